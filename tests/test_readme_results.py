"""README.md's results table quotes its raw result files: a figure that drifts from its file fails, and so does a row
that points at another row's files.

Each table row (between "## Results" and "## Documentation") has a spec in SPECS: a phrase of its `what` cell and, for
each figure of its result cell, the raw file it comes from, where in the file (see values()) and the README's wording
as a format string. The test reads the values, writes them as the README does (rounded half up, 0.3925 -> "39.3%") and
asserts that the result cell holds that text. Every other number of the cell must be in text the spec lists as
unsourced (no raw file holds it; the spec says why), so no figure of the table goes unchecked.

Which files a spec may read: a file its row links (in the result or source cell), or any file in the folder, or below
it, of a README.md the row links, since such a README documents the raw results kept beside it.
"""

from __future__ import annotations

import json
import re
import string
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from functools import reduce
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
LINK = re.compile(r"\[[^\]]*\]\(([^)#]+)[^)]*\)")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
# Numbers that name things rather than measure them: model sizes (135M, 0.5B) and operand sizes (3-digit).
NAMES = re.compile(r"\d+(?:\.\d+)?[BM]\b|\d+-digit\b")
TableRow = namedtuple("TableRow", "what result links")  # a row of README's table, its links as written


@dataclass(frozen=True)
class Figure:
    path: str  # the raw file, from the repository root
    where: str | Callable[[str], list]  # JSON key paths, a regex, or a function of the file's text: see values()
    text: str  # the README's wording, a format string over the values (see ReadmeFormat)


class ReadmeFormat(string.Formatter):
    """The README's rounding, half up; `!p` writes a fraction as points (0.471 -> 47.1), `!m` seconds as minutes."""

    def convert_field(self, value, conversion):
        if conversion == "p":
            return value * 100
        return value / 60 if conversion == "m" else super().convert_field(value, conversion)

    def format_field(self, value, format_spec):
        with localcontext() as context:
            context.rounding = ROUND_HALF_UP
            return format(value, format_spec)


def number(value) -> Decimal:
    return Decimal(str(value))  # through str, so that 0.3925 stays 0.3925 and rounds as the README rounds it


def spread(found: list) -> list[Decimal]:
    return [min(map(number, found)), max(map(number, found))]


def json_value(data, key_path: str) -> Decimal:
    """`filters.correctness.low`; `a/b` divides two such paths (right answers over problems: an accuracy)."""
    top, _, bottom = key_path.partition("/")
    value = number(reduce(lambda node, key: node[int(key) if isinstance(node, list) else key], top.split("."), data))
    return value / json_value(data, bottom) if bottom else value


def values(figure: Figure, root: Path = ROOT) -> list:
    """A function of the file's text; else space-separated key paths of a JSON file; else the groups of the regex's
    first match in a text file (^ and $ match at each line)."""
    text = (root / figure.path).read_text(encoding="utf-8")
    if callable(figure.where):
        return [number(v) for v in figure.where(text)]
    if figure.path.endswith(".json"):
        return [json_value(json.loads(text), key_path) for key_path in figure.where.split()]
    found = re.search(figure.where, text, re.M)
    assert found, f"{figure.path}: nothing matches {figure.where!r}"
    return [number(group) for group in found.groups()]


# The demo's steps as shipped: demo_seeds.txt's rows at that many steps are the demo's (earlier rows, other recipes).
DEMO_STEPS = int(re.search(r"^  max_steps: (\d+)", (ROOT / "recipes" / "demo.yaml").read_text(), re.M).group(1))


def newest(pattern: str) -> Callable[[str], list]:
    """The groups of the pattern's last match in a log that grows at its end: the newest run's figures."""

    def read(text: str) -> list:
        found = list(re.finditer(pattern, text, re.M))
        assert found, f"nothing matches {pattern!r}"
        return [group for group in found[-1].groups() if group is not None]

    return read


# Figures the README derives from a file's rows (ranges, counts, ratios): each reads one file's text.
def seeds_learning(text: str) -> list:
    """demo_seeds.txt's newest table at the shipped step count: seeds whose length fell, and whose correctness rose
    by 0.15 (the file's bar)."""
    row = rf"^\d+ +\d+ +{DEMO_STEPS} +[\d.]+ -> [\d.]+ +([\d.]+) -> ([\d.]+) +([\d.]+) -> ([\d.]+)$"
    tables = [re.findall(row, block, re.M) for block in text.split("python benchmarks/demo_seeds.py")]
    rows = [table for table in tables if table][-1]
    brevity = sum(number(last) < number(first) for _, _, first, last in rows)
    correctness = sum(number(last) - number(first) >= number("0.15") for first, last, _, _ in rows)
    return [brevity, len(rows), correctness, len(rows)]


def vllm_speedups(text: str) -> list:
    """vllm_cpu_train_qwen.txt's steps: generation and step speed-ups (lowest, highest) and the extra peak RSS."""
    rows = re.findall(r"^(transformers|vllm) +\d+ +([\d.]+) +([\d.]+) +([\d.]+)", text, re.M)
    plain, vllm = ([[number(v) for v in r[1:]] for r in rows if r[0] == engine] for engine in ("transformers", "vllm"))
    speedups = [spread([p[i] / v[i] for p, v in zip(plain, vllm)]) for i in (1, 0)]  # generation, then the step
    return [*speedups[0], *speedups[1], max(v[2] for v in vllm) - max(p[2] for p in plain)]


def plan_errors(constants: str = "") -> Callable[[str], list]:
    """The plan's errors, lowest and highest: plan_for_data.txt's rows whose `constants` column reads so, else
    cpu_memory.txt's newest `--report` (its last block)."""
    by_constants = rf"([-+][\d.]+)%\s+[\d.]+ G\s+[-+][\d.]+% .*{constants}$"
    if constants:
        return lambda text: spread(re.findall(by_constants, text, re.M))
    return lambda text: spread(re.findall(r"([-+][\d.]+)%$", text[text.rindex("--report") :], re.M))


def held_out_errors_when_measured(text: str) -> list:
    """plan_for_data.jsonl's held-out rows as first measured: the plan's error recorded then, before the terms added
    since."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    first: dict[str, dict] = {}
    for row in rows:
        if row["case"] in HELD_OUT and row["mixed_precision"] == "no":
            first.setdefault(row["case"], row)
    return spread([row["error_for_data"] for row in first.values()])


def vllm_plan_errors(text: str) -> list:
    """The two runs vLLM's runtime term was fitted on: plan / measured - 1 at the highest and the lowest peak."""
    runs = r"d1 planned ([\d.]+) GiB against ([\d.]+)-([\d.]+) measured, the demo ([\d.]+) against ([\d.]+)-([\d.]+)"
    d1, d1_low, d1_high, demo, demo_low, demo_high = map(number, re.search(runs, text).groups())
    return [demo / demo_high - 1, demo / demo_low - 1, d1 / d1_high - 1, d1 / d1_low - 1]


F = Figure  # short, for the specs below
HELDOUT, SEEDS, OWN = "benchmarks/demo_heldout.txt", "benchmarks/demo_seeds.txt", "benchmarks/own_task_demo/heldout.txt"
TOOL, OWN_RUNS = "benchmarks/tool_demo/", "benchmarks/own_task_demo/"
LM = "benchmarks/gsm8k_learning/qwen2.5_coder_0.5b/d2/test/checkpoint-100/lm_eval_rescore.json"
RERUN = LM.replace("lm_eval_rescore", "one_product_rerun/lm_eval_rescore")
OVERHEAD, QWEN_VLLM = "benchmarks/train_overhead.txt", "benchmarks/vllm_cpu_train_qwen.txt"
ENGINE = "benchmarks/eval_engines_vllm.txt"
REPLAN, FIRST = "benchmarks/gpu/replan.txt", "benchmarks/gpu/first_measured.txt"
C, FLEX, STRICT = "filters.correctness.", "filters.flexible-extract.", "filters.strict-match."
INTERVAL = f"{FLEX}paired.low {FLEX}paired.high"
PAIRED = r"change \S+ \(paired 95% ([-+][\d.]+) to ([-+][\d.]+)"  # demo_heldout.py's interval of a change
ACCURACY = r"base ([\d.]+) -> trained ([\d.]+), " + PAIRED + r"(?:; fixed (\d+), broken (\d+))?"
DEMO42, DEMO43 = (newest(rf"(?s)demo\.yaml seed {seed}:.*?flexible-extract: " + ACCURACY) for seed in (42, 43))
STEPS = (  # train_overhead.py's lines: grpo train, then plain TRL left to TRL's defaults (after float32's, if run)
    r"(?s:.*?)grpo train +: median step +([\d.]+) s .*peak RSS ([\d.]+) GiB\n(?:plain TRL, float32 .*\n)?"
    r"plain TRL, TRL's default bf16 : median step +([\d.]+) s .*peak RSS ([\d.]+) GiB"
)
SEED42 = newest(rf"^42 +\d+ +{DEMO_STEPS} +([\d.]+) -> ([\d.]+) +([\d.]+) -> ([\d.]+) +([\d.]+) -> ([\d.]+)$")
ERRORS, LAST = r"median \|error\| ([\d.]+)%", r"(?![\s\S]*rows, first)"  # LAST: no batch line follows
ALLOCATED = r"allocated: \d+ rows, " + ERRORS + r", max \+?([\d.]+)%"
# The rows plan_for_data.txt marks `held out`.
HELD_OUT = ("r64_c96", "beta_c64", "full_gc_c128", "g4_accum4_c128", "full_c96_b8", "smollm2_gsm8k")
# README text whose numbers no raw file holds. The demo's overlap: only docs/eval.md says so (grpo eval warns with the
# count, and no committed output of it holds the warning).
UNSOURCED = {"The demo, `recipes/demo.yaml`": ("8 of the 300 are also training rows",)}
SPECS = {  # a phrase of the row's `what` cell: the figures of its result cell
    "The demo, `recipes/demo.yaml`": (
        F(HELDOUT, newest(r"held out: (\d+) problems of generated \(test\)"), "on {} generated"),
        F(HELDOUT, DEMO42, "{:.0%} -> {:.0%} at the recipe's seed (paired 95% {!p:+.1f} to {!p:+.1f}"),
        F(HELDOUT, DEMO42, "pts; {4} fixed, {5} broken)"),
        F(HELDOUT, DEMO43, "{:.0%} -> {:.0%} at seed 43 ({!p:+.1f} to {!p:+.1f}; {} fixed, {} broken)"),
        F(SEEDS, SEED42, "mean reward {} -> {}, correctness {} -> {}, length {} -> {} tokens"),
        F(SEEDS, newest(r"means over the first and the last (\d+) steps"), "(first vs last {} steps)"),
        F(SEEDS, seeds_learning, "brevity learned at {} of {} seeds, correctness at {} of {}"),
    ),
    "A shortcut caught": (
        F(HELDOUT, r"held out: (\d+) problems of generated:parity \(test\), task, greedy", "{} held-out questions"),
        F(HELDOUT, r"task, greedy\n.*: " + ACCURACY, "greedy: {:.1%} -> {:.1%} (paired {!p:+.1f} to {!p:+.1f} pts)"),
        # The first validation step from which every later one scored the same.
        F(HELDOUT, r"by step: (?:\d+: [\d.]+, )*?(\d+): ([\d.]+)(?:, \d+: \2)+$", "the plateau from step {}"),
        F(HELDOUT, r"(?s)task, greedy\n.*?trained: .*?completion '\w+' in (\d+)% of", "one answer to {}% of problems"),
    ),
    "A task of your own, learned": (
        # heldout.txt's three decimals, which the README rounds (comparison.json's 0.9125 would give 91.3%, not 91.2%).
        F(OWN, r"held out: (\d+) problems of generated:largest", "{} held-out problems"),
        F(OWN, r"(?s)seed 42:.*?correctness: " + ACCURACY, "{:.1%} -> {:.1%} at the recipe's seed (paired 95%"),
        F(OWN, r"(?s)seed 42:.*?correctness: " + ACCURACY, "{2!p:+.1f} to {3!p:+.1f} pts)"),
        F(OWN, r"(?s)seed 7:.*?correctness: " + ACCURACY, "{:.1%} -> {:.1%} at seed 7 ({!p:+.1f} to {!p:+.1f})"),
        F(OWN_RUNS + "s42/comparison.json", "majority_baseline.baseline", "the majority baseline {:.1%}"),
        # The larger of the two seeds' (seed 42's is 5.5%).
        F(OWN_RUNS + "s7/trained/summary.json", "answer_distribution.top.0.share", "the most common answer in {:.0%}"),
        F(OWN, r"seed 42: train (\d+) s, compare (\d+) s", "train {!m:.0f} min, compare {!m:.0f} min"),
        F(OWN, r"(\d+) cores", "on {} cores"),
    ),
    "A model learns a tool": (
        F(TOOL + "compare/comparison.json", "problems", "{} held-out products"),
        F(TOOL + "compare/comparison.json", f"{C}base {C}trained", "with the calculator: {:.1%} -> {:.1%}"),
        F(TOOL + "compare/comparison.json", f"{C}low {C}high", "(paired {!p:+.1f} to {!p:+.1f} pts)"),
        F(TOOL + "compare/trained/summary.json", "tools.completions_with_calls", "a call in {:.0%} of problems"),
        F(TOOL + "trained_without_tools/summary.json", f"{C}correct problems", "without the calculator: {}/{}"),
        F(TOOL + "warmup_only/summary.json", "filters.correctness.accuracy", "before any GRPO step, scores {:.1%}"),
        F(TOOL + "warmup_only/summary.json", "tools.completions_with_calls", "with a call in {:.0%} of problems"),
    ),
    "GSM8K, Qwen2.5-Coder-0.5B-Instruct": (
        # lm-eval's regexes re-scoring grpo's completions, as the README says (grpo's own scoring is comparison.json).
        F(LM, f"{FLEX}base.correct/problems {FLEX}trained.correct/problems", "flexible-extract {:.1%} -> **{:.1%}**"),
        F(LM, INTERVAL, "95% interval {!p:+.1f} to {!p:+.1f} pts"),
        F(RERUN, f"{FLEX}trained.correct/problems " + INTERVAL, "{:.1%}, {!p:+.1f} to {!p:+.1f})"),
        F(LM, f"{STRICT}base.correct/problems {STRICT}trained.correct/problems", "strict-match {:.1%} -> {:.1%}"),
    ),
    "`grpo train` against a plain TRL script": (
        F(OVERHEAD, r"At (\d+) x (\d+) tokens", "({} x {} tokens, checkpointing)"),
        F(OVERHEAD, r"At 1aa46d2 \(" + STEPS, "{:.1f} s and {:.2f} GiB peak RSS against {:.1f} s and {:.2f} GiB"),
        F(
            OVERHEAD,
            r"At 1aa46d2 \((?s:.*?)\(recipes/demo.yaml\)" + STEPS,
            "step: {:.2f} s and {:.2f} GiB against {:.2f} s and {:.2f} GiB",
        ),
        F(
            OVERHEAD,
            r"At 1aa46d2 \((?s:.*?)--rounds 3 --plain \"plain TRL, float32\"(?s:.*?)step time ([\d.]+)",
            "float32 on both sides, {:.2f}x",
        ),
    ),
    "Generation on vLLM": (
        F(ENGINE, r"speed ratio \(vllm / transformers\): ([\d.]+)x", "{}x the tokens/s"),
        F(ENGINE, r"identical completions.*: (\d+)/(\d+)", "{} of {} greedy completions"),
        F(QWEN_VLLM, r"x (\d+) completions a step[^)]*\) at (\d+) tokens", "({} x {} tokens a step)"),
        F(QWEN_VLLM, vllm_speedups, "generation {:.1f}-{:.1f}x, the step {:.1f}-{:.1f}x faster, {:.1f} GiB"),
    ),
    "`grpo plan` against measured peak RSS, CPU": (
        F("benchmarks/cpu_memory.txt", plan_errors(), "{:+.1f}% to {:+.1f}% on eight"),
        F("benchmarks/plan_for_data.txt", plan_errors("fitted on it"), "{:+.1f}% to {:+.1f}% on three"),
        F("benchmarks/plan_for_data.txt", plan_errors("held out"), "constants: {:+.1f}% to {:+.1f}%"),
        F("benchmarks/plan_for_data.jsonl", held_out_errors_when_measured, "({:+.1%} to {:+.1%} before"),
        # Hand-written: the plans of these two runs are in no machine-written file; this reading beside the engine's
        # measurements is the rawest file that states them.
        F("benchmarks/vllm_cpu_engine_memory.txt", vllm_plan_errors, "the demo {:+.1%} to {:+.1%}, the 0.5B GSM8K"),
        F("benchmarks/vllm_cpu_engine_memory.txt", vllm_plan_errors, "run d1 {2:+.1%} to {3:+.1%}"),
    ),
    "`grpo plan` against `torch.cuda.max_memory_allocated`": (
        F(REPLAN, r"allocated: (\d+) rows,", "{} configurations"),
        F(REPLAN, r"worst -([\d.]+)%", "from {}% under"),
        F(REPLAN, ALLOCATED, "to {1}% over (median absolute error {0}%;"),
        F(REPLAN, r"allocated: 0 of \d+ rows under by more than (\d+)%", "none more than {}% under"),
        F(FIRST, r"out-of-sample.*: -([\d.]+)% to \+([\d.]+)%", "{}% under to {}% over (median"),
        F(FIRST, r"out-of-sample.*\((\d+) rows\): .*" + ERRORS + r", (\d+) of", "{1}%, {2} of {0}"),
        F(FIRST, r"out-of-sample.* more than (\d+)% under", "more than {}% under; the latest"),
        F(FIRST, r"(\d+) rows, first measured" + LAST, "batch of {}:"),
        F(FIRST, r"first measured -([\d.]+)% to \+([\d.]+)%, " + ERRORS + LAST, "{}% under to {}% over, median {}%"),
        F(REPLAN, r"nvidia-smi: (\d+) rows, " + ERRORS + r", max ([\d.]+)%", "error {1}% ({0} rows), up to {2:.0f}%"),
        # A setting, not a measurement: only the folder's README (hand-written) states it.
        F("benchmarks/gpu/README.md", r'"close" when its spare is under (\d+)% \(it was 7%\)', "less than {}% spare"),
    ),
}


def table_rows(readme: str = README) -> list[TableRow]:
    table = readme[readme.index("## Results") : readme.index("## Documentation")]
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in table.splitlines()]
    rows = [TableRow(w, r, tuple(LINK.findall(f"{r} {s}"))) for w, r, s in (c for c in cells if len(c) == 3)]
    return [row for row in rows if row.what != "what"]  # less the header


def is_linked(path: str, links: tuple[str, ...]) -> bool:
    """A file the row links, or one in the folder (or below) of a README.md the row links."""
    folders = [PurePosixPath(link).parent for link in links if PurePosixPath(link).name == "README.md"]
    return path in links or any(folder in PurePosixPath(path).parents for folder in folders)


def problems(key: str, table_row: TableRow, root: Path = ROOT) -> list[str]:
    """What in a table row disagrees with the spec SPECS[key]: a file the row does not link, a figure its result cell
    does not write as the file holds it, a number of the cell no spec accounts for. Empty when the row agrees."""
    found = [
        f"{f.path} is not among the files the row links" for f in SPECS[key] if not is_linked(f.path, table_row.links)
    ]
    texts = [(f.path, ReadmeFormat().format(f.text, *values(f, root))) for f in SPECS[key]]
    result = rest = LINK.sub(" ", table_row.result)  # rest: the cell less each text; no number may be left in it
    for source, text in texts + [("the unsourced list", text) for text in UNSOURCED.get(key, ())]:
        if text not in result:
            found.append(f"{source} says {text!r}; the README does not")
        rest = rest.replace(text, " ", 1)
    stray = NUMBER.findall(NAMES.sub(" ", rest))
    return found + ([f"figures no spec sources: {stray}"] if stray else [])


def row_of(key: str) -> TableRow:
    return next(r for r in table_rows() if key in r.what)


def test_every_row_links_files_that_exist_and_has_one_spec():
    rows = table_rows()
    assert len(rows) >= 6 and set(UNSOURCED) <= set(SPECS)
    for row in rows:
        assert row.links and all((ROOT / link).is_file() for link in row.links), (row.what[:60], row.links)
        assert len([key for key in SPECS if key in row.what]) == 1, f"no spec, or several, for {row.what[:60]!r}"
    for key in SPECS:
        assert len([r for r in rows if key in r.what]) == 1, f"no row, or several, for {key!r}"


@pytest.mark.parametrize("key", list(SPECS))
def test_each_row_quotes_its_raw_files(key):
    assert problems(key, row_of(key)) == []


def test_a_changed_or_unsourced_figure_is_caught():
    key, row = "A task of your own, learned", row_of("A task of your own, learned")
    assert problems(key, row) == []
    changed = row._replace(result=row.result.replace("91.5%", "91.6%", 1))
    assert [p for p in problems(key, changed) if "heldout.txt says" in p and "91.5% at the recipe's seed" in p]
    assert problems(key, row._replace(result=row.result + "; 12.5% faster")) == ["figures no spec sources: ['12.5']"]


def test_a_row_pointing_at_another_rows_files_is_caught():
    key, row = "A task of your own, learned", row_of("A task of your own, learned")
    moved = row._replace(links=row_of("A model learns a tool").links)
    assert len([p for p in problems(key, moved) if "not among the files the row links" in p]) == len(SPECS[key])

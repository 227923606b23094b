"""The own-task demo's committed evaluations, scored again from the completions alone.

Each question names its three numbers, so the right answer is their maximum, computed here without reading the
evaluation's `gold`, `extracted` or `correct` fields; a completion's answer is the number inside `<answer>...</answer>`,
else after `####`, else its last number (the `correctness` verifier's rule, written out again here). For each seed:
base and trained accuracy with the paired 95% interval of the change, the majority baseline (always answering the most
common right answer of these problems) against the trained model, and the trained model's most common answer and its
share (a shortcut gives one answer to most problems).

    python benchmarks/own_task_demo/rescore.py            # every benchmarks/own_task_demo/s*/ folder
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from grpo_cli.eval.stats import paired_difference, wilson_interval  # noqa: E402

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
QUESTION = re.compile(r"Which is the largest of these numbers: ([\d, ]+)\?")


def right_answer(question: str) -> int:
    found = QUESTION.search(question)
    if found is None:
        raise ValueError(f"not a largest-of-three question: {question[:80]!r}")
    return max(int(n) for n in found.group(1).split(","))


def answer_of(completion: str) -> float | None:
    tagged = re.findall(r"<answer>(.*?)(?:</answer>|$)", completion, flags=re.S)
    marked = completion.rsplit("####", 1)[1] if "####" in completion else None
    for text in (tagged[-1] if tagged else None, marked, completion):
        numbers = NUMBER.findall(text) if text else []
        if numbers:
            return float(numbers[-1].replace(",", ""))
    return None


def read(folder: Path) -> dict[int, tuple[int, float | None]]:
    """Problem index -> (right answer, the completion's answer)."""
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return {r["index"]: (right_answer(r["question"]), answer_of(r["completion"])) for r in rows}


def rescore(seed_folder: Path, base_folder: Path) -> dict:
    base, trained = read(base_folder), read(seed_folder / "trained")
    if base.keys() != trained.keys():
        raise ValueError(f"{seed_folder}: base and trained evaluated different problems")
    order = sorted(trained)
    base_right = [base[i][1] == base[i][0] for i in order]
    trained_right = [trained[i][1] == trained[i][0] for i in order]
    majority, _ = Counter(trained[i][0] for i in order).most_common(1)[0]
    baseline_right = [trained[i][0] == majority for i in order]
    top_answer, top_count = Counter(trained[i][1] for i in order).most_common(1)[0]
    n = len(order)
    return {
        "problems": n,
        "base": sum(base_right) / n,
        "trained": sum(trained_right) / n,
        "trained_ci95": wilson_interval(sum(trained_right), n),
        "change": paired_difference(base_right, trained_right),
        "majority_answer": majority,
        "majority_baseline": sum(baseline_right) / n,
        "over_baseline": paired_difference(baseline_right, trained_right),
        "top_answer": top_answer,
        "top_share": top_count / n,
    }


def seed_folders(root: Path = HERE) -> list[Path]:
    return sorted(p for p in root.glob("s*") if (p / "trained" / "predictions.jsonl").is_file())


def base_of(folder: Path) -> Path:
    """A seed's own base evaluation, else the one it reused (the first seed's: same model, same problems)."""
    own = folder / "base"
    return own if own.is_dir() else next(p / "base" for p in seed_folders(folder.parent) if (p / "base").is_dir())


def main() -> None:
    for folder in seed_folders():
        r = rescore(folder, base_of(folder))
        c, b = r["change"], r["over_baseline"]
        print(
            f"{folder.name}: {r['problems']} problems, base {r['base']:.3f} -> trained {r['trained']:.3f} "
            f"(paired 95% {c['low']:+.3f} to {c['high']:+.3f}; fixed {c['fixed']}, broken {c['broken']}); "
            f"majority baseline {r['majority_baseline']:.3f} (always {r['majority_answer']}), trained over it "
            f"{b['low']:+.3f} to {b['high']:+.3f}; most common trained answer {r['top_answer']:g} in "
            f"{r['top_share']:.1%}"
        )


if __name__ == "__main__":
    main()

"""`grpo audit` on every shipped recipe: its findings and the best trivial rule, into benchmarks/audit_recipes.txt.

Recipes that read openai/gsm8k read a local copy of its train split instead (--gsm8k, default
../shared/data/gsm8k/train.jsonl); the file records it as $GSM8K. No model is loaded.

    python benchmarks/audit_recipes.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def audit(recipe: str, gsm8k: str) -> tuple[list[str], float]:
    reads_hub = "source: openai/gsm8k" in (ROOT / recipe).read_text()
    extra, shown = ([f"data.source={gsm8k}"], " data.source=$GSM8K") if reads_hub else ([], "")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "audit", recipe, *extra, "--json"], cwd=ROOT, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return [f"## grpo audit {recipe}{shown}: exit {done.returncode}: {done.stdout.strip()[-300:]}"], seconds
    result = json.loads(done.stdout)
    rewards = ", ".join(
        f"{r['name']} x{r['weight']:g}" + ("" if r["audited"] else " (not audited: a model)") for r in result["rewards"]
    )
    lines = [
        f"## grpo audit {recipe}{shown} ({seconds:.1f} s)",
        f"prompts {result['prompts']}; rewards: {rewards}; a right answer earns {result['right_answer_total']:.2f}",
    ]
    if result["best_rule"]:
        lines.append(f"best trivial rule: {result['best_rule']['rule']} {100 * result['best_rule']['share']:.0f}%")
    lines += [f"- {f['kind']}: {f['line']}" for f in result["findings"]] or ["- no finding"]
    return lines, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", default="../shared/data/gsm8k/train.jsonl")
    args = parser.parse_args()
    recipes = subprocess.run(["git", "ls-files", "recipes/*.yaml"], cwd=ROOT, capture_output=True, text=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    out = [
        f"# grpo audit on every shipped recipe ({datetime.date.today()}, commit {commit.stdout.strip()}); "
        "python benchmarks/audit_recipes.py"
    ]
    for recipe in sorted(recipes.stdout.split()):
        lines, _ = audit(recipe, args.gsm8k)
        out += lines
    (ROOT / "benchmarks" / "audit_recipes.txt").write_text("\n".join(out) + "\n", encoding="utf-8")
    print("\n".join(out))


if __name__ == "__main__":
    main()

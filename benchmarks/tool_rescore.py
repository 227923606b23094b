"""Re-score tool-using evaluations from their completions alone, without grpo's scorers.

Reads `predictions.jsonl` of one or two `grpo eval` folders (the `transcript` of each problem: the model's turns,
its `<tool_call>` blocks and the `<tool_response>` blocks between them, as the model saw them) and the gold answer,
and counts for itself:
- calls: `<tool_call>` blocks whose body is JSON with a `name` and an `arguments` object; malformed: `<tool_call>`
  blocks that are not, and fenced ```json blocks naming a function (the form the untrained model writes);
- the answer: lm-eval's flexible-extract (its regex, the last match) over the model's own text, tool responses and
  call bodies removed, compared with the gold number as numbers;
- for two folders, the paired difference on the problems both hold, with a 95% interval (normal approximation of
  the paired proportions, as grpo's own comparison states it; clipped to [-1, 1]).

    python benchmarks/tool_rescore.py BASE_DIR [TRAINED_DIR]
"""

from __future__ import annotations

import json
import math
import re
import sys
from fractions import Fraction
from pathlib import Path

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.S)
FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")  # lm-eval gsm8k flexible-extract


def number(text: str) -> Fraction | None:
    text = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def flexible(text: str) -> Fraction | None:
    matches = FLEXIBLE.findall(text)
    if not matches:
        return None
    return number(next(group for group in matches[-1] if group))


def well_formed(body: str) -> bool:
    try:
        call = json.loads(body)
    except ValueError:
        return False
    return isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)


def fenced_calls(text: str) -> int:
    count = 0
    for body in FENCED.findall(text):
        try:
            call = json.loads(body)
        except ValueError:
            continue
        count += isinstance(call, dict) and "name" in call and ("arguments" in call or "parameters" in call)
    return count


def score(record: dict) -> dict:
    transcript = record.get("transcript") or record.get("completion") or ""
    bodies = CALL.findall(transcript)
    calls = sum(well_formed(b.strip()) for b in bodies)
    own = CALL.sub(" ", RESPONSE.sub(" ", transcript))
    malformed = len(bodies) - calls + fenced_calls(own)
    answer = flexible(own)
    return {"calls": calls, "malformed": malformed, "correct": answer is not None and answer == number(record["gold"])}


def read(folder: Path) -> dict[int, dict]:
    lines = (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["index"]: {**score(r), "gold": r["gold"]} for r in map(json.loads, filter(str.strip, lines))}


def summary(rows: dict[int, dict]) -> dict:
    n = len(rows)
    return {
        "problems": n,
        "accuracy": sum(r["correct"] for r in rows.values()) / n,
        "problems_with_calls": sum(r["calls"] > 0 for r in rows.values()) / n,
        "calls_per_problem": sum(r["calls"] for r in rows.values()) / n,
        "problems_with_malformed_calls": sum(r["malformed"] > 0 for r in rows.values()) / n,
    }


def paired(base: dict[int, dict], trained: dict[int, dict]) -> dict:
    shared = sorted(set(base) & set(trained))
    diffs = [int(trained[i]["correct"]) - int(base[i]["correct"]) for i in shared]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    half = 1.96 * math.sqrt(var / n)
    return {
        "problems": n,
        "difference": mean,
        "interval_95": [max(-1.0, mean - half), min(1.0, mean + half)],
        "fixed": sum(d == 1 for d in diffs),
        "broken": sum(d == -1 for d in diffs),
    }


def main(argv: list[str]) -> None:
    folders = [Path(a) for a in argv]
    scored = [read(f) for f in folders]
    out = {str(f): summary(s) for f, s in zip(folders, scored)}
    if len(scored) == 2:
        out["paired (second - first)"] = paired(*scored)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])

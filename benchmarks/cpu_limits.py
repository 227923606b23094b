"""This machine's float32 matmul throughput at the shapes each GRPO phase runs, and each measured phase as a
fraction of it. The bfloat16 column is what `model.mixed_precision` (bf16 autocast) can reach on the same shapes.

Shapes (rows x in x out, one Linear of the model): a decode step multiplies (completions) rows; training and
evaluation prefill multiply (completions x sequence) rows. Phase timings come from benchmarks/cpu_memory.jsonl
(real steps at full completion length) and from `grpo eval`'s summary (tokens/s).

    python benchmarks/cpu_limits.py [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
# hidden, ffn, parameters in Linear layers + head (per token, forward FLOPs = 2 x these), vocabulary
MODELS = {"SmolLM2-135M": (576, 1536, 134.5e6), "Qwen2.5-0.5B": (896, 4864, 494e6)}


def gflops(rows: int, k: int, n: int, seconds: float = 1.0, dtype: torch.dtype = torch.float32) -> float:
    """Throughput of (rows x k) @ (k x n) in `dtype`, best of a few timed repeats."""
    a, b = torch.randn(rows, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(3):
        a @ b
    best, repeats = float("inf"), max(1, int(2e9 / (2 * rows * k * n)))
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = min(best, (time.perf_counter() - started) / repeats)
    return 2 * rows * k * n / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from grpo_cli.recipe.precision import cpu_computes_bf16

    print(f"torch {torch.__version__}, {args.threads} threads; CPU computes bfloat16 natively: {cpu_computes_bf16()}")
    print(f"{'shape':28s} {'GFLOP/s float32':>16s} {'bfloat16':>9s}")
    for label, shape in [("2048^3", (2048, 2048, 2048))]:
        print(f"{label:28s} {gflops(*shape):16.1f} {gflops(*shape, dtype=torch.bfloat16):9.1f}")
    limits = {}
    for model, (h, f, _) in MODELS.items():
        for rows in (8, 16, 32, 512, 2048):
            rate = (gflops(rows, h, f) + gflops(rows, f, h)) / 2  # the MLP's two shapes carry most FLOPs
            bf16 = (gflops(rows, h, f, dtype=torch.bfloat16) + gflops(rows, f, h, dtype=torch.bfloat16)) / 2
            limits[(model, rows)] = rate
            print(f"{model + f' {rows} x {h} x {f}':28s} {rate:16.1f} {bf16:9.1f}")
    print()
    rows = [json.loads(line) for line in (ROOT / "benchmarks" / "cpu_memory.jsonl").read_text().splitlines()]
    print("phase fractions of the matmul limit at their own shapes (cpu_memory.jsonl, allocator `tool`):")
    for row in rows:
        if row["allocator"] != "tool" or "batch" not in row:
            continue
        model = "Qwen2.5-0.5B" if row["config"].startswith("qwen") else "SmolLM2-135M"
        params = MODELS[model][2]
        batch, budget, prompt = row["batch"], row["completion"], row["prompt"]
        gen_s = row["generation_s"][-1]
        train_s = row["step_s"][-1] - gen_s
        gen_rate = 2 * params * batch * budget / gen_s / 1e9
        # forward + backward through the frozen weights (+ a recompute with checkpointing): 2, 2 and 2 x params
        passes = 3 if row.get("checkpointing") else 2
        train_rate = 2 * passes * params * batch * (prompt + budget) / train_s / 1e9
        gen_limit, train_limit = limits[(model, min((8, 16, 32), key=lambda r: abs(r - batch)))], limits[(model, 2048)]
        print(
            f"  {row['config']:18s} generation {batch * budget / gen_s:6.1f} tokens/s = {gen_rate:5.1f} GFLOP/s "
            f"({gen_rate / gen_limit:4.0%} of {gen_limit:.0f}); training {train_rate:5.1f} GFLOP/s "
            f"({train_rate / train_limit:4.0%} of {train_limit:.0f})"
        )


if __name__ == "__main__":
    main()

"""torch.multinomial's draw against grpo's bulk computation of the same draw (grpo_cli/generation/torch_draws.py), as
transformers' sampling loop calls it at every decode step: one token from each row of float32 probabilities.

Shapes: 16 rows of Qwen2.5's 151,936-entry vocabulary (the 0.5B GSM8K configuration of train_overhead.py) and 16 rows
of SmolLM2's 49,152 (the demo: 2 prompts x 8 completions). Rows are softmaxes of Gaussian logits from flat (scale
0.5) to near one-hot (scale 12). Each variant draws `--calls` times from a generator seeded alike; every draw and the
generator's state after it must be torch's, or the script says so and exits 1. Prints the median milliseconds a call,
and what the draws' random numbers alone take (the part torch's generator must make one at a time either way).
Then the same 16 rows one at a time, each with a generator of its own, as grpo eval's seeded sampling draws them
(grpo_cli/generation/sampling.py): torch.multinomial on each 1-D row against `one_row`.

    python benchmarks/torch_draws.py [--calls 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parent.parent))

from grpo_cli.generation.torch_draws import draw, one_row  # noqa: E402

SHAPES = {"Qwen2.5 (16 x 151,936)": (16, 151936), "SmolLM2 (16 x 49,152)": (16, 49152)}
SCALES = (0.5, 3.0, 12.0)


def median_ms(calls: int, function, *args) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def each_row(multinomial, probs, generators) -> list:
    return [multinomial(row, 1, generator=g) for row, g in zip(probs, generators)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median ms a call over {args.calls} calls")
    for name, shape in SHAPES.items():
        for scale in SCALES:
            probs = torch.softmax(torch.randn(shape, generator=torch.Generator().manual_seed(0)) * scale, -1)
            ours, torchs, workspaces = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1), {}
            for _ in range(args.calls):  # the same draws and state, call after call
                same = torch.equal(draw(probs, ours, workspaces), torch.multinomial(probs, 1, generator=torchs))
                if not (same and torch.equal(ours.get_state(), torchs.get_state())):
                    print(f"{name}, logit scale {scale}: a draw differs from torch's")
                    return 1
            theirs = median_ms(args.calls, lambda p, g: torch.multinomial(p, 1, generator=g), probs, torchs)
            bulk = median_ms(args.calls, draw, probs, ours, workspaces)
            print(
                f"{name:24s} logit scale {scale:4.1f}: torch.multinomial {theirs:6.2f} ms, in bulk {bulk:6.2f} ms "
                f"({bulk / theirs:.2f}x), the same draws"
            )
        bits = torch.empty(shape, dtype=torch.int64)
        floor = median_ms(args.calls, bits.random_)
        print(f"{name:24s} of which torch's own 64-bit draws (random_ on an int64 tensor, kept): {floor:6.2f} ms")
    for name, shape in SHAPES.items():
        probs = torch.softmax(torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 3.0, -1)
        ours = [torch.Generator().manual_seed(row) for row in range(shape[0])]
        torchs = [torch.Generator().manual_seed(row) for row in range(shape[0])]
        for _ in range(args.calls):
            mine = torch.cat([one_row(row, g) for row, g in zip(probs, ours)])
            if not torch.equal(
                mine, torch.cat([torch.multinomial(row, 1, generator=g) for row, g in zip(probs, torchs)])
            ):
                print(f"{name}, one row at a time: a draw differs from torch's")
                return 1
        theirs = median_ms(args.calls, each_row, torch.multinomial, probs, torchs)
        bulk = median_ms(args.calls, each_row, lambda row, _, generator: one_row(row, generator), probs, ours)
        print(
            f"{name:24s} one row at a time  : torch.multinomial {theirs:6.2f} ms, in bulk {bulk:6.2f} ms "
            f"({bulk / theirs:.2f}x) for the 16 rows, the same draws"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

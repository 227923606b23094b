"""Print a GRPO run's steps as a text table, one row per step, from its metrics.jsonl (tool runs: calls and errors).

python benchmarks/gsm8k_learning/steps_table.py runs/t1/metrics.jsonl
"""

import json
import sys

COLUMNS = [  # (header, metrics key, format)
    ("reward", "reward", "{:.3f}"),
    ("calls/completion", "tools/call_frequency", "{:.2f}"),
    ("malformed", "tools/malformed_frequency", "{:.2f}"),
    ("failed", "tools/failure_frequency", "{:.2f}"),
    ("clipped", "completions/clipped_ratio", "{:.2f}"),
    ("mean_len", "completions/mean_length", "{:.1f}"),
    ("kl", "kl", "{:.5f}"),
    ("step_s", "step_time_s", "{:.0f}"),
    ("generation_s", "generation_s", "{:.0f}"),
]


def rows(path: str) -> list[str]:
    widths = [max(len(header), 7) for header, _, _ in COLUMNS]
    out = ["step  " + "  ".join(header.rjust(w) for (header, _, _), w in zip(COLUMNS, widths))]
    with open(path) as f:
        for line in f:
            metrics = json.loads(line)
            if "reward" not in metrics:  # the trainer's closing summary line has no step figures
                continue
            cells = [fmt.format(metrics[key]).rjust(w) for (_, key, fmt), w in zip(COLUMNS, widths)]
            out.append(f"{metrics['step']:>4}  " + "  ".join(cells))
    return out


if __name__ == "__main__":
    print("\n".join(rows(sys.argv[1])))

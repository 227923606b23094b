"""`grpo report`: reward, KL and completion-length curves of a run as one PNG."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.train.run_dir import METRICS_FILE

REPORT_FILE = "report.png"


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    if not path.exists():
        raise UserError(f"{path} not found: is {run_dir} a run directory written by `grpo train`?")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise UserError(f"{path} is empty: the run logged no step yet")
    return rows


def plot_run(run_dir: Path, output: Path | None = None) -> Path:
    """Write the PNG (reward total and per reward; KL when beta > 0; completion length) and return its path."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    steps = [r["step"] for r in rows]
    per_reward = sorted({k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    panels = [("reward", ["reward", *per_reward])]
    if any(r.get("kl") is not None for r in rows):
        panels.append(("KL to reference", ["kl"]))
    panels.append(("completion length (tokens)", ["completions/mean_length"]))

    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), sharex=True, squeeze=False)
    for ax, (title, keys) in zip(axes[:, 0], panels):
        for key in keys:
            values = [r.get(key) for r in rows]
            points = [(s, v) for s, v in zip(steps, values) if v is not None]
            if points:
                label = key.removeprefix("rewards/").removesuffix("/mean") if key != "reward" else "total"
                ax.plot(*zip(*points), label=label, linewidth=2.0 if key == "reward" else 1.2)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize="small")
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    output = output or run_dir / REPORT_FILE
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output

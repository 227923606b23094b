"""The plan's CUDA error in-sample and out-of-sample: every batch of CUDA rows as first measured, from the raw
calibration files each lent-GPU call wrote (their `predicted_gib` is the plan of that moment, before the fix the
batch prompted), beside today's plan over the same rows (replan.txt). Writes benchmarks/gpu/first_measured.txt.

    python benchmarks/gpu/first_measured.py
"""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Each batch: the rows measured for the first time in one call, where they were written, and the fix that followed.
# Re-measurements of earlier rows (the phases rerun of 2026-11-26, the H200's second reading of ten rows on
# 2026-11-27) are not first measurements and are left out.
BATCHES = [
    (
        "1. H100, 2026-11-26 (a plan fitted on CPUs only)",
        ["h100-2026-11-26/calibration.csv"],
        None,
        "optimizer step temporaries, CUDA context; kept Linear inputs and backward transients from its traces",
    ),
    (
        "2. H100, 2026-11-26, held out",
        sorted(p.relative_to(HERE).as_posix() for p in (HERE / "h100-2026-11-26-heldout").glob("*.csv")),
        None,
        "none traced to them; later terms moved them",
    ),
    (
        "3. H200, 2026-11-27 (terms committed before the call)",
        ["h200-2026-11-27/calibration.csv"],
        {"llama1b-lora-gc-g8-c512", "qwen0.5b-lora-gc-g16-c256", "qwen1.5b-qlora-gc-g8-c512"},
        "QLoRA layer inputs (later), cuBLAS workspaces (later)",
    ),
    (
        "4. H200, 2026-12-04, call three (CUDA_MATRIX_3, committed before the call)",
        ["h200-2026-12-04/calibration.csv"],
        None,
        "QLoRA keeps each layer input; CUDA layer blocks",
    ),
    (
        "5. H200, 2026-12-04, call four (the 25th row and eight held-out rows)",
        ["h200-2026-12-04-call4/calibration.csv"],
        None,
        "cuBLAS workspaces (0.0625 GiB, committed after these rows were seen)",
    ),
]


def rows_of(files: list[str], only: set[str] | None) -> list[tuple[str, float]]:
    """(config, error %) of each CUDA row, from predicted_gib and measured_gib as written at the time."""
    out = []
    for name in files:
        lines = [line for line in (HERE / name).read_text().splitlines() if not line.startswith("#")]
        for row in csv.DictReader(lines):
            if row["device"] == "cuda" and (only is None or row["config"] in only):
                predicted, measured = float(row["predicted_gib"]), float(row["measured_gib"])
                out.append((row["config"], 100 * (predicted - measured) / measured))
    return out


def summary(errors: list[float]) -> str:
    under = sum(e < -2 for e in errors)
    median = statistics.median(abs(e) for e in errors)
    return (
        f"{min(errors):+.1f}% to {max(errors):+.1f}%, median |error| {median:.1f}%, "
        f"{under} of {len(errors)} more than 2% under"
    )


def today() -> list[float]:
    """Today's plan over the same rows: replan.txt's `plan now` error column."""
    errors = []
    for line in (HERE / "replan.txt").read_text().splitlines():
        fields = line.split()  # configuration, plan then, plan now, measured, error, then nvidia-smi's columns
        if len(fields) >= 5 and re.fullmatch(r"[-+]\d+\.\d%", fields[4]):
            errors.append(float(fields[4][:-1]))
    return errors


def main() -> None:
    lines = ["# python benchmarks/gpu/first_measured.py: the plan against torch.cuda.max_memory_allocated on CUDA rows"]
    everything: list[float] = []
    seen: set[str] = set()
    for label, files, only, fix in BATCHES:
        rows = [(c, e) for c, e in rows_of(files, only) if c not in seen]
        seen |= {c for c, _ in rows}
        everything += [e for _, e in rows]
        lines.append(f"{label}: {len(rows)} rows, first measured {summary([e for _, e in rows])}; then: {fix}")
        lines += [f"  {config:34s} {error:+6.2f}%" for config, error in rows]
    lines.append(f"out-of-sample, every row as first measured ({len(everything)} rows): {summary(everything)}")
    now = today()
    lines.append(f"in-sample, today's plan over the same rows (replan.txt, {len(now)} rows): {summary(now)}")
    (HERE / "first_measured.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

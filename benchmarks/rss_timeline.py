"""Where in a step a running `grpo train` process reaches its peak RSS: samples the process's resident memory and the
last line of its log every few seconds (reading /proc, nothing that slows it), then reports the highest RSS seen in
each step and phase the log names (start-up, generating, training micro-batches, between steps).

    python benchmarks/rss_timeline.py --pid PID --log RUN.log --output timeline.csv      # until the process ends
    python benchmarks/rss_timeline.py --summarise timeline.csv                         # peak per phase
Costs one read of /proc/PID/status and of the log's tail per sample.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import time
from pathlib import Path

GIB = 1024**3


def rss_bytes(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) * 1024 if match else None


def last_line(log: Path) -> str:
    with log.open("rb") as handle:
        handle.seek(max(0, log.stat().st_size - 4096))
        lines = [line for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def phase(line: str) -> str:
    """The phase a progress line names: `step 18/100: generating ...` -> generating."""
    if "generating" in line:
        return "generating"
    if "training micro-batch" in line or "generated in" in line:
        return "training"
    if re.match(r"step \d+/\d+\s+reward", line):
        return "between steps (saving, sync)"
    return "start-up"


def sample(pid: int, log: Path, output: Path, every_s: float) -> None:
    new = not output.exists()
    with output.open("a", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(["time", "rss_gib", "phase", "line"])
        while (rss := rss_bytes(pid)) is not None:
            line = last_line(log)
            writer.writerow([f"{time.time():.0f}", f"{rss / GIB:.3f}", phase(line), line[:120]])
            handle.flush()
            time.sleep(every_s)


def summarise(output: Path) -> str:
    """Per step and phase: samples, and the lowest, median and highest RSS seen."""
    import statistics

    seen: dict[tuple[int, str], list[float]] = {}
    with output.open() as handle:
        for row in csv.DictReader(handle):
            step = re.search(r"step (\d+)/\d+", row["line"])
            seen.setdefault((int(step.group(1)) if step else 0, row["phase"]), []).append(float(row["rss_gib"]))
    lines = ["step  phase                          samples   min GiB  median GiB  max GiB"]
    for (step, name), rss in sorted(seen.items()):
        lines.append(
            f"{step:>4}  {name:<30} {len(rss):>7}  {min(rss):>8.2f}  {statistics.median(rss):>10.2f}  {max(rss):>7.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid", type=int)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--summarise", type=Path)
    args = parser.parse_args()
    if args.summarise:
        print(summarise(args.summarise))
        return
    if not (args.pid and args.log and args.output):
        parser.error("--pid, --log and --output are needed to sample")
    os.nice(5)
    sample(args.pid, args.log, args.output, args.every)
    print(summarise(args.output))


if __name__ == "__main__":
    main()

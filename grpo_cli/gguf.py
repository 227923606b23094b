""".gguf model files as plain model directories: each file dequantized once, in a child process, into a cache."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.files import cache_root


def converted_dir(gguf: Path) -> Path:
    """Where the plain copy of a .gguf file is cached (size and mtime in the name: a changed file is converted
    again)."""
    stat = gguf.stat()
    return cache_root() / "gguf" / f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"


def plain_model_dir(gguf: Path) -> Path:
    """Dequantize a .gguf file once into a cached plain model directory (bfloat16 safetensors).

    The conversion runs in a child process: transformers dequantizes the whole file to float32 at once, and memory
    given back to the allocator is not given back to the system, so in this process much of that peak would stay
    resident beside the training that follows (benchmarks/cpu_memory.txt). `grpo plan` gives its peak
    (plan/gguf_header.py conversion_peak_bytes)."""
    import subprocess
    import sys

    target = converted_dir(gguf)
    if (target / "config.json").exists():
        return target
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from grpo_cli.gguf import convert_gguf; convert_gguf(*sys.argv[1:])",
            str(gguf),
            str(target),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()] or ["no output"]
        raise UserError(f"cannot convert {gguf}: {lines[-1][:300]}", path="model.name")
    return target


def convert_gguf(gguf: str, target: str) -> None:
    """The conversion itself (see plain_model_dir). The Trainer refuses a model still marked as GGUF-quantized, so
    the quantizer marker is dropped before saving."""
    import contextlib
    import io

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = Path(gguf)
    # transformers draws its own tqdm bar for the conversion, ignoring disable_progress_bar; errors still raise.
    with contextlib.redirect_stderr(io.StringIO()):
        model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.bfloat16)
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = Path(target).with_name(Path(target).name + ".partial")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(target)  # a crash mid-save never leaves a half-written cache entry behind

""".gguf model files as plain model directories: each file dequantized once, in a child process, into a cache."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.files import cache_root


def converted_dir(gguf: Path) -> Path:
    """Where the plain copy of a .gguf file is cached, named by its content (size and a hash of samples spread over
    the file: a changed file is converted again). Not by mtime: every reinstall of a package that ships a model
    gives it a new one, and each left another copy of several hundred MB in the cache."""
    return cache_root() / "gguf" / f"{gguf.stem}-{gguf.stat().st_size}-{content_key(gguf)}"


def content_key(path: Path, samples: int = 16, chunk: int = 1 << 16) -> str:
    """A hash of the file's first and last MiB and `samples` chunks between (about 3 MB read, milliseconds): the
    header, and tensors from every part of the file."""
    import hashlib

    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        for i in range(1, samples + 1):
            handle.seek(size * i // (samples + 1))
            digest.update(handle.read(chunk))
        handle.seek(max(0, size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:16]


def remove_mtime_keyed_copies(gguf: Path) -> None:
    """Copies cached under the earlier mtime-based names (`<stem>-<size>-<digits>`) of a file of this name and size:
    nothing will read them again."""
    import re
    import shutil

    pattern = re.compile(re.escape(f"{gguf.stem}-{gguf.stat().st_size}-") + r"\d{9,11}$")
    for old in (cache_root() / "gguf").glob(f"{gguf.stem}-*"):
        if pattern.match(old.name) and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


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
    remove_mtime_keyed_copies(gguf)
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

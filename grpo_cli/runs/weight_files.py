"""Whether a folder's weight files can be loaded, read before any model loads: a save or a copy that was interrupted
leaves weights cut short, a LoRA adapter's config cut, or its weights missing."""

from __future__ import annotations

import json
from pathlib import Path


def cut_short_weights(folder: Path) -> Path | None:
    """The first .safetensors file in `folder` that is not whole (a save or a copy cut short), or None."""
    return next((file for file in sorted(folder.glob("*.safetensors")) if not _safetensors_whole(file)), None)


def unloadable_weights(folder: Path) -> tuple[Path, str] | None:
    """The file that keeps the model in `folder` from loading, with why (a save or a copy interrupted: weights cut
    short, a LoRA adapter's config cut or its weights missing), or None. Read before any model loads."""
    damaged = cut_short_weights(folder)
    if damaged is not None:
        return damaged, "is cut short or damaged (fewer bytes than its header promises)"
    config = folder / "adapter_config.json"
    if not config.is_file():
        return None
    try:
        whole = isinstance(json.loads(config.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        whole = False
    if not whole:
        return config, "is cut short or damaged (not a JSON object)"
    if not any((folder / f"adapter_model.{suffix}").is_file() for suffix in ("safetensors", "bin")):
        return folder / "adapter_model.safetensors", "is missing (its save was interrupted)"
    return None


def _safetensors_whole(file: Path) -> bool:
    """The header parses and the file holds every byte the header promises."""
    import struct

    try:
        with open(file, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        return file.stat().st_size >= 8 + size + end
    except (OSError, ValueError, struct.error, KeyError, TypeError):
        return False

"""A model's shape from a `.gguf` file's header, for `grpo plan` on a model that exists only as a GGUF file.

Reads the key-value header and the tensor table (names and shapes), never the weights: a few hundred kilobytes of
a file of hundreds of megabytes, in well under a second. Format: github.com/ggml-org/ggml/blob/master/docs/gguf.md.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any, BinaryIO

# value type -> struct format (scalars); 8 = string, 9 = array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_STRING = 1 << 24  # a header string longer than 16 MB means the file is not what it claims


# Converting a .gguf file once into a plain model directory (grpo_cli/models.py, a child process) holds every weight
# dequantized to float32: a peak RSS of about 0.36 GiB plus 4 B per element of the file's tensors. Measured with
# /usr/bin/time: SmolLM2-135M (134.5M elements) 0.86 GiB, Qwen2.5-Coder-0.5B (630M, its output layer untied) 2.84 GiB,
# where this gives 0.86 and 2.71.
CONVERSION_RUNTIME_GIB = 0.36
CONVERSION_BYTES_PER_ELEMENT = 4


class GGUFError(ValueError):
    pass


def conversion_peak_bytes(path: Path) -> float:
    """Peak RSS of converting the file (see above), from its tensor table alone."""
    _, shapes = read_header(path)
    return CONVERSION_RUNTIME_GIB * 2**30 + CONVERSION_BYTES_PER_ELEMENT * sum(math.prod(s) for s in shapes.values())


def read_header(path: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """(metadata, tensor name -> shape). Arrays are kept as their length only (the vocabulary is one)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFError("not a GGUF file (no GGUF magic)")
        version, tensors, kvs = struct.unpack("<IQQ", _exact(f, 20))
        if version < 2:
            raise GGUFError(f"GGUF version {version} is too old")
        meta = {}
        for _ in range(kvs):
            key = _string(f)
            meta[key] = _value(f, struct.unpack("<I", _exact(f, 4))[0])
        shapes = {}
        for _ in range(tensors):
            name = _string(f)
            (dims,) = struct.unpack("<I", _exact(f, 4))
            shapes[name] = struct.unpack(f"<{dims}Q", _exact(f, 8 * dims))
            _exact(f, 12)  # type, offset
    return meta, shapes


def architecture_fields(path: Path) -> dict[str, Any]:
    """The keyword arguments of `Architecture` (less its name) from the header."""
    meta, shapes = read_header(path)
    arch = meta.get("general.architecture")
    try:
        hidden, heads = meta[f"{arch}.embedding_length"], meta[f"{arch}.attention.head_count"]
        return dict(
            hidden_size=hidden,
            num_layers=meta[f"{arch}.block_count"],
            num_heads=heads,
            num_kv_heads=meta.get(f"{arch}.attention.head_count_kv", heads),
            head_dim=meta.get(f"{arch}.attention.key_length", hidden // heads),
            intermediate_size=meta[f"{arch}.feed_forward_length"],
            vocab_size=meta.get(f"{arch}.vocab_size") or meta["tokenizer.ggml.tokens"],
            tie_word_embeddings="output.weight" not in shapes,
            qkv_bias="blk.0.attn_q.bias" in shapes,
            max_position_embeddings=meta.get(f"{arch}.context_length"),
        )
    except KeyError as exc:
        raise GGUFError(f"the header has no {exc.args[0]} (architecture {arch!r})") from None


def _exact(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise GGUFError("the header ends early (a cut file?)")
    return data


def _string(f: BinaryIO) -> str:
    (size,) = struct.unpack("<Q", _exact(f, 8))
    if size > _MAX_STRING:
        raise GGUFError("a header string is implausibly long")
    return _exact(f, size).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, _exact(f, struct.calcsize(fmt)))[0]
    if kind == 8:
        return _string(f)
    if kind == 9:
        item, count = struct.unpack("<IQ", _exact(f, 12))
        if item in _SCALARS:
            f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
        else:
            for _ in range(count):
                _value(f, item)
        return count
    raise GGUFError(f"unknown value type {kind}")

"""Finding and loading models: hub id, local directory, `.gguf` file, or a file shipped inside a package.

torch/transformers are imported inside functions so recipe validation stays fast.
"""

from __future__ import annotations

from pathlib import Path

from grpo_cli.chat_templates import adapt
from grpo_cli.errors import UserError
from grpo_cli.gguf import plain_model_dir
from grpo_cli.recipe.sources import model_location


def resolve_model_path(name: str) -> str:
    """Hub id or a loadable local directory (GGUF files are converted first)."""
    location = model_location(name)
    if location.endswith(".gguf"):
        return str(plain_model_dir(Path(location)))
    return location


def load_tokenizer(model):
    """The model section's tokenizer, left-padded (generation needs left padding), with a pad token."""
    from transformers import AutoTokenizer

    source = model.tokenizer or resolve_model_path(model.name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source,
            padding_side="left",
            revision=model.revision,
            trust_remote_code=model.trust_remote_code,
        )
    except (OSError, ValueError) as exc:
        raise UserError(_not_found(source, exc), path="model.tokenizer" if model.tokenizer else "model.name") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return adapt(tokenizer, model)


def tokenizer_without_weights(model):
    """The model section's tokenizer for measuring prompts before any weight exists: a .gguf model is not converted
    (that takes minutes); its tokenizer is read from the file once and kept beside the converted models."""
    from transformers import AutoTokenizer

    from grpo_cli.files import cache_root
    from grpo_cli.gguf import converted_dir

    location = model.tokenizer or model_location(model.name)
    if not location.endswith(".gguf"):
        return load_tokenizer(model)
    gguf = Path(location)
    converted = converted_dir(gguf)
    if (converted / "config.json").exists():
        return adapt(AutoTokenizer.from_pretrained(str(converted), padding_side="left"), model)
    kept = cache_root() / "tokenizers" / converted.name
    if not kept.is_dir():
        staging = kept.with_name(kept.name + ".partial")
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(staging))
        staging.rename(kept)  # never a half-written tokenizer in the cache
    return adapt(AutoTokenizer.from_pretrained(str(kept), padding_side="left"), model)


def quantization_config(q, dtype: str):
    """bitsandbytes config for the quantization section `q` (QLoRA 4-bit or 8-bit base weights; computing in
    `dtype` unless it names one); None without it (full and plain LoRA)."""
    if q is None:
        return None
    import torch  # after the early return, with BitsAndBytesConfig: only a quantized base reads either
    from transformers import BitsAndBytesConfig

    if q.bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=q.quant_type,
        bnb_4bit_use_double_quant=q.double_quant,
        bnb_4bit_compute_dtype=getattr(torch, q.compute_dtype or dtype),
    )


def pretrained_kwargs(model) -> dict:
    """`from_pretrained` arguments every load of the section's model shares: the dtype is always explicit (TRL and
    transformers would default to float32), remote code only when the section turns it on."""
    import torch

    return dict(
        dtype=getattr(torch, model.dtype),
        attn_implementation=model.attn_implementation,
        revision=model.revision,
        trust_remote_code=model.trust_remote_code,
    )


def is_lora_adapter(path: str | Path) -> bool:
    """A directory written by peft's save_pretrained (a LoRA/QLoRA run's final/ or a checkpoint)."""
    return (Path(path) / "adapter_config.json").is_file()


def load_model(model, quantization=None, frozen_linear_dtype: str | None = None):
    """The model section's model, in its dtype (never TRL's float32 default), quantized as the quantization
    section says (QLoRA).

    A float32 run of a checkpoint stored narrower loads it as stored (memory-mapped, nothing read yet) and widens it
    tensor by tensor from the file, instead of from_pretrained's conversion, which holds the whole mapped file beside
    the whole converted copy (load peaks in benchmarks/cpu_memory.txt). With `frozen_linear_dtype` (a LoRA
    run under autocast, grpo_cli/train/frozen_weights.py) a checkpoint stored in that dtype keeps its Linear weights as
    stored: the same values as loading all in float32 and casting the Linears back."""
    import torch
    from transformers import AutoModelForCausalLM

    location = resolve_model_path(model.name)
    kwargs = pretrained_kwargs(model)
    quant = quantization_config(quantization, model.dtype)
    if quant is not None:
        kwargs["quantization_config"] = quant
        if torch.cuda.is_available():
            from accelerate import PartialState

            # Quantized weights are placed at load time, one whole copy per process.
            kwargs["device_map"] = {"": PartialState().local_process_index}
    stored = None
    try:
        if quant is None and model.dtype == "float32":
            stored = _stored_dtype(location, kwargs)
            stored = stored if stored in ("bfloat16", "float16") else None
        if stored:
            kwargs["dtype"] = getattr(torch, stored)
        loaded = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    except OSError as exc:
        raise UserError(_not_found(location, exc), path="model.name") from None
    except ImportError as exc:  # flash-attn or another optional kernel package is missing
        raise UserError(f"{exc}", path="model.attn_implementation") from None
    if stored:
        _widen_from_file(
            loaded,
            _stored_tensors(location, model.revision),
            torch.float32,
            keep_linears=stored == frozen_linear_dtype,
        )
    return loaded


def _stored_dtype(location: str, kwargs: dict) -> str | None:
    """The dtype the checkpoint's config says its weights are stored in (None when it does not say)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        location, revision=kwargs["revision"], trust_remote_code=kwargs["trust_remote_code"]
    )
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(stored).removeprefix("torch.") if stored is not None else None


def _stored_tensors(location: str, revision: str | None) -> dict[str, tuple[Path, int, dict]]:
    """Tensor name -> (safetensors file, offset of its data section, header entry) for a checkpoint on this disk;
    empty when its files cannot be found (then tensors are copied out of the mapping instead)."""
    import json

    directory = Path(location)
    if not directory.is_dir():
        try:
            from transformers.utils import cached_file

            directory = Path(cached_file(location, "config.json", revision=revision)).parent
        except (OSError, ValueError):
            return {}
    index = directory / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    )
    entries = {}
    for name in files:
        path = directory / name
        if not path.is_file():
            return {}
        with path.open("rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        entries.update((key, (path, 8 + size, entry)) for key, entry in header.items() if key != "__metadata__")
    return entries


def _read_stored(path: Path, data_start: int, entry: dict, stored_dtype, dtype, chunk_bytes: int = 64 << 20):
    """One tensor read from a safetensors file with plain reads (the page cache holds the file, not this process),
    converted to `dtype` in slices of about `chunk_bytes`: a whole-tensor staging copy would be freed to the allocator,
    which keeps it (as large as the largest tensor: the embedding)."""
    import torch

    shape = entry["shape"]
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(-1)
    size = stored_dtype.itemsize
    step = max(1, chunk_bytes // size)
    staging = torch.empty(min(step, flat.numel()) * size, dtype=torch.uint8)
    with path.open("rb") as fh:
        fh.seek(data_start + entry["data_offsets"][0])
        for first in range(0, flat.numel(), step):
            count = min(step, flat.numel() - first)
            part = staging[: count * size]
            if fh.readinto(memoryview(part.numpy())) != count * size:
                raise OSError(f"{path} is shorter than its header says")
            flat[first : first + count].copy_(part.view(stored_dtype))
    return out


def _widen_from_file(model, stored: dict, dtype, keep_linears: bool) -> None:
    """Every floating parameter and buffer to `dtype`, one at a time, read from the checkpoint file where it is found
    there as loaded (same name, shape and dtype); with `keep_linears` the decoder Linear layers' weights keep their
    stored dtype. Nothing stays a view of the file's memory map: while one view lives the whole mapping stays, and
    every page read through it counts in the resident set until the end (benchmarks/cpu_memory.txt)."""
    import torch

    output = model.get_output_embeddings()
    keep = (
        {
            id(t)
            for m in model.modules()
            if isinstance(m, torch.nn.Linear) and m is not output
            for t in m.parameters(recurse=False)
        }
        if keep_linears
        else set()
    )
    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            target = tensor.dtype if id(tensor) in keep or not tensor.is_floating_point() else dtype
            path, start, entry = stored.get(name, (None, 0, {}))
            if path and entry.get("shape") == list(tensor.shape) and dtypes.get(entry.get("dtype")) == tensor.dtype:
                tensor.data = _read_stored(path, start, entry, tensor.dtype, target)
            else:
                tensor.data = tensor.data.to(target, copy=True)
    model.config.dtype = dtype


def _not_found(name: str, exc: Exception) -> str:
    import os

    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"cannot load `{name}`: {reason[:200]}. " + (
        "HF_HUB_OFFLINE=1 is set: download it first or point model.name at a local directory or .gguf file"
        if offline
        else "check the hub id, your network and HF_TOKEN, or point model.name at a local directory or .gguf file"
    )


def lora_config(lora):
    """peft LoraConfig from a `lora` section (`all-linear` spares the output head)."""
    from peft import LoraConfig

    targets = lora.target_modules
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules="all-linear" if targets == ["all-linear"] else targets,
        bias=lora.bias,
        use_rslora=lora.use_rslora,
        task_type="CAUSAL_LM",
    )

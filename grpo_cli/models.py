"""Finding and loading models: hub id, local directory, `.gguf` file, or a file shipped inside a package.

torch/transformers are imported inside functions so recipe validation stays fast.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.recipe.sources import model_location


def cache_root() -> Path:
    import os

    return Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo"))


def plain_model_dir(gguf: Path) -> Path:
    """Dequantize a .gguf file once into a cached plain model directory.

    The Trainer refuses a model still marked as GGUF-quantized, so the quantizer marker is dropped before
    saving. The cache key includes size and mtime, so a changed file is converted again.
    """
    stat = gguf.stat()
    target = cache_root() / "gguf" / f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if (target / "config.json").exists():
        return target
    import contextlib
    import io

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # transformers draws its own tqdm bar for the conversion, ignoring disable_progress_bar; errors still raise.
    with contextlib.redirect_stderr(io.StringIO()):
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)  # a crash mid-save never leaves a half-written cache entry behind
    return target


def resolve_model_path(name: str) -> str:
    """Hub id or a loadable local directory (GGUF files are converted first)."""
    location = model_location(name)
    if location.endswith(".gguf"):
        return str(plain_model_dir(Path(location)))
    return location


def load_tokenizer(recipe):
    """Left-padded tokenizer (generation needs left padding), with a pad token."""
    from transformers import AutoTokenizer

    source = recipe.model.tokenizer or resolve_model_path(recipe.model.name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source, padding_side="left", revision=recipe.model.revision, trust_remote_code=recipe.model.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise UserError(_not_found(source, exc), path="model.tokenizer" if recipe.model.tokenizer else "model.name") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def quantization_config(recipe):
    """bitsandbytes config for QLoRA (4-bit) or 8-bit base weights; None for full and plain LoRA."""
    q = recipe.quantization
    if q is None:
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if q.bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=q.quant_type,
        bnb_4bit_use_double_quant=q.double_quant,
        bnb_4bit_compute_dtype=getattr(torch, q.compute_dtype or recipe.model.dtype),
    )


def pretrained_kwargs(recipe) -> dict:
    """`from_pretrained` arguments every load of the recipe's model shares: the dtype is always explicit (TRL and
    transformers would default to float32), remote code only when the recipe turns it on."""
    import torch

    return dict(
        dtype=getattr(torch, recipe.model.dtype),
        attn_implementation=recipe.model.attn_implementation,
        revision=recipe.model.revision,
        trust_remote_code=recipe.model.trust_remote_code,
    )


def is_lora_adapter(path: str | Path) -> bool:
    """A directory written by peft's save_pretrained (a LoRA/QLoRA run's final/ or a checkpoint)."""
    return (Path(path) / "adapter_config.json").is_file()


def load_model(recipe, frozen_linear_dtype: str | None = None):
    """The policy model, in the recipe's dtype (never TRL's float32 default), quantized for QLoRA.

    `frozen_linear_dtype` (a LoRA run under autocast, grpo_cli/train/frozen_weights.py): a checkpoint stored in that
    dtype keeps its Linear weights as stored and only the rest is widened to float32, the same values as loading all
    in float32 and casting the Linears back, without from_pretrained's whole-model conversion (Qwen2.5-0.5B: peak RSS
    4.02 GiB loaded in float32, 2.56 GiB this way; a run of qwen_small 3.77 GiB against 4.33, benchmarks/cpu_memory.txt)."""
    import torch
    from transformers import AutoModelForCausalLM

    location = resolve_model_path(recipe.model.name)
    kwargs = pretrained_kwargs(recipe)
    quant = quantization_config(recipe)
    if quant is not None:
        kwargs["quantization_config"] = quant
        if torch.cuda.is_available():
            from accelerate import PartialState

            # Quantized weights are placed at load time, one whole copy per process.
            kwargs["device_map"] = {"": PartialState().local_process_index}
    as_stored = False
    try:
        if frozen_linear_dtype and quant is None and recipe.model.dtype == "float32":
            as_stored = _stored_dtype(location, kwargs) == frozen_linear_dtype
        if as_stored:
            kwargs["dtype"] = getattr(torch, frozen_linear_dtype)
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    except OSError as exc:
        raise UserError(_not_found(location, exc), path="model.name") from None
    except ImportError as exc:  # flash-attn or another optional kernel package is missing
        raise UserError(f"{exc}", path="model.attn_implementation") from None
    if as_stored:
        _widen_all_but_linears(model, torch.float32)
    return model


def _stored_dtype(location: str, kwargs: dict) -> str | None:
    """The dtype the checkpoint's config says its weights are stored in (None when it does not say)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(location, revision=kwargs["revision"],
                                        trust_remote_code=kwargs["trust_remote_code"])
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(stored).removeprefix("torch.") if stored is not None else None


def _widen_all_but_linears(model, dtype) -> None:
    """Every floating parameter and buffer to `dtype`, one at a time, except the decoder Linear layers' own, which
    are copied out of the checkpoint file instead: loaded as stored they are views of its memory map, and while one
    view lives the whole file stays mapped and counts in the resident set (0.48 GiB more at Qwen2.5-0.5B's peak)."""
    import torch

    output = model.get_output_embeddings()
    keep = {id(t) for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not output
            for t in m.parameters(recurse=False)}
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if id(tensor) in keep or not tensor.is_floating_point():
                tensor.data = tensor.data.clone()
            else:
                tensor.data = tensor.data.to(dtype, copy=True)
    model.config.dtype = dtype


def _not_found(name: str, exc: Exception) -> str:
    import os

    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"cannot load `{name}`: {reason[:200]}. "
        + ("HF_HUB_OFFLINE=1 is set: download it first or point model.name at a local directory or .gguf file"
           if offline else "check the hub id, your network and HF_TOKEN, or point model.name at a local directory or .gguf file")
    )


def lora_config(recipe):
    """peft LoraConfig from the recipe's `lora` section (`all-linear` spares the output head)."""
    from peft import LoraConfig

    lora = recipe.lora
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


def _lean_lora_forward(base_layer, a, b, x, *args, **kwargs):
    import torch.nn.functional as F

    return base_layer(x, *args, **kwargs) + F.linear(F.linear(x.to(a.dtype), a), b)


def lean_lora(model, dtype):
    """Until the returned function is called, each plain LoRA layer (one active adapter, no dropout acting, no
    variant) computes base(x) + x A^T (s B)^T with A and s B cast once to `dtype`: what PEFT's forward computes, in
    three operations instead of about ten per layer, for evaluation, where the adapters do not change. On
    Qwen2.5-0.5B in bfloat16 a decode step (batch 16) took 177 against 198 ms (LoRA r16 on all 168 Linear layers;
    155 ms without the adapter). Inside training it made no measurable difference (benchmarks/generation_in_training.txt)."""
    import torch
    from peft.tuners.lora import Linear as LoraLinear

    patched = []
    with torch.no_grad():
        for module in model.modules():
            if not isinstance(module, LoraLinear) or module.merged or module.disable_adapters:
                continue
            names = [n for n in module.active_adapters if n in module.lora_A]
            if len(names) != 1 or names[0] in module.lora_variant:
                continue
            name = names[0]
            dropout = module.lora_dropout[name]
            if not (isinstance(dropout, torch.nn.Identity) or (isinstance(dropout, torch.nn.Dropout) and not dropout.training)):
                continue  # a dropout that would act (training mode): PEFT's forward applies it
            a = module.lora_A[name].weight.to(dtype)
            b = (module.lora_B[name].weight * module.scaling[name]).to(dtype)
            module.forward = partial(_lean_lora_forward, module.base_layer, a, b)
            patched.append(module)

    def restore() -> None:
        for module in patched:
            del module.forward  # back to the class's (PEFT's) forward

    return restore

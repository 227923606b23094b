"""Training that starts from weights trained before: the SFT stage's adapter or model, or the PEFT adapter that
`lora.adapter` names. Every tensor it holds must land in the model, with its shape: an adapter for another model or
another LoRA shape is refused in one line, before any step."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.recipe.model_section import LoraSection
from grpo_cli.recipe.sft_checks import adapter_mismatch

ADAPTER_KEY = "lora.adapter"


def named_adapter(model_name: str, lora: LoraSection | None) -> Path | None:
    """The folder of `lora.adapter` (a hub id downloaded first), checked against the model and LoRA shape; None
    without one."""
    adapter = lora.adapter if lora is not None else None
    if not adapter:
        return None
    folder = Path(adapter).expanduser()
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        try:
            folder = Path(snapshot_download(adapter))
        except Exception as exc:  # the hub raises many types (offline, not found, gated)
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise UserError(f"cannot load adapter `{adapter}`: {reason}", path=ADAPTER_KEY) from None
    problem = adapter_mismatch(folder, model_name, lora)
    if problem:
        raise UserError(problem, path=ADAPTER_KEY)
    return folder


def start_from(model, weights: Path, model_name: str, lora: LoraSection | None, key: str = ADAPTER_KEY):
    """The model carrying `weights`: a LoRA recipe's model wrapped in a trainable PeftModel with that adapter (TRL then
    trains it as it is, and with grpo.beta > 0 keeps a frozen copy of it as the KL reference); a full fine-tuning
    recipe's model with every weight replaced. `key` is the recipe key the weights came from, named in errors."""
    if lora is not None:
        return _with_adapter(model, weights, model_name, lora, key)
    _replace_weights(model, weights, key)
    return model


def _with_adapter(model, folder: Path, model_name: str, lora: LoraSection, key: str):
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import load_file

    problem = adapter_mismatch(folder, model_name, lora)
    if problem:
        raise UserError(problem, path=key)
    try:
        peft_model = PeftModel.from_pretrained(model, str(folder), is_trainable=True)
    except (RuntimeError, ValueError, KeyError, OSError) as exc:  # size mismatch, targets the model lacks
        raise UserError(f"{folder} does not fit {model_name}: {_first_line(exc)}", path=key) from None
    weights = folder / "adapter_model.safetensors"
    stored = load_file(str(weights)) if weights.is_file() else {}
    loaded = get_peft_model_state_dict(peft_model)
    missing = [name for name in stored if name not in loaded or loaded[name].shape != stored[name].shape]
    if missing:
        raise UserError(f"{folder} holds weights {model_name} has no place for ({missing[0]})", path=key)
    _check_targets(peft_model, lora.target_modules, folder, key)
    return peft_model


def _check_targets(peft_model, targets: list[str], folder: Path, key: str) -> None:
    """The adapter must adapt every Linear layer the recipe's lora.target_modules names (`all-linear`: all but the
    output layer): PEFT keeps the adapter's own targets, so a narrower adapter would silently train fewer layers."""
    import torch

    base = peft_model.get_base_model()
    output = base.get_output_embeddings()
    wanted, adapted = set(), set()
    for name, module in base.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            adapted.add(name)
        layer = getattr(module, "base_layer", module)  # an adapted layer's own Linear is its base_layer
        if ".lora_" in name or name.endswith(".base_layer") or layer is output:
            continue
        if isinstance(layer, torch.nn.Linear) and (targets == ["all-linear"] or name.rsplit(".", 1)[-1] in targets):
            wanted.add(name)
    left = sorted(wanted - adapted)
    if left:
        raise UserError(
            f"{folder} does not adapt {len(left)} of the {len(wanted)} layers lora.target_modules "
            f"({', '.join(targets)}) names, e.g. {left[0]}; train it with the same target_modules, or set "
            "lora.target_modules to the ones it adapts",
            path=key,
        )


def _replace_weights(model, folder: Path, key: str) -> None:
    """Every parameter from the saved model in `folder`, tensor by tensor (never two whole copies at once)."""
    import torch
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(f"{folder} holds no model weights (*.safetensors)", path=key)
    params = dict(model.named_parameters())
    done = set()
    with torch.no_grad():
        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():
                    if name in params and tuple(handle.get_slice(name).get_shape()) == tuple(params[name].shape):
                        params[name].copy_(handle.get_tensor(name))
                        done.add(name)
    left = [name for name in params if name not in done]
    if left:
        raise UserError(f"{folder} does not hold every weight of the model ({left[0]} is missing)", path=key)
    # TRL builds the KL reference (grpo.beta > 0) from this path: the model GRPO starts from, not the base
    model.config._name_or_path = str(folder)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("Error(s)")]
    return (lines[0] if lines else type(exc).__name__)[:300]

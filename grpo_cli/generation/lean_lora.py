"""LoRA layers computed lean for evaluation, where the adapters do not change."""

from __future__ import annotations

from functools import partial


def _lean_lora_forward(base_layer, a, b, x, *args, **kwargs):
    import torch.nn.functional as F

    return base_layer(x, *args, **kwargs) + F.linear(F.linear(x.to(a.dtype), a), b)


def plain_adapter(module) -> str | None:
    """The adapter's name when `module` is a plain LoRA Linear (one active adapter, no dropout acting, no variant
    such as DoRA, an nn.Linear base): what base(x) + s B A x computes exactly. None for anything else."""
    import torch
    from peft.tuners.lora import Linear as LoraLinear

    if not isinstance(module, LoraLinear) or module.merged or module.disable_adapters:
        return None
    names = [n for n in module.active_adapters if n in module.lora_A]
    if len(names) != 1 or names[0] in module.lora_variant:
        return None
    if not isinstance(module.base_layer, torch.nn.Linear) or module.fan_in_fan_out:
        return None
    dropout = module.lora_dropout[names[0]]
    if isinstance(dropout, torch.nn.Identity) or (isinstance(dropout, torch.nn.Dropout) and not dropout.training):
        return names[0]
    return None  # a dropout that would act (training mode): PEFT's forward applies it


def lean_lora(model, dtype):
    """Until the returned function is called, each plain LoRA layer (one active adapter, no dropout acting, no
    variant) computes base(x) + x A^T (s B)^T with A and s B cast once to `dtype`: what PEFT's forward computes, in
    three operations instead of about ten per layer, for evaluation, where the adapters do not change: fewer small
    operations per decode step, which a CPU runs far below its matmul speed. Inside training it made no measurable
    difference (benchmarks/generation_in_training.txt)."""
    import torch

    patched = []
    with torch.no_grad():
        for module in model.modules():
            name = plain_adapter(module)
            if name is None:
                continue
            a = module.lora_A[name].weight.to(dtype)
            b = (module.lora_B[name].weight * module.scaling[name]).to(dtype)
            module.forward = partial(_lean_lora_forward, module.base_layer, a, b)
            patched.append(module)

    def restore() -> None:
        for module in patched:
            del module.forward  # back to the class's (PEFT's) forward

    return restore

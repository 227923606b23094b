"""What this machine must have for a recipe (GPU, packages), checked before any rank starts or weight loads."""

from __future__ import annotations

import importlib.util

from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import Recipe


def check_runtime(recipe: Recipe) -> None:
    """Settings that need hardware or packages this machine may lack: one clear line instead of a crash in TRL."""
    import torch

    cuda = torch.cuda.is_available()
    if recipe.grpo.use_liger_kernel and not cuda:
        raise UserError(
            "Liger kernels need a CUDA GPU; set grpo.use_liger_kernel=false here", path="grpo.use_liger_kernel"
        )
    if recipe.grpo.use_liger_kernel and importlib.util.find_spec("liger_kernel") is None:
        raise UserError("liger-kernel is not installed: pip install 'grpo-cli[liger]'", path="grpo.use_liger_kernel")
    if recipe.grpo.use_vllm and (not cuda or importlib.util.find_spec("vllm") is None):
        raise UserError(
            "vLLM generation needs a CUDA GPU and `pip install vllm`; "
            "set grpo.use_vllm=false to generate with transformers",
            path="grpo.use_vllm",
        )
    if recipe.model.dtype == "bfloat16" and cuda and not torch.cuda.is_bf16_supported():
        raise UserError("this GPU has no bfloat16; set model.dtype=float16 (or float32)", path="model.dtype")

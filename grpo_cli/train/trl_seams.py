"""Every private TRL (and transformers Trainer) name grpo relies on, what for, and one check of them at start-up.

TRL moves fast and these names are not its API. grpo's trainer class (recipe_trainer.py) overrides the methods below,
each once; a TRL upgrade that renames one must stop the run before any weight loads, naming the TRL version and what
grpo used the name for, never fall back silently. Public names (GRPOTrainer, GRPOConfig, add_callback) are not
listed: an upgrade that breaks those fails on import or in the constructor, loudly.
"""

from __future__ import annotations

from grpo_cli.errors import UserError
from grpo_cli.plan.memory import CPU_VOCAB_CHUNK_SIZE

SUPPORTED_TRL = "'trl>=1.16,<2'"

# GRPOTrainer methods the trainer class overrides or calls.
TRAINER_METHODS = {
    "_generate_single_turn": "generates with precision handling, a merged adapter or a CPU vLLM engine, and counts "
    "generation rounds, by overriding",
    "_generate_and_score_completions": "times the generation phase, counts zero-variance groups and skips or "
    "resamples them by overriding",
    "_calculate_rewards": "reads the gathered rewards for zero-variance groups by overriding",
    "_save_checkpoint": "keeps the finished steps after a reward fails by calling",
    "_compute_loss": "marks the micro-batch whose vLLM correction comes from the loss's forward pass by overriding",
    "_get_per_token_logps_and_entropies": "takes the vLLM correction weights from the loss's log-probs by overriding",
}
# Attributes a built GRPOTrainer holds (checked on the instance: they are set in its constructor).
INSTANCE_ATTRIBUTES = {
    "_metrics": "logs its own figures (zero-variance groups) beside TRL's in",
    "_step": "finds a generation batch's last micro-batch (vLLM correction diagnostics) by reading",
}
VLLM_ATTRIBUTES = {
    "vllm_generation": "pushes trained weights into a CPU vLLM engine through",
    "_last_loaded_step": "syncs a CPU vLLM engine once per step, as TRL does, by reading and setting",
    "vllm_importance_sampling_correction": "switches TRL's extra pass for the vLLM correction off on-policy by setting",
    "vllm_importance_sampling_mode": "computes the vLLM correction as TRL does from",
    "vllm_importance_sampling_clip_min": "computes the vLLM correction as TRL does from",
    "vllm_importance_sampling_clip_max": "computes the vLLM correction as TRL does from",
}
# Methods of TRL's vLLM generation helper, used only when vLLM generates on a CPU (vllm_cpu.py).
VLLM_GENERATION_METHODS = {
    "_iter_named_params": "reads the merged, vLLM-named weights to push into a CPU vLLM engine from",
}
# Module globals of TRL's vLLM helper, replaced only while a CPU vLLM engine starts (vllm_cpu.py).
VLLM_MODULE_GLOBALS = {
    ("trl.generation.vllm_generation", "LLM"): "starts a CPU vLLM engine in the recipe's dtype, eagerly, by wrapping",
}
# Module globals read or set.
MODULE_GLOBALS = {
    ("trl.trainer.utils", "_CHUNKED_LOGPROB_CHUNK_SIZE"): "narrows the LM head's vocabulary tiles on a CPU by setting",
}

# The LM head's tile width on a CPU.
#
# TRL projects the LM head in [4096 tokens, 32768 vocabulary] tiles (trl/kernels/chunked_logprob.py). With Triton the
# fold of each tile runs in registers; without it (every CPU) `_forward_tile` and `_backward_tile` run it as torch ops
# that hold several float32 copies of the whole tile at once: at the demo's full length, more than the unchunked
# logits would take. Narrower tiles hold proportionally less and change results only by float32 rounding (the fold is
# an online logsumexp in float32, and the gradients accumulate in float32 either way; tests/test_cpu_memory.py).
CPU_HEAD_TILE = CPU_VOCAB_CHUNK_SIZE  # one width: the plan's CPU head term assumes what the trainer sets


def missing() -> list[str]:
    """The listed names this TRL lacks, each with what grpo uses it for."""
    import importlib
    import importlib.util

    from trl import GRPOTrainer

    gone = [
        f"GRPOTrainer.{name}, which grpo {purpose} it"
        for name, purpose in TRAINER_METHODS.items()
        if not callable(getattr(GRPOTrainer, name, None))
    ]
    if importlib.util.find_spec("vllm") is not None:  # TRL imports its vLLM helper only where vLLM is installed
        from trl.generation.vllm_generation import VLLMGeneration

        gone += [
            f"VLLMGeneration.{name}, which grpo {purpose} it"
            for name, purpose in VLLM_GENERATION_METHODS.items()
            if not callable(getattr(VLLMGeneration, name, None))
        ]
        gone += _missing_globals(VLLM_MODULE_GLOBALS)
    return gone + _missing_globals(MODULE_GLOBALS)


def _missing_globals(names: dict) -> list[str]:
    import importlib

    gone = []
    for (module, name), purpose in names.items():
        if not hasattr(importlib.import_module(module), name):
            gone.append(f"{module}.{name}, which grpo {purpose} it")
    return gone


def check() -> None:
    """Stop with one line, before any weight loads, when the installed TRL lacks a name grpo relies on."""
    gone = missing()
    if gone:
        raise UserError(
            f"the installed trl {trl_version()} has no {gone[0]}"
            + (f" (and {len(gone) - 1} more private name(s))" if len(gone) > 1 else "")
            + f"; install the trl range grpo supports: pip install {SUPPORTED_TRL}"
        )


def check_instance(trainer) -> None:
    """The listed attributes on a built trainer (those of the vLLM engine only when it generates with vLLM)."""
    wanted = {**INSTANCE_ATTRIBUTES, **(VLLM_ATTRIBUTES if getattr(trainer, "use_vllm", False) else {})}
    gone = [
        f"GRPOTrainer.{name}, which grpo {purpose} it" for name, purpose in wanted.items() if not hasattr(trainer, name)
    ]
    if gone:
        raise UserError(f"the installed trl {trl_version()} has no {gone[0]}; pip install {SUPPORTED_TRL}")


def narrow_head_tiles() -> None:
    """Set TRL's head tile width to CPU_HEAD_TILE for this process (check() has made sure the setting exists); the
    plan's CPU head term assumes it (plan/memory.py, CPU_VOCAB_CHUNK_SIZE)."""
    import trl.trainer.utils as trl_utils

    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, CPU_HEAD_TILE)


def trl_version() -> str:
    from importlib.metadata import version

    return version("trl")

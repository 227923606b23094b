"""One process's share of the memory under `distributed.strategy`, and what the strategy itself adds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_cli.plan.architectures import Architecture
from grpo_cli.recipe.machine import DistributedSection


@dataclass
class Term:
    name: str
    bytes: float
    phase: str  # static | generation | training | comparison
    formula: str


# What each strategy splits across N processes (DeepSpeed ZeRO paper, Rajbhandari et al. 2020, section 5;
# FSDP shards like ZeRO-3). Memory that is not listed stays whole on every process.
SHARDED = {
    "ddp": (),
    "zero2": ("optimizer states", "gradients"),
    "zero3": ("optimizer states", "gradients", "weights", "lora adapters", "reference model"),
    "fsdp": (
        "optimizer states",
        "gradients",
        "weights",
        "lora adapters",
        "reference model",
        "optimizer step temporaries",
    ),
}


def per_process(
    terms: list[Term], distributed: DistributedSection, trl: dict[str, Any], arch: Architecture, w: int
) -> list[Term]:
    """One process's share under distributed.strategy, plus what the strategy itself adds (`trl`: the recipe's
    passthrough GRPOConfig fields, which say whether ZeRO-3 gathers the weights for generation)."""
    n, strategy = distributed.num_processes, distributed.strategy
    if n == 1:
        return terms
    out = []
    for t in terms:
        if t.name in SHARDED[strategy] and t.bytes:
            t = Term(t.name, t.bytes / n, t.phase, f"({t.formula}) / {n} processes ({strategy} shards it)")
        out.append(t)
    layer = (arch.params - arch.embedding_params) / arch.num_layers * w
    if strategy == "ddp":
        # DDP's reducer keeps its own flat gradient buckets beside param.grad (gradient_as_bucket_view=False).
        grads = next(t.bytes for t in terms if t.name == "gradients")
        out.append(Term("DDP gradient buckets", grads, "static", "a second copy of the gradients for all-reduce"))
    elif strategy in ("zero3", "fsdp"):
        # The layer being computed and the prefetched next one are gathered whole.
        out.append(Term("gathered layers", 2 * layer, "training", f"2 decoder layers x {layer / 1e6:.0f} MB, gathered"))
        weights = next(t.bytes for t in terms if t.name == "weights")
        if strategy == "zero3" and trl.get("ds3_gather_for_generation", True):
            # TRL gathers every weight for generation (GRPOConfig.ds3_gather_for_generation, default True).
            out.append(
                Term(
                    "weights gathered for generation",
                    weights * (n - 1) / n,
                    "generation",
                    "trl.ds3_gather_for_generation=true: the full model on each GPU while sampling",
                )
            )
        else:
            out.append(Term("gathered layers (generation)", 2 * layer, "generation", "FSDP2 gathers layer by layer"))
    return out

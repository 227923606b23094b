"""The health watch's signatures (runs/health.py decides when each sounds): the kind `training.health.halt_on`
names, what the signature means and what to change. docs/health.md lists them with their thresholds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    name: str
    kind: str  # what `training.health.halt_on` names
    meaning: str
    fix: str


SIGNATURES = {
    s.name: s
    for s in (
        Signature(
            "nan",
            "nan",
            "the loss or the gradient norm is NaN or infinite",
            "lower training.learning_rate; train in bf16 or float32 rather than fp16; check that no reward returns inf",
        ),
        Signature(
            "no_signal",
            "no_signal",
            "most groups scored all their completions alike: no advantage, no update",
            "the task is too hard or too easy for the model, or the rewards cannot tell completions apart: "
            "raise grpo.num_generations or grpo.temperature, add partial credit, or set "
            "grpo.zero_variance_groups: resample",
        ),
        Signature(
            "entropy_collapse",
            "collapse",
            "the policy's entropy fell to a small part of its start: it samples almost one completion",
            "lower training.learning_rate, set grpo.beta (0.04), or raise the temperature",
        ),
        Signature(
            "length_collapse",
            "collapse",
            "completions shrank to a small part of their starting length",
            "a reward pays for saying less: lower its weight or give it a minimum length",
        ),
        Signature(
            "cut_at_limit",
            "collapse",
            "most completions are cut at grpo.max_completion_length",
            "raise grpo.max_completion_length, or add a length reward",
        ),
        Signature(
            "reward_saturated",
            "gaming",
            "the reward rose while validation accuracy stayed flat or fell",
            "the rewards pay for something besides the answer: read samples.jsonl for what scores; weight "
            "correctness above format and length rewards",
        ),
        Signature(
            "shortcut",
            "gaming",
            "validation's answers look like a shortcut",
            "see the reason; a reward that pays one answer or a format alone is the usual cause",
        ),
        Signature(
            "one_reward_dominates",
            "gaming",
            "a reward with less weight makes most of the reward's spread, so the advantages follow it",
            "lower that reward's weight, or check it cannot be earned without the answer",
        ),
        Signature(
            "reward_falling",
            "divergence",
            "the reward fell over three windows in a row",
            "lower training.learning_rate, or --resume from an earlier checkpoint with a lower one",
        ),
        Signature(
            "kl_runaway",
            "divergence",
            "the KL to the reference stayed above its limit",
            "raise grpo.beta, or lower training.learning_rate",
        ),
        Signature(
            "grad_spike",
            "divergence",
            "the gradient norm jumped far above its recent median",
            "lower training.learning_rate or training.max_grad_norm",
        ),
        Signature(
            "tools_vanished",
            "tools",
            "the model stopped calling its tools",
            "a reward pays answers without calls as well: reward the call, or run SFT on traces",
        ),
        Signature(
            "tools_failing",
            "tools",
            "most tool calls fail",
            "read the tool errors in samples.jsonl; describe the arguments better in the tool's docstring",
        ),
    )
}

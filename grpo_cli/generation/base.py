"""What every generation engine shares: the prompt and result types, the `Generator` protocol, the batch order and
the stop-string cut.

Evaluation, validation while training, preflight's sampling, the SFT stage's self-sampling and the tool loop all
generate through one of the engines in this package (the shape of lm-evaluation-harness's `LM` interface with its
registered backends): `transformers_engine.py` (batched `generate`), `continuous.py` (continuous batching on a
transformers model), `vllm_engine.py` (vLLM, CPU or GPU), `policy_sampler.py` (sampled as TRL samples in training),
and `tool_loop.py` over any of them; `engines.py` chooses and builds one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from grpo_cli.generation.sampling import Sampling

# A prompt is text, or token ids (the tool loop continues a conversation from its exact tokens).
Prompt = str | list[int]


@dataclass
class Generated:
    index: int  # position in the caller's prompt list
    text: str  # decoded, cut at the first stop string
    new_tokens: int
    tokens: list[int] = field(default_factory=list)  # the new token ids, without the end-of-sequence token
    stopped: bool = False  # ended with the end-of-sequence token (not at the budget or a stop string)
    model_tokens: int | None = None  # tokens the model wrote (the tool loop's completions also hold tool tokens)
    extra: dict = field(default_factory=dict)  # fields a record keeps beside the completion (the tool loop's calls)

    def __post_init__(self):
        if self.model_tokens is None:
            self.model_tokens = self.new_tokens


def longest_first(lengths: list[int], texts: list[str] | None = None) -> list[int]:
    """Indices, longest prompts first; ties by text, as lm-eval's Collator orders them."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], texts[i] if texts else "", i))


def length_sorted_batches(lengths: list[int], batch_size: int, texts: list[str] | None = None) -> list[list[int]]:
    order = longest_first(lengths, texts)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def sort_texts(prompts: Sequence[Prompt]) -> list[str] | None:
    """Tie-breaking keys for the length sort: the texts (lm-eval's order), or none for token-id prompts."""
    return [p if isinstance(p, str) else "" for p in prompts]


def cut_at_stops(text: str, stops: list[str]) -> str:
    """Text before the first occurrence of each stop string in turn (lm-eval's postprocessing)."""
    for stop in stops:
        if stop:
            text = text.split(stop)[0]
    return text


class Generator(Protocol):
    """A generation engine. `generate` yields lists of `Generated` as they finish (callers record results as they
    come), in any order: each carries its index in the caller's prompt list."""

    # Read-only members (properties), so an engine may hold each as a plain attribute or compute it.
    @property
    def name(self) -> str: ...  # "transformers", "vllm", ...: recorded in settings and summaries with `version`

    @property
    def version(self) -> str: ...

    @property
    def max_new_tokens(self) -> int: ...

    @property
    def sampling(self) -> Sampling | None: ...  # eval's seeded sampling (sampling.py); None: greedy or TRL's draws

    def token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]: ...

    def generate(
        self,
        prompts: Sequence[Prompt],
        batch_size: int,
        budgets: list[int] | None = None,
        seeds: list[int] | None = None,
    ) -> Iterator[list[Generated]]: ...

    def close(self) -> None: ...

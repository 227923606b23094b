"""Completions sampled as GRPO samples them in training (TRL's transformers path: `generate` with `do_sample` and the
`grpo` section's temperature, top-p and top-k, drawn from torch's global generator), for preflight's sampled groups
and tool loop and for the SFT stage's examples of the model's own.

Prompts go through in the caller's order and batches, unsorted: a caller that seeds torch draws the same completions
as `generate` with `num_return_sequences` would for prompts repeated in place. `autocast`, when given, is the
precision training generates in (bf16 matmuls over float32 weights).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import nullcontext

from grpo_cli.generation.base import Generated, Prompt
from grpo_cli.generation.sampling import Sampling


class PolicySampler:
    name = "transformers"

    def __init__(self, model, tokenizer, grpo, max_new_tokens: int, autocast: str | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens = max_new_tokens
        self.settings = dict(do_sample=True, temperature=grpo.temperature, top_p=grpo.top_p, top_k=grpo.top_k)
        self.autocast = autocast  # "bfloat16", "float16" or None
        self.sampling: Sampling | None = (
            None  # draws as TRL does (settings above), not eval's seeded sampling: the Generator protocol
        )

    @property
    def version(self) -> str:
        import transformers

        return transformers.__version__

    def token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        texts = [p for p in prompts if isinstance(p, str)]
        encoded = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
        return [next(encoded) if isinstance(p, str) else list(p) for p in prompts]

    def generate(
        self,
        prompts: Sequence[Prompt],
        batch_size: int,
        budgets: list[int] | None = None,
        seeds: list[int] | None = None,
    ) -> Iterator[list[Generated]]:
        """Yields each batch's completions in prompt order. `seeds` is not taken: training draws from torch's global
        generator, seeded once by the caller."""
        import torch

        if seeds is not None:
            raise ValueError("PolicySampler draws from torch's global generator: seed it, do not pass seeds")
        budgets = budgets or [self.max_new_tokens] * len(prompts)
        rows_all = self.token_ids(prompts)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        pad = pad if pad is not None else eos
        device = self.model.device
        dtype = getattr(torch, self.autocast) if self.autocast else None
        for start in range(0, len(rows_all), batch_size):
            rows = rows_all[start : start + batch_size]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
            autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
            with torch.no_grad(), autocast:
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=max(budgets[start : start + len(rows)]),
                    pad_token_id=pad,
                    **self.settings,
                )
            yield [self._generated(start + k, seq, budgets[start + k]) for k, seq in enumerate(out[:, width:].tolist())]

    def _generated(self, index: int, seq: list[int], budget: int) -> Generated:
        eos = self.tokenizer.eos_token_id
        seq = (seq[: seq.index(eos) + 1] if eos in seq else seq)[:budget]  # padding after the end dropped
        stopped = bool(seq) and seq[-1] == eos
        kept = seq[:-1] if stopped else seq
        return Generated(index, self.tokenizer.decode(kept, skip_special_tokens=True), len(seq), kept, stopped)

    def close(self) -> None:
        """Nothing to free: the model belongs to the caller."""


def with_end(item: Generated, eos: int | None) -> list[int]:
    """A completion's token ids as TRL hands them to rewards: up to and including its end-of-sequence token."""
    return [*item.tokens, eos] if item.stopped and eos is not None else list(item.tokens)

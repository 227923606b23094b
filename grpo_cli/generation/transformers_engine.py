"""Generation on a transformers model with `generate`, greedy or sampled (generation/sampling.py): batched,
left-padded, stopped per sequence.

Batches are built from prompts sorted longest first (lm-eval's order: similar lengths pad little, and an
out-of-memory shows up in the first batch, not after an hour). A sequence stops at EOS or a stop string;
`generate` returns as soon as every sequence in the batch has stopped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from grpo_cli.generation.base import Generated, Prompt, cut_at_stops, length_sorted_batches, sort_texts


class HFGenerator:
    """transformers `generate` on a loaded model: the path on CPU and on a GPU without vLLM."""

    name = "transformers"

    def __init__(
        self,
        model,
        tokenizer,
        max_new_tokens: int,
        stops: list[str],
        max_length: int | None = None,
        inference_mode: bool = True,
        sampling=None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.sampling = sampling  # sampling.py's Sampling, or None: greedy
        # A model that trains on afterwards generates under no_grad: a tensor it caches under inference mode (a
        # rotary table, say) could never enter autograd again.
        self.inference_mode = inference_mode
        self.max_new_tokens = max_new_tokens
        eos = tokenizer.eos_token
        self.stops = [*stops, *([eos] if eos and eos not in stops else [])]
        # Left-truncate contexts so context + generation fits the model (lm-eval does the same).
        self.max_context = None if max_length is None else max(1, max_length - max_new_tokens)
        self.finished_ids = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}

    @property
    def version(self) -> str:
        import transformers

        return transformers.__version__

    def token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        texts = [p for p in prompts if isinstance(p, str)]
        encoded = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
        return [next(encoded) if isinstance(p, str) else list(p) for p in prompts]

    def prompt_lengths(self, prompts: Sequence[Prompt]) -> list[int]:
        return [len(ids) for ids in self.token_ids(prompts)]

    def _encode(self, prompts: Sequence[Prompt]):
        """Left-padded ids and mask on the model's device, left-truncated to the context budget."""
        import torch

        rows = self.token_ids(prompts)
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
        if self.max_context is not None and ids.shape[1] > self.max_context:
            ids, mask = ids[:, -self.max_context :], mask[:, -self.max_context :]
        return ids.to(self.model.device), mask.to(self.model.device)

    def generate(
        self,
        prompts: Sequence[Prompt],
        batch_size: int,
        budgets: list[int] | None = None,
        seeds: list[int] | None = None,
    ) -> Iterator[list[Generated]]:
        """Yields one list per batch, in batch order (callers record results as they come). `budgets`: new tokens
        per prompt, when they differ (default: max_new_tokens for all); `seeds`: each prompt's seed when sampling."""
        import torch

        from grpo_cli.generation.sampling import RowSampler

        budgets = budgets or [self.max_new_tokens] * len(prompts)
        for batch in length_sorted_batches(self.prompt_lengths(prompts), batch_size, sort_texts(prompts)):
            input_ids, attention_mask = self._encode([prompts[i] for i in batch])
            # Sampling draws in a logits processor, each row from its own seed, and greedy search takes the draw.
            draws = [RowSampler(self.sampling, [(seeds or [])[i] for i in batch])] if self.sampling else None
            with torch.inference_mode() if self.inference_mode else torch.no_grad():
                output = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    max_new_tokens=max(budgets[i] for i in batch),
                    logits_processor=draws,
                    do_sample=False,
                    temperature=None,
                    top_p=None,
                    top_k=None,  # greedy: silence sampling defaults from the config
                    stop_strings=[s for s in self.stops if s] or None,
                    tokenizer=self.tokenizer,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            new = output[:, input_ids.shape[1] :].tolist()
            yield [self._generated(i, tokens[: budgets[i]]) for i, tokens in zip(batch, new)]

    def close(self) -> None:
        """Nothing to free: the model goes with the generator."""

    def _generated(self, index: int, tokens: list[int]) -> Generated:
        count = self._count(tokens)
        stopped = bool(count) and tokens[count - 1] == self.tokenizer.eos_token_id
        kept = tokens[: count - stopped]
        return Generated(index, self._text(kept), count, kept, stopped)

    def _text(self, tokens: list[int]) -> str:
        return cut_at_stops(self.tokenizer.decode(tokens, skip_special_tokens=True), self.stops)

    def _count(self, tokens: list[int]) -> int:
        """Tokens the model produced for this row: up to and including its EOS; padding after a stop excluded."""
        for position, token in enumerate(tokens):
            if token in self.finished_ids:
                return position + (token == self.tokenizer.eos_token_id)
        return len(tokens)

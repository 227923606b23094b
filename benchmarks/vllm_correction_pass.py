"""What TRL's extra no-grad pass for the vLLM importance-sampling correction costs a step, on a real recipe.

Builds the recipe's real trainer (vLLM generating) and trains two steps from the recipe's start: step 1 with grpo's
correction (the weights from the loss's forward pass, grpo_cli/train/vllm_correction.py; it also warms the engine
and kernels, so the step that pays TRL's pass is not the cold one), step 2 with TRL's own (`correct_from_loss_pass`
off: TRL's no-grad forward over the whole generation batch, then the same loss). For each step: its wall time, the
generate-and-score phase (vLLM, rewards, every no-grad pass), the no-grad passes' count and seconds, the completion
tokens. The two steps sample different completions, so their totals differ by length too; the pass's own seconds are
the saving. Runs with mimalloc preloaded, as `grpo train` does on a CPU.

    python benchmarks/vllm_correction_pass.py RECIPE [key=value ...] --output benchmarks/vllm_correction_pass.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))


def main() -> None:
    from grpo_cli.process.allocator import preload_env

    env = preload_env()
    if env is not None:
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], {**os.environ, **env})
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    import torch
    from transformers import TrainerCallback

    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.trainer import build_trainer

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [*args.overrides, "training.max_steps=2", "training.save_steps=1000", f"training.output_dir={tmp}"]
        recipe = load_recipe(Path(args.recipe), overrides)
        trainer, _ = build_trainer(recipe, Path(tmp))
        assert trainer.correct_from_loss_pass, "this recipe is not on-policy with vLLM: nothing to compare"
        steps = {1: {"passes": []}, 2: {"passes": []}}  # seconds of each no-grad pass, in order
        logps_pass, generate = trainer._get_per_token_logps_and_entropies, trainer._generate_and_score

        def timed_pass(*a, **kw):
            start = time.perf_counter()
            result = logps_pass(*a, **kw)
            if not torch.is_grad_enabled():
                steps[trainer.state.global_step + 1]["passes"].append(time.perf_counter() - start)
            return result

        def timed_generation(inputs):
            start = time.perf_counter()
            output = generate(inputs)
            steps[trainer.state.global_step + 1]["generate_score_s"] = time.perf_counter() - start
            steps[trainer.state.global_step + 1]["tokens"] = int(output["completion_mask"].sum())
            return output

        class Clock(TrainerCallback):
            def on_step_begin(self, a, state, control, **kw):
                self.start = time.perf_counter()

            def on_step_end(self, a, state, control, **kw):
                steps[state.global_step]["step_s"] = time.perf_counter() - self.start
                trainer.correct_from_loss_pass = False  # step 2: TRL's own correction

        trainer._get_per_token_logps_and_entropies = timed_pass
        trainer._generate_and_score = timed_generation
        trainer.add_callback(Clock())
        trainer.train()

    rows = [
        "| step | correction | step s | generate+score s | no-grad passes | their s | completion tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, label in ((1, "grpo: from the loss's pass"), (2, "TRL: its own no-grad pass")):
        s = steps[n]
        rows.append(
            f"| {n} | {label} | {s['step_s']:.1f} | {s['generate_score_s']:.1f} | {len(s['passes'])} | "
            f"{' + '.join(f'{p:.1f}' for p in s['passes']) or '-'} | "
            f"{s['tokens']} |"
        )
    # TRL runs its pass for the correction first, then the reference model's (when beta > 0), which both steps run.
    assert len(steps[2]["passes"]) == len(steps[1]["passes"]) + 1, steps
    extra = steps[2]["passes"][0]
    report = "\n".join(
        [
            f"`python benchmarks/vllm_correction_pass.py {args.recipe} {' '.join(args.overrides)}`",
            "",
            f"recipe: {recipe.model.name}, {recipe.generation_batch_per_process} completions a step, "
            f"{recipe.training.gradient_accumulation_steps} micro-batches of "
            f"{recipe.training.per_device_train_batch_size}, "
            f"beta {recipe.grpo.beta}; torch threads {torch.get_num_threads()}",
            "",
            *rows,
            "",
            f"TRL's extra pass: {extra:.1f} s of step 2's {steps[2]['step_s']:.1f} s "
            f"({100 * extra / steps[2]['step_s']:.0f}%); step 1 ran without it.",
        ]
    )
    print(report)
    if args.output:
        args.output.write_text(report + "\n")


if __name__ == "__main__":
    main()

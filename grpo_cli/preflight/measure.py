"""Measured peak memory of real GRPO steps, to calibrate and check `grpo plan`.

On CUDA the truth is `torch.cuda.max_memory_allocated()`; on CPU it is the peak of live tensor storage bytes,
counted by `LiveTensorBytes` (torch's MemTracker does the same but cannot track frozen LoRA base weights: it
installs gradient hooks on every parameter). Completions are forced to their full length (`min_new_tokens`, or
`min_tokens` on vLLM) and every prompt has the same length, so the sequence length the plan assumes is the one that
ran.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grpo_cli.preflight.trackers import CudaPeaks, LiveTensorBytes, PhasePeaks
from grpo_cli.process.allocator import peak_rss
from grpo_cli.recipe.schema import Recipe
from grpo_cli.train.phases import GenerationClock, StepPhases

PROMPT = "Ava has 5 apples and buys 7 more. How many apples does Ava have now?"


def fixed_length_data(directory: Path, rows: int = 64) -> Path:
    path = directory / "same_prompt.jsonl"
    path.write_text("".join(json.dumps({"question": PROMPT, "answer": "#### 12"}) + "\n" for _ in range(rows)))
    return path


def calibration_recipe(recipe: Recipe, tokenizer, work: Path) -> Recipe:
    """The same recipe on fixed-length prompts, full-length completions, no checkpoint saving, 2 steps."""
    from grpo_cli.chat_templates import prompt_lengths
    from grpo_cli.data import build_prompt
    from grpo_cli.tools.wiring import prompt_tools

    data_file = fixed_length_data(work)
    tools = prompt_tools(recipe.tools)  # rendered into every prompt
    (length,) = prompt_lengths(tokenizer, [build_prompt(PROMPT, recipe.data.system_prompt, recipe.data.chat)], tools)
    update = recipe.model_dump()
    update["data"].update(
        source=str(data_file),
        config=None,
        max_prompt_length=length,
        limit=None,
        shuffle_seed=None,
        prompt_column="question",
        answer_column="answer",
        answer_format="gsm8k",
    )
    update["training"].update(max_steps=2, save_steps=10_000, output_dir=str(work / "run"), logging_steps=1)
    update["sft"] = None  # GRPO's steps only: the SFT stage is timed on its own (sft_steps.py)
    update["trl"] = {
        **update.get("trl", {}),
        # transformers' `generate` and vLLM's SamplingParams name the same floor differently
        "generation_kwargs": {
            ("min_tokens" if recipe.grpo.use_vllm else "min_new_tokens"): recipe.grpo.max_completion_length
        },
    }
    return Recipe.model_validate(update)


def _mark_generation(trainer, tracker) -> None:
    """Attribute allocations made while generating and scoring to the generation phase."""
    trainer.add_phase_listener(
        GenerationClock(lambda: setattr(tracker, "phase", "generation"), lambda: setattr(tracker, "phase", "training"))
    )


def measure_peak(recipe: Recipe, phases: dict | None = None) -> tuple[float, Recipe]:
    """Bytes at the peak of two real training steps, and the exact recipe that ran.

    `phases`, if given, receives the peak of each phase (generation, training; on CUDA optimizer too) and on
    CUDA the peak reserved by the caching allocator (`cuda_reserved`)."""
    import torch

    from grpo_cli import models
    from grpo_cli.train.trainer import build_trainer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = models.load_tokenizer(recipe.model)
        ran = calibration_recipe(recipe, tokenizer, work)
        if torch.cuda.is_available():
            trainer, _ = build_trainer(ran, work / "run", tokenizer=tokenizer)
            cuda_peaks = CudaPeaks()
            by_phase = PhasePeaks(cuda_peaks.read_and_reset)
            by_phase.install(trainer)
            torch.cuda.reset_peak_memory_stats()
            trainer.train()
            by_phase.switch("done")
            if phases is not None:  # reserved: what the caching allocator held, the part of nvidia-smi torch sees
                phases.update(by_phase.peaks, cuda_reserved=cuda_peaks.reserved)
            return float(max(by_phase.peaks.values())), ran
        trainer, _ = build_trainer(ran, work / "run", tokenizer=tokenizer)
        tracker = LiveTensorBytes()
        tracker.add_existing([*trainer.model.parameters(), *trainer.model.buffers()])
        _mark_generation(trainer, tracker)
        with tracker:
            trainer.train()
        if phases is not None:
            phases.update(tracker.phase_peaks)
        return float(tracker.peak), ran


@dataclass
class StepMeasurement:
    """What `grpo preflight` measures over a few real worst-case steps (full-length completions)."""

    peak_bytes: float  # CUDA: max_memory_allocated; CPU: live tensor bytes during the last step
    rss_bytes: float  # the process's peak resident set so far (sampling and steps), as the kernel counts it
    reserved_bytes: float | None  # CUDA: what the caching allocator held (nvidia-smi shows this + the context)
    step_seconds: list[float]  # wall time of each untracked step
    generation_seconds: list[float]  # the generation-and-scoring part of those steps
    device: str
    recipe: Recipe  # as it ran
    scoring_seconds: list[float] = field(default_factory=list)  # the part reward models and judges took of each


def measure_steps(
    recipe: Recipe, work: Path, steps: int = 2, show=lambda text, new_phase=False: None
) -> StepMeasurement:
    """`steps` real training steps of `recipe` at full completion length, timed; the last one measures the peak.

    On the CPU the live-tensor tracker slows every op, so earlier steps are timed without it and only the last
    step is tracked (its optimizer states exist by then, so its peak is the run's); on CUDA the allocator's own
    counters cost nothing and every step is timed."""
    import time

    import torch
    from transformers import TrainerCallback

    from grpo_cli import models
    from grpo_cli.model_rewards.build import reward_functions
    from grpo_cli.train.trainer import build_trainer

    cuda = torch.cuda.is_available()
    tokenizer = models.load_tokenizer(recipe.model)
    ran = calibration_recipe(recipe, tokenizer, work)
    ran = ran.model_copy(update={"training": ran.training.model_copy(update={"max_steps": max(2, steps)})})
    funcs = [_tolerant(f) for f in reward_functions(ran.rewards, ran.model)]
    trainer, _ = build_trainer(ran, work / "run", reward_funcs=funcs, tokenizer=tokenizer)
    tracker = None if cuda else LiveTensorBytes()
    last_step = ran.training.max_steps
    step_seconds: list[float] = []
    generation_seconds: list[float] = []
    clock = {"step": 0.0, "generation": 0.0}

    started = {"generation": 0.0}

    def add_generation_time() -> None:
        clock["generation"] += time.perf_counter() - started["generation"]

    trainer.add_phase_listener(
        GenerationClock(lambda: started.update(generation=time.perf_counter()), add_generation_time)
    )

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            tracked = (
                " (tracking live tensors: slower)" if tracker is not None and state.global_step + 1 == last_step else ""
            )
            show(f"timing training step {state.global_step + 1}/{last_step} at full length{tracked}", new_phase=True)
            if tracker is not None and state.global_step + 1 == last_step:
                optimizer_state = [
                    t for s in trainer.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)
                ]
                tracker.add_existing([*trainer.model.parameters(), *trainer.model.buffers(), *optimizer_state])
                tracker.__enter__()
            clock.update(step=time.perf_counter(), generation=0.0)

        def on_step_end(self, args, state, control, **kwargs):
            if tracker is not None and state.global_step == last_step:
                tracker.__exit__(None, None, None)
                return
            step_seconds.append(time.perf_counter() - clock["step"])
            generation_seconds.append(clock["generation"])

    trainer.add_callback(StepClock())
    StepPhases(
        show, ran.grpo.max_completion_length, ran.generation_batch_per_process, ran.training.gradient_accumulation_steps
    ).install(trainer)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    if cuda:
        peak, reserved = float(torch.cuda.max_memory_allocated()), float(torch.cuda.max_memory_reserved())
    else:
        peak, reserved = float(tracker.peak), None
    return StepMeasurement(
        peak_bytes=peak,
        rss_bytes=peak_rss(),
        reserved_bytes=reserved,
        step_seconds=step_seconds,
        generation_seconds=generation_seconds,
        scoring_seconds=_scoring_seconds(funcs, len(step_seconds)),
        device="cuda" if cuda else "cpu",
        recipe=ran,
    )


def _scoring_seconds(funcs: list, steps: int) -> list[float]:
    """Seconds the reward models and judges among `funcs` scored in each of the first `steps` steps."""
    from grpo_cli.model_rewards.build import model_rewards

    scorers = model_rewards(funcs)
    return [sum(s.step_seconds.get(step, 0.0) for s in scorers) for step in range(1, steps + 1)]


def _tolerant(func):
    """The reward behind training's guard, with any failure turned into missing values: preflight reports failures
    from its sampling, and its timing steps must not stop on them. A guard itself, so training finds a reward
    model or judge behind it (model_rewards/build.py)."""
    from grpo_cli.reward_guard import GuardedReward, RewardFailure

    class Tolerant(GuardedReward):
        def __call__(self, *args, **kwargs):
            try:
                return super().__call__(*args, **kwargs)
            except RewardFailure:
                return [None] * len(kwargs.get("completions") or [])

    return Tolerant(func, warn=lambda line: None)

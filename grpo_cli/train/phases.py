"""Inside a step: which phase it is in (generating token k of N for the batch, training micro-batch i of n), so a
step of several minutes on a CPU is not minutes of silence. The phases come from the trainer class's listeners;
preflight's clocks listen the same way."""

from __future__ import annotations

import time
from collections.abc import Callable

from transformers import TrainerCallback


class PhaseListener:
    """What the trainer class (recipe_trainer.py) tells its listeners about each step: the generate-and-score phase
    starts and ends; inside it, each generation round (one call of the backend) starts and ends. A step may have
    several rounds (zero-variance resampling, tool turns)."""

    def generation_started(self) -> None:
        pass

    def generation_ended(self) -> None:
        pass

    def round_started(self) -> None:
        pass

    def round_ended(self) -> None:
        pass


class GenerationClock(PhaseListener):
    """Calls `on_start` and `on_end` around each generate-and-score phase (preflight's clocks and memory phases)."""

    def __init__(self, on_start: Callable[[], None], on_end: Callable[[], None]):
        self.on_start, self.on_end = on_start, on_end

    def generation_started(self) -> None:
        self.on_start()

    def generation_ended(self) -> None:
        self.on_end()


class StepPhases(TrainerCallback, PhaseListener):
    """Feeds `show(text)` with the phase: a forward hook counts decode steps while generating (one model call per
    new token), the substep callbacks count micro-batches while training. A step may generate in several rounds
    (zero-variance resampling, tool turns): each round counts its tokens afresh and is named from the second on."""

    def __init__(self, show: Callable[[str], None], budget: int, batch: int, micro_batches: int):
        self.show, self.budget, self.batch, self.micro_batches = show, budget, batch, micro_batches
        self.generating = False  # inside the step's generate-and-score phase
        self.decoding = False  # inside one generation round (not scoring, which also calls the model)
        self.rounds = 0
        self.rows = batch
        self.calls = 0
        self.started = 0.0
        self.round_started_at = 0.0
        self.micro = 0
        self.generation_total = 0.0  # seconds spent generating since the last take

    def take_generation_seconds(self) -> float:
        """Seconds of generate-and-score since the last call (the metrics line's `generation_s`)."""
        total, self.generation_total = self.generation_total, 0.0
        return total

    def install(self, trainer) -> None:
        trainer.add_phase_listener(self)
        model = trainer.model
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # what generate() calls
        causal_lm.register_forward_hook(self._forward)
        trainer.add_callback(self)

    def generation_started(self) -> None:
        self.generating, self.rounds, self.started = True, 0, time.perf_counter()
        self.show(f"generating {self.batch} completions...")

    def generation_ended(self) -> None:
        self.generating, self.micro = False, 0
        seconds = time.perf_counter() - self.started
        self.generation_total += seconds
        self.show(f"generated in {seconds:.0f} s; training micro-batch 1/{self.micro_batches}")

    def round_started(self) -> None:
        self.rounds, self.calls, self.decoding = self.rounds + 1, 0, True
        self.round_started_at = time.perf_counter()

    def round_ended(self) -> None:
        self.decoding = False

    def _forward(self, module, args, output) -> None:
        if not (self.generating and self.decoding):
            return
        self.calls += 1  # call 1 reads the prompts; each later call adds one token to every unfinished completion
        if self.calls == 1:
            logits = getattr(output, "logits", None)
            self.rows = logits.shape[0] if logits is not None else self.batch
        if self.calls > 1 and (self.calls % 8 == 0 or self.calls == 2):
            elapsed = time.perf_counter() - self.round_started_at
            name = f" (round {self.rounds})" if self.rounds > 1 else ""
            self.show(
                f"generating {self.rows} completions{name}: token {self.calls - 1}/{self.budget} "
                f"({(self.calls - 1) * self.rows / elapsed:.0f} tokens/s)"
            )

    def on_substep_end(self, args, state, control, **kwargs):
        self.micro += 1
        self.show(f"training micro-batch {min(self.micro + 1, self.micro_batches)}/{self.micro_batches}")

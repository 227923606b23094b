"""Inside a step: which phase it is in (generating token k of N for the batch, training micro-batch i of n), so a
step of several minutes on a CPU is not minutes of silence. Also the one place that wraps TRL's private
generate-and-score method, for this display and for preflight's phase timing."""

from __future__ import annotations

import time
from collections.abc import Callable

from transformers import TrainerCallback

from grpo_cli.errors import UserError

GENERATION_SEAM = "_generate_and_score_completions"  # GRPOTrainer's private generate-and-score phase (trl 1.x)
SINGLE_TURN_SEAM = "_generate_single_turn"  # its private call of the generation backend, once per round (trl 1.x)


def trl_seam(trainer, name: str, purpose: str) -> Callable:
    """The trainer's private TRL method `name`; if an upgrade renamed it, say so at start-up, naming what grpo
    uses it for, instead of silently doing without."""
    method = getattr(trainer, name, None)
    if not callable(method):
        from importlib.metadata import version

        raise UserError(
            f"the installed trl {version('trl')} has no GRPOTrainer.{name}, which grpo {purpose}; "
            "install the trl range grpo supports: pip install 'trl>=1.16,<2'"
        )
    return method


def around_generation(trainer, on_start: Callable[[], None], on_end: Callable[[], None]) -> None:
    """Call `on_start`/`on_end` around each generate-and-score phase of the trainer's steps.

    The method is TRL's private one: if an upgrade renames it, say so at start-up instead of showing nothing."""
    original = trl_seam(trainer, GENERATION_SEAM, "measures and shows the generation phase by")

    def wrapped(*args, **kwargs):
        on_start()
        try:
            return original(*args, **kwargs)
        finally:
            on_end()

    setattr(trainer, GENERATION_SEAM, wrapped)


class StepPhases(TrainerCallback):
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
        self.round_started = 0.0
        self.micro = 0
        self.generation_total = 0.0  # seconds spent generating since the last take

    def take_generation_seconds(self) -> float:
        """Seconds of generate-and-score since the last call (the metrics line's `generation_s`)."""
        total, self.generation_total = self.generation_total, 0.0
        return total

    def install(self, trainer) -> None:
        around_generation(trainer, self._generation_start, self._generation_end)
        single_turn = trl_seam(trainer, SINGLE_TURN_SEAM, "counts the generation rounds of a step by")

        def one_round(*args, **kwargs):
            self.rounds, self.calls, self.decoding = self.rounds + 1, 0, True
            self.round_started = time.perf_counter()
            try:
                return single_turn(*args, **kwargs)
            finally:
                self.decoding = False

        setattr(trainer, SINGLE_TURN_SEAM, one_round)
        model = trainer.model
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # what generate() calls
        causal_lm.register_forward_hook(self._forward)
        trainer.add_callback(self)

    def _generation_start(self) -> None:
        self.generating, self.rounds, self.started = True, 0, time.perf_counter()
        self.show(f"generating {self.batch} completions...")

    def _generation_end(self) -> None:
        self.generating, self.micro = False, 0
        seconds = time.perf_counter() - self.started
        self.generation_total += seconds
        self.show(f"generated in {seconds:.0f} s; training micro-batch 1/{self.micro_batches}")

    def _forward(self, module, args, output) -> None:
        if not (self.generating and self.decoding):
            return
        self.calls += 1  # call 1 reads the prompts; each later call adds one token to every unfinished completion
        if self.calls == 1:
            logits = getattr(output, "logits", None)
            self.rows = logits.shape[0] if logits is not None else self.batch
        if self.calls > 1 and (self.calls % 8 == 0 or self.calls == 2):
            elapsed = time.perf_counter() - self.round_started
            name = f" (round {self.rounds})" if self.rounds > 1 else ""
            self.show(
                f"generating {self.rows} completions{name}: token {self.calls - 1}/{self.budget} "
                f"({(self.calls - 1) * self.rows / elapsed:.0f} tokens/s)"
            )

    def on_substep_end(self, args, state, control, **kwargs):
        self.micro += 1
        self.show(f"training micro-batch {min(self.micro + 1, self.micro_batches)}/{self.micro_batches}")

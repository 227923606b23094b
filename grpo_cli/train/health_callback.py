"""The health watch during a run: every logged step goes through runs/health.py's rules; a signature's one line
goes to the console when it starts, the signatures in force into metrics.jsonl's `health` field, and a signature of
a kind `training.health.halt_on` names stops the run with a checkpoint saved (exit 3; `--resume` continues)."""

from __future__ import annotations

from collections.abc import Callable

from transformers import TrainerCallback

from grpo_cli.recipe.health_section import HealthSection
from grpo_cli.runs.health import Alarm, HealthWatch

HALTED_EXIT = 3


class HealthCallback(TrainerCallback):
    """Runs on every rank (the logged figures are gathered across processes, so every rank decides alike and a
    halt stops them together); `say` prints on rank 0 only."""

    def __init__(
        self,
        settings: HealthSection,
        say: Callable[[str], None],
        groups_per_step: int | None = None,
        weights: dict[str, float] | None = None,
    ):
        self.watch = HealthWatch(settings, groups_per_step, weights)
        self.halt_on = set(settings.halt_on)
        self.say = say
        self.halted: Alarm | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self._read({"step": state.global_step, **logs})
        self._stop_if_halted(control)

    def on_step_end(self, args, state, control, **kwargs):
        self._stop_if_halted(control)  # a validation row's alarm (validated) stops the run at the next step's end

    def validated(self, row: dict) -> None:
        """A validation row (validation_callback.py): the signatures that read validation."""
        self._read(row)

    def _read(self, record: dict) -> None:
        for alarm in self.watch.observe(record):
            self.say(alarm.line())
            if alarm.kind in self.halt_on and self.halted is None:
                self.halted = alarm

    def _stop_if_halted(self, control) -> None:
        if self.halted is not None and not control.should_training_stop:
            # After a NaN the optimizer has already written non-finite weights: a checkpoint of them would resume
            # into a failing step, so none is saved (and a save_steps one is cancelled).
            control.should_save = self.halted.kind != "nan"
            control.should_training_stop = True

    def in_force(self) -> list[str]:
        """The signatures that hold at the latest step, for its metrics.jsonl record."""
        return sorted(self.watch.active)


def halted_line(alarm: Alarm, run_dir: str, step: int) -> str:
    stopped = f"halted at step {step} by the health watch ({alarm.signature}, training.health.halt_on: {alarm.kind})"
    if alarm.kind == "nan":
        return (
            f"{stopped}; the weights after it are not finite, so no checkpoint of it was saved. Lower "
            "training.learning_rate and train again into a new directory (training.output_dir=...), or "
            f"`grpo train RECIPE --resume` from the last checkpoint in {run_dir} if it was saved before the trouble"
        )
    return (
        f"{stopped}; a checkpoint of that step is in {run_dir}. Change the recipe as the line above says, then "
        "continue with `grpo train RECIPE --resume`"
    )


def reward_weights(trainer) -> dict[str, float]:
    """Reward name as TRL logs it (`rewards/<name>/mean`) -> its weight."""
    return {name: float(w) for name, w in zip(trainer.reward_func_names, trainer.reward_weights.tolist())}

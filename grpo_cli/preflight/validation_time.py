"""Validation while training in `grpo preflight`: one batch of the held-out slice generated and scored as training
will do it, on the model as it starts, timed, so the ETA counts what validation adds (the plan says how often it runs,
plan/view.py; training prints its time apart from the step times)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_cli.recipe.model_section import ModelSection, QuantizationSection

if TYPE_CHECKING:  # training's protocol, read by the checker; the module itself needs transformers
    from grpo_cli.train.validation_callback import Validation


@dataclass
class ValidationTiming:
    problems: int  # in the slice
    timed: int  # problems in the one batch that was timed
    batch_s: float
    passes: int  # over the whole run: before the first step, every K-th, after the last

    @property
    def pass_s(self) -> float:
        return self.batch_s * math.ceil(self.problems / max(1, self.timed))

    @property
    def eta_s(self) -> float:
        return self.passes * self.pass_s


def time_validation(
    validation: Validation,
    model_section: ModelSection,
    quantization: QuantizationSection | None,
    passes: int,
    show=lambda text, new_phase=False: None,
) -> ValidationTiming:
    """Time the slice's first batch (the untrained model's lengths; training can make answers shorter or longer).

    `validation`: the run's (eval/training_validation.py), `passes` it makes over the run."""
    import torch

    from grpo_cli import models

    problems = len(validation.questions)
    batch = validation.first(validation.batch_size)  # the caller's validation keeps all its problems
    show(f"timing validation: one batch of {len(batch.questions)} held-out problems", new_phase=True)
    tokenizer = models.load_tokenizer(model_section)
    model = models.load_model(model_section, quantization)
    if torch.cuda.is_available() and model.device.type == "cpu":
        model = model.to("cuda")
    started = time.perf_counter()
    batch(model, tokenizer)
    seconds = time.perf_counter() - started
    del model
    return ValidationTiming(problems, len(batch.questions), seconds, passes)

"""The shape every reward that is a model shares, and the reward model itself (a sequence classifier).

A plain callable with TRL's reward signature, not TRL's own reward-model path (`reward_funcs=["org/rm"]`): TRL
scores a model reward outside any reward function, so the reward guard (time limit, NaN and infinity counted as not
judged, one line on failure) would not see it, and it formats the whole completion (tool results included) at full
length in one batch. As a callable it reads the model's own turns (rewards/answers.py completion_text), cut to
`max_length`, `batch_size` completions at a time, and logs its scoring time per step (`scoring/<name>/seconds`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

from grpo_cli.model_rewards.loading import conversation_text, encode, load_scorer, readable_length, scorer_device
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.user_code import RewardSpec


class ModelReward:
    """Loaded once: as training starts (`bind`), else at its first call; scored in eval mode without gradients."""

    def __init__(self, spec: RewardSpec, index: int, policy: ModelSection):
        self.spec, self.policy = spec, policy
        self.path = f"rewards[{index}]"  # where a loading error points in the recipe
        self.__name__ = spec.name  # TRL's metric key: rewards/<name>/mean
        self.trainer = None
        self.model = self.tokenizer = None
        self.templated = False
        self.step_seconds: dict[int, float] = {}  # scoring time by training step, loading excluded (preflight)
        self.counts: dict[str, float] = {}  # figures of the latest call, logged as scoring/<name>/<key>

    @property
    def dtype(self) -> str:
        return self.spec.dtype or self.policy.dtype

    def bind(self, trainer) -> None:
        """Training starts: load now (a missing model stops the run before its first step), where the policy is."""
        self.trainer = trainer
        self.load()

    def load(self) -> None:
        if self.model is None:
            self.model, self.tokenizer, self.templated = self._load()

    def _load(self):
        raise NotImplementedError

    def __call__(self, prompts=None, completions=None, completion_ids=None, **columns: Any) -> list[float]:
        self.load()
        started = time.perf_counter()
        rows, size, out = len(completions or []), self.spec.batch_size, []
        self.counts = {}
        with self.scoring():
            for start in range(0, rows, size):
                part = {
                    k: v[start : start + size] for k, v in columns.items() if isinstance(v, list) and len(v) == rows
                }
                out += self.score_batch(prompts[start : start + size], completions[start : start + size], part)
        seconds = time.perf_counter() - started
        state = columns.get("trainer_state")
        if state is not None:
            self.step_seconds[state.global_step + 1] = self.step_seconds.get(state.global_step + 1, 0.0) + seconds
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            for key, value in {"seconds": seconds, **self.counts}.items():
                log_metric(f"scoring/{self.__name__}/{key}", value)
        return out

    @contextmanager
    def scoring(self):
        import torch

        with torch.inference_mode():
            yield

    def score_batch(self, prompts: list, completions: list, columns: dict[str, list]) -> list[float]:
        raise NotImplementedError


class RewardModel(ModelReward):
    """A sequence classifier with one output: its score of prompt + completion is the reward."""

    def _load(self):
        device = scorer_device(self.spec.device, self.trainer)
        return load_scorer(self.spec.model, True, self.dtype, device, self.spec.chat_template, f"{self.path}.model")

    def score_batch(self, prompts: list, completions: list, columns: dict[str, list]) -> list[float]:
        texts = [conversation_text(self.tokenizer, p, c, self.templated) for p, c in zip(prompts, completions)]
        limit = readable_length(self.model, self.spec.max_length)
        ids, mask, positions = encode(self.tokenizer, texts, limit, self.templated, self.model.device)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        return logits[:, 0].float().tolist()

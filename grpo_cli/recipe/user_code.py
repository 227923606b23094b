"""Recipe entries that name user code: rewards, tools and an environment. Each is a built-in name,
`package.module:function` or `path/to/file.py:function`, and runs behind a guard with an optional time limit. A
reward may also be a model: a reward model (`model:`, a sequence classifier) or an LLM judge (`judge:`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from grpo_cli.recipe.section import Section

POLICY = "policy"  # judge.model: the model being trained, asked as its own judge
# The keys of a reward entry that only a reward model or judge reads.
MODEL_ONLY = ("model", "judge", "max_length", "batch_size", "dtype", "device", "chat_template")


class JudgeSpec(Section):
    model: str = Field(
        min_length=1,
        description="A causal LM (hub id, local folder, .gguf or pkg:...), or `policy`: the model being trained, with "
        "its adapters as they are (no second copy).",
    )
    prompt: str = Field(
        min_length=1,
        description="What the judge is asked; {question}, {completion} (required) and {reference} are filled in.",
    )
    score: Literal["yes_no", "scale_0_10"] = Field(
        "yes_no",
        description="yes_no: P(yes) against P(no) at the first answer token (one forward pass, no sampling); "
        "scale_0_10: a number in a few greedy tokens, mapped to [0, 1] (none readable: 0, counted in the metrics).",
    )
    max_new_tokens: int = Field(4, ge=1, le=64, description="scale_0_10: tokens generated for the number.")


class RewardSpec(Section):
    name: str = Field(
        min_length=1,
        description="Built-in name, `package.module:function`, or `path/to/file.py:function`. Beside `model` or "
        "`judge`: the name its metrics are logged under (default: the model's folder or file name; `judge`, or "
        "`judge_` and the judge model's name).",
    )
    weight: float = 1.0
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Arguments for parameterised rewards.")
    timeout_s: float | None = Field(
        None, gt=0.0, description="Stop the run (with a checkpoint) when one call takes longer."
    )
    role: Literal["verifier", "format", "shaping"] | None = Field(
        None,
        description="What `grpo eval` (eval.protocol: task) does with it: verifier = checks the answer (accuracy), "
        "format = checks the form (format rate), shaping = nothing. Default by name: the built-in answer checks are "
        "verifiers, the built-in *_format rewards formats, everything else shaping.",
    )
    pass_score: float = Field(1.0, description="A score at or above this counts as right (verifier) or well-formed.")
    model: str | None = Field(
        None,
        min_length=1,
        description="A reward model: a sequence classifier with one score output (hub id, local "
        "folder or pkg:...), scoring prompt + completion through its own tokenizer.",
    )
    judge: JudgeSpec | None = Field(None, description="An LLM judge asked about each completion.")
    max_length: int | None = Field(
        None, ge=1, description="Reward model or judge: tokens it reads at most (the start is cut); default: all."
    )
    batch_size: int = Field(8, ge=1, description="Reward model or judge: completions scored per forward pass.")
    dtype: Literal["bfloat16", "float16", "float32"] | None = Field(
        None, description="Reward model or judge: its weights' dtype; default model.dtype."
    )
    device: Literal["auto", "cpu"] = Field(
        "auto", description="Reward model or judge: auto = where the policy trains; cpu keeps it off the GPU."
    )
    chat_template: str | None = Field(
        None,
        min_length=1,
        description="Reward model or judge: `none` for plain text, a template TRL ships or a .jinja file; default: "
        "its tokenizer's own (plain text without one).",
    )

    @model_validator(mode="before")
    @classmethod
    def _named_after_its_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and "name" not in data:
            label = model_reward_label(data)
            return {**data, "name": label} if label else data
        return data

    @model_serializer(mode="wrap")
    def _without_model_settings(self, handler) -> dict[str, Any]:
        """A reward function's entry is written without the settings only a model reads (validate, recipe.yaml)."""
        data = handler(self)
        return data if self.is_model else {k: v for k, v in data.items() if k not in MODEL_ONLY}

    @property
    def is_model(self) -> bool:
        """A reward model or a judge, not a function."""
        return self.model is not None or self.judge is not None

    def given(self, key: str) -> bool:
        """Whether a setting differs from its default (a dumped and re-read recipe lists every key)."""
        return getattr(self, key) != type(self).model_fields[key].default


def model_reward_label(entry: dict[str, Any]) -> str | None:
    """The default name of a reward model (its folder or file name, as TRL names one) or a judge (`judge`, or
    `judge_<its model's name>` for a judge that is not the policy)."""
    if "judge" in entry:
        judge = entry["judge"]
        model = judge.get("model") if isinstance(judge, dict) else None
        return "judge" if model in (None, POLICY) else f"judge_{model_reward_label({'model': model}) or 'model'}"
    model = entry.get("model")
    if isinstance(model, str) and model.strip("/ "):
        return model.strip("/ ").rsplit("/", 1)[-1].removeprefix("pkg:").removesuffix(".gguf")
    return None


class ToolSpec(Section):
    name: str = Field(
        min_length=1,
        description="Built-in (calculator), `package.module:function`, or "
        "`path/to/file.py:function`, with type hints and a docstring (TRL's tool contract).",
    )
    timeout_s: float = Field(10.0, gt=0.0, description="A call that takes longer fails; the model is told so.")
    max_result_chars: int = Field(2000, ge=1, description="A longer result is cut before the model reads it.")


class EnvironmentSpec(Section):
    name: str = Field(
        min_length=1,
        description="`package.module:Class` or `path/to/file.py:Class` with "
        "reset(**row) [-> prompt text]; its public methods are tools, an optional get_reward() a reward.",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Arguments for the class.")
    timeout_s: float = Field(10.0, gt=0.0, description="Time limit of each method call.")
    max_result_chars: int = Field(2000, ge=1, description="A longer tool result is cut before the model reads it.")

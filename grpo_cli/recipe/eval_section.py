"""The recipe's `eval:` section: which data `grpo eval` scores, under which protocol, with what budget."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grpo_cli.recipe.section import Section


class EvalSection(Section):
    """`grpo eval`: accuracy of the recipe's model (base) or of a finished run, on GSM8K or on the recipe's task."""

    source: str = Field(
        "openai/gsm8k",
        description="Hub dataset, a local .jsonl file, or `generated`; with protocol task, unset means the recipe's "
        "data.source (and data.config).",
    )
    config: str | None = "main"
    split: str = "test"
    limit: int | None = Field(None, ge=1, description="Evaluate the first N problems (the same N for every model).")
    batch_size: int = Field(16, ge=1)
    max_new_tokens: int | None = Field(
        None, ge=1, description="Generation budget; default 512 for `chat`, 256 (lm-eval's max_gen_toks) for `lm-eval`."
    )
    protocol: Literal["chat", "lm-eval", "task"] = Field(
        "chat",
        description="chat: GSM8K zero-shot with the chat template and the training system prompt; "
        "lm-eval: lm-evaluation-harness `gsm8k` (5-shot plain text, strict-match and flexible-extract); "
        "task: the recipe's own data section on this split, scored by its verifier rewards.",
    )
    num_fewshot: int = Field(5, ge=0, description="Few-shot examples for the lm-eval protocol (lm-eval: 5).")
    fewshot_source: str | None = Field(
        None,
        description="Where lm-eval's few-shot examples come from; default: the same dataset's train split "
        "(for a local test.jsonl, the train.jsonl beside it).",
    )
    fewshot_seed: int = Field(1234, description="lm-eval's default fewshot_random_seed.")
    # Unset (None): greedy, one completion per problem. None defaults keep a saved run recipe that lacks these keys
    # equal to one that has them, so resuming that run records no change.
    samples: int | None = Field(
        None,
        ge=1,
        description="Completions per problem (mean@N, pass@N, maj@N); default 1; above 1 needs a temperature.",
    )
    temperature: float | None = Field(
        None, gt=0, description="Sample at this temperature; unset: greedy (one completion per problem)."
    )
    top_p: float | None = Field(
        None, gt=0, le=1, description="Nucleus sampling: draw from the smallest set of this mass (default 1.0)."
    )
    seed: int | None = Field(None, ge=0, description="Seed of the sampled completions (default 0).")

    def task_data(self, data) -> tuple[str, str | None]:
        """Where protocol task reads (source, config): this section's source when the recipe sets it, else the
        training data's own (`data`: the recipe's data section), whose held-out split is `split`."""
        if "source" in self.model_fields_set:
            return self.source, self.config
        return data.source, data.config

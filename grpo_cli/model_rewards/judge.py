"""An LLM judge: a causal LM asked about each completion with the recipe's prompt.

`yes_no` reads P("yes") against P("no") from the logits of the answer's first token: one forward pass, no sampling,
a reward in (0, 1). `scale_0_10` generates a few tokens greedily and reads the first number, mapped to [0, 1]; an
answer without a number from 0 to 10 scores 0 and is counted (`scoring/<name>/unparsed`). `judge: {model: policy}`
asks the model being trained, with its adapters as they are, in eval mode without gradients and inside the trainer's
generation context (the precision and merged adapter generation uses), then puts it back in train mode; outside
training (preflight's sampling, `grpo eval`) the recipe's model is loaded as its own copy.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

from grpo_cli.errors import UserError
from grpo_cli.model_rewards.loading import encode, load_scorer, question_of, question_text, readable_length
from grpo_cli.model_rewards.scorer import ModelReward
from grpo_cli.recipe.reward_model_checks import PLACEHOLDER
from grpo_cli.recipe.user_code import POLICY
from rewards.answers import completion_text

# A number standing on its own: not the digits of `-3` (out of range), `1e3` or a word (`v2`).
NUMBER = re.compile(r"(?<![\w.\-])(\d+(?:\.\d+)?)(?!\.?\d|[eE][-+]?\d)")


def parse_scale(text: str) -> float | None:
    """The first number in a judge's answer as a reward in [0, 1] (`7` -> 0.7); None when none lies in 0..10."""
    found = NUMBER.search(text)
    if found is None or float(found.group(1)) > 10:
        return None
    return float(found.group(1)) / 10


def fill(prompt: str, question: str, completion: str, reference: str) -> str:
    """The judge's prompt with its placeholders filled in (other braces are left as written)."""
    values = {"question": question, "completion": completion, "reference": reference}
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), prompt)


def answer_tokens(tokenizer, word: str) -> set[int]:
    """The first token of the ways an answer starts (`yes`, ` yes`, `Yes`, ` Yes`)."""
    variants = (word, " " + word, word.capitalize(), " " + word.capitalize())
    return {ids[0] for ids in (tokenizer.encode(v, add_special_tokens=False) for v in variants) if ids}


class Judge(ModelReward):
    @property
    def of_policy(self) -> bool:
        return self.spec.judge.model == POLICY

    def _load(self):
        import torch

        from grpo_cli import models
        from grpo_cli.model_rewards.loading import scorer_device

        if self.of_policy and self.trainer is not None:
            model, tokenizer = self.trainer.accelerator.unwrap_model(self.trainer.model), self.trainer.processing_class
        elif self.of_policy:  # outside training: the recipe's model, its own copy
            model, tokenizer = models.load_model(self.policy).eval(), models.load_tokenizer(self.policy)
            model.requires_grad_(False)
            model.to("cuda" if torch.cuda.is_available() else "cpu")
        else:
            device = scorer_device(self.spec.device, self.trainer)
            path = f"{self.path}.judge.model"
            return self._checked(
                *load_scorer(self.spec.judge.model, False, self.dtype, device, self.spec.chat_template, path)
            )
        return self._checked(model, tokenizer, bool(tokenizer.chat_template))

    def _checked(self, model, tokenizer, templated: bool):
        if self.spec.judge.score == "yes_no":
            yes, no = answer_tokens(tokenizer, "yes"), answer_tokens(tokenizer, "no")
            self.yes, self.no = sorted(yes - no), sorted(no - yes)
            if not self.yes or not self.no:
                raise UserError(
                    f"judge `{self.spec.judge.model}`: its tokenizer starts `yes` and `no` with the same token, so "
                    "one token's logits cannot tell them apart; use score: scale_0_10",
                    path=f"{self.path}.judge.score",
                )
        return model, tokenizer, templated

    @contextmanager
    def scoring(self):
        """The policy judges in eval mode inside the trainer's generation context, then trains on as it was."""
        if not (self.of_policy and self.trainer is not None):
            with super().scoring():
                yield
            return
        import torch

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), self.trainer.generation_context():
                yield
        finally:
            self.model.train(was_training)

    def score_batch(self, prompts: list, completions: list, columns: dict[str, list]) -> list[float]:
        judge = self.spec.judge
        references = columns.get("answer") or [""] * len(prompts)
        texts = [
            question_text(
                self.tokenizer, fill(judge.prompt, question_of(p), completion_text(c), str(r or "")), self.templated
            )
            for p, c, r in zip(prompts, completions, references)
        ]
        room = judge.max_new_tokens if judge.score == "scale_0_10" else 0
        limit = readable_length(self.model, self.spec.max_length, room)
        ids, mask, positions = encode(self.tokenizer, texts, limit, self.templated, self.model.device)
        if judge.score == "yes_no":
            return self._yes_no(ids, mask, positions)
        return self._scale(ids, mask)

    def _yes_no(self, ids, mask, positions) -> list[float]:
        import torch

        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False, logits_to_keep=1)
        logp = out.logits[:, -1].float().log_softmax(-1)
        return torch.sigmoid(logp[:, self.yes].logsumexp(-1) - logp[:, self.no].logsumexp(-1)).tolist()

    def _scale(self, ids, mask) -> list[float]:
        from grpo_cli.generation.transformers_engine import HFGenerator

        # Greedy tokens from the already-truncated prompts; no_grad, not inference mode: the policy as its own judge
        # trains on after this.
        generator = HFGenerator(self.model, self.tokenizer, self.spec.judge.max_new_tokens, [], inference_mode=False)
        rows = [row[keep.bool()].tolist() for row, keep in zip(ids, mask)]
        answers = [""] * len(rows)
        for batch in generator.generate(rows, len(rows)):
            for item in batch:
                answers[item.index] = item.text
        values = [parse_scale(text) for text in answers]
        self.counts["unparsed"] = self.counts.get("unparsed", 0) + sum(v is None for v in values)
        return [0.0 if v is None else v for v in values]

"""A reward model's or judge's weights and tokenizer, loaded once, and the text it reads: prompt and completion through
its own tokenizer (its chat template, another one, or plain text), cut from the start to what it may read."""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import UserError
from rewards.answers import completion_text


def load_scorer(name: str, classifier: bool, dtype: str, device, template: str | None, path: str):
    """(model, tokenizer, templated): the weights in eval mode without gradients on `device`, the tokenizer padding
    on the left, and whether text goes through a chat template. `path`: the recipe key errors point at."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from grpo_cli.chat_templates import apply_choice
    from grpo_cli.models import resolve_model_path

    try:
        location = resolve_model_path(name)
        tokenizer = AutoTokenizer.from_pretrained(location, padding_side="left")
        kind = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
        model = kind.from_pretrained(location, dtype=getattr(torch, dtype))
    except UserError as exc:
        raise UserError(exc.problems[0].message, path=path) from None
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load `{name}`: {reason}", path=path) from None
    if classifier and model.config.num_labels != 1:
        raise UserError(
            f"`{name}` has {model.config.num_labels} outputs; a reward model has one score output", path=path
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id  # a classifier reads the last token that is not padding
    model.requires_grad_(False)
    model.eval()
    if template not in (None, "none"):
        apply_choice(tokenizer, template)
    return model.to(device), tokenizer, template != "none" and bool(tokenizer.chat_template)


def scorer_device(setting: str, trainer=None):
    """`auto`: where the policy trains (the trainer's device, else a GPU when there is one); `cpu`: the CPU."""
    import torch

    if setting == "cpu":
        return torch.device("cpu")
    if trainer is not None:
        return trainer.accelerator.device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def prompt_messages(prompt: Any) -> list[dict[str, Any]]:
    """A prompt as chat messages (a plain-text prompt is one user turn)."""
    return list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


def question_of(prompt: Any) -> str:
    """The last user turn of a prompt: the question a judge is shown."""
    users = [m for m in prompt_messages(prompt) if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


def conversation_text(tokenizer, prompt: Any, completion: Any, templated: bool) -> str:
    """Prompt and completion (the model's own turns, no tool results) as the scorer's tokenizer writes them."""
    answer = completion_text(completion)
    if templated:
        messages = [*prompt_messages(prompt), {"role": "assistant", "content": answer}]
        return tokenizer.apply_chat_template(messages, tokenize=False)
    if isinstance(prompt, str):
        return prompt + answer  # a plain-text prompt: the completion continues it
    return "".join(f"{m.get('content') or ''}\n\n" for m in prompt_messages(prompt)) + answer


def question_text(tokenizer, text: str, templated: bool) -> str:
    """A judge's filled-in prompt as one user turn, ready for the answer's first token."""
    if not templated:
        return text
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def encode(tokenizer, texts: list[str], max_length: int | None, templated: bool, device):
    """Token ids (left-padded), attention mask and positions; each text cut from its start to `max_length` tokens,
    so a classifier still reads the end of the completion. A template writes its own special tokens."""
    import torch

    rows = [tokenizer(text, add_special_tokens=not templated)["input_ids"] for text in texts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = [(row[-max_length:] if max_length else row) or [pad] for row in rows]
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[index, width - len(row) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each row's first token at position 0
    return ids.to(device), mask.to(device), positions.to(device)


def readable_length(model, setting: int | None, room: int = 0) -> int | None:
    """Tokens a scorer reads at most: the entry's max_length, and never past the model's positions (less `room`
    for tokens it generates)."""
    positions = getattr(model.config, "max_position_embeddings", None)
    limits = [v for v in (setting, positions - room if isinstance(positions, int) else None) if v]
    return max(1, min(limits)) if limits else None

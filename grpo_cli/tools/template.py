"""Whether a model's chat template can carry tool calls, asked before any weight loads (train, preflight, eval).

TRL needs two things of the template: that it renders a whole tool exchange (the call and the tool's answer), and
that a response parser exists for it, so calls can be read back out of generated text. TRL ships parsers for the
templates it knows (Qwen2.5, Qwen3, Llama 3.1/3.2, GPT-OSS, ...) and attaches them itself.
"""

from __future__ import annotations

from grpo_cli.errors import UserError

_FIX = (
    "use a model whose chat template supports tools (Qwen2.5 or Qwen3 Instruct, Llama 3.1/3.2 Instruct), set "
    "model.chat_template to one TRL ships that speaks the model's format (ChatML models: qwen2_5), or point "
    "model.tokenizer at a tokenizer with such a template"
)


def check_tool_template(tokenizer, model_name: str) -> None:
    """UserError (one line naming the model and the fix) when TRL could not run tool calls with this template."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        raise UserError(
            f"the chat template of {model_name} cannot render tool calls (it has none, or drops the call "
            f"or the tool's answer); {_FIX}",
            path="model.name",
        )
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)  # what GRPOTrainer does itself; harmless to do first
        except ValueError:
            raise UserError(
                f"the chat template of {model_name} renders tools, but TRL has no parser to read tool "
                f"calls back out of its output; {_FIX}",
                path="model.name",
            ) from None

"""How preflight draws its completions: sampled with the recipe's settings from the model as it starts, plainly or
(with tools) through training's tool loop."""

from __future__ import annotations

from grpo_cli.recipe.schema import Recipe


def sample_batch(loop, model, tokenizer, prompts: list, columns: dict, start: int, g: int, sample: dict):
    """`g` sampled completions of each prompt: their token ids, the completions as rewards receive them, and (with
    tools, through the tool loop) each one's tool figures."""
    import torch

    from grpo_cli import data

    if loop is not None:
        examples = [
            {"index": k, **{c: v[start + k // g] for c, v in columns.items()}, "prompt": prompts[k // g]}
            for k in range(len(prompts) * g)
        ]
        results = sorted((r for chunk in loop.run(examples, len(examples)) for r in chunk), key=lambda r: r.index)
        return (
            [r.completion_ids for r in results],
            [r.messages for r in results],
            [{"tools": r.extra["tools"]} for r in results],
        )
    texts = [data.render_prompt(tokenizer, p) for p in prompts]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    with torch.no_grad():
        out = model.generate(**inputs, **sample)
    ids = [_until_eos(seq, tokenizer) for seq in out[:, inputs["input_ids"].shape[1] :].tolist()]
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    chat = isinstance(prompts[0], list)
    return ids, [[{"role": "assistant", "content": t}] for t in decoded] if chat else decoded, []


def tool_loop(recipe: Recipe, model, tokenizer, sample: dict):
    """With tools: training's tool loop on a sampler with the recipe's settings (None without tools)."""
    if not recipe.tools and recipe.environment is None:
        return None
    from grpo_cli.tools.loop import ToolLoop
    from grpo_cli.tools.wiring import recipe_tools

    tools, environment = recipe_tools(recipe, tokenizer)
    settings = {k: v for k, v in sample.items() if k not in ("max_new_tokens", "num_return_sequences")}
    return ToolLoop(
        Sampler(model, tokenizer, settings),
        tokenizer,
        tools,
        environment,
        recipe.grpo.max_completion_length,
        recipe.grpo.max_tool_calling_iterations,
    )


class Sampler:
    """The tool loop's engine for preflight: sampled (not greedy) continuations of token-id contexts, one per row."""

    def __init__(self, model, tokenizer, settings: dict):
        self.model, self.tokenizer, self.settings = model, tokenizer, settings

    def generate(self, contexts: list[list[int]], batch_size: int, budgets: list[int]):
        import torch

        from grpo_cli.eval.generation import Generated

        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        for start in range(0, len(contexts), batch_size):
            rows = contexts[start : start + batch_size]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.model.device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.model.device)
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=max(budgets[start : start + len(rows)]),
                    **self.settings,
                )
            items = []
            for k, seq in enumerate(out[:, width:].tolist()):
                seq = _until_eos(seq, self.tokenizer)[: budgets[start + k]]
                stopped = bool(seq) and seq[-1] == eos
                items.append(Generated(start + k, "", len(seq), seq[:-1] if stopped else seq, stopped))
            yield items


def _until_eos(seq: list[int], tokenizer) -> list[int]:
    """The completion's tokens up to and including its end-of-sequence token (padding after it dropped)."""
    eos = tokenizer.eos_token_id
    return seq[: seq.index(eos) + 1] if eos in seq else seq

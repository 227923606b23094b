"""How preflight draws its completions: sampled as training samples (generation/policy_sampler.py) from the model as
it starts, plainly or (with tools) through training's tool loop."""

from __future__ import annotations

from grpo_cli.generation.policy_sampler import PolicySampler, with_end
from grpo_cli.recipe.schema import GRPOSection


def sample_batch(loop, sampler: PolicySampler, prompts: list, columns: dict, start: int, g: int):
    """`g` sampled completions of each prompt: their token ids, the completions as rewards receive them, and (with
    tools, through the tool loop) each one's tool figures."""
    from grpo_cli.chat_templates import render_prompt

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
    # Each prompt g times in place: the draws `generate(num_return_sequences=g)` makes.
    texts = [render_prompt(sampler.tokenizer, p) for p in prompts for _ in range(g)]
    items = [item for batch in sampler.generate(texts, len(texts)) for item in batch]
    ids = [with_end(item, sampler.tokenizer.eos_token_id) for item in items]
    chat = isinstance(prompts[0], list)
    decoded = [item.text for item in items]
    return ids, [[{"role": "assistant", "content": t}] for t in decoded] if chat else decoded, []


def tool_loop(sampler: PolicySampler, grpo: GRPOSection, tools, environment):
    """With tools: training's tool loop on the sampler, with the recipe's guarded `tools` and `environment`
    (tools/wiring.recipe_tools); None without tools."""
    if tools is None and environment is None:
        return None
    from grpo_cli.generation.tool_loop import ToolLoop

    return ToolLoop(
        sampler, sampler.tokenizer, tools, environment, grpo.max_completion_length, grpo.max_tool_calling_iterations
    )

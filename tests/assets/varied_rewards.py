"""A reward with variance even on a random tiny model's output, so every GRPO step has a real gradient."""


def digit_share(prompts, completions, **kwargs):
    texts = [c if isinstance(c, str) else "".join(m["content"] for m in c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) + 0.01 * len(t) for t in texts]


def alternating(prompts, completions, **kwargs):
    """1 for every other completion: variance inside every group even when a group's completions are identical (a
    tiny model that has learned one habit per prompt), so a step always has a gradient."""
    return [float(index % 2) for index in range(len(completions))]

"""Rewards for SFT tests: a verdict known in advance on a random tiny model's output."""


def even_answer(prompts, completions, answer, **kwargs):
    """1 for every completion of a problem whose answer is even, 0 otherwise: rejection sampling must keep exactly the
    problems with an even answer, whatever the model wrote."""
    return [float(int(float(a)) % 2 == 0) for a in answer]

"""An environment for the tiny tool model: its `calculator` method is the tool (described as the built-in one, which
the model was taught to call), reset starts each rollout, get_reward pays a rollout that used the tool."""

from grpo_cli.tools.calculator import calculator as builtin_calculator


class CountingCalculator:
    resets = 0

    def __init__(self, offset: int = 0):
        self.offset = offset
        self.calls = 0

    def reset(self, **row):
        type(self).resets += 1
        self.calls = 0
        return None

    def calculator(self, expression: str) -> str:
        self.calls += 1
        return str(int(builtin_calculator(expression)) + self.offset)

    def get_reward(self) -> float:
        return float(self.calls > 0)


CountingCalculator.calculator.__doc__ = builtin_calculator.__doc__

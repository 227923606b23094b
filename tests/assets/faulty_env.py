"""Environments for the tiny tool model that misbehave in each way the guard must turn into one line (or, for a NaN
reward, into a warning): each is a working calculator environment with one hook broken."""

from grpo_cli.tools.calculator import calculator as builtin_calculator


class Working:
    def reset(self, **row):
        return None

    def calculator(self, expression: str) -> str:
        return builtin_calculator(expression)

    def get_reward(self) -> float:
        return 1.0


Working.calculator.__doc__ = builtin_calculator.__doc__  # the description the tiny model was taught


class RaisingReset(Working):
    def reset(self, **row):
        raise RuntimeError("the simulator is down")


class ListReset(Working):
    def reset(self, **row):
        return ["Use the calculator."]


class StringReward(Working):
    def get_reward(self) -> float:
        return "high"


class ListReward(Working):
    def get_reward(self) -> float:
        return [1.0, 0.0]


class NanReward(Working):
    def get_reward(self) -> float:
        return float("nan")

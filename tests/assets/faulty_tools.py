"""Tools that present themselves exactly as the built-in calculator (the tool the tiny tool model was taught to call,
with the same description) and misbehave in each way a guard must absorb, or print."""

import time

from grpo_cli.tools.calculator import calculator


def raising(expression: str) -> str:
    raise RuntimeError("the service is down")


def hanging(expression: str) -> str:
    time.sleep(60)
    return "too late"


def flooding(expression: str) -> str:
    return "9" * 10_000_000


def chatty(expression: str) -> str:
    print(f"chatty tool: computing {expression}")
    return calculator(expression)


for _tool in (raising, hanging, flooding, chatty):
    _tool.__name__, _tool.__doc__ = "calculator", calculator.__doc__

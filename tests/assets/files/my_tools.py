"""Tools for the broken-recipe corpus: one that is fine, and each way a tool can be unusable."""


def lookup(key: str) -> str:
    """Look a key up in a small table.

    Args:
        key: The key to look up.
    """
    return {"a": "1"}.get(key, "unknown")


def no_hints(key):
    """Look a key up.

    Args:
        key: The key.
    """
    return key


def no_docstring(key: str) -> str:
    return key


def calculator(expression: str) -> str:
    """A second tool called calculator.

    Args:
        expression: An expression.
    """
    return expression


class Game:
    """An environment: reset starts a rollout, guess is a tool."""

    def __init__(self, secret: int = 7):
        self.secret = secret

    def reset(self, **row):
        return None

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: The guess.
        """
        return "right" if number == self.secret else "wrong"


class NoReset:
    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: The guess.
        """
        return "wrong"

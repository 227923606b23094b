"""The built-in `calculator` tool: exact arithmetic on decimal numbers, by walking the parsed expression tree.

Model output is never evaluated as code. The expression is parsed with `ast` and only numbers, + - * / // % **,
unary signs and parentheses are accepted; everything else (names, calls, attributes, strings, comparisons) is
refused. Numbers are exact fractions built from their written digits, so 0.1 + 0.2 is 0.3. Every size is bounded
before it is computed: the expression's length, each exponent, and the digits of every intermediate result, so
`9**9**9` or a 10,000-digit number is refused at once instead of hanging the run or filling its memory.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

MAX_EXPRESSION_CHARS = 500
MAX_RESULT_DIGITS = 1000  # numerator and denominator, each; a 1000-digit product takes microseconds
MAX_RESULT_BITS = int(MAX_RESULT_DIGITS * 3.33)
MAX_EXPONENT = 10_000
SHOWN_DECIMALS = 12  # a result that is not a finite decimal (1/3) is rounded to this many places

_OPERATORS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}
_HINTS = {ast.BitXor: "use ** for powers, not ^", ast.MatMult: "use * to multiply"}
# Thousands separators between digit groups (1,234.5) and currency signs are how people write GSM8K numbers.
_DECIMAL = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


class CalculatorError(ValueError):
    """A short reason the expression was refused; the model reads it as the tool's answer."""


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, for example "(48 / 2 + 3) * 1.5".
    """
    return format_number(evaluate(expression))


def evaluate(expression: str) -> Fraction:
    if not isinstance(expression, str):
        raise CalculatorError('the expression must be a string such as "2 * (3 + 4)"')
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = _THOUSANDS.sub("", expression.replace("$", "").replace("×", "*").replace("÷", "/")).strip()
    if not text:
        raise CalculatorError("empty expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise CalculatorError(f"not an arithmetic expression: {expression[:60]!r}") from None
    return _value(tree.body, text)


def _value(node: ast.AST, text: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _literal(ast.get_source_segment(text, node) or str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _value(node.operand, text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, text), _value(node.right, text)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        operation = _OPERATORS.get(type(node.op))
        if operation is None:
            raise CalculatorError(_HINTS.get(type(node.op), f"operator {type(node.op).__name__} is not supported"))
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            raise CalculatorError("division by zero")
        return _checked(operation(left, right))
    raise CalculatorError(f"only numbers, + - * / // % ** and parentheses are allowed, not {_describe(node)}")


def _literal(written: str) -> Fraction:
    """The number as written (ast would have rounded 0.1 to a binary float already); `1e999999` is refused before
    Fraction would build its million digits."""
    match = _DECIMAL.fullmatch(written.replace("_", ""))
    if match is None:
        raise CalculatorError(f"write numbers in decimal digits, not {written[:20]!r}")
    if match.group(1) and abs(int(match.group(1))) > MAX_RESULT_DIGITS:
        raise CalculatorError(f"a number with more than {MAX_RESULT_DIGITS} digits")
    return _checked(Fraction(match.group(0)))


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError("exponents must be whole numbers")
    power = exponent.numerator
    if abs(power) > MAX_EXPONENT:
        raise CalculatorError(f"exponent larger than {MAX_EXPONENT}")
    if base == 0 and power < 0:
        raise CalculatorError("division by zero")
    # Bound the result's size from the operands before computing it.
    size = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(power)
    if size > MAX_RESULT_BITS and abs(base) != 1:
        raise CalculatorError(f"result would have more than {MAX_RESULT_DIGITS} digits")
    return _checked(base**power)


def _checked(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS:
        raise CalculatorError(f"a number with more than {MAX_RESULT_DIGITS} digits")
    return value


def format_number(value: Fraction) -> str:
    """Whole numbers as integers, finite decimals exactly, others rounded to SHOWN_DECIMALS places."""
    if value.denominator == 1:
        return str(value.numerator)
    denominator = value.denominator
    for factor in (2, 5):
        while denominator % factor == 0:
            denominator //= factor
    places = SHOWN_DECIMALS
    if denominator == 1:  # a finite decimal: as many places as it needs, rounded past MAX_RESULT_DIGITS (1/2**1100)
        exact = (p for p in range(1, MAX_RESULT_DIGITS + 1) if (value * 10**p).denominator == 1)
        places = next(exact, SHOWN_DECIMALS)
    scaled = round(value * 10**places)
    sign, digits = ("-" if scaled < 0 else ""), str(abs(scaled)).rjust(places + 1, "0")
    whole, fraction = digits[:-places], digits[-places:].rstrip("0")
    return f"{sign}{whole}.{fraction}" if fraction else f"{sign}{whole}"


def _describe(node: ast.AST) -> str:
    names = {
        ast.Name: "names",
        ast.Call: "function calls",
        ast.Attribute: "attributes",
        ast.Compare: "comparisons",
        ast.Tuple: "commas (write numbers without separators)",
        ast.Subscript: "indexing",
        ast.BoolOp: "and/or",
        ast.Lambda: "lambdas",
    }
    if isinstance(node, ast.Constant):
        return "strings" if isinstance(node.value, (str, bytes)) else f"{type(node.value).__name__} values"
    return names.get(type(node), type(node).__name__)

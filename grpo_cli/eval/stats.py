"""Intervals that keep a small evaluation honest: a 2-point change on 200 problems is mostly noise."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion (Wilson 1927); well-behaved near 0 and 1, unlike p +- z*se."""
    if total <= 0:
        return 0.0, 1.0
    p = correct / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference(before: list[bool], after: list[bool], z: float = Z95) -> dict[str, float | int]:
    """Accuracy change on the same problems, with a 95% interval from the per-problem differences.

    Pairing matters: both models see identical problems, so the variance comes only from problems whose
    outcome changed (`fixed` and `broken`, McNemar's discordant pairs), not from problem difficulty.
    """
    if len(before) != len(after):
        raise ValueError("paired results must cover the same problems")
    n = len(before)
    fixed = sum(1 for b, a in zip(before, after) if a and not b)
    broken = sum(1 for b, a in zip(before, after) if b and not a)
    if n == 0:
        return {"n": 0, "difference": 0.0, "low": 0.0, "high": 0.0, "fixed": 0, "broken": 0}
    mean = (fixed - broken) / n
    variance = ((fixed + broken) / n - mean * mean) / max(1, n - 1) if n > 1 else 0.0
    half = z * math.sqrt(max(variance, 0.0))
    return {"n": n, "difference": mean, "low": mean - half, "high": mean + half, "fixed": fixed, "broken": broken}

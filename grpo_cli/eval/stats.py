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
    # The normal approximation overshoots on a handful of problems; a change of accuracy lies in [-1, 1].
    low, high = max(-1.0, mean - half), min(1.0, mean + half)
    return {"n": n, "difference": mean, "low": low, "high": high, "fixed": fixed, "broken": broken}


def mean_interval(values: list[float], z: float = Z95) -> tuple[float, float, float]:
    """Mean of per-problem values in [0, 1] (mean@N: each problem's fraction of right samples) with a normal 95%
    interval over problems: mean +- z * s / sqrt(n), s the sample standard deviation of the per-problem values,
    clipped to [0, 1]. Problems are the unit of the interval, so samples of one problem (which agree more with each
    other than with other problems') are not counted as independent. Zero width when every problem has the same
    value; fewer than two problems give the whole range."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 1.0
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0, 1.0
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(variance / n)
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def paired_mean_difference(before: list[float], after: list[float], z: float = Z95) -> dict[str, float | int]:
    """Change of a per-problem value on the same problems (mean@N's fractions), with a normal 95% interval over the
    per-problem differences; `improved` and `worsened` count problems whose value rose or fell. On 0/1 values it
    equals `paired_difference`."""
    if len(before) != len(after):
        raise ValueError("paired results must cover the same problems")
    n = len(before)
    differences = [a - b for b, a in zip(before, after)]
    improved, worsened = sum(d > 0 for d in differences), sum(d < 0 for d in differences)
    if n == 0:
        return {"n": 0, "difference": 0.0, "low": 0.0, "high": 0.0, "improved": 0, "worsened": 0}
    mean = sum(differences) / n
    variance = sum((d - mean) ** 2 for d in differences) / (n - 1) if n > 1 else 0.0
    half = z * math.sqrt(variance / n)
    return {
        "n": n,
        "difference": mean,
        "low": mean - half,
        "high": mean + half,
        "improved": improved,
        "worsened": worsened,
    }


def pass_at_k(samples: int, right: int, k: int) -> float:
    """The unbiased estimate of pass@k from `right` of `samples` completions (Chen et al. 2021, HumanEval):
    1 - C(n-c, k) / C(n, k), the chance that k completions drawn without replacement hold a right one."""
    if not 1 <= k <= samples:
        raise ValueError(f"k must be between 1 and the {samples} samples, not {k}")
    if samples - right < k:
        return 1.0
    return 1.0 - math.comb(samples - right, k) / math.comb(samples, k)

"""Reward functions with TRL's signature, and the registry that finds them by name."""

from rewards.registry import BUILTINS, RewardLookupError, resolve_reward

__all__ = ["BUILTINS", "RewardLookupError", "resolve_reward"]

"""Reward functions with TRL's signature, and the registry that finds them by name. Depends on nothing in grpo_cli."""

from rewards.registry import BUILTINS, RewardLookupError, resolve_reward, resolve_rewards

__all__ = ["BUILTINS", "RewardLookupError", "resolve_reward", "resolve_rewards"]

"""Rewards that are models: reward models (sequence classifiers) and LLM judges, as plain callables with TRL's reward
signature, so the reward guard, the weights and the metrics treat them as any reward function."""

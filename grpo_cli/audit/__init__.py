"""`grpo audit`: what a recipe's rewards pay known-good and known-bad replies and trivial rules, before training."""

"""`grpo preflight`: a short measured run before the real one: real steps (peak, time), sampled groups (reward
statistics, zero-variance share, truncation), advice. It runs training, so it sits above `train/`; `plan/` does not."""

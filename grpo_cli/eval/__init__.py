"""`grpo eval`: GSM8K evaluation: generation, answer scoring, statistics, rendering."""

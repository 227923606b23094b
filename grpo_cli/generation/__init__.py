"""Every generation engine grpo drives outside TRL's own (base.py says which is which)."""

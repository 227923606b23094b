"""grpo: fine-tune language models with GRPO from declarative YAML recipes."""

__version__ = "0.1.0"

"""grpo: fine-tune language models with GRPO from declarative YAML recipes."""

__version__ = "0.1.0"
OLD_NAMES_UNTIL = "0.2.0"  # the release that stops reading renamed keys and old command spellings

"""What a run directory and an evaluation folder hold: every file name they share, defined once, and the metric
keys a person looks at first."""

from __future__ import annotations

import re
from pathlib import Path

# A run directory (`grpo train`).
RECIPE_FILE = "recipe.yaml"  # the resolved recipe: every default and override filled in
RECIPE_CHANGES_FILE = "recipe_changes.jsonl"  # what a resumed run changed in it, and from which step
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
FINAL_DIR = "final"
FINAL_STAGING = "final.partial"  # a final model being written; renamed to FINAL_DIR once whole
CARD_FILE = "README.md"
REPORT_FILE = "report.png"
EVAL_DIR = "eval"  # `grpo eval run/compare` of this run: EVAL_DIR/<protocol>-<data>/{base,trained}/
ACCELERATE_CONFIG_FILE = "accelerate_config.yaml"  # generated for several processes
RANK_RECIPE_FILE = "launch_recipe.yaml"  # the resolved recipe (file + overrides) every launched rank loads
TRL_LOGS_DIR = "runs"  # TRL's TensorBoard logs, when training.report_to names it
TRAINER_STATE_FILE = "trainer_state.json"  # the Trainer's, in each checkpoint: `grpo report` reads a plain TRL run's
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# The SFT stage before GRPO (`sft:`): a run directory of its own inside the run (RECIPE_FILE, METRICS_FILE,
# checkpoints, FINAL_DIR), so `grpo eval run RUN/sft` and `grpo report RUN/sft` read it like any run.
SFT_DIR = "sft"
OLD_SFT_DIR = "warmup"  # its name before 0.2.0: a run trained then resumes, reports and evaluates as before
SFT_EXAMPLES_FILE = "examples.jsonl"  # the examples it trains on, as the trainer reads them
SFT_SOURCE_FILE = "source.json"  # where they came from and how many: rows, prompts, samples, kept

# An evaluation folder (`grpo eval`), and the folder that compares two of them.
PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"
SETTINGS_FILE = "settings.json"
COMPARISON_FILE = "comparison.json"

# Everything `grpo train`, `grpo eval run`, `grpo report` and TRL write into a run directory.
OWN_NAMES = {
    RECIPE_FILE,
    RECIPE_CHANGES_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    FINAL_DIR,
    FINAL_STAGING,
    CARD_FILE,
    REPORT_FILE,
    EVAL_DIR,
    TRL_LOGS_DIR,
    ACCELERATE_CONFIG_FILE,
    RANK_RECIPE_FILE,
    SFT_DIR,
    OLD_SFT_DIR,
}


def sft_dir(run_dir: Path) -> Path:
    """The run's SFT stage folder: RUN/sft/, or RUN/warmup/ in a run that stage wrote before it was renamed."""
    old = run_dir / OLD_SFT_DIR
    return old if old.is_dir() and not (run_dir / SFT_DIR).is_dir() else run_dir / SFT_DIR


def checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints in step order (whole or not)."""
    found = [p for p in run_dir.glob("checkpoint-*") if p.is_dir() and CHECKPOINT.match(p.name)]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(path: Path) -> int:
    """The global step a `checkpoint-N` folder was saved at."""
    return int(CHECKPOINT.match(path.name).group(1))


def is_checkpoint(path: Path) -> bool:
    """A `checkpoint-N` folder inside a run directory (the run's recipe one level up)."""
    return bool(CHECKPOINT.match(path.name)) and (path.parent / RECIPE_FILE).is_file()


def reward_keys(keys) -> list[str]:
    """TRL's per-reward metrics (`rewards/<name>/mean`) among `keys`, sorted."""
    return sorted({k for k in keys if k.startswith("rewards/") and k.endswith("/mean")})


def headline_keys(row: dict) -> list[str]:
    """The metrics a person looks at first: total reward, each reward, KL, completion length."""
    return ["reward", *reward_keys(row), "kl", "completions/mean_length"]

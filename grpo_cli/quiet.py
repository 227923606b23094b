"""Keeping library chatter (progress bars, deprecation and hub warnings) off the user's console."""

from __future__ import annotations


def silence_import_notes() -> None:
    """Before any library is imported: notes they log at import time, about optional speed-ups that are absent.

    bitsandbytes logs a warning on AVX512-BF16 CPUs when its optional hub kernel is missing (it falls back itself);
    the level must be set before its first import, which trl and peft trigger. TRL warns at each of its vLLM checks
    (seven at import) that vLLM 0.32 is past the range it was released with; grpo runs and tests that pairing
    (tests/test_vllm_cpu.py)."""
    import logging
    import warnings

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")


def quiet_libraries() -> None:
    """Library progress bars and deprecation chatter drown the run's own output; errors still show."""
    import warnings

    import datasets
    import huggingface_hub
    import transformers

    datasets.disable_progress_bars()
    huggingface_hub.utils.logging.set_verbosity_error()  # offline: a retry warning per request before our one line
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    silence_import_notes()

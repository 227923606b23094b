"""Keeping library chatter (progress bars, deprecation and hub warnings) off the user's console."""

from __future__ import annotations


def quiet_libraries() -> None:
    """Library progress bars and deprecation chatter drown the run's own output; errors still show."""
    import logging
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
    # bitsandbytes warns on import on AVX512-BF16 CPUs that its optional hub kernel is absent; it falls back itself.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

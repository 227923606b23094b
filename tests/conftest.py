from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Tests never reach a hub: a stray download attempt must fail fast, not hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist each worker takes one core: two workers with a thread pool per core each would fight over them.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# trackio reads TRACKIO_DIR once, when TRL first imports it: set before any import, so a test run writes its trackio
# database here, never into ~/.cache/huggingface/trackio (removed when the session ends).
TRACKIO_DIR = Path(tempfile.gettempdir()) / f"grpo-tests-trackio-{os.getpid()}"
os.environ["TRACKIO_DIR"] = str(TRACKIO_DIR)

ASSETS = Path(__file__).parent / "assets"
ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TRACKIO_DIR, ignore_errors=True)


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core, at most one per 3 GiB of memory (a worker peaks near
    1.5 GiB) and at most 8; each worker runs torch on one thread (above)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 2**34
    return max(1, min(cores, memory // (3 * 2**30), 8))


def pytest_itemcollected(item):
    """Under pytest-xdist (`--dist loadgroup`): tests that share an expensive fixture run on one worker, so it is
    built once. Marked as each test is collected, before xdist reads the groups."""
    group = shared_fixture_group(item) if "PYTEST_XDIST_WORKER" in os.environ else None
    if group:
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, tests that train are handed out first, so a long one never starts last while the other
    workers idle."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: collection order otherwise


def shared_fixture_group(item) -> str | None:
    """The tool model (trained for a minute) or a module-scoped fixture: what a worker should build only once."""
    if "tool_model" in item.fixturenames:
        return "tool_model"
    definitions = getattr(item, "_fixtureinfo", None)
    for name in item.fixturenames:
        for definition in definitions.name2fixturedefs.get(name, ()) if definitions else ():
            if definition.scope == "module":
                return item.module.__name__
    return None


def pytest_runtest_setup(item):
    """Before any fixture is built: the tool_model fixture trains a model for some hundred steps."""
    if "tool_model" in item.fixturenames and item.get_closest_marker("slow") is None:
        pytest.fail("this test builds the tool_model fixture (training steps): mark it @pytest.mark.slow")


@pytest.fixture(autouse=True)
def _only_slow_tests_train(request, monkeypatch):
    """`-m "not slow"` is the inner loop: a test not marked slow that reaches a Trainer's train() (grpo train,
    preflight's steps, the SFT stage) fails here."""
    if request.node.get_closest_marker("slow") is not None:
        return
    from transformers import Trainer

    def refuse(self, *args, **kwargs):
        raise AssertionError("this test trains: mark it @pytest.mark.slow")

    monkeypatch.setattr(Trainer, "train", refuse)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    from tiny_models import build_model

    return build_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory) -> Path:
    from tiny_models import build_model

    return build_model(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2")


@pytest.fixture(scope="session")
def tool_model(request, tmp_path_factory) -> Path:
    """A tiny model with a tool-capable template that calls the calculator on some problems (tests/tool_models.py).
    Its supervised steps take most of a minute, so it is kept in pytest's cache (`.pytest_cache/`) under a key of
    the code and library versions that make it; `--cache-clear` builds it anew. Tests only read it."""
    from tool_models import build_tool_model, fingerprint

    cache = getattr(request.config, "cache", None)  # None under `-p no:cacheprovider`
    if cache is None:
        return build_tool_model(tmp_path_factory.mktemp("tiny-tool-model"))
    kept = cache.mkdir("tool-model") / fingerprint()
    if not kept.is_dir():
        built = build_tool_model(tmp_path_factory.mktemp("tiny-tool-model"))
        staged = kept.with_name(f"{kept.name}.{os.getpid()}")
        shutil.copytree(built, staged)
        try:
            staged.rename(kept)  # whole or absent: a concurrent run may have kept its own copy first
        except OSError:
            shutil.rmtree(staged, ignore_errors=True)
    return kept


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory) -> Path:
    """A tiny Llama vLLM's CPU attention can run (head size 32, its smallest), with weights large enough that each
    greedy step has a clear winner: completions compare engines, not float rounding between near-equal logits."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from tiny_models import build_tokenizer

    directory = tmp_path_factory.mktemp("vllm-llama")
    tokenizer = build_tokenizer(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    return directory


def write_recipe(directory: Path, model_dir: Path, **sections) -> Path:
    """A small valid training recipe for a tiny model; keyword arguments replace or extend sections."""
    import yaml

    recipe = {
        # float32 matmuls everywhere: `auto` would switch to bf16 on CPUs that have it and make runs machine-dependent
        "model": {"name": str(model_dir), "dtype": "float32", "mixed_precision": "no", "gradient_checkpointing": False},
        "data": {"source": "generated", "limit": 32, "system_prompt": "Answer briefly."},
        "rewards": [{"name": "correctness"}, {"name": "length_target", "kwargs": {"target": 8}, "weight": 0.5}],
        "grpo": {"num_generations": 2, "max_completion_length": 8, "temperature": 1.0},
        "training": {
            "output_dir": str(directory / "run"),
            "learning_rate": 0.05,
            "per_device_train_batch_size": 4,
            "max_steps": 2,
            "save_steps": 1,
            "logging_steps": 1,
            "lr_scheduler_type": "constant",
        },
    }
    for key, value in sections.items():
        if value is None:
            recipe.pop(key, None)
        elif isinstance(value, dict) and isinstance(recipe.get(key), dict):
            recipe[key] = {**recipe[key], **value}
        else:
            recipe[key] = value
    path = directory / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def write_jsonl(rows: list[dict], path: Path) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def fails_cleanly(result, *words: str) -> str:
    """Exit 2, no traceback, and the words on the last line (the error line)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    line = result.output.strip().splitlines()[-1]
    for word in words:
        assert word in line, line
    return line

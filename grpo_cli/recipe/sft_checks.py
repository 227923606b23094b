"""Checks for the SFT stage and for a starting adapter: the rules across fields, and what the files they name hold
(read without torch: a file of examples by its first rows, an adapter by its adapter_config.json)."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.recipe.checks import data_file_problem
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.model_section import LoraSection, ModelSection
from grpo_cli.recipe.sft_section import REFERENCE, SELF, SftSection
from grpo_cli.recipe.sources import LOCAL_DATA_SUFFIXES, looks_like_path, model_location
from grpo_cli.recipe.user_code import RewardSpec
from grpo_cli.recipe.yaml_source import KeyPath

ADAPTER_CONFIG = "adapter_config.json"  # what peft's save_pretrained writes beside the adapter weights


def sft_problems(
    section: SftSection | None, data: DataSection, rewards: list[RewardSpec], uses_tools: bool, processes: int
) -> list[tuple[KeyPath, str]]:
    """Rules between `sft:` and the rest of the recipe (`uses_tools`: tools or an environment; `processes`:
    distributed.num_processes), each with its fix."""
    if section is None:
        return []
    out: list[tuple[KeyPath, str]] = []
    if section.source in (REFERENCE, SELF) and not data.answer_column:
        out.append(
            (
                ("sft", "source"),
                f"`{section.source}` needs the data's reference answers; set data.answer_column, or give a file of "
                "examples (a `messages` column, or `prompt` and `completion`)",
            )
        )
    names = [spec.name for spec in rewards]
    if section.source == SELF and names and section.reward not in names:
        out.append(
            (
                ("sft", "reward"),
                f"`{section.reward}` is not one of the recipe's rewards ({', '.join(names)}); name the one that scores "
                "a right answer",
            )
        )
    if section.source == SELF and uses_tools:
        out.append((("sft", "source"), "`self` samples without tools; use `reference` or a file of examples"))
    if section.source == REFERENCE and uses_tools and (data.answer_format != "gsm8k" or not data.chat):
        out.append(
            (
                ("sft", "source"),
                "`reference` writes tool calls from GSM8K-format solutions' `<<expression=result>>` notes in chat "
                "prompts; with data.answer_format: plain (or data.chat: false) no example would call a tool: give a "
                "file of examples with the calls, or drop the SFT stage",
            )
        )
    if processes > 1:
        out.append(
            (
                ("sft",),
                "the SFT stage runs in one process; train it with distributed.num_processes=1, then give its "
                "adapter as lora.adapter to the run with several processes",
            )
        )
    return out


def sft_file_problems(section: SftSection | None) -> list[tuple[KeyPath, str]]:
    """An SFT file must exist and hold examples: a `messages` column, or `prompt` and `completion` columns."""
    source = section.source if section is not None else None
    if source in (None, REFERENCE, SELF):
        return []
    key = ("sft", "source")
    path = Path(source).expanduser()
    if looks_like_path(source) and not path.exists():
        return [(key, f"SFT data file not found: {path} (relative paths start at {Path.cwd()})")]
    if path.is_file() and path.suffix not in LOCAL_DATA_SUFFIXES:
        return [(key, f"unsupported data file type {path.suffix!r}; use one of {', '.join(LOCAL_DATA_SUFFIXES)}")]
    if not path.is_file():
        return []  # a hub dataset: checked when it loads
    problem = data_file_problem(path, ["messages"])
    if problem and "field" in problem:
        pairs = data_file_problem(path, ["prompt", "completion"])
        if pairs is None:
            return []
        has = pairs.partition("(it has:")[2].rstrip(")").strip()
        problem = f"{path} has no `messages` column and no `prompt` and `completion` columns (it has: {has})"
    return [(key, problem)] if problem else []


def adapter_problems(model: ModelSection, lora: LoraSection | None) -> list[tuple[KeyPath, str]]:
    """`lora.adapter`, when it is a folder on this machine, must be a LoRA adapter for this model and LoRA shape (a
    hub id is checked once it is downloaded)."""
    adapter = lora.adapter if lora is not None else None
    if not adapter:
        return []
    path = Path(adapter).expanduser()
    if not path.exists():
        if looks_like_path(adapter):
            return [(("lora", "adapter"), f"no such adapter folder: {path} (relative paths start at {Path.cwd()})")]
        return []
    problem = adapter_mismatch(path, model.name, lora)
    return [(("lora", "adapter"), problem)] if problem else []


def adapter_mismatch(folder: Path, model_name: str, lora: LoraSection) -> str | None:
    """Why the PEFT adapter in `folder` cannot start a run of `model_name` with `lora` (another model, another LoRA
    shape), or None."""
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except OSError:
        return f"{folder} holds no {ADAPTER_CONFIG}, so it is not a PEFT adapter folder"
    except ValueError:
        return f"{folder / ADAPTER_CONFIG} is not valid JSON"
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        kind = config.get("peft_type") if isinstance(config, dict) else None
        return f"{folder} holds a {kind or 'non-LoRA'} adapter; grpo trains LoRA adapters"
    recorded = config.get("base_model_name_or_path")
    if not same_model(recorded, model_name):
        return (
            f"{folder} was trained on `{recorded}`, not on model.name `{model_name}`: an adapter only fits "
            "the model it was trained on; set model.name to its base model"
        )
    for key, theirs, ours in (("r", config.get("r"), lora.r), ("alpha", config.get("lora_alpha"), lora.alpha)):
        if theirs is not None and theirs != ours:
            return f"{folder} was trained with lora.{key}={theirs}, the recipe says {ours}; set lora.{key}={theirs}"
    targets = config.get("target_modules")
    if lora.target_modules != ["all-linear"] and isinstance(targets, (list, str)):
        # PEFT records a module's full path where it resolved `all-linear`; the recipe names the last part
        theirs = sorted({t.rsplit(".", 1)[-1] for t in ([targets] if isinstance(targets, str) else targets)})
        if theirs != sorted(lora.target_modules):
            return (
                f"{folder} adapts {', '.join(theirs)}, not the recipe's lora.target_modules "
                f"{', '.join(lora.target_modules)}; set lora.target_modules=[{','.join(theirs)}]"
            )
    return None


def same_model(recorded: str | None, name: str) -> bool:
    """Whether the base an adapter recorded is the recipe's model: the same name or folder, the cached plain copy of
    the same .gguf file, or the same model under another folder or hub organisation. Unknown (nothing recorded):
    yes, and the weights' shapes decide when they load."""
    if not recorded:
        return True
    try:
        location = model_location(name)
    except UserError:  # a pkg: model whose package is missing: the model check says so
        return True
    here = _resolved(recorded)  # None where no such folder exists here: then only the names can agree
    if recorded in (name, location) or (here is not None and here in (_resolved(name), _resolved(location))):
        return True
    theirs, ours = _stem(recorded), _stem(location)
    # grpo_cli/gguf.py caches a .gguf file's plain copy as <stem>-<size>-<mtime>
    return theirs == ours or theirs == _stem(name) or (location.endswith(".gguf") and theirs.startswith(ours + "-"))


def _resolved(name: str) -> str | None:
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else None


def _stem(name: str) -> str:
    return Path(name.rstrip("/")).name.removesuffix(".gguf").lower()

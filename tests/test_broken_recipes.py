"""Every broken recipe in tests/assets/broken fails with `file:LINE: key.path: message`, exit 2, no traceback.

Each file's first line says what to expect: `# expect: LINE key.path` (LINE may be `command line` for
overrides, given on a second line as `# args: key=value`).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app

BROKEN = sorted((Path(__file__).parent / "assets" / "broken").glob("*.yaml"))
FILES = Path(__file__).parent / "assets" / "files"


def expectation(path: Path) -> tuple[str, str, list[str]]:
    lines = path.read_text().splitlines()
    match = re.match(r"# expect: (command line|\d+) ?(\S*)$", lines[0])
    assert match, f"{path.name}: first line must be '# expect: LINE key.path'"
    args = lines[1].removeprefix("# args: ").split() if lines[1].startswith("# args:") else []
    return match.group(1), match.group(2), args


def test_corpus_is_large_enough():
    assert len(BROKEN) >= 30


@pytest.mark.parametrize("recipe", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_recipe_is_reported_precisely(recipe: Path, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # relative paths in the corpus must not accidentally exist
    shutil.copytree(FILES, tmp_path / "files")  # ... except the broken data and reward files under files/
    where, key_path, args = expectation(recipe)
    result = CliRunner().invoke(app, ["validate", str(recipe), *args])
    output = result.output
    assert result.exit_code == 2, output
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    location = "command line" if where == "command line" else f"{recipe}:{where}"
    expected = f"{location}: {key_path}: " if key_path else f"{location}: "
    assert expected in output, f"expected {expected!r} in:\n{output}"

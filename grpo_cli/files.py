"""Where the tool reads and writes files: never over a user's file without --force, one clear line when a path
cannot be written, and JSON Lines read the way a killed process leaves them (a cut last line, stray lines)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError


def cache_root() -> Path:
    """The tool's own cache (converted .gguf models, tokenizer classes, prompt lengths): GRPO_CACHE, else
    ~/.cache/grpo. Nothing a user wrote lives there."""
    return Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo"))


def check_writable_file(path: Path, force: bool = False, flag: str = "--force") -> None:
    """`path` can be written as a new file (or replaced with `force`): its folder exists and is writable, it is not
    a directory. Checked before any slow work, so a mistake costs nothing."""
    if path.is_dir():
        raise UserError(f"{path} is a directory; give a file name")
    if path.exists() and not force:
        raise UserError(f"{path} already exists; pass {flag} to overwrite it or choose another name")
    check_writable_dir(path.parent, create=False)


def check_writable_dir(directory: Path, create: bool = True) -> None:
    """`directory` exists as a writable folder, or (with `create`) can be made: every existing ancestor is a
    folder we may write into."""
    name_max = _name_max(directory)
    too_long = [part for part in directory.parts if len(os.fsencode(part)) > name_max]
    if too_long:
        raise UserError(
            f"{too_long[0][:40]}...({len(os.fsencode(too_long[0]))} bytes) is longer than the file system allows for "
            f"a name ({name_max} bytes); choose a shorter name"
        )
    existing = directory
    while not existing.exists() and existing != existing.parent:
        if not create:
            raise UserError(f"folder {directory} does not exist; create it first or choose another path")
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{existing} is a file, so {directory} cannot be a folder; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into {existing} (permission denied); choose another path")


@contextmanager
def sole_writer(directory: Path, command: str) -> Iterator[None]:
    """While the block runs, this process is the only grpo process writing `directory`: a second one (two
    evaluations appending to one predictions file, two runs saving one checkpoint) is refused before it writes. The
    lock is the kernel's (flock on the folder itself): it ends with the process however the process ends, so a
    killed run leaves no stale lock and no lock file. Folders made here and left empty are removed again."""
    import fcntl

    try:
        check_writable_dir(directory)  # names the file system allows, ancestors we may write into: nothing made yet
        made = next((p for p in [*reversed(directory.parents), directory] if not p.exists()), None)
        directory.mkdir(parents=True, exist_ok=True)
        handle = os.open(directory, os.O_RDONLY)
    except (OSError, UserError):  # not a folder that can be made or opened: the command's own checks refuse it
        handle = None
    if handle is None:
        yield
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{directory} is being written by another grpo process right now; wait for it to end, or give "
                f"{command} another output folder"
            ) from None
        except OSError:  # a file system without locks (some network mounts): the command runs unguarded, as before
            pass
        yield
    finally:
        os.close(handle)
        for folder in [directory, *directory.parents] if made else []:
            if not folder.is_dir() or any(folder.iterdir()):
                break
            folder.rmdir()
            if folder == made:
                break


def _name_max(directory: Path) -> int:
    """The longest file name the file system holding `directory` allows (255 bytes on Linux and macOS file
    systems)."""
    for folder in directory.parents:
        try:
            if folder.is_dir():
                return os.pathconf(folder, "PC_NAME_MAX")
        except (OSError, ValueError, AttributeError):  # a name too long on the way, no pathconf (Windows), no answer
            continue
    return 255


# A line of a JSON Lines data file longer than this is refused before it is read whole: 4 MiB of text is about a
# million tokens, past the context of any model trained here, while one such line parsed and tokenized costs
# gigabytes.
MAX_LINE_BYTES = 4 * 2**20


def long_line(path: Path, first: int | None = None, limit: int = MAX_LINE_BYTES) -> str | None:
    """Why a line of `path` (of its `first` lines) is too long to read, or None. Read in chunks no longer than
    `limit`, so memory stays bounded whatever the file holds, and a file of short lines is scanned at disk speed."""
    number, run = 1, 0  # the line being read, and its bytes so far
    with open(path, "rb") as handle:
        while first is None or number <= first:
            chunk = handle.read(min(limit, 2**20))
            if not chunk:
                break
            end = chunk.find(b"\n")
            # a line wholly inside one chunk is no longer than the chunk: only the one that spans chunks can be
            if run + (len(chunk) if end < 0 else end) > limit:
                return (
                    f"line {number} of {path} is longer than {limit // 2**20} MiB: no model reads a prompt that "
                    "long; split or remove that row"
                )
            if end >= 0:
                number += chunk.count(b"\n")
                run = len(chunk) - chunk.rfind(b"\n") - 1
            else:
                run += len(chunk)
    return None


@dataclass
class JsonLines:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # 1-based line numbers that were not JSON objects


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> JsonLines:
    """Every JSON object line holding the `required` keys; the numbers of the other lines (a line cut by a kill,
    a stray line) are reported, never raised."""
    out = JsonLines()
    if not path.exists():
        return out
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict) and all(key in row for key in required):
            out.rows.append(row)
        else:
            out.skipped.append(number)
    return out

"""One evaluation's output directory: settings.json, then predictions.jsonl appended a batch at a time.

It only ever writes into a directory that is new, empty, or its own (settings.json and well-formed records): a user's
own files are never truncated or overwritten. A last line cut short by a kill is the one thing it repairs.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.runs.layout import PREDICTIONS_FILE, SETTINGS_FILE, SUMMARY_FILE

OWN_FILES = {PREDICTIONS_FILE, SUMMARY_FILE, SETTINGS_FILE}


def refuse_foreign(directory: Path, own: set[str], what: str, own_pattern: re.Pattern | None = None) -> None:
    """Refuse a directory that holds anything `grpo eval` would not have written there: names other than `own`
    (and than those `own_pattern` matches)."""
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{directory} is a file, not a directory; choose another --output")
    names = [p.name for p in directory.iterdir()] if directory.is_dir() else []
    foreign = sorted(n for n in names if n not in own and not (own_pattern and own_pattern.fullmatch(n)))
    if foreign:
        raise UserError(
            f"{directory} holds files {what} did not write ({', '.join(foreign[:3])}); nothing was "
            "changed: choose another --output (an empty or new directory)"
        )


class PredictionStore:
    """predictions.jsonl + settings.json in one output directory; appends, never rewrites a scored problem."""

    def __init__(self, directory: Path, settings: dict[str, Any], problems: list | None = None):
        """`problems`: the evaluation's problems (eval/problems.py), which the records found must be records of."""
        self.directory = directory
        self.path = directory / PREDICTIONS_FILE
        refuse_foreign(directory, OWN_FILES, "grpo eval")
        settings_file = directory / SETTINGS_FILE
        if directory.is_dir() and any(directory.iterdir()) and not settings_file.is_file():
            raise UserError(
                f"{directory} holds {', '.join(sorted(p.name for p in directory.iterdir()))} but no "
                f"{SETTINGS_FILE}, so it is not an evaluation grpo can continue; choose another --output"
            )
        if settings_file.is_file():
            previous = _read_settings(settings_file)
            changed = [k for k in sorted(set(previous) | set(settings)) if not _same(previous.get(k), settings.get(k))]
            if changed:
                detail = "; ".join(f"{k}: {previous.get(k)!r} there, {settings.get(k)!r} now" for k in changed[:3])
                raise UserError(
                    f"{directory} holds an evaluation with other settings ({detail}); "
                    "choose another --output, or delete that directory to start over"
                )
        _refuse_read_only(directory)
        self.records, self._good_bytes = self._read()
        if problems is not None:
            _refuse_other_problems(self.path, self.records, problems)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if not settings_file.is_file():
                settings_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write to {directory}: {exc.strerror or exc}; choose another --output") from None

    def _read(self) -> tuple[dict[int, dict[str, Any]], int]:
        """Scored problems so far. A last line without its newline (a kill mid-write) is dropped to be redone; any
        other line that is not one of our records means the file is not ours: refuse, change nothing."""
        if not self.path.exists():
            return {}, 0
        raw = self.path.read_bytes()
        records, good_bytes = {}, 0
        for number, line in enumerate(raw.splitlines(keepends=True), start=1):
            if not line.endswith(b"\n"):
                break
            record = _record(line)
            if record is None:
                raise UserError(
                    f"line {number} of {self.path} is not a grpo eval record; the file was left as it "
                    "is: choose another --output"
                )
            records[record["index"]] = record
            good_bytes += len(line)
        return records, good_bytes

    def add(self, batch: list[dict[str, Any]]) -> None:
        if self.path.exists() and self.path.stat().st_size != self._good_bytes:
            with open(self.path, "r+b") as handle:  # the cut last line of a killed run, read above
                handle.truncate(self._good_bytes)
        with open(self.path, "a", encoding="utf-8") as handle:
            for record in batch:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())  # a batch is minutes of CPU work: make it survive a power cut too
        self._good_bytes = self.path.stat().st_size
        for record in batch:
            self.records[record["index"]] = record


def previous_session(directory: Path) -> dict | None:
    """The `session` of the summary.json an earlier run left in `directory` (its generation's timing), if any."""
    try:
        return json.loads((directory / SUMMARY_FILE).read_text(encoding="utf-8")).get("session")
    except (OSError, ValueError, AttributeError):
        return None


def _refuse_other_problems(path: Path, records: dict[int, dict[str, Any]], problems: list) -> None:
    """A record is resumed by its index only when it holds that problem's question and gold answer: after the data
    file was replaced at the same path, or in a folder of another file's evaluation, the records found belong to
    other problems and none of them may be counted as these."""
    by_index = {p.index: p for p in problems}
    other = [
        index
        for index, record in sorted(records.items())
        if index in by_index
        and (record.get("question"), record.get("gold")) != (by_index[index].question, by_index[index].gold)
    ]
    if other:
        raise UserError(
            f"{len(other)} of the {len(records)} records in {path} are of other problems than the data now holds at "
            f"their place (the first: problem {other[0]}): the data changed after they were scored, or the folder "
            f"is another file's evaluation; nothing was counted or changed: choose another --output, or delete "
            f"{path.parent} to start again"
        )


def _refuse_read_only(directory: Path) -> None:
    """Every run writes here (new records, summary.json), a finished one included: a folder or file that cannot be
    written is refused before any model loads, not met as a traceback at the end."""
    for path in [directory, *(directory / name for name in sorted(OWN_FILES))]:
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(
                f"{path} is read-only and grpo eval writes its results there; make it writable (chmod -R u+w "
                f"{directory}) or choose another --output; nothing was changed"
            )


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("index"), int) or "correct" not in record:
        return None
    return record if _well_formed(record) else None


def _well_formed(record: dict[str, Any]) -> bool:
    """What the summary and the shortcut report read: the reference answer, the completion (or the samples, each
    with one) and a finite verdict per scorer. A hand-edited line without them is not counted as a result."""
    correct, samples = record.get("correct"), record.get("samples")
    if not isinstance(correct, dict) or not all(_finite(v) for v in correct.values()) or "gold" not in record:
        return False
    if samples is None:
        return "completion" in record
    return isinstance(samples, list) and all(isinstance(s, dict) and "completion" in s for s in samples)


def _finite(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) and math.isfinite(value)


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        settings = None
    if not isinstance(settings, dict):
        raise UserError(f"{path} is not a grpo eval settings file; choose another --output")
    return settings


def _same(previous: Any, now: Any) -> bool:
    """Equal settings; a data file or model given by another path to the same file counts as the same."""
    if previous == now:
        return True
    if isinstance(previous, str) and isinstance(now, str) and os.path.exists(previous) and os.path.exists(now):
        return os.path.samefile(previous, now)
    return False

"""Recipe keys renamed since an earlier release, still read under their old name with one notice line until 0.2.0.

`warmup:` named the supervised stage before GRPO while `training.warmup_steps` named the learning-rate warm-up; the
stage is `sft:` now, so `warmup` means one thing."""

from __future__ import annotations

import sys
from typing import Any

from grpo_cli import OLD_NAMES_UNTIL
from grpo_cli.errors import Problem, UserError

RENAMED = {"warmup": "sft"}  # top-level section: old name -> new name


def renamed_overrides(overrides: list[str]) -> list[str]:
    """`warmup.count=8` -> `sft.count=8`: a command line written for the old name sets the new one."""
    out = []
    for item in overrides:
        head, dot, rest = item.partition(".")
        key, eq, value = head.partition("=")
        if key in RENAMED and (dot or eq):
            item = RENAMED[key] + (f".{rest}" if dot else f"={value}")
        out.append(item)
    return out


def move_renamed(data: dict[str, Any], lines: dict, source: str | None, notify: bool = True) -> None:
    """Read each old top-level key as its new name, in `data` and its line numbers, in place; one notice line on
    stderr for each one that sets something (`notify=False`: a run's own saved recipe, which the user did not
    write)."""
    for old, new in RENAMED.items():
        if old not in data:
            continue
        if new in data:
            raise UserError(
                [Problem(f"`{old}:` is the old name of `{new}:` and both are set; keep `{new}:`", old, source=source)]
            )
        data[new] = data.pop(old)
        for path in [p for p in lines if p and p[0] == old]:
            lines[(new, *path[1:])] = lines.pop(path)
        if notify and data[new] is not None:
            where = f"{source}: " if source else ""
            print(
                f"notice: {where}`{old}:` is called `{new}:` now (read as `{new}:` until {OLD_NAMES_UNTIL}); "
                "rename the key",
                file=sys.stderr,
            )

"""The base of every recipe section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Every section rejects unknown keys: a typo must never be silently ignored. `.inf` or `.nan` is never a
    sensible learning rate, weight or temperature."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

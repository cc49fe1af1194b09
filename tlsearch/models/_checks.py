"""Checking the fields of what a study file declares: one error type, naming the field and the fix."""

from __future__ import annotations

from typing import Any

from tlsearch.errors import StudySpecError


def require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise StudySpecError(f"{field_name} {message}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

"""Values read from a store that become parts of local paths: checked against their exact form, and confined.

Someone who can write to the store must not be able to choose which local file is written, renamed or
deleted. So every such value (content hashes, fold-plan hashes) must be 64 lowercase hex digits, and every
path built from one must resolve under its root; otherwise `UnsafeStoreValueError` names the field and
nothing is touched.
"""

from __future__ import annotations

import re
from pathlib import Path

from tlsearch.errors import UnsafeStoreValueError

_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_sha256(value: object, field: str) -> str:
    """`value` when it is a sha256 hex digest (64 lowercase hex digits); else UnsafeStoreValueError naming `field`."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise UnsafeStoreValueError(
            f"refusing {field} {str(value)[:80]!r} read from the store: expected 64 hex digits "
            "(the store was written by something other than tlsearch, or tampered with)"
        )
    return value


def confined(root: Path, *parts: str) -> Path:
    """`root / parts...`, refused with UnsafeStoreValueError when it resolves outside `root`."""
    path = Path(root).joinpath(*parts)
    if not path.resolve().is_relative_to(Path(root).resolve()):
        raise UnsafeStoreValueError(f"refusing path {path}: it leaves {root}")
    return path

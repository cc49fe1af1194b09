"""Every seed tlsearch derives (a trial's sampler, a fold's training, a refit), from one function."""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from any printable parts, the same in every process (unlike hash()): distinct parts give
    distinct seeds, the same parts the same seed on a re-run."""
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF

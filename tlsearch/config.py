"""Where things live: the embedded default folder, the host-local cache and the MongoDB URI.

Precedence everywhere: an explicit argument (a command-line flag), then the environment variable.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

DEFAULT_DATABASE = "tlsearch"


def home(path: str | os.PathLike | None = None) -> Path:
    """The embedded default's folder: `path`, else `$TLSEARCH_HOME`, else `./.tlsearch`."""
    return Path(path or os.environ.get("TLSEARCH_HOME") or ".tlsearch").expanduser().absolute()


def journal_path(root: str | os.PathLike | None = None) -> Path:
    """The Optuna journal file holding every study of the embedded default."""
    return home(root) / "studies.journal"


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """This host's dataset cache: `path`, else `$TLSEARCH_CACHE_DIR`, else the user's cache directory."""
    default = Path(platformdirs.user_cache_dir("tlsearch")) / "datasets"
    return Path(path or os.environ.get("TLSEARCH_CACHE_DIR") or default).expanduser().absolute()


def mongo_uri(uri: str | None = None) -> str | None:
    """The MongoDB URI to use: `uri`, else `$TLSEARCH_MONGO_URI`, else None (the embedded default)."""
    return uri or os.environ.get("TLSEARCH_MONGO_URI") or None

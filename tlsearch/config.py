"""Where things live: the embedded default folder, the host-local cache, the MongoDB URI and the scheduler.

Precedence everywhere: an explicit argument (a command-line flag), then the environment variable
(`TLSEARCH_MONGO_URI`, `TLSEARCH_SCHEDULER`, `TLSEARCH_HOME`, `TLSEARCH_CACHE_DIR`), then the config file
(`$TLSEARCH_CONFIG`, else `./tlsearch.toml`, else `<user config dir>/tlsearch/config.toml`; keys `mongo`,
`scheduler`, `home`, `cache_dir`, and `tls_ca_file`, `tls_cert`, `tls_key` for Dask TLS), then the default.
"""

from __future__ import annotations

import functools
import json
import os
import time
import tomllib
from pathlib import Path

import platformdirs

from tlsearch.errors import TLSearchError

DEFAULT_DATABASE = "tlsearch"


def home(path: str | os.PathLike | None = None) -> Path:
    """The embedded default's folder (default `./.tlsearch`)."""
    return Path(_setting(path, "TLSEARCH_HOME", "home") or ".tlsearch").expanduser().absolute()


def journal_path(root: str | os.PathLike | None = None) -> Path:
    """The Optuna journal file holding every study of the embedded default."""
    return home(root) / "studies.journal"


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """This host's dataset cache (default: the user's cache directory)."""
    default = Path(platformdirs.user_cache_dir("tlsearch")) / "datasets"
    return Path(_setting(path, "TLSEARCH_CACHE_DIR", "cache_dir") or default).expanduser().absolute()


def mongo_uri(uri: str | None = None) -> str | None:
    """The MongoDB URI to use, or None for the embedded default."""
    return _setting(uri, "TLSEARCH_MONGO_URI", "mongo")


def scheduler(address: str | None = None, scheduler_file: str | os.PathLike | None = None) -> str | None:
    """The Dask scheduler to use, or None for a local cluster: `address`, else the address in
    `scheduler_file` (as `dask scheduler --scheduler-file` writes it), else the environment and config file."""
    if scheduler_file:
        return scheduler_address(scheduler_file)
    return _setting(address, "TLSEARCH_SCHEDULER", "scheduler")


def scheduler_address(path: str | os.PathLike, wait: float = 60.0) -> str:
    """The scheduler address in a Dask scheduler file, waiting up to `wait` seconds for the file to appear
    (in a batch system the scheduler's job may start after the workers')."""
    path = Path(path).expanduser()
    deadline = time.monotonic() + wait
    while not path.is_file():
        if time.monotonic() >= deadline:
            raise TLSearchError(
                f"no scheduler file at {path} after {wait:g} s: start the scheduler with "
                f"`dask scheduler --scheduler-file {path}`, or check the path"
            )
        time.sleep(0.5)
    try:
        address = json.loads(path.read_text()).get("address")
    except (ValueError, AttributeError, OSError) as error:
        raise TLSearchError(f"cannot read scheduler file {path}: {error}") from None
    if not isinstance(address, str) or "://" not in address:
        raise TLSearchError(f"scheduler file {path} names no scheduler address (its 'address' is {address!r})")
    return address


def tls_files(ca_file: str | None = None, cert: str | None = None, key: str | None = None) -> tuple:
    """The Dask TLS files (CA, certificate, key): arguments, else `$TLSEARCH_TLS_CA_FILE` / `_CERT` / `_KEY`,
    else the config file's `tls_ca_file`, `tls_cert`, `tls_key`; None where none is given."""
    return (
        _setting(ca_file, "TLSEARCH_TLS_CA_FILE", "tls_ca_file"),
        _setting(cert, "TLSEARCH_TLS_CERT", "tls_cert"),
        _setting(key, "TLSEARCH_TLS_KEY", "tls_key"),
    )


def _setting(explicit, env: str, key: str):
    if explicit:
        return explicit
    return os.environ.get(env) or _file_settings().get(key) or None


@functools.cache
def _file_settings() -> dict:
    candidates = [
        os.environ.get("TLSEARCH_CONFIG"),
        "tlsearch.toml",
        Path(platformdirs.user_config_dir("tlsearch")) / "config.toml",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            try:
                return tomllib.loads(Path(candidate).read_text())
            except (tomllib.TOMLDecodeError, OSError) as error:
                raise TLSearchError(f"cannot read config file {candidate}: {error}") from None
    return {}

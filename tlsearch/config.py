"""Where things live: `Settings`, resolved once from every layer of configuration.

Each setting comes from, in increasing precedence: its default, the config file (TOML: `$TLSEARCH_CONFIG`, else
`./tlsearch.toml`, else `<user config dir>/tlsearch/config.toml`), the environment, and an explicit value (a
command-line option, or a keyword of `tlsearch.run`):

| setting          | config file key  | environment                | default                            |
|------------------|------------------|----------------------------|------------------------------------|
| `mongo`          | `mongo`          | `TLSEARCH_MONGO_URI`       | none: the embedded default         |
| `database`       | `database`       | `TLSEARCH_DATABASE`        | `tlsearch`                         |
| `home`           | `home`           | `TLSEARCH_HOME`            | `./.tlsearch`                      |
| `cache_dir`      | `cache_dir`      | `TLSEARCH_CACHE_DIR`       | the user cache directory           |
| `scheduler`      | `scheduler`      | `TLSEARCH_SCHEDULER`       | none: a local cluster              |
| `scheduler_file` | `scheduler_file` | `TLSEARCH_SCHEDULER_FILE`  | none                               |
| `tls_ca_file`, `tls_cert`, `tls_key` | same | `TLSEARCH_TLS_CA_FILE`, `_CERT`, `_KEY` | none: plain TCP      |

`scheduler` and `scheduler_file` are one choice: the highest layer giving either wins.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import platformdirs

from tlsearch.errors import TLSearchError

DEFAULT_DATABASE = "tlsearch"
ENVIRONMENT = {
    "mongo": "TLSEARCH_MONGO_URI",
    "database": "TLSEARCH_DATABASE",
    "home": "TLSEARCH_HOME",
    "cache_dir": "TLSEARCH_CACHE_DIR",
    "scheduler": "TLSEARCH_SCHEDULER",
    "scheduler_file": "TLSEARCH_SCHEDULER_FILE",
    "tls_ca_file": "TLSEARCH_TLS_CA_FILE",
    "tls_cert": "TLSEARCH_TLS_CERT",
    "tls_key": "TLSEARCH_TLS_KEY",
}
_SCHEDULER_CHOICE = ("scheduler", "scheduler_file")
_MONGO_URI = re.compile(r"mongodb(\+srv)?://\S+")
_BAD_DATABASE = re.compile(r'[/\\. "$\x00]')


def _default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("tlsearch")) / "datasets"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where things live: the study and dataset stores (`mongo` and `database`, else the embedded default under
    `home`), this host's dataset cache, the Dask scheduler and its TLS files. Each comes from its default, the
    config file, the environment, then an explicit value, the last given winning (the table of keys and
    variables: docs/guides/configuration.md#settings).

    Build it with `Settings.resolve(...)`; the constructor takes the values as they are."""

    mongo: str | None = None
    database: str | None = None  # None: the database the URI names, else DEFAULT_DATABASE
    home: Path = dataclasses.field(default_factory=lambda: Path(".tlsearch").absolute())
    cache_dir: Path = dataclasses.field(default_factory=_default_cache_dir)
    scheduler: str | None = None
    scheduler_file: Path | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def resolve(cls, *, source: Callable[[str], str] | None = None, **explicit: Any) -> Settings:
        """The settings of every layer, `explicit` values (None: not given) over the environment over the config
        file over the defaults. `source(name)` says where an explicit value came from (default: the keyword).

        Raises TLSearchError naming the layer, the setting, the value and the fix for a bad value anywhere,
        and TypeError for an unknown setting."""
        unknown = sorted(set(explicit) - set(ENVIRONMENT))
        if unknown:
            raise TypeError(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(ENVIRONMENT)}")
        values: dict[str, Any] = {}
        for where, given in (*_file_layer(), _environment_layer(), (source or _keyword, explicit)):
            given = {name: value for name, value in given.items() if value is not None and value != ""}
            if any(name in given for name in _SCHEDULER_CHOICE):
                for name in _SCHEDULER_CHOICE:
                    values.pop(name, None)
            values.update({name: _checked(name, value, where(name)) for name, value in given.items()})
        return cls(**values)

    @property
    def journal_path(self) -> Path:
        """The Optuna journal file holding every study of the embedded default."""
        return journal_path(self.home)

    def scheduler_address(self) -> str | None:
        """The Dask scheduler to use, or None for a local cluster: `scheduler`, or the address in
        `scheduler_file` (waiting for the file: see `scheduler_address`)."""
        return scheduler_address(self.scheduler_file) if self.scheduler_file else self.scheduler

    def tls_files(self) -> tuple[str | None, str | None, str | None]:
        """The Dask TLS files: (CA, certificate, key), None where not given."""
        return self.tls_ca_file, self.tls_cert, self.tls_key


def journal_path(home: Path) -> Path:
    """The Optuna journal file of the embedded default under `home`."""
    return Path(home) / "studies.journal"


def _keyword(name: str) -> str:
    return f"argument {name}="


def _environment_layer() -> tuple[Callable[[str], str], dict[str, str]]:
    given = {name: os.environ.get(variable) for name, variable in ENVIRONMENT.items()}
    return (lambda name: f"environment variable {ENVIRONMENT[name]}"), given


def _file_layer() -> list[tuple[Callable[[str], str], dict[str, Any]]]:
    """The config file's layer ([] without one): the first file found of `$TLSEARCH_CONFIG`, ./tlsearch.toml
    and the user's config directory."""
    candidates = [
        os.environ.get("TLSEARCH_CONFIG"),
        "tlsearch.toml",
        Path(platformdirs.user_config_dir("tlsearch")) / "config.toml",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            try:
                given = tomllib.loads(Path(candidate).read_text())
            except (tomllib.TOMLDecodeError, OSError) as error:
                raise TLSearchError(f"cannot read config file {candidate}: {error}") from None
            unknown = sorted(set(given) - set(ENVIRONMENT))
            if unknown:
                raise TLSearchError(
                    f"config file {candidate}: unknown key(s) {', '.join(unknown)}; "
                    f"the keys are {', '.join(ENVIRONMENT)}"
                )
            return [(lambda name, path=candidate: f"config file {path} (key {name})", given)]
    return []


def _checked(name: str, value: Any, where: str) -> Any:
    """`value` as the setting `name` holds it; TLSearchError naming `where` it came from if it is not valid."""
    if isinstance(value, os.PathLike) and name not in ("mongo", "database", "scheduler"):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TLSearchError(f"{where}: {name} must be a string, not {value!r}")
    problem = _PROBLEMS.get(name, lambda _: None)(value)
    if problem:
        from tlsearch.mongo import mask_uri  # pymongo only when a URI is shown

        shown = mask_uri(value) if name == "mongo" else value
        raise TLSearchError(f"{where}: {name} {shown!r} {problem}")
    if name in ("home", "cache_dir", "scheduler_file"):
        return Path(value).expanduser().absolute()
    return value


_PROBLEMS: Mapping[str, Callable[[str], str | None]] = {
    "mongo": lambda uri: (
        None if _MONGO_URI.fullmatch(uri) else "is not a MongoDB URI: write mongodb://HOST[:PORT] or mongodb+srv://HOST"
    ),
    "database": lambda name: (
        None
        if len(name) <= 63 and not _BAD_DATABASE.search(name)
        else 'is not a MongoDB database name: at most 63 characters, none of / \\ . space " $'
    ),
    "scheduler": lambda address: (
        None
        if address.strip() == address
        else "has spaces around it: write the address alone, e.g. tcp://10.0.0.5:8786"
    ),
}


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


# A URI's hosts (group 1: host:port,...; never the user-info) and the database it names (group 2: the path after
# the hosts, pymongo's "default database", before any options).
_URI_PARTS = re.compile(r"^mongodb(?:\+srv)?://(?:[^@]*@)?([^/?#]*)(?:/([^?#]*))?")


def uri_servers(uri: str) -> str | None:
    """The servers a MongoDB URI names ("host:port,..."), without its user-info; None for what is no such URI."""
    match = _URI_PARTS.match(uri)
    return match.group(1) if match else None


def database_name(uri_or_client: object, database: str | None) -> str:
    """The database a store opens: `database` when given, else the one the URI names
    (``mongodb://host/mydb``: "mydb", as pymongo's `get_default_database`), else "tlsearch".

    Raises TLSearchError when `database` and the URI name different databases."""
    named = None
    if isinstance(uri_or_client, str):
        match = _URI_PARTS.match(uri_or_client)
        named = urllib.parse.unquote(match.group(2)) if match and match.group(2) else None
    if database is not None and named is not None and database != named:
        raise TLSearchError(
            f"the MongoDB URI names database {named!r} but database {database!r} was given: "
            "give one of them, or the same name in both"
        )
    return database or named or DEFAULT_DATABASE

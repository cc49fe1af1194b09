"""What a stored dataset is: `DatasetInfo`, dataset references ("NAME" or "NAME@VERSION") and array names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from tlsearch.data._paths import check_sha256
from tlsearch.errors import DatasetValidationError

# Array names a dataset may hold: features, labels, and the optional per-row groups and sample weights.
FEATURES, LABELS, GROUPS, SAMPLE_WEIGHT = "X", "y", "groups", "sample_weight"
ARRAY_NAMES = (FEATURES, LABELS, GROUPS, SAMPLE_WEIGHT)
REQUIRED_ARRAYS = (FEATURES, LABELS)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: str) -> str:
    """A dataset name: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 100 long."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DatasetValidationError(
            f"invalid dataset name {name!r}: use letters, digits, '.', '_' and '-' (at most 100), "
            "starting with a letter or digit"
        )
    return name


def parse_ref(ref: str) -> tuple[str, int | None]:
    """ "NAME" → (NAME, None) meaning the latest version; "NAME@VERSION" → (NAME, VERSION)."""
    if not isinstance(ref, str):
        raise DatasetValidationError(f"a dataset reference is a string like 'digits' or 'digits@2', not {ref!r}")
    name, at, version = ref.partition("@")
    check_name(name)
    if not at:
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise DatasetValidationError(f"invalid dataset reference {ref!r}: the version after '@' is a number >= 1")
    return name, int(version)


@dataclass(frozen=True)
class DatasetInfo:
    """One stored version of a dataset.

    `hash` is the sha256 content hash over each array's name, dtype, shape and bytes (see `_hashing`);
    `arrays` maps each array name to {"dtype": numpy dtype string like "<f4", "shape": [..]};
    `size_bytes` is the arrays' total data size.
    """

    name: str
    version: int
    hash: str
    arrays: dict[str, dict]
    metadata: dict = field(default_factory=dict)
    created: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    size_bytes: int = 0

    @property
    def ref(self) -> str:
        """The exact reference of this version, "NAME@VERSION"."""
        return f"{self.name}@{self.version}"

    @property
    def n_rows(self) -> int:
        return int(self.arrays[FEATURES]["shape"][0])

    def dtype(self, array: str) -> np.dtype:
        return np.dtype(self.arrays[array]["dtype"])

    def shape(self, array: str) -> tuple[int, ...]:
        return tuple(int(n) for n in self.arrays[array]["shape"])

    def __repr__(self) -> str:
        arrays = ", ".join(f"{k}={np.dtype(v['dtype']).name}{tuple(v['shape'])}" for k, v in self.arrays.items())
        return f"DatasetInfo({self.ref} sha256:{self.hash[:12]} {arrays})"

    def to_document(self) -> dict:
        """A plain document (no numpy types); `created` stays a datetime."""
        return {
            "name": self.name,
            "version": self.version,
            "hash": self.hash,
            "arrays": {k: {"dtype": v["dtype"], "shape": [int(n) for n in v["shape"]]} for k, v in self.arrays.items()},
            "metadata": self.metadata,
            "created": self.created,
            "size_bytes": self.size_bytes,
        }

    @classmethod
    def of(
        cls, name: str, version: int, content_hash: str, arrays: dict[str, np.ndarray], metadata: dict
    ) -> DatasetInfo:
        """A new version of dataset `name` holding `arrays` (their content hash given), created now."""
        return cls(
            name,
            version,
            content_hash,
            {array: {"dtype": a.dtype.str, "shape": [int(n) for n in a.shape]} for array, a in arrays.items()},
            metadata,
            datetime.now(timezone.utc),
            sum(a.nbytes for a in arrays.values()),
        )

    @classmethod
    def from_document(cls, doc: dict) -> DatasetInfo:
        created = doc["created"]
        if isinstance(created, str):
            created = datetime.fromisoformat(created)
        created = created.replace(tzinfo=timezone.utc) if created.tzinfo is None else created.astimezone(timezone.utc)
        unknown = sorted(set(doc["arrays"]) - set(ARRAY_NAMES), key=str)
        if unknown:  # array names become cache file names
            raise DatasetValidationError(
                f"refusing stored dataset {doc.get('name')!r}: unknown array name(s) "
                f"{', '.join(map(repr, unknown))} (the store was tampered with?)"
            )
        return cls(
            name=check_name(doc["name"]),
            version=int(doc["version"]),
            hash=check_sha256(doc["hash"], "dataset content hash"),
            arrays={k: {"dtype": v["dtype"], "shape": [int(n) for n in v["shape"]]} for k, v in doc["arrays"].items()},
            metadata=dict(doc.get("metadata") or {}),
            created=created,
            size_bytes=int(doc["size_bytes"]),
        )

"""The dataset store interface, shared by the MongoDB (GridFS) and local-directory backends.

A store holds named, versioned datasets. Content is addressed by its hash, so pushing content that is
already stored (under any name) transfers nothing, and two names can share one stored copy. A version
becomes visible only once all its bytes are stored; deleting the last version that uses some content
removes that content's bytes and fold plans too.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from tlsearch.data._hashing import ContentHasher, hash_arrays
from tlsearch.data._info import DatasetInfo, check_name
from tlsearch.data._npy import NpyHashingSink, npy_size
from tlsearch.data._validation import prepare_arrays, prepare_metadata
from tlsearch.errors import DatasetCorruptedError, DatasetExistsError, DatasetNotFoundError

if TYPE_CHECKING:
    from tlsearch.data._folds import FoldPlan

Progress = Callable[[int], object]
"""Told the number of bytes moved after each piece of a transfer (e.g. a tqdm bar's `update`)."""


@dataclass
class TransferStats:
    """Bytes this store object moved: sent to the store (pushes, fold plans) and received from it."""

    bytes_sent: int = 0
    bytes_received: int = 0
    arrays_sent: int = 0


class DatasetStore(abc.ABC):
    """Named, versioned, content-hashed datasets.

    Refs: "NAME" is the latest version, "NAME@VERSION" a given one. Arrays are "X" (features), "y" (labels)
    and optionally "groups" and "sample_weight"; they travel as .npy without pickle.
    """

    block_bytes: int | None = None
    """Bytes of rows a push hashes and writes at a time (None: a push chunk, `row_blocks`' default)."""

    def __init__(self) -> None:
        self.stats = TransferStats()

    # -- writing ---------------------------------------------------------------------------------------
    def push(
        self,
        name: str | None,
        arrays: Mapping[str, np.ndarray],
        *,
        metadata: dict | None = None,
        new_version: bool = False,
        allow_missing: bool = False,
        progress: Progress | None = None,
    ) -> DatasetInfo:
        """Store `arrays` as dataset `name` and return its info.

        Content identical to the latest version returns that version (nothing is transferred); content
        already stored under another name or version is not transferred again. Different content under an
        existing name raises DatasetExistsError unless `new_version`, which adds version latest+1.
        Name None names the dataset after its arrays and metadata (`content_name`): pushing the same again
        returns the same version. NaN features are refused unless `allow_missing` (kept in the metadata, so
        a copy of the dataset is accepted too). Invalid arrays or metadata raise DatasetValidationError
        before anything is written.
        """
        if name is not None:
            check_name(name)
        document = prepare_metadata(metadata)
        if allow_missing:
            document["allow_missing"] = True
        prepared = prepare_arrays(
            arrays, allow_missing=bool(document.get("allow_missing")), feature_names=document.get("feature_names")
        )
        content_hash = hash_arrays(prepared, self.block_bytes)
        if name is None:
            name = content_name(content_hash, document)
        return self._push(name, prepared, content_hash, document, new_version, progress)

    @abc.abstractmethod
    def _push(
        self,
        name: str,
        arrays: dict[str, np.ndarray],
        content_hash: str,
        metadata: dict,
        new_version: bool,
        progress: Progress | None,
    ) -> DatasetInfo:
        """Store validated arrays; settle races on the name and the content atomically."""

    @abc.abstractmethod
    def delete(self, ref: str, *, all_versions: bool = False) -> list[DatasetInfo]:
        """Delete one version ("NAME" = latest, "NAME@VERSION"), or every version of NAME; returns what went.

        Content no other version uses is removed with its chunks and fold plans.
        """

    # -- reading ---------------------------------------------------------------------------------------
    @abc.abstractmethod
    def info(self, ref: str) -> DatasetInfo:
        """The info of `ref`; DatasetNotFoundError when there is no such dataset or version."""

    @abc.abstractmethod
    def list(self) -> list[DatasetInfo]:
        """Every stored version, by name then version."""

    def versions(self, name: str) -> list[DatasetInfo]:
        """Every stored version of `name`, oldest first."""
        check_name(name)
        return [info for info in self.list() if info.name == name]

    @abc.abstractmethod
    def read_array(self, info: DatasetInfo, array: str, sink: BinaryIO, progress: Progress | None = None) -> int:
        """Write the .npy bytes of one array of `info` to `sink` (in bounded pieces); returns the byte count."""

    def link_array(self, info: DatasetInfo, array: str, path: Path) -> bool:
        """Make `path` (not existing yet) the store's own file of one array of `info`, sharing its bytes on disk
        (a hard link), when the store keeps its arrays as files on the same file system; False, and nothing
        made, otherwise. The host cache uses it to keep one copy per host; it still hashes what it links."""
        return False

    def verify(self, ref: str, progress: Progress | None = None) -> DatasetInfo:
        """Read every stored byte of `ref` back and check its hash; DatasetCorruptedError when it differs."""
        info = self.info(ref)
        hasher = ContentHasher()
        for name in sorted(info.arrays):
            sink = NpyHashingSink(hasher, name, what=f"stored array {name!r} of {info.ref}")
            self.read_array(info, name, sink, progress)
            sink.close()
        actual = hasher.hexdigest()
        if actual != info.hash:
            raise DatasetCorruptedError(
                f"stored bytes of {info.ref} do not match its hash (sha256 {actual[:12]} instead of "
                f"{info.hash[:12]}): delete it and push it again"
            )
        return info

    # -- fold plans ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def put_fold_plan(self, plan: FoldPlan) -> FoldPlan:
        """Store `plan` next to its dataset's content (idempotent: the same hash is stored once)."""

    @abc.abstractmethod
    def get_fold_plan(self, plan_hash: str) -> FoldPlan:
        """The stored plan with that hash, checked against it; FoldPlanNotFoundError when absent."""

    # -- housekeeping ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def describe(self) -> str:
        """Where the store is, for messages (credentials masked)."""

    def close(self) -> None:
        """Release connections; the store reconnects if used again."""

    def __enter__(self) -> DatasetStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _not_found(self, ref: str) -> DatasetNotFoundError:
        return DatasetNotFoundError(
            f"no dataset {ref!r} in {self.describe()} (`tlsearch dataset ls` lists them; "
            f"`tlsearch dataset push NAME PATH` adds one)"
        )


def content_name(content_hash: str, metadata: dict) -> str:
    """The name of a dataset pushed without one: "data-" and 16 hex digits of a hash over its content and
    metadata, so that two pushes share a name only when they agree on both (e.g. on the class names)."""
    document = json.dumps({"content": content_hash, "metadata": metadata}, sort_keys=True)
    return f"data-{hashlib.sha256(document.encode()).hexdigest()[:16]}"


def version_for_push(name: str, latest: DatasetInfo | None, content_hash: str, new_version: bool) -> DatasetInfo | int:
    """The version a push of `content_hash` creates under `name`, or the existing latest when identical."""
    if latest is None:
        return 1
    if latest.hash == content_hash:
        return latest
    if not new_version:
        raise DatasetExistsError(
            f"dataset {name!r} already holds different content ({latest.ref}, sha256 {latest.hash[:12]}): "
            f"push with --new-version (new_version=True) to add {name}@{latest.version + 1}, or use another name"
        )
    return latest.version + 1


def stored_size(info: DatasetInfo) -> int:
    """Bytes of all of `info`'s .npy files (what a download moves)."""
    return sum(npy_size(info.dtype(name), info.shape(name)) for name in info.arrays)

"""Content hashes: a dataset's identity is sha256 over each array's name, dtype, shape and bytes.

Arrays are fed in name order; each contributes a length-prefixed JSON header {name, dtype, shape}, its
byte count and its C-order bytes, so no two different datasets share a byte stream. The same hasher
runs over in-memory or memory-mapped arrays a block of rows at a time (push, cache re-check) and over a
.npy byte stream (download, store verify), and gives the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import numpy as np

from tlsearch.data._chunks import row_blocks

_DOMAIN = b"tlsearch-dataset-v1\n"


def _header(fields: dict) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def array_bytes(array: np.ndarray) -> memoryview:
    """The C-order bytes of `array` without a copy when it is already C-contiguous."""
    array = np.ascontiguousarray(array)
    return memoryview(array.reshape(-1).view(np.uint8))


class ContentHasher:
    """Incremental dataset hash: `begin(name, dtype, shape)`, then `update(bytes)` until the array is complete."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256(_DOMAIN)
        self._remaining = 0
        self._last_name: str | None = None

    def begin(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        if self._remaining:
            raise ValueError(f"array {self._last_name!r} is incomplete: {self._remaining} bytes missing")
        if self._last_name is not None and name <= self._last_name:
            raise ValueError("arrays must be hashed in name order")
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header = _header({"name": name, "dtype": dtype.str, "shape": list(shape)})
        self._sha.update(len(header).to_bytes(8, "little"))
        self._sha.update(header)
        self._sha.update(nbytes.to_bytes(8, "little"))
        self._remaining = nbytes
        self._last_name = name

    def update(self, data) -> None:
        n = memoryview(data).nbytes
        if n > self._remaining:
            raise ValueError(f"array {self._last_name!r} has more bytes than its dtype and shape allow")
        self._sha.update(data)
        self._remaining -= n

    @property
    def remaining(self) -> int:
        """Bytes the current array still needs."""
        return self._remaining

    def hexdigest(self) -> str:
        if self._remaining:
            raise ValueError(f"array {self._last_name!r} is incomplete: {self._remaining} bytes missing")
        return self._sha.hexdigest()


def hash_arrays(arrays: Mapping[str, np.ndarray], block_bytes: int | None = None) -> str:
    """The content hash of a dataset given as arrays (in memory or memory-mapped, any memory order), read
    `block_bytes` of rows at a time (default: a push chunk, see `row_blocks`)."""
    hasher = ContentHasher()
    for name in sorted(arrays):
        array = arrays[name]
        hasher.begin(name, array.dtype, array.shape)
        for block in row_blocks(array, block_bytes):
            hasher.update(array_bytes(block))
    return hasher.hexdigest()


def hash_fold_plan(dataset_hash: str, splitter: str, n_rows: int, folds: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """A fold plan's identity: its dataset, its splitter's description and every fold's int64 row indices."""
    sha = hashlib.sha256(b"tlsearch-foldplan-v1\n")
    header = _header(
        {
            "dataset": dataset_hash,
            "splitter": splitter,
            "n_rows": int(n_rows),
            "sizes": [[len(train), len(validation)] for train, validation in folds],
        }
    )
    sha.update(len(header).to_bytes(8, "little"))
    sha.update(header)
    for train, validation in folds:
        sha.update(array_bytes(np.asarray(train, dtype="<i8")))
        sha.update(array_bytes(np.asarray(validation, dtype="<i8")))
    return sha.hexdigest()

"""Arrays as .npy byte streams (never pickled): writing them in pieces, and reading a stream while hashing it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from tlsearch.data._chunks import row_blocks
from tlsearch.data._hashing import ContentHasher, array_bytes
from tlsearch.errors import DatasetCorruptedError

PIECE_BYTES = 4 << 20


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy header (magic, version, dict) of a C-order array."""
    fields = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False,
        "shape": tuple(int(n) for n in shape),
    }
    buffer = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buffer, fields)
    except ValueError:  # header over 64 KiB: only very many dimensions get here
        buffer = io.BytesIO()
        np.lib.format.write_array_header_2_0(buffer, fields)
    return buffer.getvalue()


def npy_size(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """Bytes of the .npy file of an array with that dtype and shape."""
    return len(npy_header(dtype, shape)) + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def iter_npy(array: np.ndarray, piece_bytes: int | None = None) -> Iterator[memoryview]:
    """The .npy bytes of `array` (in any memory order, memory-mapped or not): its header, then its C-order data
    in pieces of whole rows, at most `piece_bytes` each (default: CHUNK_BYTES; one row, when a row is longer)."""
    if array.dtype.hasobject:
        raise ValueError("object arrays cannot be written without pickle")
    yield memoryview(npy_header(array.dtype, array.shape))
    for block in row_blocks(array, piece_bytes):
        yield array_bytes(block)


def write_npy(array: np.ndarray, file: BinaryIO, progress=None) -> int:
    """Write `array` as .npy to `file`; returns the byte count. `progress(n)` is told every piece written."""
    written = 0
    for piece in iter_npy(array):
        file.write(piece)
        written += piece.nbytes
        if progress:
            progress(piece.nbytes)
    return written


class NpyHashingSink:
    """A writable sink for one array's .npy bytes: parses the header, feeds the data to a ContentHasher,
    and copies everything to `file` when one is given. `close()` checks that the stream was complete."""

    def __init__(self, hasher: ContentHasher, name: str, file: BinaryIO | None = None, what: str = "") -> None:
        self._hasher, self._name, self._file = hasher, name, file
        self._what = what or f"array {name!r}"
        self._prefix = bytearray()
        self._started = False
        self.dtype: np.dtype | None = None
        self.shape: tuple[int, ...] | None = None

    def write(self, data) -> int:
        view = memoryview(data)
        if self._file is not None:
            self._file.write(view)
        if self._started:
            self._feed(view)
        else:
            self._prefix += view
            self._try_parse_header()
        return view.nbytes

    def _try_parse_header(self) -> None:
        if len(self._prefix) < 10:
            return
        major = self._prefix[6]
        length_bytes = 2 if major == 1 else 4
        if len(self._prefix) < 8 + length_bytes:
            return
        header_length = int.from_bytes(self._prefix[8 : 8 + length_bytes], "little")
        total = 8 + length_bytes + header_length
        if len(self._prefix) < total:
            return
        try:
            stream = io.BytesIO(bytes(self._prefix[:total]))
            version = np.lib.format.read_magic(stream)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran_order, dtype = read(stream, max_header_size=1 << 20)
        except (ValueError, SyntaxError, TypeError) as error:
            raise DatasetCorruptedError(f"{self._what} has a damaged .npy header: {error}") from None
        if fortran_order or dtype.hasobject:
            raise DatasetCorruptedError(f"{self._what} is not a plain C-order numeric .npy")
        self.dtype, self.shape = dtype, tuple(shape)
        self._hasher.begin(self._name, dtype, shape)
        self._started = True
        rest = bytes(self._prefix[total:])
        self._prefix = bytearray()
        if rest:
            self._feed(memoryview(rest))

    def _feed(self, view: memoryview) -> None:
        try:
            self._hasher.update(view)
        except ValueError:
            raise DatasetCorruptedError(f"{self._what} is longer than its .npy header says") from None

    def close(self) -> None:
        if not self._started:
            raise DatasetCorruptedError(f"{self._what} is truncated: its .npy header is incomplete")
        if self._hasher.remaining:
            raise DatasetCorruptedError(f"{self._what} is truncated: {self._hasher.remaining} bytes missing")

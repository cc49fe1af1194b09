"""Reading an array a block of rows at a time, so a push of a memory-mapped file of any size holds about one
block in memory: its checks, its hash and its upload all go through `row_blocks`."""

from __future__ import annotations

import mmap
from collections.abc import Iterator

import numpy as np

CHUNK_BYTES = 16 << 20
"""Bytes of rows a push reads, checks, hashes and writes at a time (read when called, so tests can shrink it)."""


_RELEASE_BYTES = 1 << 20


def row_blocks(array: np.ndarray, block_bytes: int | None = None) -> Iterator[np.ndarray]:
    """`array`'s rows in consecutive C-contiguous blocks of at most `block_bytes` (default CHUNK_BYTES; at least
    one row): views when `array` is C-contiguous, else copies into one buffer that the next block overwrites,
    so a block is valid only until the next is asked for. When `array` maps a file, the pages read are dropped
    from this process as it goes (they stay in the page cache): a copy holds about one block in memory."""
    if array.ndim == 0:
        yield np.ascontiguousarray(array)
        return
    step = max(1, (block_bytes or CHUNK_BYTES) // max(1, array[:1].nbytes))
    mapping = _shared_mapping(array)
    if array.flags.c_contiguous:
        for start in range(0, len(array), step):
            yield array[start : start + step]
            _release(mapping, array[start : start + step])
        return
    buffer = np.empty((min(step, len(array)), *array.shape[1:]), array.dtype)
    # The rows are copied a megabyte of the file at a time, so the file's pages and the copy are not both
    # resident in full.
    part = max(1, _RELEASE_BYTES // max(1, abs(array.strides[0])))
    for start in range(0, len(array), step):
        block = buffer[: min(step, len(array) - start)]
        for offset in range(0, len(block), part):
            rows = array[start + offset : start + min(offset + part, len(block))]
            np.copyto(block[offset : offset + len(rows)], rows)
            _release(mapping, rows)
        yield block


def _release(mapping: mmap.mmap | None, rows: np.ndarray) -> None:
    """Drop the pages of `rows` (a view of `mapping`) from this process; they stay in the page cache."""
    if mapping is None or len(rows) == 0 or rows.strides[0] <= 0:
        return
    base = np.frombuffer(mapping, np.uint8).__array_interface__["data"][0]
    start = rows.__array_interface__["data"][0] - base
    end = start + (len(rows) - 1) * rows.strides[0] + rows[-1:].nbytes
    start -= start % mmap.PAGESIZE
    # Without this, every page read stays mapped and counts as this process's resident memory.
    mapping.madvise(mmap.MADV_DONTNEED, start, min(end, len(mapping)) - start)


def _shared_mapping(array: np.ndarray) -> mmap.mmap | None:
    """The shared file mapping under `array` (np.load(mmap_mode="r"/"r+"), views of it), else None. A
    copy-on-write mapping (mode "c") is left alone: dropping its pages would drop the writes made to them."""
    base = array
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap) and base.mode not in ("r", "r+", "w+"):
            return None
        base = base.base
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        return base
    return None

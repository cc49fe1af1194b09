"""A fold's own random streams, which no other thread can draw from.

Seeding Python's global `random` per fold is not enough in a worker: Dask's event-loop thread draws from that
same stream while a fold trains (dask/sizeof.py samples with random.sample), so the draws the fold makes after
its seed (Keras' default seeds for initializers and dropout) differ from run to run. `seed_thread(seed)` gives
the calling thread a `random.Random` of its own, and Keras draws its default seeds from it
(keras.src.random.seed_generator.make_default_seed reads the module-level name `python_random`, which
`_keep_keras_on_thread_streams` points at a stand-in that picks the calling thread's stream). Threads that
were never seeded here draw from the global stream, as before. The global streams are still seeded as well, so
code that reads them in a plain process behaves as it always did.
"""

from __future__ import annotations

import random
import sys
import threading
from typing import Any

import numpy as np

_streams = threading.local()  # .random: the calling thread's fold stream, once seed_thread ran in it
_install_lock = threading.Lock()


class _ThreadStreams:
    """Stands in for the `random` module where Keras draws its default seeds: the calling thread's fold stream
    when it has one, else the global `random` module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(getattr(_streams, "random", None) or random, name)


def seed_thread(seed: int) -> None:
    """From now on, until the next call in this thread: Keras' default seeds drawn in this thread come from a
    `random.Random(seed)` of this thread's own; Python's and NumPy's global streams are seeded with `seed` too
    (for code that reads them; another thread may draw from those)."""
    _keep_keras_on_thread_streams()
    _streams.random = random.Random(seed)
    random.seed(seed)
    np.random.seed(seed)


def _keep_keras_on_thread_streams() -> None:
    """Point Keras' default-seed draws at `_ThreadStreams`, once Keras is imported (never importing it here)."""
    module = sys.modules.get("keras.src.random.seed_generator")
    if module is None or isinstance(getattr(module, "python_random", None), _ThreadStreams):
        return
    with _install_lock:
        if hasattr(module, "python_random"):  # tests/test_models.py fails loudly if a Keras renames it
            module.python_random = _ThreadStreams()

"""TensorFlow internals tlsearch relies on, each found defensively: when one is not as expected (another
TensorFlow, another Keras backend), the function says so (None, or a no-op) and tlsearch trains as plain Keras
would, only without that optimisation."""

from __future__ import annotations

import contextlib
import functools
import random
import threading
from collections.abc import Iterator
from typing import Any

_kernels_lock = threading.Lock()


def eager_context(keras: Any) -> Any:
    """TensorFlow's eager context (`tensorflow.python.eager.context.context()`), when the backend is TensorFlow
    and the context has the two methods that clear its kernel cache and the `_seed` `tf.random.set_seed`
    sets; else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    try:
        from tensorflow.python.eager import context
    except ImportError:
        return None
    eager = context.context()
    known = all(hasattr(type(eager), name) for name in ("_set_global_seed", "clear_kernel_cache"))
    return eager if known and hasattr(eager, "_seed") else None


@contextlib.contextmanager
def kernels_kept(keras: Any) -> Iterator[None]:
    """Within: TensorFlow's seed is set and Keras' session cleared without clearing TensorFlow's eager kernel
    cache. The context's two methods that clear it are shadowed on the instance for the duration (under a lock:
    workers may run trials in threads)."""
    context = eager_context(keras)
    if context is None:
        yield
        return
    with _kernels_lock:
        context._set_global_seed = functools.partial(_set_seed_keeping_kernels, context)
        context.clear_kernel_cache = _keep_kernels
        try:
            yield
        finally:
            del context._set_global_seed, context.clear_kernel_cache  # the class's own methods again


def forget_kernels(keras: Any) -> None:
    """Clear TensorFlow's eager kernel cache (nothing on another backend)."""
    context = eager_context(keras)
    if context is not None:
        context.clear_kernel_cache()


def _set_seed_keeping_kernels(context: Any, seed: int) -> None:
    context._seed = seed  # what tf.random.set_seed sets, less its kernel-cache clearing
    context._rng = random.Random(seed)


def _keep_kernels() -> None:
    pass


def gradient_registry(keras: Any) -> dict | None:
    """TensorFlow's process-wide registry of gradient functions (`ops.gradient_registry._registry`), or None."""
    if keras.backend.backend() != "tensorflow":
        return None
    try:
        from tensorflow.python.framework import ops

        return ops.gradient_registry._registry
    except (ImportError, AttributeError):  # a TensorFlow without this registry needs no clean-up
        return None

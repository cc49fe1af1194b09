"""Keras in a worker process: imported once, on first use, with the backend set up for trials (GPU memory on
demand, the worker's share of CPU threads), and TensorFlow's process-wide gradient registry kept from growing."""

from __future__ import annotations

import functools
import gc
import os
import random
import threading
from typing import Any

_keras_ready = False
_import_lock = threading.Lock()  # the worker set-up imports Keras in a thread of its own
_cpu_threads: int | None = None  # set in worker processes: see prepare_worker


def prepare_worker(cpu_threads: int) -> None:
    """Make this process a trial worker: from the Keras import on, the backend runs CPU operations on
    `cpu_threads` threads (intra-op and inter-op; TensorFlow only, and only before its first operation),
    and the objects the import creates are moved out of the garbage collector's sight (gc.freeze).

    Keras and TensorFlow create hundreds of thousands of long-lived objects at import; every full collection
    walks them all, about a second each on a small machine, and a worker collects after every trial.
    """
    global _cpu_threads
    _cpu_threads = cpu_threads


def import_keras() -> Any:
    """Import keras once per process, with GPU memory allocated on demand rather than all at start."""
    global _keras_ready
    with _import_lock:
        if not _keras_ready:
            _prepare_backend()
            if _cpu_threads is not None:
                gc.freeze()
            _keras_ready = True
    import keras

    return keras


def _prepare_backend() -> None:
    # JAX reads this at its own import: without it, every worker process would reserve 75% of each GPU.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import keras

    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf  # already imported by keras: costs nothing more

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # the GPU was initialised before us: its setting stays as it is
            pass
    if _cpu_threads is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(_cpu_threads)
            tf.config.threading.set_inter_op_parallelism_threads(_cpu_threads)
        except RuntimeError:  # TensorFlow already ran an operation here: its thread pools stay as they are
            pass


def set_random_seed(keras: Any, seed: int) -> None:
    """keras.utils.set_random_seed(seed) (Python, NumPy, Keras and TensorFlow's global seed) without the cost it
    has on TensorFlow: tf.random.set_seed also clears TensorFlow's eager kernel cache, so that the counters of
    stateful random kernels restart, and with it every instantiated function: the next fit and evaluate then
    instantiate their traced functions and input pipelines again, ~0.1 s a fold for a small model.

    Keras' own random ops are stateless (seeded by its SeedGenerators, whose state is part of a model's
    variables) and each fit builds a fresh input pipeline, so the global seed alone makes a fold reproducible.
    Only a study's own stateful TensorFlow random ops executed eagerly (tf.random.uniform outside a model,
    with no seed) would carry on from an earlier fold instead of restarting."""
    context = _tensorflow_eager_context(keras)
    if context is None:
        keras.utils.set_random_seed(seed)
        return
    context._set_global_seed = functools.partial(_set_seed_keeping_kernels, context)
    try:
        keras.utils.set_random_seed(seed)
    finally:
        del context._set_global_seed  # the class's own method again


def _tensorflow_eager_context(keras: Any) -> Any:
    """TensorFlow's eager context when its seed can be set without clearing its caches, else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    try:
        from tensorflow.python.eager import context
    except ImportError:
        return None
    eager = context.context()
    return eager if hasattr(type(eager), "_set_global_seed") and hasattr(eager, "_seed") else None


def _set_seed_keeping_kernels(context: Any, seed: int) -> None:
    context._seed = seed  # what tf.random.set_seed sets, less its kernel-cache clearing
    context._rng = random.Random(seed)


def _tensorflow_gradient_registry(keras: Any) -> dict | None:
    if keras.backend.backend() != "tensorflow":
        return None
    try:
        from tensorflow.python.framework import ops

        return ops.gradient_registry._registry
    except (ImportError, AttributeError):  # a TensorFlow without this registry needs no clean-up
        return None


def custom_gradient_names(keras: Any) -> set[str] | None:
    registry = _tensorflow_gradient_registry(keras)
    return None if registry is None else set(registry)


def forget_custom_gradients(keras: Any, names_before: set[str] | None) -> None:
    """Drop the custom gradients TensorFlow registered while a fold trained.

    Keras' TensorFlow trainer all-reduces through tf.custom_gradient, and TensorFlow keeps every such
    gradient in a process-wide registry for good, and with it each traced training graph: about 4 MiB
    per fold that clear_session cannot free. The fold's model is gone, so nothing uses them any more.
    """
    registry = _tensorflow_gradient_registry(keras)
    if registry is None or names_before is None:
        return
    for name in set(registry) - names_before:
        if name.startswith("CustomGradient-"):
            registry.pop(name, None)

"""Keras in a worker process: imported once, on first use, with the backend set up for trials (GPU memory on
demand, the worker's share of CPU threads), and TensorFlow's process-wide gradient registry kept from growing."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from tlsearch._compat import tensorflow as tensorflow_compat
from tlsearch.errors import TLSearchError
from tlsearch.models._fold_random import seed_thread

_keras_ready = False
_import_lock = threading.Lock()  # the worker set-up imports Keras in a thread of its own
_cpu_threads: int | None = None  # set in worker processes: see prepare_worker

# The Keras backends tlsearch trains on, each tested by the suite (tests/test_keras_backends.py runs on both).
SUPPORTED_BACKENDS = ("tensorflow", "jax")


def requested_backend() -> str:
    """The Keras backend this process uses or will use, found without importing Keras: the imported Keras' own,
    else $KERAS_BACKEND, else the "backend" of Keras' config file ($KERAS_HOME or ~/.keras, keras.json), else
    TensorFlow (Keras' default)."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(getattr(keras, "backend", None), "backend"):
        return keras.backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    config = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras") / "keras.json"
    try:
        return str(json.loads(config.read_text()).get("backend") or "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def check_backend(name: str) -> None:
    """Refuse, in one line, a Keras backend tlsearch does not train on (PyTorch, NumPy, OpenVINO)."""
    if name not in SUPPORTED_BACKENDS:
        raise TLSearchError(
            f"Keras backend {name!r} is not supported by tlsearch (its Keras trainer runs on TensorFlow or JAX "
            "only; PyTorch's is untested): set KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax"
        )


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
    """Import keras once per process, with GPU memory allocated on demand rather than all at start; a backend
    other than TensorFlow or JAX is refused (TLSearchError)."""
    global _keras_ready
    with _import_lock:
        if not _keras_ready:
            check_backend(requested_backend())  # before the import: Keras on torch imports torch at once
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

    if keras.backend.backend() == "jax":
        _keep_jax_compilations()
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


JAX_COMPILATIONS_MAX_BYTES = 2**30


def _keep_jax_compilations() -> None:
    """Keep JAX's compiled programs on disk in this host's cache (`<cache_dir>/jax`, at most 1 GiB, least
    recently used dropped first), so that a process's first trial of a model structure that another worker on
    this host, or an earlier run, compiled loads the program instead of compiling it (a digits MLP fold: 2.7 s
    compiling, 0.6 s loading). A cache the user set up (JAX_COMPILATION_CACHE_DIR) is left as it is."""
    import jax

    from tlsearch.config import Settings

    if jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", str(Settings.resolve().cache_dir / "jax"))
    # A size limit also makes JAX lock the folder, so that workers never read an entry another is writing.
    jax.config.update("jax_compilation_cache_max_size", JAX_COMPILATIONS_MAX_BYTES)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # small models compile in under 1 s


def set_random_seed(keras: Any, seed: int) -> None:
    """keras.utils.set_random_seed(seed) (Python, NumPy, Keras and TensorFlow's global seed), keeping TensorFlow's
    eager kernel cache, and Keras' default seeds drawn in this thread from a stream of its own
    (`_fold_random.seed_thread`: Dask's event-loop thread draws from Python's global stream meanwhile).

    tf.random.set_seed clears that cache, so that the counters of stateful random kernels restart, and with it
    every instantiated function: the next fit and evaluate instantiate their traced functions and input
    pipelines again, ~0.1 s a fold for a small model. Keras' own random ops are stateless (seeded by its
    SeedGenerators, whose state is part of a model's variables) and each fit builds a fresh input pipeline, so
    the global seed alone makes a fold reproducible. Only a study's own stateful TensorFlow random ops executed
    eagerly (tf.random.uniform outside a model, with no seed) carry on from an earlier fold instead of restarting."""
    with tensorflow_compat.kernels_kept(keras):
        keras.utils.set_random_seed(seed)
    seed_thread(seed)


def clear_session(keras: Any, keep_kernels: bool) -> None:
    """keras.backend.clear_session() (Keras' global state, TensorFlow's default graph, a garbage collection),
    with `keep_kernels` keeping TensorFlow's eager kernel cache: the worker's next trial of the same structure
    trains the model this one traced (see _keras_reuse), and that model's instantiated functions are in the
    cache (a trial of the MLP on digits: 2.3 s with the cache cleared, 1.2 s kept). `forget_kernels` clears it
    when that model is replaced, so a search over many structures does not grow."""
    with tensorflow_compat.kernels_kept(keras) if keep_kernels else contextlib.nullcontext():
        keras.backend.clear_session()


def forget_kernels(keras: Any) -> None:
    """Clear TensorFlow's eager kernel cache: the functions of a model no longer kept are never called again."""
    tensorflow_compat.forget_kernels(keras)


def custom_gradient_names(keras: Any) -> set[str] | None:
    registry = tensorflow_compat.gradient_registry(keras)
    return None if registry is None else set(registry)


def forget_custom_gradients(keras: Any, names_before: set[str] | None) -> None:
    """Drop the custom gradients TensorFlow registered while a fold trained.

    Keras' TensorFlow trainer all-reduces through tf.custom_gradient, and TensorFlow keeps every such
    gradient in a process-wide registry for good, and with it each traced training graph: about 4 MiB
    per fold that clear_session cannot free. The fold's model is gone, so nothing uses them any more.
    """
    registry = tensorflow_compat.gradient_registry(keras)
    if registry is None or names_before is None:
        return
    for name in set(registry) - names_before:
        if name.startswith("CustomGradient-"):
            registry.pop(name, None)

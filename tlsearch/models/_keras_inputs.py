"""How a fold's rows reach Keras: on TensorFlow, folds of up to SMALL_FOLD_ROWS rows go in as a plain tf.data
pipeline built here; otherwise Keras gets the arrays.

Keras' own pipeline for arrays (shuffled index batches gathered by traced map functions) is made for large
arrays: each fit, evaluate and epoch instantiates those functions again, about 30 ms each time, which is most of
an epoch of a small model on a few thousand rows (a 3-epoch fit of the digits MLP: 125 ms with arrays, 43 ms
through a plain pipeline; an evaluate: 43 ms against 7 ms). A plain pipeline (rows, shuffled with the fold's
seed, batched) costs a few microseconds more a row instead, so it is slower above about 10,000 rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SMALL_FOLD_ROWS = 10_000
# Rows scored in one batch when they hold at most this many input values: each batch shape is one more compile of
# the test step on JAX (about 0.5 s on a loaded CPU), and fewer, larger batches are fewer steps on any backend.
ONE_BATCH_VALUES = 1 << 18

# fit keywords that Keras honours only for arrays (it refuses or ignores them for a dataset)
_ARRAY_ONLY_FIT_KEYWORDS = frozenset({"shuffle", "validation_split", "steps_per_epoch", "validation_batch_size"})


def training(
    keras: Any,
    x: np.ndarray,
    y: np.ndarray,
    sample_weight: np.ndarray | None,
    batch_size: int,
    seed: int,
    fit_kwargs: dict,
) -> dict[str, Any]:
    """The keywords of `model.fit` that give it the training rows, shuffled each epoch (in an order drawn from
    `seed` when they go in as a pipeline)."""
    if not _as_pipeline(keras, len(x)) or _ARRAY_ONLY_FIT_KEYWORDS & set(fit_kwargs):
        return {"x": x, "y": y, "sample_weight": sample_weight, "batch_size": batch_size}
    import tensorflow as tf

    rows = tf.data.Dataset.from_tensor_slices(_columns(x, y, sample_weight))
    batches = rows.shuffle(len(x), seed=seed, reshuffle_each_iteration=True).batch(batch_size)
    return {"x": batches, "shuffle": False}  # shuffled by the pipeline


def evaluation(keras: Any, x: np.ndarray, y: np.ndarray, batch_size: int) -> dict[str, Any]:
    """The keywords of `model.evaluate` that give it the rows x, y in batches of `batch_size`, or in one batch when
    they are few (at most ONE_BATCH_VALUES input values): the same scores, up to float rounding."""
    if 0 < x.size <= ONE_BATCH_VALUES:
        batch_size = max(batch_size, len(x))
    if _as_pipeline(keras, len(x)):
        return {"x": _batches(x, y, batch_size)}
    return {"x": x, "y": y, "batch_size": batch_size}


def validation_data(keras: Any, x: np.ndarray, y: np.ndarray, batch_size: int) -> Any:
    """The rows x, y as `model.fit`'s validation_data, in batches of `batch_size` when they go in as a pipeline."""
    return _batches(x, y, batch_size) if _as_pipeline(keras, len(x)) else (x, y)


def _batches(x: np.ndarray, y: np.ndarray, batch_size: int) -> Any:
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def _as_pipeline(keras: Any, n_rows: int) -> bool:
    return 0 < n_rows <= SMALL_FOLD_ROWS and keras.backend.backend() == "tensorflow"


def _columns(x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None) -> tuple:
    return (x, y) if sample_weight is None else (x, y, np.asarray(sample_weight, dtype="float32"))

"""A small convolutional network: blocks of convolution + pooling, then dropout and a dense head.

params = cnn(trial)     # {"filters": [16, 32], "kernel_size": 3, "pooling": "max", "dropout": 0.3, ...}
model = make_cnn(params, input_shape, n_classes, image_shape=(8, 8, 1))
"""

from __future__ import annotations

import math
from typing import Any

from tlsearch.spaces import scoped


def cnn(
    trial: Any,
    prefix: str | None = "cnn",
    *,
    max_blocks: int = 3,
    filters: tuple[int, int] = (8, 64),
    max_dropout: float = 0.5,
) -> dict:
    """Sample a CNN: n_blocks in 1..max_blocks, filters per block (log-uniform), kernel size 3 or 5,
    max or average pooling, a dropout rate and the width of the dense layer before the output."""
    trial = scoped(trial, prefix)
    n_blocks = trial.suggest_int("n_blocks", 1, max_blocks)
    return {
        "filters": [trial.suggest_int(f"filters_{block}", *filters, log=True) for block in range(n_blocks)],
        "kernel_size": trial.suggest_categorical("kernel_size", [3, 5]),
        "pooling": trial.suggest_categorical("pooling", ["max", "average"]),
        "dropout": trial.suggest_float("dropout", 0.0, max_dropout),
        "dense_units": trial.suggest_int("dense_units", 16, 128, log=True),
    }


def make_cnn(
    params: dict,
    input_shape: tuple[int, ...],
    n_classes: int | None,
    *,
    image_shape: tuple[int, int, int] | None = None,
    rescale: float | None = None,
) -> Any:
    """An uncompiled keras.Model for a dict sampled by `cnn`. Flat rows are reshaped to `image_shape`
    (height, width, channels) first; pooling stops once the image is 1 pixel wide, so deep nets fit small images."""
    import keras

    inputs = keras.Input(shape=tuple(input_shape))
    x = inputs
    if image_shape is not None and tuple(input_shape) != tuple(image_shape):
        if math.prod(input_shape) != math.prod(image_shape):
            raise ValueError(f"cannot reshape inputs of shape {tuple(input_shape)} to images of shape {image_shape}")
        x = keras.layers.Reshape(tuple(image_shape))(x)
    if rescale is not None:
        x = keras.layers.Rescaling(rescale)(x)
    pool = keras.layers.MaxPooling2D if params["pooling"] == "max" else keras.layers.AveragePooling2D
    for filters in params["filters"]:
        x = keras.layers.Conv2D(filters, params["kernel_size"], padding="same", activation="relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = pool(2)(x)
    x = keras.layers.Flatten()(x)
    if params["dropout"] > 0:
        x = keras.layers.Dropout(params["dropout"])(x)
    x = keras.layers.Dense(params["dense_units"], activation="relu")(x)
    outputs = keras.layers.Dense(1) if n_classes is None else keras.layers.Dense(n_classes, activation="softmax")
    return keras.Model(inputs, outputs(x))

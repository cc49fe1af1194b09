"""A multi-layer perceptron: depth, width of each layer, dropout, activation, batch normalisation.

params = mlp(trial)     # {"units": [128, 32], "dropout": 0.2, "activation": "relu", "batch_norm": False}
model = make_mlp(params, input_shape, n_classes)
"""

from __future__ import annotations

from typing import Any

from tlsearch.spaces import scoped


def mlp(
    trial: Any,
    prefix: str | None = "mlp",
    *,
    max_layers: int = 3,
    units: tuple[int, int] = (16, 256),
    max_dropout: float = 0.5,
    activations: tuple[str, ...] = ("relu", "gelu", "tanh"),
) -> dict:
    """Sample an MLP: n_layers in 1..max_layers, then units per layer (log-uniform), one dropout rate,
    activation and whether to batch-normalise."""
    trial = scoped(trial, prefix)
    n_layers = trial.suggest_int("n_layers", 1, max_layers)
    return {
        "units": [trial.suggest_int(f"units_{layer}", *units, log=True) for layer in range(n_layers)],
        "dropout": trial.suggest_float("dropout", 0.0, max_dropout),
        "activation": trial.suggest_categorical("activation", list(activations)),
        "batch_norm": trial.suggest_categorical("batch_norm", [False, True]),
    }


def make_mlp(params: dict, input_shape: tuple[int, ...], n_classes: int | None, *, rescale: float | None = None) -> Any:
    """An uncompiled keras.Model for a dict sampled by `mlp`: softmax over n_classes outputs, or one linear
    output for regression (n_classes None). `rescale` multiplies the inputs first (e.g. 1/255 for pixels)."""
    import keras

    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    if rescale is not None:
        x = keras.layers.Rescaling(rescale)(x)
    for units in params["units"]:
        x = keras.layers.Dense(units, use_bias=not params["batch_norm"])(x)
        if params["batch_norm"]:
            x = keras.layers.BatchNormalization()(x)
        x = keras.layers.Activation(params["activation"])(x)
        if params["dropout"] > 0:
            x = keras.layers.Dropout(params["dropout"])(x)
    outputs = keras.layers.Dense(1) if n_classes is None else keras.layers.Dense(n_classes, activation="softmax")
    return keras.Model(inputs, outputs(x))

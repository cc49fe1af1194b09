"""Keras optimizers: adam, sgd with momentum, rmsprop, each with a log-uniform learning rate and optional
decoupled weight decay.

    params = optimizer(trial)                 # {"name": "adam", "learning_rate": 0.003, "weight_decay": None}
    model.compile(optimizer=make_optimizer(params), ...)
"""

from __future__ import annotations

from typing import Any

from tlsearch.spaces import scoped

OPTIMIZERS = ("adam", "sgd", "rmsprop")


def optimizer(
    trial: Any,
    prefix: str | None = "optimizer",
    *,
    names: tuple[str, ...] = OPTIMIZERS,
    learning_rate: tuple[float, float] = (1e-4, 1e-1),
) -> dict:
    """Sample an optimizer: name, learning_rate (log-uniform), weight_decay (None or log-uniform 1e-6..1e-2),
    plus momentum and nesterov for sgd, rho for rmsprop."""
    trial = scoped(trial, prefix)
    name = trial.suggest_categorical("name", list(names))
    params: dict = {"name": name, "learning_rate": trial.suggest_float("learning_rate", *learning_rate, log=True)}
    params["weight_decay"] = (
        trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True)
        if trial.suggest_categorical("use_weight_decay", [False, True])
        else None
    )
    if name == "sgd":
        params["momentum"] = trial.suggest_float("momentum", 0.0, 0.99)
        params["nesterov"] = trial.suggest_categorical("nesterov", [False, True])
    elif name == "rmsprop":
        params["rho"] = trial.suggest_float("rho", 0.8, 0.99)
    return params


def make_optimizer(params: dict) -> Any:
    """The keras optimizer for a dict sampled by `optimizer`."""
    import keras

    options = {"learning_rate": params["learning_rate"], "weight_decay": params.get("weight_decay")}
    if params["name"] == "adam":
        return keras.optimizers.Adam(**options)
    if params["name"] == "sgd":
        return keras.optimizers.SGD(momentum=params["momentum"], nesterov=params["nesterov"], **options)
    if params["name"] == "rmsprop":
        return keras.optimizers.RMSprop(rho=params["rho"], **options)
    raise ValueError(f"unknown optimizer {params['name']!r}; known: {', '.join(OPTIMIZERS)}")


def compile_model(
    model: Any, optimizer_params: dict, n_classes: int | None, *, metrics: tuple[str, ...] = ("accuracy",)
) -> Any:
    """Compile `model` for its task and return it: sparse categorical cross-entropy and `metrics` for
    classification (labels 0..n_classes-1, softmax outputs), mean squared error for regression (n_classes None).
    """
    if n_classes is None:
        model.compile(optimizer=make_optimizer(optimizer_params), loss="mean_squared_error")
    else:
        model.compile(
            optimizer=make_optimizer(optimizer_params), loss="sparse_categorical_crossentropy", metrics=list(metrics)
        )
    return model

"""Training an already traced Keras model instead of a fresh one of the same structure (see
KerasTrainer._reuse_trained): how two compiled models are compared, and how one gets the other's initial state."""

from __future__ import annotations

import json
from typing import Any

# This process's last traced model, by structure, for the next trial of the same structure.
kept_model: dict[str, Any] = {}


def structure(model: Any) -> tuple[str | None, bool]:
    """(structure, portable). The structure is what two compiled models must share for one to stand in for
    the other: their classes, configs and compile settings with the names Keras numbers per build (layers,
    the optimizer) replaced by positions and a constant learning rate left out (it is a variable, reset with
    the initial state), and their variables' shapes and dtypes; None when the model cannot describe itself
    (it is then never reused). Portable: the structure holds plain values only, no object that stands for
    itself (e.g. a custom loss function, which may capture a trial's hyperparameters), so models of
    different params with that structure are interchangeable; otherwise only models built from the same
    params are (the folds of one trial)."""
    opaque: list[Any] = []

    def describe(value: Any) -> str:
        opaque.append(value)
        return repr(value)

    try:
        layers, pending = [model], [model]
        while pending:
            inner = getattr(pending.pop(), "layers", None) or []
            layers += inner
            pending += inner
        compile_config = model.get_compile_config()
        optimizer = (compile_config.get("optimizer") or {}).get("config", {})
        if isinstance(optimizer.get("learning_rate"), (int, float)):
            optimizer["learning_rate"] = "#variable"
        compile_config["steps_per_execution"] = model.steps_per_execution  # as set for training: see _fit
        config = [type(model).__qualname__, model.get_config(), compile_config]
        positions = {layer.name: f"#{position}" for position, layer in enumerate(layers)}
        positions[model.optimizer.name] = "#optimizer"
        shapes = [(tuple(variable.shape), str(variable.dtype)) for variable in model.variables]
        return json.dumps([_renamed(config, positions), shapes], sort_keys=True, default=describe), not opaque
    except Exception:  # a subclassed model or custom object without a serialisable config
        return None, False


def _renamed(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, dict):
        return {key: _renamed(item, names) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_renamed(item, names) for item in value]
    return value


def load_initial_state(model: Any, fresh: Any) -> bool:
    """Give `model` the untrained state of `fresh` (same structure): its variables (weights, seed generators)
    and its optimizer's variables as built before the first step. False when the optimizers differ."""
    fresh.optimizer.build(fresh.trainable_variables)
    pairs = [*zip(model.variables, fresh.variables), *zip(model.optimizer.variables, fresh.optimizer.variables)]
    if len(model.optimizer.variables) != len(fresh.optimizer.variables) or any(
        tuple(mine.shape) != tuple(theirs.shape) for mine, theirs in pairs
    ):
        return False
    for mine, theirs in pairs:
        mine.assign(theirs)
    return True

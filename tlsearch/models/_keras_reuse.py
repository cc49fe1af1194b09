"""Training an already traced Keras model instead of a fresh one of the same structure (see
KerasTrainer._reuse_trained): how two compiled models are compared, and how one gets the other's initial state."""

from __future__ import annotations

import enum
import hashlib
import json
import types
from typing import Any

import numpy as np

from tlsearch.errors import TLSearchError

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
    params are (the folds of one trial). The loss, metrics and optimizer compiled in are described by their
    whole state (`compiled_objects`), not only by their configs, which need not hold every parameter."""
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
        config = [type(model).__qualname__, model.get_config(), compile_config, compiled_objects(model)]
        positions = {layer.name: f"#{position}" for position, layer in enumerate(layers)}
        positions[model.optimizer.name] = "#optimizer"
        positions.update({name: f"#loss{position}" for position, name in enumerate(_loss_names(model))})
        shapes = [(tuple(variable.shape), str(variable.dtype)) for variable in model.variables]
        return json.dumps([_renamed(config, positions), shapes], sort_keys=True, default=describe), not opaque
    except Exception:  # a subclassed model or custom object without a serialisable config
        return None, False


def _loss_names(model: Any) -> list[str]:
    """The names of the loss objects compiled in, which Keras numbers per build (focal_loss, focal_loss_1, ...)."""
    losses = getattr(getattr(model, "_compile_config", None), "config", {}).get("loss")
    losses = list(losses.values()) if isinstance(losses, dict) else losses
    losses = losses if isinstance(losses, (list, tuple)) else [losses]
    return [loss.name for loss in losses if isinstance(getattr(loss, "name", None), str) and hasattr(loss, "call")]


class _Opaque(TLSearchError):
    """A compiled object whose state cannot be described by plain values."""


# Keras' own bookkeeping in a loss's or metric's attributes: which variables it tracks (described apart).
_BOOKKEEPING = frozenset({"_tracker"})


def compiled_objects(model: Any) -> Any:
    """The state of what `model.compile` was given (loss, metrics, loss weights; the optimizer when its class is
    not Keras' own, whose config is complete and described with the compile config): every attribute, nested,
    as plain values (a variable by its shape and dtype, a function by its code, defaults and captured values), so
    that a parameter kept out of `get_config()` (a focal loss's gamma) tells two models apart. A value with no
    plain description (a C object, a cycle) is returned as itself: `structure` then finds it opaque."""
    given = dict(getattr(getattr(model, "_compile_config", None), "config", None) or {})
    optimizer = given.pop("optimizer", None)
    if not type(optimizer).__module__.startswith("keras."):
        given["optimizer"] = optimizer
    try:
        return _state(given, set())
    except (_Opaque, RecursionError):
        return given  # not JSON: `structure` marks the model as not portable


def _state(value: Any, seen: set[int]) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)  # nan and inf included
    if isinstance(value, enum.Enum):
        return ["enum", _qualified(type(value)), _state(value.value, seen)]
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise _Opaque
        return ["array", str(array.dtype), list(array.shape), hashlib.sha256(array.tobytes()).hexdigest()]
    if isinstance(value, (type, types.BuiltinFunctionType, types.ModuleType)):
        return ["named", _qualified(value)]
    if id(value) in seen:
        raise _Opaque  # a cycle
    seen = seen | {id(value)}
    if isinstance(value, (list, tuple)):
        return [_state(item, seen) for item in value]
    if isinstance(value, dict):
        return [
            [_state(key, seen), _state(item, seen)] for key, item in sorted(value.items(), key=lambda kv: repr(kv[0]))
        ]
    if _is_variable(value):
        return ["variable", [int(n) for n in value.shape], str(value.dtype)]
    if isinstance(value, types.FunctionType):
        cells = [cell.cell_contents for cell in value.__closure__ or ()]
        return [
            "function",
            _qualified(value),
            _code(value.__code__),
            _state([value.__defaults__, value.__kwdefaults__, cells], seen),
        ]
    if isinstance(value, types.MethodType):
        return ["method", _state(value.__func__, seen), _state(value.__self__, seen)]
    attributes = getattr(value, "__dict__", None)
    if attributes is None:
        raise _Opaque
    kept = {key: item for key, item in attributes.items() if key not in _BOOKKEEPING}
    return ["object", _qualified(type(value)), _state(kept, seen)]


def _code(code: types.CodeType) -> list:
    constants = [_code(item) if isinstance(item, types.CodeType) else repr(item) for item in code.co_consts]
    return [hashlib.sha256(code.co_code).hexdigest(), constants, list(code.co_names)]


def _qualified(value: Any) -> str:
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def _is_variable(value: Any) -> bool:
    return type(value).__module__.startswith("keras.") and all(
        hasattr(value, name) for name in ("assign", "shape", "dtype", "path")
    )


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
    import keras

    on_jax = keras.backend.backend() == "jax"
    for mine, theirs in pairs:
        # A copy on JAX: assign would share `theirs`' buffer, which the next training step donates (deletes).
        mine.assign(keras.ops.copy(theirs.value) if on_jax else theirs)
    return True

"""Search spaces: sampling them on a trial, composing them, and checking them before a study starts.

A space is either a function of an `optuna.Trial` that returns a dict of hyperparameters (define-by-run:
conditional and nested spaces are plain Python), or a dict whose values are Optuna distributions (sampled
under their key) or constants (passed through). Spaces compose: a space function may call other spaces,
and `scoped(trial, "prefix")` keeps their parameter names apart ("prefix.name").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tlsearch.errors import InvalidSpaceError

Space = Callable[[optuna.Trial], dict] | Mapping[str, Any]

_SUGGEST_METHODS = (
    "suggest_float",
    "suggest_int",
    "suggest_categorical",
    "suggest_uniform",
    "suggest_loguniform",
    "suggest_discrete_uniform",
)


def sample(trial: optuna.Trial, space: Space) -> dict:
    """Sample `space` on `trial` and return its hyperparameters as a dict."""
    if callable(space):
        return space(trial)
    if isinstance(space, Mapping):
        return {name: suggest(trial, name, value) for name, value in space.items()}
    raise InvalidSpaceError(f"a space must be a function of a trial or a dict, not {type(space).__name__}")


def suggest(trial: optuna.Trial, name: str, distribution: Any) -> Any:
    """Sample one value of `distribution` under `name`; a value that is not a distribution is returned as is."""
    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, BaseDistribution):
        raise InvalidSpaceError(f"parameter {name!r}: unsupported distribution {type(distribution).__name__}")
    return distribution


class ScopedTrial:
    """A view of a trial that prefixes every parameter name with "prefix.", so composed spaces don't clash.

    Everything but the suggest methods is forwarded to the underlying trial unchanged.
    """

    def __init__(self, trial: optuna.Trial | ScopedTrial, prefix: str) -> None:
        if not prefix:
            raise ValueError("a scope needs a non-empty prefix")
        self._trial = trial
        self._prefix = prefix

    def _name(self, name: str) -> str:
        return f"{self._prefix}.{name}"

    def suggest_float(self, name: str, *args: Any, **kwargs: Any) -> float:
        return self._trial.suggest_float(self._name(name), *args, **kwargs)

    def suggest_int(self, name: str, *args: Any, **kwargs: Any) -> int:
        return self._trial.suggest_int(self._name(name), *args, **kwargs)

    def suggest_categorical(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._trial.suggest_categorical(self._name(name), *args, **kwargs)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._trial, attribute)


def scoped(trial: optuna.Trial | ScopedTrial, prefix: str | None) -> optuna.Trial | ScopedTrial:
    """`trial` with parameter names prefixed by "prefix." (no prefix: the trial itself)."""
    return ScopedTrial(trial, prefix) if prefix else trial


class _CheckingTrial:
    """Forwards to a trial and names the parameter in any error raised while suggesting it."""

    def __init__(self, trial: optuna.Trial, space_name: str) -> None:
        self._trial = trial
        self._space_name = space_name

    def __getattr__(self, attribute: str) -> Any:
        target = getattr(self._trial, attribute)
        if attribute not in _SUGGEST_METHODS:
            return target

        def checked_suggest(name: str, *args: Any, **kwargs: Any) -> Any:
            try:
                return target(name, *args, **kwargs)
            except Exception as exc:
                raise InvalidSpaceError(f"space {self._space_name!r}, parameter {name!r}: {_one_line(exc)}") from exc

        return checked_suggest


def check_space(space: Space, name: str, *, n_samples: int = 8, seed: int = 0) -> None:
    """Sample `space` `n_samples` times on a throwaway in-memory study; raise InvalidSpaceError if it can't be.

    Catches what would otherwise fail on every worker: low > high, a log scale with low <= 0, empty
    choices, the same parameter name with two different ranges, an exception in the space function,
    and a return value that is not a dict.
    """
    if not (callable(space) or isinstance(space, Mapping)):
        raise InvalidSpaceError(
            f"space {name!r} must be a function of a trial or a dict of distributions, not {type(space).__name__}"
        )
    if isinstance(space, Mapping):
        for key in space:
            if not isinstance(key, str):
                raise InvalidSpaceError(f"space {name!r}: parameter names must be strings, got {key!r}")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the throwaway study is nobody's business
    try:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    finally:
        optuna.logging.set_verbosity(verbosity)
    for _ in range(n_samples):
        trial = study.ask()
        try:
            params = sample(_CheckingTrial(trial, name), space)  # type: ignore[arg-type]
        except InvalidSpaceError as exc:
            if str(exc).startswith(f"space {name!r}"):
                raise
            raise InvalidSpaceError(f"space {name!r}: {exc}") from exc
        except Exception as exc:
            raise InvalidSpaceError(f"space {name!r} failed while sampling: {_one_line(exc)}") from exc
        if not isinstance(params, dict):
            raise InvalidSpaceError(
                f"space {name!r} returned {type(params).__name__}, expected a dict of hyperparameters"
            )
        study.tell(trial, 0.0)


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__

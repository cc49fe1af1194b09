"""One errors module: every exception tlsearch defines is a TLSearchError, and a model's code can mark its own
failure retryable or fatal, over tlsearch's own rules (the runs through a study are in test_driver.py)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import optuna
import pytest

import tlsearch
from tlsearch import errors
from tlsearch.cv import is_retryable
from tlsearch.errors import FatalTrialError, NonFiniteLossError, RetryableTrialError, TLSearchError


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a tlsearch module, by its qualified name (warnings' categories aside)."""
    found = {}
    for module_info in pkgutil.walk_packages(tlsearch.__path__, "tlsearch."):
        if ".examples" in module_info.name or ".testing" in module_info.name:
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and not issubclass(value, Warning)
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_exception_tlsearch_defines_is_a_tlsearch_error():
    classes = exception_classes()
    assert "tlsearch.errors.GridFSDamagedError" in classes and "tlsearch.cv._pruners.EpochPruned" in classes
    assert [name for name, cls in classes.items() if not issubclass(cls, TLSearchError)] == []


def test_every_public_error_is_defined_in_the_errors_module():
    public = {cls for name, cls in exception_classes().items() if not name.rpartition(".")[2].startswith("_")}
    elsewhere = {cls.__qualname__ for cls in public if cls.__module__ != "tlsearch.errors"}
    assert elsewhere == {"EpochPruned"}  # an optuna.TrialPruned too: it lives with the pruners, over optuna


def test_the_errors_keep_the_builtin_bases_callers_catch():
    assert issubclass(errors.DatasetNotFoundError, KeyError) and issubclass(errors.StudySpecError, ValueError)
    assert issubclass(errors.MongoUnavailableError, ConnectionError)
    assert issubclass(errors.NonFiniteLossError, FloatingPointError)
    assert issubclass(tlsearch.cv.EpochPruned, optuna.TrialPruned)


@pytest.mark.parametrize(
    ("make", "retried"),
    [
        (lambda: RetryableTrialError("flaky sensor"), True),
        (lambda: FatalTrialError("out of memory, and it always will be"), False),  # the OOM rule would retry it
        (lambda: _raised(RetryableTrialError("retry me"), NonFiniteLossError("nan")), True),
        (lambda: _raised(FatalTrialError("give up"), ConnectionError("lost")), False),
        (lambda: _raised(ValueError("wrapped"), FatalTrialError("give up")), False),
        (lambda: _raised(FatalTrialError("outer"), RetryableTrialError("inner")), False),
        (lambda: ConnectionError("lost"), True),
        (lambda: ValueError("bad value"), False),
    ],
)
def test_the_models_own_mark_decides_before_the_built_in_rules(make, retried):
    assert is_retryable(make()) is retried


def _raised(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        raise outer from cause
    except BaseException as error:
        return error

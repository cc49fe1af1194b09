"""Old names kept working with a DeprecationWarning: keywords renamed by the naming pass, and module paths moved
when the package was laid out by layer (each warning names the version that removes the old name)."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

REMOVED_IN = "tlsearch 3.0"  # the release that drops every old name kept here


def renamed_keywords(**new_for_old: str) -> Callable[[F], F]:
    """Accept each old keyword (`root="home"`: old `root=`, new `home=`) as its new name, with a warning."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def accepting_old_names(*args: Any, **kwargs: Any) -> Any:
            for old, new in new_for_old.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{function.__qualname__}() got {old}= and {new}=: give {new}= only")
                warnings.warn(
                    f"{function.__qualname__}({old}=...) is deprecated and removed in {REMOVED_IN}: use {new}=",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return accepting_old_names  # type: ignore[return-value]

    return decorate


# ---- modules moved by the layout-by-layer step ------------------------------------------------------------------

MOVED_MODULES = {  # old path: (where its code lives now, what to import instead)
    "tlsearch._optuna_compat": ("tlsearch._compat.optuna", "tlsearch._compat.optuna"),
    "tlsearch.artifacts": ("tlsearch.stores._artifacts", "tlsearch.stores"),
    "tlsearch.cluster": ("tlsearch.execution._cluster", "tlsearch.execution"),
    "tlsearch.dispatcher": ("tlsearch.execution._dispatcher", "tlsearch.execution"),
    "tlsearch.driver": ("tlsearch.execution._driver", "tlsearch.execution"),
    "tlsearch.driver_guards": ("tlsearch.execution._guards", "tlsearch.execution"),
    "tlsearch.fold_tasks": ("tlsearch.execution._fold_tasks", "tlsearch.execution"),
    "tlsearch.progress": ("tlsearch.execution._progress", "tlsearch.execution"),
    "tlsearch.pruners": ("tlsearch.cv._pruners", "tlsearch.cv"),
    "tlsearch.refit": ("tlsearch.reading._refit", "tlsearch.reading"),
    "tlsearch.report": ("tlsearch.reading._report", "tlsearch.reading"),
    "tlsearch.report_page": ("tlsearch.reading._report_page", "tlsearch.reading"),
    "tlsearch.report_png": ("tlsearch.reading._report_png", "tlsearch.reading"),
    "tlsearch.retries": ("tlsearch.execution._retries", "tlsearch.execution"),
    "tlsearch.spec_checks": ("tlsearch.models._checks", "tlsearch.spec"),
    "tlsearch.study": ("tlsearch.spec._spec", "tlsearch.spec"),
    "tlsearch.study_attrs": ("tlsearch.reading._study_attrs", "tlsearch.reading"),
    "tlsearch.study_files": ("tlsearch.stores._study_files", "tlsearch.stores"),
    "tlsearch.trial_task": ("tlsearch.execution._trial_task", "tlsearch.execution"),
    "tlsearch.trials_table": ("tlsearch.reading._trials_table", "tlsearch.reading"),
    "tlsearch.worker_setup": ("tlsearch.execution._worker_setup", "tlsearch.execution"),
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports each old path of `MOVED_MODULES` as a module that forwards every name to the module's new home,
    with a DeprecationWarning naming the new path and the version that removes the old one."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default: a new, empty module

    def exec_module(self, module: types.ModuleType) -> None:
        home, public = MOVED_MODULES[module.__name__]
        warnings.warn(
            f"{module.__name__} is deprecated and removed in {REMOVED_IN}: import from {public}",
            DeprecationWarning,
            stacklevel=2,  # warnings skips the import machinery's frames: this names the import statement
        )
        moved = importlib.import_module(home)
        module.__doc__ = f"Moved: {module.__name__} is {public} (its code: {home}); removed in {REMOVED_IN}."
        module.__getattr__ = functools.partial(getattr, moved)  # type: ignore[method-assign]
        module.__dir__ = lambda: dir(moved)  # type: ignore[method-assign]


def install_moved_modules() -> None:
    """Let the old module paths import (once per process)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())

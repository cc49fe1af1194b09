"""Keywords renamed by the naming pass: the old spelling keeps working, with a DeprecationWarning."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


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
                    f"{function.__qualname__}({old}=...) is deprecated: use {new}=", DeprecationWarning, stacklevel=2
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return accepting_old_names  # type: ignore[return-value]

    return decorate

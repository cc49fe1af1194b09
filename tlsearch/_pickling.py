"""Pickling a study's definition and its sampler, locks included.

Some Optuna samplers hold a `threading.Lock` (NSGA-II's generation cache), which neither pickle nor
`copy.deepcopy` accept; a lock guards only the process that holds it, so a copy gets a new, released one."""

from __future__ import annotations

import io
import threading
from typing import Any

import cloudpickle

_LOCKS = {type(threading.Lock()): threading.Lock, type(threading.RLock()): threading.RLock}


class _Pickler(cloudpickle.CloudPickler):
    def reducer_override(self, obj):
        make = _LOCKS.get(type(obj))
        if make is not None:
            return make, ()
        return super().reducer_override(obj)


def dumps(obj: Any) -> bytes:
    """`obj` as cloudpickle bytes (functions of a study file by value), each lock replaced by a new one."""
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    return buffer.getvalue()


def copy(obj: Any) -> Any:
    """A deep copy of `obj` through `dumps`."""
    return cloudpickle.loads(dumps(obj))

"""Running a study: the driver, the dispatcher that keeps trials in flight, the Dask cluster's client side, and
what runs on the workers (the trial and fold tasks, the worker plugins).

Names are imported on first use: a worker imports its trial task without the driver."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tlsearch._lazy import lazy_exports

if TYPE_CHECKING:
    from tlsearch.execution._cluster import ClusterOptions, connect, local_security, tls_security
    from tlsearch.execution._dispatcher import Budget
    from tlsearch.execution._driver import RunResult, drive, run
    from tlsearch.execution._stop_policy import EXIT_CODES

__all__ = [
    "EXIT_CODES",
    "Budget",
    "ClusterOptions",
    "RunResult",
    "connect",
    "drive",
    "local_security",
    "run",
    "tls_security",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(["ClusterOptions", "connect", "local_security", "tls_security"], "tlsearch.execution._cluster"),
        "Budget": "tlsearch.execution._dispatcher",
        "EXIT_CODES": "tlsearch.execution._stop_policy",
        **dict.fromkeys(["RunResult", "drive", "run"], "tlsearch.execution._driver"),
    },
)

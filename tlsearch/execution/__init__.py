"""Running a study: the driver, the dispatcher that keeps trials in flight, the Dask cluster's client side, and
what runs on the workers (the trial and fold tasks, the worker plugins)."""

from tlsearch.errors import DatasetChangedError
from tlsearch.execution._cluster import ClusterOptions, connect, local_security, tls_security
from tlsearch.execution._dispatcher import EXIT_CODES, Budget
from tlsearch.execution._driver import RunResult, drive, run

__all__ = [
    "EXIT_CODES",
    "Budget",
    "ClusterOptions",
    "DatasetChangedError",
    "RunResult",
    "connect",
    "drive",
    "local_security",
    "run",
    "tls_security",
]

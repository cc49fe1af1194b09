"""Reading a study: its `tlsearch:*` attributes, the trials table, the report, and the best model refitted.

Names are imported on first use: the command line reads the trials table without importing the refit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tlsearch._lazy import lazy_exports

if TYPE_CHECKING:
    from tlsearch.reading._refit import RefitRecord, load_model, load_model_file, predict, refit
    from tlsearch.reading._report import write_report
    from tlsearch.reading._trials_table import results, trials_frame

__all__ = [
    "RefitRecord",
    "load_model",
    "load_model_file",
    "predict",
    "refit",
    "results",
    "trials_frame",
    "write_report",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            ["RefitRecord", "load_model", "load_model_file", "predict", "refit"], "tlsearch.reading._refit"
        ),
        "write_report": "tlsearch.reading._report",
        **dict.fromkeys(["results", "trials_frame"], "tlsearch.reading._trials_table"),
    },
)

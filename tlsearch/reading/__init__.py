"""Reading a study: its `tlsearch:*` attributes, the trials table, the report, and the best model refitted."""

from tlsearch.errors import UnsafeModelError
from tlsearch.reading._refit import RefitRecord, load_model, load_model_file, predict, refit
from tlsearch.reading._report import write_report
from tlsearch.reading._trials_table import results, trials_frame

__all__ = [
    "RefitRecord",
    "UnsafeModelError",
    "load_model",
    "load_model_file",
    "predict",
    "refit",
    "results",
    "trials_frame",
    "write_report",
]

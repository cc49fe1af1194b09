"""tlsearch: hyperparameter search with k-fold cross-validation on Optuna + Dask, with a MongoDB study store.

The public API. Names are imported on first use, so `import tlsearch` stays fast (no TensorFlow, no Dask).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    # where things live
    "Settings": "tlsearch.config",
    # where trials live
    "MongoStorage": "tlsearch.storage",
    # where data lives
    "open_dataset_store": "tlsearch.data",
    "HostCache": "tlsearch.data",
    "FoldPlan": "tlsearch.data",
    # what a study is
    "StudySpec": "tlsearch.study",
    "KerasModel": "tlsearch.study",
    "SklearnModel": "tlsearch.study",
    "CustomLoop": "tlsearch.study",
    "load_study_file": "tlsearch.study",
    # running it
    "run": "tlsearch.driver",
    # what it found
    "results": "tlsearch.trials_table",
    # the best model
    "load_model": "tlsearch.refit",
    "predict": "tlsearch.refit",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tlsearch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value

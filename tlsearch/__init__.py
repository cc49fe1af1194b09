"""tlsearch: hyperparameter search with k-fold cross-validation on Optuna + Dask, with a MongoDB study store.

The public API. Names are imported on first use, so `import tlsearch` stays fast (no TensorFlow, no Dask).
"""

from __future__ import annotations

import importlib

from tlsearch._renamed import install_moved_modules

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
    "StudySpec": "tlsearch.spec",
    "KerasModel": "tlsearch.spec",
    "SklearnModel": "tlsearch.spec",
    "CustomLoop": "tlsearch.spec",
    "load_study_file": "tlsearch.spec",
    # running it
    "run": "tlsearch.execution",
    # what it found
    "results": "tlsearch.reading",
    # the best model
    "load_model": "tlsearch.reading",
    "predict": "tlsearch.reading",
}

__all__ = ["__version__", *_EXPORTS]

install_moved_modules()  # tlsearch.study, tlsearch.driver, ...: the paths modules had before the layout by layer


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tlsearch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value

"""tlsearch: hyperparameter search with k-fold cross-validation on Optuna + Dask, with a MongoDB study store.

The public API. Names are imported on first use, so `import tlsearch` stays fast (no TensorFlow, no Dask);
type checkers and IDEs read them from the `TYPE_CHECKING` block below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tlsearch._lazy import lazy_exports
from tlsearch._renamed import install_moved_modules

__version__ = "0.1.0"

_EXPORTS = {
    # where things live
    "Settings": "tlsearch.config",
    "Stores": "tlsearch.stores",
    "open_artifact_store": "tlsearch.stores",
    # where trials live
    "MongoStorage": "tlsearch.storage",
    # where data lives
    "open_dataset_store": "tlsearch.data",
    "ensure_dataset": "tlsearch.data",
    "push_dataset": "tlsearch.data",
    "HostCache": "tlsearch.data",
    "FoldPlan": "tlsearch.data",
    "fold_plan_for": "tlsearch.data",
    # what a study is
    "StudySpec": "tlsearch.spec",
    "KerasModel": "tlsearch.spec",
    "SklearnModel": "tlsearch.spec",
    "CustomLoop": "tlsearch.spec",
    "load_study_file": "tlsearch.spec",
    # how a trial is evaluated
    "AutoKFold": "tlsearch.cv",
    "Holdout": "tlsearch.cv",
    "KFoldPruner": "tlsearch.cv",
    "EpochPruning": "tlsearch.cv",
    # running it
    "run": "tlsearch.execution",
    "drive": "tlsearch.execution",
    "RunResult": "tlsearch.execution",
    "Budget": "tlsearch.execution",
    "ClusterOptions": "tlsearch.execution",
    "tls_security": "tlsearch.execution",
    # what it found
    "results": "tlsearch.reading",
    "write_report": "tlsearch.reading",
    # the best model
    "load_model": "tlsearch.reading",
    "predict": "tlsearch.reading",
    # when something fails
    "TLSearchError": "tlsearch.errors",
    "RetryableTrialError": "tlsearch.errors",
    "FatalTrialError": "tlsearch.errors",
}

if TYPE_CHECKING:
    from tlsearch.config import Settings
    from tlsearch.cv import AutoKFold, EpochPruning, Holdout, KFoldPruner
    from tlsearch.data import FoldPlan, HostCache, ensure_dataset, fold_plan_for, open_dataset_store, push_dataset
    from tlsearch.errors import FatalTrialError, RetryableTrialError, TLSearchError
    from tlsearch.execution import Budget, ClusterOptions, RunResult, drive, run, tls_security
    from tlsearch.reading import load_model, predict, results, write_report
    from tlsearch.spec import CustomLoop, KerasModel, SklearnModel, StudySpec, load_study_file
    from tlsearch.storage import MongoStorage
    from tlsearch.stores import Stores, open_artifact_store

__all__ = [
    "__version__",
    "Settings",
    "Stores",
    "open_artifact_store",
    "MongoStorage",
    "open_dataset_store",
    "ensure_dataset",
    "push_dataset",
    "HostCache",
    "FoldPlan",
    "fold_plan_for",
    "StudySpec",
    "KerasModel",
    "SklearnModel",
    "CustomLoop",
    "load_study_file",
    "AutoKFold",
    "Holdout",
    "KFoldPruner",
    "EpochPruning",
    "run",
    "drive",
    "RunResult",
    "Budget",
    "ClusterOptions",
    "tls_security",
    "results",
    "write_report",
    "load_model",
    "predict",
    "TLSearchError",
    "RetryableTrialError",
    "FatalTrialError",
]

install_moved_modules()  # tlsearch.study, tlsearch.driver, ...: the paths modules had before the layout by layer

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

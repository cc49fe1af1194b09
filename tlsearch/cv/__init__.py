"""How one trial is evaluated: the splitters, the fold loop with its reports to the study, and the pruners that
stop a trial between folds or epochs.

Names are imported on first use: the trials table reads the pruners' decisions without importing scikit-learn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tlsearch._lazy import lazy_exports

if TYPE_CHECKING:
    from tlsearch.cv._evaluate import (
        AutoKFold,
        Holdout,
        describe_failure,
        evaluate,
        is_infrastructure_error,
        is_retryable,
    )
    from tlsearch.cv._pruners import (
        EpochPruned,
        EpochPruneDecision,
        EpochPruning,
        KFoldPruner,
        PruneDecision,
        describe,
        epoch_hook,
        fold_scores,
        prune_decision,
    )

__all__ = [
    "AutoKFold",
    "EpochPruneDecision",
    "EpochPruned",
    "EpochPruning",
    "Holdout",
    "KFoldPruner",
    "PruneDecision",
    "describe",
    "describe_failure",
    "epoch_hook",
    "evaluate",
    "fold_scores",
    "is_infrastructure_error",
    "is_retryable",
    "prune_decision",
]

_EVALUATE = ["AutoKFold", "Holdout", "describe_failure", "evaluate", "is_infrastructure_error", "is_retryable"]
__getattr__, __dir__ = lazy_exports(
    __name__,
    {name: "tlsearch.cv._evaluate" if name in _EVALUATE else "tlsearch.cv._pruners" for name in __all__},
)

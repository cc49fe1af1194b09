"""How one trial is evaluated: the splitters, the fold loop with its reports to the study, and the pruners that
stop a trial between folds or epochs."""

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

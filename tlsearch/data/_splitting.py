"""Computing a fold plan: running a splitter on a dataset, and storing the plan next to the dataset."""

from __future__ import annotations

import inspect
import warnings

from tlsearch.data._dataset import Dataset
from tlsearch.data._folds import FoldPlan, describe_splitter
from tlsearch.data._info import FEATURES, GROUPS, LABELS
from tlsearch.data._store import DatasetStore
from tlsearch.errors import DatasetValidationError


def compute_fold_plan(dataset: Dataset, splitter) -> FoldPlan:
    """Run `splitter.split(X, y, groups)` on the dataset (passing y and groups when it accepts them)."""
    description = describe_splitter(splitter)
    arrays, info = dataset.arrays, dataset.info
    kwargs = {}
    parameters = _parameters(splitter.split)
    for key, array in (("y", arrays.get(LABELS)), ("groups", arrays.get(GROUPS))):
        if parameters is None or key in parameters:
            kwargs[key] = array
    try:
        with warnings.catch_warnings():  # scikit-learn warns when a splitter ignores the groups it is given
            warnings.filterwarnings("ignore", message="The groups parameter is ignored")
            folds = list(splitter.split(arrays[FEATURES], **kwargs))
    except ValueError as error:
        if "groups" in str(error) and arrays.get(GROUPS) is None:
            raise DatasetValidationError(
                f"{description} needs groups, but dataset {info.ref} has no 'groups' array "
                "(push it with --groups COLUMN)"
            ) from None
        raise DatasetValidationError(f"{description} cannot split {info.ref}: {error}") from None
    return FoldPlan.build(info.hash, description, info.n_rows, folds)


def _parameters(function) -> set[str] | None:
    """The keyword names `function` accepts, or None when it takes **kwargs."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return set(signature.parameters)


def fold_plan_for(store: DatasetStore, dataset: Dataset, splitter) -> FoldPlan:
    """Compute the plan for `dataset` and `splitter` and store it next to the dataset (idempotent)."""
    plan = compute_fold_plan(dataset, splitter)
    store.put_fold_plan(plan)
    return plan

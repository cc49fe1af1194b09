"""A study's metadata: the `tlsearch:*` system attributes the driver keeps on each study, and opening,
stopping and copying a study by name. Readers (`refit`, `results`, `report`, the CLI) need this, not the driver.
"""

from __future__ import annotations

import sys
from typing import Any

import optuna

from tlsearch._compat import optuna as compat
from tlsearch.data import HostCache
from tlsearch.errors import TLSearchError
from tlsearch.storage import _slots as slots
from tlsearch.stores import _study_files as study_files
from tlsearch.stores._stores import Stores

DATASET_REF = "tlsearch:dataset_ref"
DATASET_HASH = "tlsearch:dataset_hash"
FOLD_PLAN = "tlsearch:fold_plan_hash"
STUDY_FILE = "tlsearch:study_file"
STOP = "tlsearch:stop_requested"
INTENSIFIED = "tlsearch:intensified"  # set once a leading trial was re-evaluated: the pick reads the trials


def load(stores: Stores, name: str, spec=None) -> optuna.Study:
    """The study `name` from the study store, as a plain `optuna.Study` (with `spec`'s sampler and pruner)."""
    try:
        return optuna.load_study(
            study_name=name,
            storage=stores.study_storage(),
            sampler=spec.sampler_ if spec else None,
            pruner=spec.pruner_ if spec else None,
        )
    except KeyError:
        raise TLSearchError(f"no study named {name!r} in {stores.describe()}") from None


def read(study: optuna.Study) -> dict[str, Any]:
    """The study's system attributes (the `tlsearch:*` keys among them)."""
    return compat.study_system_attrs(study)


def write(study: optuna.Study, key: str, value: Any) -> None:
    """Set one system attribute of the study."""
    compat.set_study_system_attr(study, key, value)


def request_stop(stores: Stores, name: str) -> None:
    """Ask every driver of study `name` to finish its running trials and start no new ones."""
    write(load(stores, name), STOP, True)


def copy(source: Stores, target: Stores, name: str, to_name: str | None = None) -> optuna.Study:
    """Copy study `name` from `source` into `target` (e.g. a local study into MongoDB), with its dataset and
    fold plan and its count of folds used, so it can be resumed there (`optuna.copy_study` copies the trials and
    attributes)."""
    to_name = to_name or name
    attrs = read(load(source, name))
    optuna.copy_study(
        from_study_name=name,
        from_storage=source.study_storage(),
        to_storage=target.study_storage(),
        to_study_name=to_name,
    )
    copied = load(target, to_name)
    used = slots.folds_claimed(source.study_storage(), compat.study_id(load(source, name)))
    if used is not None:  # the fold budget's count, which optuna.copy_study does not know of
        slots.ClaimedFolds(target.study_storage(), compat.study_id(copied)).claim(0, sys.maxsize, lambda: used)
    study_files.copy_record(source, target, name, to_name)
    if DATASET_REF in attrs:
        dataset = HostCache().open(source.dataset_store(), attrs[DATASET_REF])
        info = target.dataset_store().push(
            dataset.info.name, dict(dataset.arrays), metadata=dataset.info.metadata, new_version=True
        )
        target.dataset_store().put_fold_plan(source.dataset_store().get_fold_plan(attrs[FOLD_PLAN]))
        write(copied, DATASET_REF, info.ref)
    return copied

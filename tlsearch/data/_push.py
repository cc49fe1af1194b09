"""Data held in Python (arrays, DataFrames) into the dataset store: `push_dataset`, and `push_data`, which the
driver calls for a StudySpec whose dataset is such data."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tlsearch.config import Settings
from tlsearch.data._info import DatasetInfo
from tlsearch.data._open import open_dataset_store
from tlsearch.data._sources import Columns, arrays_from_data, push_arrays
from tlsearch.data._store import DatasetStore


def push_dataset(
    data,
    *,
    name: str | None = None,
    features: str | Sequence[str] | None = None,
    label: str | None = None,
    groups=None,
    sample_weight=None,
    task: str | None = None,
    allow_missing: bool = False,
    new_version: bool = False,
    mongo: str | None = None,
    database: str | None = None,
    home: str | os.PathLike | None = None,
    stores=None,
) -> str:
    """Store data held in Python as a dataset and return its reference "NAME@VERSION", which
    `StudySpec(dataset=...)` names (what `tlsearch dataset push` does for a file).

    Args:
        data: (X, y) arrays, a DataFrame, (DataFrame, "label column") or {"X": .., "y": .., "groups": ..,
            "sample_weight": ..}. X may be a DataFrame and y a Series or list; text labels are encoded as
            integers and their names kept, so refit models predict them.
        name: The dataset's name; default: named after its content ("data-" and a hash), so that pushing the
            same data again stores nothing and returns the same reference.
        features: A DataFrame's feature columns (default: every column but the label, groups and weights).
        label: A DataFrame's label column (default: its last column).
        groups: A DataFrame's column of group ids, or one group id per row.
        sample_weight: A DataFrame's column of sample weights, or one weight per row.
        task: "classification" or "regression": store the labels as classes (whole-number floats become
            integers) or a quantity; default: integer, bool and text labels are classes, float labels a quantity.
        allow_missing: Accept missing (NaN) feature values, for models that handle them.
        new_version: Add a new version when `name` holds other content.
        mongo: The MongoDB URI of the dataset store; default: the settings', else the local store under `home`.
        database: The MongoDB database; default: the settings'.
        home: The embedded default's folder; default: the settings'.
        stores: Stores built already (`tlsearch.Stores`), instead of `mongo`, `database` and `home`.

    Raises:
        DatasetValidationError: Data that cannot be stored as it is (missing values, one class, ...).
        DatasetExistsError: `name` holds other content and `new_version` is not set.
    """
    options = dict(
        name=name,
        features=features,
        label=label,
        groups=groups,
        sample_weight=sample_weight,
        task=task,
        allow_missing=allow_missing,
        new_version=new_version,
    )
    if stores is not None:
        if (mongo, database, home) != (None, None, None):
            raise TypeError("give stores= or mongo=, database=, home=, not both")
        return push_data(stores.dataset_store(), data, **options).ref
    settings = Settings.resolve(mongo=mongo, database=database, home=home)
    with open_dataset_store(settings.mongo, database=settings.database, home=settings.home) as store:
        return push_data(store, data, **options).ref


def push_data(
    store: DatasetStore,
    data,
    *,
    name: str | None = None,
    features: Columns = None,
    label: str | None = None,
    groups=None,
    sample_weight=None,
    task: str | None = None,
    allow_missing: bool = False,
    new_version: bool = False,
) -> DatasetInfo:
    """`push_dataset` into `store`, returning the stored version's info."""
    arrays, metadata = arrays_from_data(
        data, features=features, label=label, groups=groups, sample_weight=sample_weight
    )
    return push_arrays(store, name, arrays, metadata, task=task, allow_missing=allow_missing, new_version=new_version)

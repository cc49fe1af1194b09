"""Ways in: files, DataFrames and scikit-learn's bundled datasets; ensure_dataset for study sources."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tlsearch.data import (
    BUILTINS,
    arrays_from_data,
    arrays_from_frame,
    ensure_dataset,
    push_data,
    push_source,
    read_source,
)
from tlsearch.errors import DatasetExistsError, DatasetNotFoundError, DatasetValidationError


@pytest.fixture
def frame():
    return pd.DataFrame(
        {
            "age": [31, 45, 27, 60],
            "income": [2.5, 3.1, np.nan, 4.0],
            "member": [True, False, True, True],
            "customer": ["c1", "c2", "c1", "c3"],
            "weight": [1.0, 0.5, 1.0, 2.0],
            "churned": ["no", "yes", "no", "yes"],
        }
    )


def test_csv_and_parquet_choose_feature_label_and_group_columns(store, frame, tmp_path):
    frame.to_csv(tmp_path / "churn.csv", index=False)
    frame.to_parquet(tmp_path / "churn.parquet")
    infos = [
        push_source(
            store,
            f"churn-{kind}",
            tmp_path / f"churn.{kind}",
            features="age,income,member",
            label="churned",
            groups="customer",
            sample_weight="weight",
            allow_missing=True,
        )
        for kind in ("csv", "parquet")
    ]
    assert infos[0].hash == infos[1].hash
    info = infos[0]
    assert info.metadata["feature_names"] == ["age", "income", "member"]
    assert info.metadata["class_names"] == ["no", "yes"] and info.metadata["source"] == "file:churn.csv"
    assert info.arrays["X"] == {"dtype": "<f8", "shape": [4, 3]}
    assert info.metadata["allow_missing"] is True and info.metadata["task"] == "classification"
    arrays, _ = read_source(
        tmp_path / "churn.csv", features="age,income,member", label="churned", groups="customer", sample_weight="weight"
    )
    np.testing.assert_array_equal(arrays["y"], [0, 1, 0, 1])
    np.testing.assert_array_equal(arrays["groups"], [0, 1, 0, 2])
    assert np.isnan(arrays["X"][2, 1])


def test_parquet_without_pyarrow_names_the_extra(frame, tmp_path, monkeypatch):
    frame.to_parquet(tmp_path / "churn.parquet")
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)  # as if not installed
    with pytest.raises(
        DatasetValidationError, match=r"churn.parquet: Parquet needs pyarrow: pip install 'tlsearch\[parquet\]'"
    ):
        read_source(tmp_path / "churn.parquet")


def test_default_columns_are_the_last_as_label_and_the_rest_as_features(tmp_path):
    pd.DataFrame({"a": [1, 2], "b": [3.0, 4.0], "target": [0, 1]}).to_csv(tmp_path / "t.csv", index=False)
    arrays, metadata = read_source(tmp_path / "t.csv")
    assert metadata["feature_names"] == ["a", "b"] and metadata["label"] == "target"
    np.testing.assert_array_equal(arrays["X"], [[1, 3], [2, 4]])


def test_non_numeric_features_and_missing_labels_are_named(frame):
    with pytest.raises(DatasetValidationError, match=r"feature column\(s\) 'customer' \((object|str)\).* not numeric"):
        arrays_from_frame(frame, label="churned")
    with pytest.raises(
        DatasetValidationError, match=r"label column 'income' has 1 missing value\(s\) \(first at row 2\)"
    ):
        arrays_from_frame(frame, features=["age"], label="income")
    with pytest.raises(DatasetValidationError, match=r"no label column 'nope' \(columns: age, income"):
        arrays_from_frame(frame, label="nope")


def test_npz_and_npy_files(store, tmp_path):
    X, y = np.arange(12.0).reshape(4, 3), np.array([0, 1, 0, 1])
    np.savez(tmp_path / "plain.npz", X=X, y=y)
    np.savez(tmp_path / "renamed.npz", data=X, target=y)
    np.save(tmp_path / "table.npy", np.column_stack([X, y]))
    hashes = {
        push_source(store, "plain", tmp_path / "plain.npz").hash,
        push_source(store, "renamed", tmp_path / "renamed.npz", features="data", label="target").hash,
        push_source(store, "table", tmp_path / "table.npy").hash,
    }
    assert len(hashes) == 2  # the .npy table has float labels
    arrays, _ = read_source(tmp_path / "table.npy", features="0,2", label="3")
    np.testing.assert_array_equal(arrays["X"], X[:, [0, 2]])

    np.save(tmp_path / "flat.npy", y)
    with pytest.raises(DatasetValidationError, match="2-D table"):
        read_source(tmp_path / "flat.npy")
    np.savez(tmp_path / "objects.npz", X=np.array([None, {}], dtype=object), y=y[:2])
    with pytest.raises(DatasetValidationError, match="'X' in objects.npz is an object array.*pickle"):
        read_source(tmp_path / "objects.npz")
    with pytest.raises(DatasetValidationError, match="has no array 'X'"):
        read_source(tmp_path / "renamed.npz")
    assert not any(info.name == "objects" for info in store.list())


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_sources(name):
    arrays, metadata = read_source(f"sklearn:{name}")
    assert len(arrays["X"]) == len(arrays["y"]) > 100 and metadata["class_names"]


def test_ensure_dataset_pushes_once_then_transfers_nothing(store, tmp_path):
    info = ensure_dataset(store, "sklearn:iris")
    assert info.ref == "iris@1"
    sent = store.stats.bytes_sent
    assert ensure_dataset(store, "sklearn:iris").ref == "iris@1" and store.stats.bytes_sent == sent
    assert ensure_dataset(store, "iris").hash == info.hash
    assert ensure_dataset(store, "iris@1").hash == info.hash

    path = tmp_path / "my data.csv"
    pd.DataFrame({"a": [1, 2, 3], "y": [0, 1, 0]}).to_csv(path, index=False)
    assert ensure_dataset(store, str(path)).ref == "my_data@1"
    pd.DataFrame({"a": [1, 2, 4], "y": [0, 1, 0]}).to_csv(path, index=False)
    with pytest.raises(DatasetExistsError, match="--new-version"):
        ensure_dataset(store, str(path))
    with pytest.raises(DatasetNotFoundError, match="no dataset 'unknown'"):
        ensure_dataset(store, "unknown")
    with pytest.raises(DatasetNotFoundError, match="no file"):
        ensure_dataset(store, str(tmp_path / "missing.csv"))
    with pytest.raises(DatasetValidationError, match="sklearn:digits"):
        ensure_dataset(store, "sklearn:mnist")


def test_missing_feature_values_are_refused_at_push_naming_the_columns_and_counts(store, tmp_path):
    frame = pd.DataFrame({"a": [1.0, np.nan, np.nan, 4.0], "b": [np.nan, 1.0, 2.0, 3.0], "c": [1, 2, 3, 4]})
    frame["y"] = [0, 1, 0, 1]
    frame.to_csv(tmp_path / "gaps.csv", index=False)
    says = r"^missing feature values \(NaN\): 'a' in 2 rows, 'b' in 1 row; impute them, or push with --allow-missing"
    with pytest.raises(DatasetValidationError, match=says):
        push_source(store, "gaps", tmp_path / "gaps.csv")
    with pytest.raises(DatasetValidationError, match=says):  # a study naming the file is refused alike
        ensure_dataset(store, str(tmp_path / "gaps.csv"))
    assert store.list() == []
    info = push_source(store, "gaps", tmp_path / "gaps.csv", allow_missing=True)
    assert info.metadata["allow_missing"] is True
    arrays = {"X": np.array([[1.0, np.inf], [2.0, 3.0]]), "y": np.array([0, 1])}
    with pytest.raises(DatasetValidationError, match=r"^infinite feature values: column 1 in 1 row; replace them"):
        store.push("inf", arrays, allow_missing=True)  # infinite is never "missing"


def test_a_float_label_of_whole_numbers_says_it_is_taken_for_regression_and_how_to_change_it(store, tmp_path, caplog):
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "churned": [0.0, 1.0, 0.0, 1.0]})
    frame.to_csv(tmp_path / "float.csv", index=False)
    with caplog.at_level("WARNING", logger="tlsearch"):
        info = push_source(store, "float", tmp_path / "float.csv")
    assert info.metadata["task"] == "regression" and info.arrays["y"]["dtype"] == "<f8"
    assert caplog.messages == [
        "label 'churned' is float and holds only the whole numbers 0.0, 1.0: it is treated as regression (KFold, a "
        "regression loss); to treat it as class labels, push it with --task classification (Python: "
        "push_dataset(..., task='classification'))"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="tlsearch"):
        info = push_source(store, "classes", tmp_path / "float.csv", task="classification")
    assert info.metadata["task"] == "classification" and info.arrays["y"]["dtype"] == "<i8" and not caplog.messages
    assert push_source(store, "back", tmp_path / "float.csv", task="regression").metadata["task"] == "regression"

    pd.DataFrame({"a": [1.0, 2.0], "y": [0.5, 1.0]}).to_csv(tmp_path / "fractions.csv", index=False)
    with pytest.raises(DatasetValidationError, match="needs whole-number labels"):
        push_source(store, "fractions", tmp_path / "fractions.csv", task="classification")
    pd.DataFrame({"a": [1.0, 2.0], "y": ["no", "yes"]}).to_csv(tmp_path / "text.csv", index=False)
    with pytest.raises(DatasetValidationError, match="the labels are text: they cannot be a regression target"):
        push_source(store, "text", tmp_path / "text.csv", task="regression")
    with pytest.raises(DatasetValidationError, match="task must be 'classification' or 'regression'"):
        push_source(store, "text", tmp_path / "text.csv", task="ranking")


def test_data_held_in_python_is_pushed_under_a_name_made_of_its_content_once(store):
    rng = np.random.default_rng(0)
    X, species = rng.normal(size=(30, 3)), np.array(["setosa", "virginica", "versicolor"] * 10)
    first = push_data(store, (X, species))
    sent = store.stats.bytes_sent
    again = push_data(store, (X.copy(), list(species)))  # equal data, other objects
    assert again.ref == first.ref and first.name.startswith("data-") and store.stats.bytes_sent == sent
    assert first.metadata["class_names"] == ["setosa", "versicolor", "virginica"]
    assert first.metadata["task"] == "classification" and first.arrays["y"]["dtype"] == "<i8"
    assert [info.ref for info in store.list()] == [first.ref]

    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(species=species)
    by_column = push_data(store, (frame, "species"))
    assert by_column.ref == push_data(store, frame).ref == push_data(store, frame, label="species").ref
    assert by_column.hash == first.hash and by_column.ref != first.ref  # other metadata: the same bytes, stored once
    assert by_column.metadata["feature_names"] == ["a", "b", "c"] and by_column.metadata["label"] == "species"
    assert push_data(store, (frame[["a", "b", "c"]], frame["species"])).metadata["label"] == "species"
    other_names = push_data(store, (X, np.where(species == "setosa", "a", np.where(species == "virginica", "c", "b"))))
    assert other_names.hash == first.hash and other_names.ref != first.ref  # the class names tell them apart
    assert push_data(store, (X, species), name="iris-like").ref == "iris-like@1"


def test_every_form_of_data_held_in_python_gives_the_same_arrays():
    X, y = np.arange(12.0).reshape(4, 3), np.array([0, 1, 0, 1])
    groups, weights = np.array(["g1", "g2", "g1", "g3"]), np.array([1.0, 2.0, 1.0, 0.5])
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(g=groups, w=weights, y=y)
    forms = [
        arrays_from_data((X, y), groups=groups, sample_weight=weights),
        arrays_from_data({"X": X, "y": y, "groups": groups, "sample_weight": weights}),
        arrays_from_data(frame, groups="g", sample_weight="w"),
        arrays_from_data((frame.drop(columns=["g"]), "y"), groups=groups, sample_weight="w"),
    ]
    for arrays, _ in forms:
        np.testing.assert_array_equal(arrays["X"], X)
        np.testing.assert_array_equal(arrays["y"], y)
        np.testing.assert_array_equal(arrays["groups"], [0, 1, 0, 2])
        np.testing.assert_array_equal(arrays["sample_weight"], weights)
    with pytest.raises(DatasetValidationError, match="label= name columns of a DataFrame"):
        arrays_from_data((X, y), label="y")
    with pytest.raises(DatasetValidationError, match="label column is given twice"):
        arrays_from_data((frame, "y"), label="a")
    with pytest.raises(DatasetValidationError, match=r"a dict of arrays holds 'X' and 'y'.*not \['X', 'labels'\]"):
        arrays_from_data({"X": X, "labels": y})
    with pytest.raises(DatasetValidationError, match=r"data must be \(X, y\) arrays, a DataFrame"):
        arrays_from_data(X)


def test_missing_values_in_data_held_in_python_are_refused_naming_the_columns(store):
    frame = pd.DataFrame({"age": [30.0, np.nan, 40.0, 50.0], "income": [1.0, 2.0, 3.0, 4.0], "y": [0, 1, 0, 1]})
    with pytest.raises(DatasetValidationError, match=r"missing feature values \(NaN\): 'age' in 1 row;"):
        push_data(store, frame)
    assert push_data(store, frame, allow_missing=True).metadata["allow_missing"] is True
    with pytest.raises(DatasetValidationError, match=r"label array 'y' has 1 row\(s\) with NaN values"):
        push_data(store, (frame[["income"]], [0.0, np.nan, 1.0, 1.0]))
    with pytest.raises(DatasetValidationError, match=r"label array 'y' has 1 missing value"):
        push_data(store, (frame[["income"]], pd.Series(["a", None, "b", "a"])))


@pytest.mark.parametrize("backend", ["local", "mongo"])
def test_push_dataset_chooses_its_store_as_run_does_and_returns_a_ref_a_study_names(tmp_path, backend, request):
    import tlsearch
    from tlsearch.data import open_dataset_store

    where = (
        {"home": tmp_path}
        if backend == "local"
        else {"mongo": request.getfixturevalue("mongo_uri"), "database": request.getfixturevalue("mongo_db_name")}
    )
    X, y = np.arange(20.0).reshape(10, 2), np.array(["a", "b"] * 5)
    ref = tlsearch.push_dataset((X, y), **where)
    assert tlsearch.push_dataset((X, y), **where) == ref and ref.startswith("data-") and ref.endswith("@1")
    assert tlsearch.push_dataset((X, y), name="ab", **where) == "ab@1"
    with open_dataset_store(where.get("mongo"), database=where.get("database"), home=where.get("home")) as store:
        assert len(store.list()) == 2 and ensure_dataset(store, ref).metadata["class_names"] == ["a", "b"]
    with pytest.raises(TypeError, match="give stores= or mongo=, database=, home=, not both"):
        tlsearch.push_dataset((X, y), stores=tlsearch.Stores(home=tmp_path), home=tmp_path)

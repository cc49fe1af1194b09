"""StudySpec: defaults, validation, loading study files by path, and the shipped study files."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import cloudpickle
import optuna
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold

from tlsearch.cv._evaluate import AutoKFold
from tlsearch.cv._pruners import KFoldPruner
from tlsearch.errors import InvalidSpaceError, StudyFileError, StudySpecError, TLSearchError
from tlsearch.spaces import check_space
from tlsearch.spec._spec import CustomLoop, KerasModel, SklearnModel, StudySpec, load_study_file

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def logistic(params):
    return LogisticRegression(C=params["C"])


def spec(**overrides) -> StudySpec:
    fields = {"name": "s", "dataset": "sklearn:iris", "space": {"C": 1.0}, "model": SklearnModel(logistic)}
    fields.update(overrides)
    return StudySpec(**fields)


def test_defaults():
    study = spec()
    assert isinstance(study.cv_, AutoKFold)
    assert (study.cv_.n_splits, study.cv_.shuffle, study.cv_.random_state) == (5, True, 0)
    assert isinstance(study.sampler_, optuna.samplers.TPESampler)
    assert isinstance(study.pruner_, KFoldPruner)
    assert study.metrics == (None,) and study.metric_names == ("score",)
    assert study.directions_ == ("maximize",)
    assert (study.cv, study.sampler, study.pruner, study.direction, study.directions) == (None,) * 5  # as given
    assert study.retries >= 0 and study.seed == 0 and not study.is_multi_objective
    assert spec(cv=3).cv_.n_splits == 3
    splitter = GroupKFold(4)
    assert spec(cv=splitter).cv_ is splitter


@pytest.mark.parametrize(
    "model, metric, expected",
    [
        (SklearnModel(logistic), "neg_log_loss", "maximize"),
        (SklearnModel(logistic), "accuracy", "maximize"),
        (KerasModel(lambda *a: None), None, "minimize"),
        (KerasModel(lambda *a: None), "loss", "minimize"),
        (KerasModel(lambda *a: None), "mean_squared_error", "minimize"),
        (KerasModel(lambda *a: None), "accuracy", "maximize"),
        (KerasModel(lambda *a: None), "neg_log_loss", "maximize"),
        (CustomLoop(lambda *a: 0.0), "val_loss", "minimize"),
        (CustomLoop(lambda *a: 0.0), None, "maximize"),
    ],
)
def test_direction_is_inferred_from_the_metric(model, metric, expected):
    assert spec(model=model, metric=metric).directions_ == (expected,)


def test_multi_objective():
    study = spec(metric=["accuracy", "neg_log_loss"], directions=["maximize", "maximize"])
    assert study.is_multi_objective and study.directions == ["maximize", "maximize"]  # as given
    assert study.metric_names == ("accuracy", "neg_log_loss")
    assert isinstance(study.pruner_, optuna.pruners.NopPruner)
    assert study.directions_ == ("maximize", "maximize")


def test_a_spec_is_plain_data_that_dataclasses_replace_copies_with_new_values():
    given = spec(cv=3, holdout=0.2, direction="maximize", sampler=lambda seed: optuna.samplers.RandomSampler(seed))
    fewer = dataclasses.replace(given, n_trials=5)
    assert fewer.n_trials == 5 and fewer.cv == 3 and fewer.holdout == 0.2 and fewer.direction == "maximize"
    assert fewer.cv_.cv.n_splits == 3 and isinstance(fewer.sampler_, optuna.samplers.RandomSampler)
    assert fewer == dataclasses.replace(given, n_trials=5) and fewer != given
    with pytest.raises(StudySpecError, match="StudySpec.n_trials must be an int >= 1"):
        dataclasses.replace(given, n_trials=0)


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"name": ""}, "StudySpec.name"),
        ({"dataset": None}, "StudySpec.dataset"),
        ({"dataset": 3}, r"StudySpec.dataset must be .* or data held in Python: \(X, y\) arrays.*; got int"),
        ({"space": 3}, "StudySpec.space"),
        ({"model": LogisticRegression()}, "StudySpec.model"),
        ({"metric": "acuracy"}, "did you mean accuracy"),
        ({"metric": ["accuracy", "f1_macro"], "direction": "maximize"}, "one direction per metric"),
        ({"direction": "up"}, "'maximize' or 'minimize'"),
        ({"direction": "maximize", "directions": ["maximize"]}, "give only one"),
        ({"metric": ["accuracy", "f1_macro"], "pruner": optuna.pruners.MedianPruner()}, "multi-objective"),
        ({"n_trials": 0}, "StudySpec.n_trials"),
        ({"timeout": -1}, "StudySpec.timeout"),
        ({"retries": -1}, "StudySpec.retries"),
        ({"cv": 1}, "at least 2 folds"),
        ({"cv": "kfold"}, "scikit-learn splitter"),
        ({"sampler": "tpe"}, "Optuna sampler"),
        ({"metric": ["accuracy", "accuracy"], "direction": ["maximize", "maximize"]}, "distinct"),
        ({"callbacks": [1]}, "StudySpec.callbacks must be a list of functions"),
        ({"callbacks": print}, "StudySpec.callbacks must be a list of functions"),
    ],
)
def test_bad_fields_fail_with_the_field_named(overrides, words):
    with pytest.raises(StudySpecError, match=words) as raised:
        spec(**overrides)
    assert isinstance(raised.value, TLSearchError) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"build": 1}, "KerasModel.build"),
        ({"epochs": 0}, "KerasModel.epochs"),
        ({"early_stopping": 0}, "KerasModel.early_stopping"),
        ({"fit_kwargs": {"epochs": 3}}, "must not set"),
        ({"task": "ranking"}, "KerasModel.task"),
        ({"fit_kwargs": {"callbacks": []}}, r"KerasModel.fit_kwargs must not set 'callbacks'.*KerasModel\(callbacks="),
        ({"callbacks": [1]}, "KerasModel.callbacks must be a function"),
    ],
)
def test_keras_model_validates(kwargs, words):
    fields = {"build": lambda *a: None} | kwargs
    with pytest.raises(StudySpecError, match=words):
        KerasModel(**fields)


def test_check_fails_on_an_unsampleable_space():
    with pytest.raises(InvalidSpaceError, match="'bad-space'.*'C'"):
        check_space(lambda t: {"C": t.suggest_float("C", 0, 1, log=True)}, "bad-space")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


GOOD_FILE = """
import tlsearch
from sklearn.linear_model import LogisticRegression

def make(params):
    return LogisticRegression(C=params["C"])

study = tlsearch.StudySpec(name="{name}", dataset="sklearn:iris", space={{"C": 0.5}},
                           model=tlsearch.SklearnModel(make))
"""


def test_load_study_file_by_path(tmp_path):
    first = load_study_file(write(tmp_path / "a" / "study.py", GOOD_FILE.format(name="first")))
    second = load_study_file(write(tmp_path / "b" / "study.py", GOOD_FILE.format(name="second")))
    assert (first.name, second.name) == ("first", "second")
    # functions defined in the file pickle by value: a worker without the file can still use them
    clone = pickle.loads(cloudpickle.dumps(first))
    assert clone.model.factory({"C": 2.0}).C == 2.0


def test_load_study_file_errors(tmp_path):
    with pytest.raises(StudyFileError, match="does not exist"):
        load_study_file(tmp_path / "missing.py")
    with pytest.raises(StudyFileError, match=r"failed to import: line 3: ZeroDivisionError"):
        load_study_file(write(tmp_path / "broken.py", "import math\n\nx = 1 / 0\n"))
    with pytest.raises(StudyFileError, match="failed to import: line 1: SyntaxError"):
        load_study_file(write(tmp_path / "syntax.py", "def (:\n"))
    with pytest.raises(StudyFileError, match="failed to import.*StudySpecError: StudySpec.name"):
        load_study_file(write(tmp_path / "invalid.py", GOOD_FILE.format(name="")))
    with pytest.raises(StudyFileError, match="defines no module variable `spec`"):
        load_study_file(write(tmp_path / "empty.py", "x = 1\n"))
    with pytest.raises(StudyFileError, match="is a dict, not a tlsearch.StudySpec"):
        load_study_file(write(tmp_path / "wrong.py", "study = {}\n"))


@pytest.mark.parametrize("file_name", ["digits_mlp.py", "wine_sklearn.py", "images_cnn.py"])
def test_shipped_study_files_load_and_check(file_name):
    study = load_study_file(STUDIES / file_name)
    check_space(study.space, study.name)
    assert study.dataset.startswith("sklearn:") and study.n_trials


def test_digits_study_file_stays_tiny():
    lines = [
        line
        for line in (STUDIES / "digits_mlp.py").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert len(lines) <= 25


@pytest.mark.slow
def test_loading_a_scikit_learn_study_does_not_import_keras():
    import subprocess
    import sys

    code = (
        "import sys; from tlsearch.spec import load_study_file; from tlsearch.spaces import check_space; "
        f"spec = load_study_file({str(STUDIES / 'wine_sklearn.py')!r}); check_space(spec.space, spec.name); "
        "assert 'keras' not in sys.modules and 'tensorflow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])

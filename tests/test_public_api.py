"""The public API's shape: what `tlsearch` exports (and lists to `dir`, IDEs and the reference), `run`'s explicit
keyword-only signature with every parameter documented, and an `import tlsearch` that stays light."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest

import tlsearch

# Names the guides and the README tell users to import from tlsearch.
DOCUMENTED = [
    "run",
    "drive",
    "StudySpec",
    "KerasModel",
    "SklearnModel",
    "CustomLoop",
    "load_study_file",
    "KFoldPruner",
    "EpochPruning",
    "AutoKFold",
    "Holdout",
    "TLSearchError",
    "RetryableTrialError",
    "FatalTrialError",
    "RunResult",
    "Budget",
    "ClusterOptions",
    "write_report",
    "results",
    "load_model",
    "predict",
    "Settings",
    "Stores",
    "MongoStorage",
    "push_dataset",
]


def test_every_documented_name_is_exported_listed_and_importable():
    for name in DOCUMENTED:
        assert name in tlsearch.__all__ and name in dir(tlsearch)
        assert getattr(tlsearch, name) is not None
    assert set(dir(tlsearch)) >= set(tlsearch.__all__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        tlsearch.nothing_here  # noqa: B018


@pytest.mark.parametrize("function", [tlsearch.run, tlsearch.drive], ids=["run", "drive"])
def test_run_takes_each_option_once_by_keyword_only(function):
    parameters = list(inspect.signature(function).parameters.values())
    assert parameters[0].name == "spec"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters[1:])
    assert inspect.signature(tlsearch.run).parameters.keys() == inspect.signature(tlsearch.drive).parameters.keys()


def test_runs_docstring_documents_every_parameter():
    args = inspect.getdoc(tlsearch.run).split("Args:\n", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"^    (\w+): ", args, re.M))
    assert documented == set(inspect.signature(tlsearch.run).parameters)


def test_stores_and_the_keywords_that_select_stores_are_not_both_given(tmp_path):
    with pytest.raises(TypeError, match="give stores= or mongo=, database=, home=, not both"):
        tlsearch.drive(None, stores=tlsearch.Stores(home=tmp_path), home=tmp_path)


@pytest.mark.slow
def test_import_tlsearch_imports_no_optuna_dask_or_tensorflow():
    code = "import sys, tlsearch; dir(tlsearch); print(sorted(m for m in ('optuna', 'distributed', 'tensorflow', 'sklearn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

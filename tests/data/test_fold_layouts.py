"""Fold layouts (the host cache's per-plan copies of each fold's rows) carry hashes: damage that keeps a file's
size and mtime is found by `tlsearch dataset verify` and when a trial opens the layout, and never trained on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tlsearch
from tlsearch.cli import main
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(300)

ROWS_STUDY = """
import numpy as np
import tlsearch

def fit(params, fold, report):
    # a fingerprint of the rows the fold trains and is scored on
    return float(np.asarray(fold.x_train, np.float64).sum() + 1e-3 * np.asarray(fold.x_validation, np.float64).sum())

study = tlsearch.StudySpec(
    name="{name}", dataset="sklearn:iris", cv=3, n_trials=1, direction="maximize", space={{}},
    model=tlsearch.CustomLoop(fit))
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TLSEARCH_CACHE_DIR", str(tmp_path / "cache"))  # the workers' host cache too
    return tmp_path / "home"


def fold_scores(tmp_path: Path, home: Path, name: str) -> tuple[list[float], str]:
    """Run a one-trial study that scores each fold by its rows; (its fold scores, its dataset ref)."""
    path = tmp_path / f"{name}.py"
    path.write_text(ROWS_STUDY.format(name=name))
    study = tlsearch.run(load_study_file(path), stores=Stores(home=home), n_workers=1, progress="off")
    [trial] = study.trials
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("error_message")
    return [trial.user_attrs[f"split{k}_test_score"] for k in range(3)], study_attrs.read(study)[
        study_attrs.DATASET_REF
    ]


def damage_keeping_size_and_mtime(path: Path) -> None:
    """Change the last bytes of `path` (array data, not the .npy header), then give it back its mtime."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[-16:] = bytes(255 - byte for byte in data[-16:])
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def layout_file(tmp_path: Path, name: str = "X.npy") -> Path:
    [path] = (tmp_path / "cache" / "layouts").glob(f"*/*/{name}")
    return path


@pytest.mark.slow
def test_a_trial_never_trains_on_a_damaged_fold_layout(tmp_path, home):
    scores, _ = fold_scores(tmp_path, home, "first")
    damage_keeping_size_and_mtime(layout_file(tmp_path))
    again, _ = fold_scores(tmp_path, home, "second")  # the same dataset and splitter: the same layout
    assert again == scores


@pytest.mark.slow
def test_dataset_verify_finds_a_damaged_fold_layout_and_plan_and_a_trial_then_makes_them_again(tmp_path, home, capsys):
    scores, ref = fold_scores(tmp_path, home, "first")
    capsys.readouterr()
    assert main(["dataset", "verify", ref, "--home", str(home)]) == 0
    assert "this host's fold plans and layouts ok (2)" in capsys.readouterr().out

    damage_keeping_size_and_mtime(layout_file(tmp_path, "order.npy"))
    [indices] = (tmp_path / "cache" / "plans").glob("*/indices.npy")
    damage_keeping_size_and_mtime(indices)
    assert main(["dataset", "verify", ref, "--home", str(home)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  this host's cached copy ok" in lines
    damaged = [line for line in lines if "was damaged: removed, made again when next used" in line]
    assert [line.split("this host's ")[1].split()[:2] for line in damaged] == [["fold", "layout"], ["fold", "plan"]]
    assert not list((tmp_path / "cache" / "layouts").glob("*/*"))

    again, _ = fold_scores(tmp_path, home, "second")
    assert again == scores
    assert main(["dataset", "verify", ref, "--home", str(home)]) == 0
    assert "this host's fold plans and layouts ok (2)" in capsys.readouterr().out

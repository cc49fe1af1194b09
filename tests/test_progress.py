"""The progress line: elapsed time on a resumed study, and an ETA that one odd trial does not swing."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from optuna.trial import TrialState

from tlsearch.cli import main
from tlsearch.execution._progress import Progress

STUDY = """
import tlsearch
from sklearn.tree import DecisionTreeClassifier

study = tlsearch.StudySpec(
    name="iris-progress", dataset="sklearn:iris",
    space=lambda trial: {"max_depth": trial.suggest_int("max_depth", 1, 6)},
    model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(max_depth=p["max_depth"], random_state=0)),
    cv=2, metric="accuracy", n_trials=2)
"""


def _eta(line: str) -> str:
    return line.rsplit("eta ", 1)[1]


def test_the_eta_is_the_median_trial_time_per_slot():
    stream = io.StringIO()
    progress = Progress(10, Counter(), mode="log", stream=stream, parallelism=2)
    for number, seconds in enumerate([60, 60, 600, 60]):  # one slow trial among them
        progress.finished(number, TrialState.COMPLETE, 0.5, seconds=seconds)
    lines = stream.getvalue().splitlines()
    assert [_eta(line) for line in lines] == ["4:30", "4:00", "3:30", "3:00"]  # 60 s x trials left / 2 slots
    assert "since resume" not in lines[-1]


def test_a_resumed_study_says_so_and_has_an_eta_from_its_first_line():
    stream = io.StringIO()
    progress = Progress(6, Counter(COMPLETE=4), mode="log", stream=stream, durations=[30, 30, 30, 30])
    progress.finished(4, TrialState.PRUNED, None)
    assert "done 5/6" in stream.getvalue() and "since resume, eta 0:30" in stream.getvalue()


@pytest.mark.slow
def test_resume_shows_elapsed_since_resume(tmp_path, capsys):
    study_file = tmp_path / "iris_progress.py"
    study_file.write_text(STUDY)
    options = ["--home", str(tmp_path / "home"), "--workers", "1", "--progress", "log", "--no-report"]
    assert main(["run", str(study_file), *options]) == 0
    first = [line for line in capsys.readouterr().err.splitlines() if line.startswith("trial ")]
    assert main(["resume", "iris-progress", "--n-trials", "4", *options]) == 0
    resumed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("trial ")]
    assert len(first) == len(resumed) == 2
    assert not any("since resume" in line for line in first)
    assert all("since resume, eta " in line for line in resumed), resumed

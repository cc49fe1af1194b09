"""The pick (`tlsearch.reading._pick`) on studies with re-evaluation trials, what `tlsearch best` and the report
show of it, and the driver's re-evaluations (`StudySpec.intensify`) through `tlsearch run` on both stores."""

from __future__ import annotations

import json
import math

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

import tlsearch
from tests.test_fold_budget import _folds, _stores
from tlsearch import cli
from tlsearch.errors import StudySpecError
from tlsearch.execution._reevaluations import Reevaluations
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._pick import REEVALUATES, REPEAT, pick
from tlsearch.reading._report_page import _render_answer
from tlsearch.reading._trials_table import best_frame, best_summary

X = {"x": FloatDistribution(0, 1)}


def _study(rows, direction="maximize", intensified=True) -> optuna.Study:
    """An in-memory study of `rows`: (value, x, reevaluates, repeat), reevaluates None for an ordinary trial."""
    study = optuna.create_study(direction=direction)
    for value, x, of, repeat in rows:
        attrs = {} if of is None else {REEVALUATES: of, REPEAT: repeat}
        state = TrialState.FAIL if value is None else TrialState.COMPLETE
        study.add_trial(create_trial(state=state, value=value, params={"x": x}, distributions=X, user_attrs=attrs))
    if intensified:
        study_attrs.write(study, study_attrs.INTENSIFIED, True)
    return study


def test_a_lucky_incumbent_loses_its_place_to_a_steady_challenger():
    # trial 0: lucky 0.95 then 0.85, 0.86; trial 1: 0.93, 0.92, 0.91 (paired mean 0.92 against 0.887)
    study = _study([(0.95, 0.1, None, 0), (0.93, 0.2, None, 0), (0.85, 0.1, 0, 1), (0.92, 0.2, 1, 1)])
    study.add_trial(
        create_trial(value=0.86, params={"x": 0.1}, distributions=X, user_attrs={REEVALUATES: 0, REPEAT: 2})
    )
    study.add_trial(
        create_trial(value=0.91, params={"x": 0.2}, distributions=X, user_attrs={REEVALUATES: 1, REPEAT: 2})
    )
    picked = pick(study)
    assert picked.trial.number == 1 and study.best_trial.number == 0  # Optuna's best stays the lucky one
    assert picked.estimate.n == 3 and math.isclose(picked.estimate.mean, 0.92)
    text = best_summary(study)
    assert text.startswith("best trial #1") and "estimate: 0.9200 ± 0.0058 (3 evaluations)" in text
    row = json.loads(best_frame(study).to_json(orient="records", date_format="iso"))[0]
    assert row["number"] == 1 and row["n_evaluations"] == 3
    assert "Best trial #1" in _render_answer(study, study.trials) and "3 evaluations" in _render_answer(
        study, study.trials
    )


def test_one_evaluation_cannot_unseat_several_and_minimize():
    rows = [(0.10, 0.1, None, 0), (0.12, 0.1, 0, 1), (0.05, 0.3, None, 0)]
    assert pick(_study(rows, "minimize")).trial.number == 0  # trial 2 has not run repeat 1 yet
    rows.append((0.06, 0.3, 2, 1))
    assert pick(_study(rows, "minimize")).trial.number == 2


def test_hostile_or_failed_reevaluations_never_win_nor_crash():
    rows = [
        (0.90, 0.1, None, 0),
        (math.inf, 0.2, None, 0),  # Optuna keeps inf (not NaN) as a complete value
        (0.99, 0.3, "1", 1),  # a string for a number: counts for no trial, is no pick
        (0.99, 0.4, 0, 0),  # repeat 0 is the trial itself
        (0.99, 0.5, 77, 1),  # re-runs a trial that does not exist
        (None, 0.1, 0, 1),  # a failed re-evaluation: missing
    ]
    picked = pick(_study(rows))
    assert picked.trial.number == 0 and picked.estimate.n == 1
    assert pick(_study([])) is None
    assert "no complete trial yet" in best_summary(_study([]))


def test_a_study_never_intensified_keeps_optunas_best_trial():
    study = _study([(0.9, 0.1, None, 0), (0.95, 0.2, None, 0)], intensified=False)
    assert pick(study).trial.number == study.best_trial.number == 1


def test_the_driver_policy_enqueues_each_reevaluation_once():
    study = _study([(0.9, 0.1, None, 0)], intensified=False)
    policy = Reevaluations(study, 3)
    policy.enqueue_next()
    policy.enqueue_next()  # asked already: not again
    waiting = study.get_trials(states=[TrialState.WAITING])
    assert len(waiting) == 1 and waiting[0].user_attrs == {REEVALUATES: 0, REPEAT: 1}
    assert waiting[0].system_attrs["fixed_params"] == {"x": 0.1} and study_attrs.read(study)[study_attrs.INTENSIFIED]


def test_intensify_is_checked():
    with pytest.raises(StudySpecError, match="intensify"):
        tlsearch.StudySpec(
            name="s", dataset="sklearn:iris", space=lambda t: {}, model=tlsearch.CustomLoop(abs), intensify=1
        )


STUDY_FILE = """
import numpy as np
import optuna
import tlsearch

def space(trial):
    return {"x": trial.suggest_float("x", -10, 10)}

def fit(params, fold, report):
    return -abs(params["x"] - 2) / 10 + np.random.default_rng(fold.seed).normal(0, 0.5)

study = tlsearch.StudySpec(
    name="raced", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit), cv=3,
    direction="maximize", intensify=3, fold_parallel=False,
    sampler=optuna.samplers.RandomSampler(seed=3), pruner=optuna.pruners.NopPruner())
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(("store", "given"), [("local", "file"), ("mongo", "file"), ("local", "flag")])
def test_a_run_reevaluates_leading_trials_within_the_fold_budget(tmp_path, store, given, request, capsys):
    study_file = tmp_path / "raced.py"
    where, stores = _stores(store, request, tmp_path)
    args = ["--workers", "1", "--progress", "log", "--no-report", *where]
    if given == "flag":  # `run --intensify 3` on a study file that does not intensify
        study_file.write_text(STUDY_FILE.replace("intensify=3, ", ""))
        args += ["--intensify", "3"]
    else:
        study_file.write_text(STUDY_FILE)
    assert cli.main(["run", str(study_file), "--fold-budget", "24", *args]) == 0
    study = study_attrs.load(stores, "raced")
    trials = study.get_trials(deepcopy=False)
    again = [t for t in trials if REEVALUATES in t.user_attrs]
    assert again and len(trials) == 8 and _folds(study) == (24, 24)  # re-evaluations count in the budget
    assert all(t.user_attrs["n_folds_run"] == 3 for t in trials)
    for trial in again:  # the params of the trial it re-runs, on seeds of its own
        original = trials[trial.user_attrs[REEVALUATES]]
        assert trial.params == original.params and trial.value != original.value
    capsys.readouterr()
    assert cli.main(["best", "raced", *where]) == 0
    assert "evaluations" in capsys.readouterr().out
    assert cli.main(["best", "raced", *where, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["number"] == pick(study).trial.number and row["n_evaluations"] >= 1
    frame = tlsearch.results("raced", mongo=stores.mongo, database=stores.database, home=stores.home, best=True)
    estimate = ["number", "estimate_mean", "estimate_standard_error", "n_evaluations"]
    assert frame[estimate].to_dict("records") == [pytest.approx({key: row[key] for key in estimate})]  # best --json


def test_a_bad_intensify_flag_is_one_line(tmp_path, capsys):
    study_file = tmp_path / "raced.py"
    study_file.write_text(STUDY_FILE)
    assert cli.main(["run", str(study_file), "--intensify", "1", "--home", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "StudySpec.intensify" in err and "got 1" in err
    assert not list(tmp_path.glob("**/*.journal*"))  # refused before any study is made


class _PruneAll(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return True


def test_a_reevaluation_trains_every_fold_whatever_the_pruner():
    from tlsearch.cv import _evaluate as cv

    spec = tlsearch.StudySpec(
        name="s",
        dataset="d",
        space=lambda t: {"x": t.suggest_float("x", 0, 1)},
        model=tlsearch.CustomLoop(lambda params, fold, report: params["x"]),
        cv=3,
        direction="maximize",
        pruner=_PruneAll(),
        intensify=2,
    )
    rows = np.arange(30, dtype=float).reshape(-1, 1)
    arrays = {"X": rows, "y": rows[:, 0]}
    folds = list(spec.cv_.split(rows, rows[:, 0]))
    study = optuna.create_study(direction="maximize", pruner=spec.pruner_)
    with pytest.raises(optuna.TrialPruned):
        cv.evaluate(study.ask(), spec, arrays, folds)
    study.enqueue_trial({"x": 0.5}, user_attrs={REEVALUATES: 0, REPEAT: 1})
    assert cv.evaluate(study.ask(), spec, arrays, folds) == 0.5
    assert study.trials[1].user_attrs["n_folds_run"] == 3

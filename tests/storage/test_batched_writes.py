"""The batched trial writes (`set_trial_user_attrs`, `one_write`) of tlsearch's two study stores (MongoDB and the journal
file): what one write stores is what a fresh reader sees, and a finished or missing trial refuses it as single writes do."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState

import tlsearch
from tlsearch.storage import MongoStorage
from tlsearch.storage._journal import open_journal


@pytest.fixture(params=["mongo", "journal"])
def stores(request, tmp_path):
    """(writer, reopen): a store, and a function opening a second one on the same data, with no cache."""
    if request.param == "mongo":
        uri, database = request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name")
        writer = MongoStorage(uri, database)
        yield writer, lambda: MongoStorage(uri, database)
        writer.close()
    else:
        path = str(tmp_path / "studies.journal")
        yield open_journal(path), lambda: open_journal(path)


def test_user_attrs_in_one_write(stores):
    writer, reopen = stores
    study_id = writer.create_new_study([StudyDirection.MAXIMIZE])
    trial_id = writer.create_new_trial(study_id)
    writer.set_trial_user_attrs(trial_id, {"split0_test_score": 0.9, "a.b": [1]})
    writer.set_trial_user_attrs(trial_id, {"split1_test_score": 0.8})
    writer.set_trial_user_attrs(trial_id, {"mean_test_score": 0.85})
    seen = reopen().get_trial(trial_id)
    assert seen.user_attrs == {"split0_test_score": 0.9, "a.b": [1], "split1_test_score": 0.8, "mean_test_score": 0.85}
    writer.set_trial_state_values(trial_id, TrialState.COMPLETE, [0.85])
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        writer.set_trial_user_attrs(trial_id, {"late": 1})
    assert reopen().get_trial(trial_id).user_attrs.keys() == seen.user_attrs.keys()
    with pytest.raises(KeyError):
        writer.set_trial_user_attrs(trial_id + 1000, {"x": 1})


def test_a_kfold_trial_reports_each_fold_with_its_scores(stores):
    """The recorder reports each fold's running mean together with its scores, in the store and in the trial's
    cached copy that the pruner reads."""
    from tlsearch.cv._evaluate import _ResultRecorder
    from tlsearch.models import FoldResult

    writer, reopen = stores
    study = optuna.create_study(storage=writer, direction="maximize")
    trial = study.ask()
    spec = tlsearch.StudySpec(
        name="t",
        dataset="sklearn:iris",
        space=lambda trial: {},
        model=tlsearch.CustomLoop(lambda params, fold, report: 0.0),
    )
    recorder = _ResultRecorder(trial, spec, {"n_splits": 2})
    for index, score in enumerate([0.8, 0.6]):
        recorder.add(index, FoldResult(test_scores=[score], fit_time=1.0, score_time=0.1))
        recorder.write(report=recorder.running_mean())
    recorder.summarise()
    seen = reopen().get_trial(trial._trial_id)
    assert seen.intermediate_values == {0: 0.8, 1: 0.7}
    assert seen.user_attrs["n_splits"] == 2 and seen.user_attrs["split1_test_score"] == 0.6
    assert seen.user_attrs["mean_test_score"] == pytest.approx(0.7)
    assert trial._cached_frozen_trial.intermediate_values == {0: 0.8, 1: 0.7}  # what the pruner reads


def test_a_refused_batch_on_the_journal_is_replayed_past_and_the_store_goes_on(tmp_path, monkeypatch):
    """Every operation of a batch written to a finished trial is refused by the replay; the store replays past
    all of them (one replay each, not a loop that ends only if Optuna counts a refused operation as read)."""
    from tlsearch._compat import optuna as compat

    path = str(tmp_path / "studies.journal")
    storage = open_journal(path)
    study_id = storage.create_new_study([StudyDirection.MAXIMIZE])
    trial_id = storage.create_new_trial(study_id)
    storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])
    replays = []
    replay = compat.replay_journal
    monkeypatch.setattr(compat, "replay_journal", lambda s: replays.append(1) or replay(s))
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_user_attrs(trial_id, {"a": 1, "b": 2, "c": 3})
    assert len(replays) <= 3
    second = storage.create_new_trial(study_id)  # later calls see none of the refused operations
    storage.set_trial_user_attrs(second, {"d": 4})
    assert open_journal(path).get_trial(second).user_attrs == {"d": 4}

    monkeypatch.setattr(compat, "replay_journal", lambda s: (_ for _ in ()).throw(KeyError("refused forever")))
    with pytest.raises(KeyError, match="refused forever"):
        storage._replay_rejected(3)  # bounded: raises after 3 replays instead of spinning


def test_a_trials_writes_in_one_block_reach_a_reader_together_when_it_ends(stores):
    writer, reopen = stores
    study_id = writer.create_new_study([StudyDirection.MAXIMIZE])
    trial_id, other = writer.create_new_trial(study_id), writer.create_new_trial(study_id)
    with writer.one_write(trial_id):
        writer.set_trial_param(trial_id, "x", 0.5, FloatDistribution(0, 1))
        writer.set_trial_param(trial_id, "n", 2, IntDistribution(1, 4))
        with writer.one_write(trial_id):  # part of the outer block
            writer.set_trial_intermediate_value(trial_id, 0, 0.25)
        writer.set_trial_user_attrs(trial_id, {"split0_test_score": 0.25})
        writer.set_trial_user_attrs(other, {"elsewhere": 1})  # another trial's write goes straight through
        held = reopen().get_trial(trial_id)
        assert (held.params, held.intermediate_values, held.user_attrs) == ({}, {}, {})
        assert reopen().get_trial(other).user_attrs == {"elsewhere": 1}
    seen = reopen().get_trial(trial_id)
    assert seen.params == {"x": 0.5, "n": 2}
    assert seen.intermediate_values == {0: 0.25} and seen.user_attrs == {"split0_test_score": 0.25}


def test_a_block_ended_by_an_error_still_sends_its_writes(stores):
    """The parameters a failing search space drew are stored, as they would be one write each."""
    writer, reopen = stores
    trial_id = writer.create_new_trial(writer.create_new_study([StudyDirection.MAXIMIZE]))
    with pytest.raises(RuntimeError, match="bad space"), writer.one_write(trial_id):
        writer.set_trial_param(trial_id, "x", 0.5, FloatDistribution(0, 1))
        raise RuntimeError("bad space")
    assert reopen().get_trial(trial_id).params == {"x": 0.5}


def test_a_block_whose_trial_was_finished_elsewhere_raises_when_it_ends_and_the_store_goes_on(stores):
    writer, reopen = stores
    study_id = writer.create_new_study([StudyDirection.MAXIMIZE])
    trial_id = writer.create_new_trial(study_id)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError), writer.one_write(trial_id):
        writer.set_trial_param(trial_id, "x", 0.5, FloatDistribution(0, 1))
        writer.set_trial_user_attrs(trial_id, {"late": 1})
        reopen().set_trial_state_values(trial_id, TrialState.FAIL)  # failed as stale by another driver
    finished = reopen().get_trial(trial_id)
    assert (finished.state, finished.params, finished.user_attrs) == (TrialState.FAIL, {}, {})
    second = writer.create_new_trial(study_id)
    writer.set_trial_user_attrs(second, {"d": 4})
    assert reopen().get_trial(second).user_attrs == {"d": 4}

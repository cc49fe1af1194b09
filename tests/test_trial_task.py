"""What one trial's task opens: a study object of its own, whose sampler is the study's seeded for the trial.

The sampler each trial is shown through a real cluster is tested in tests/test_samplers.py; these tests pin
the two contracts of `open_trial` that make it right, in one process and one thread, as a worker thread runs
one trial after another."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from tlsearch._compat import optuna as compat
from tlsearch.execution._trial_task import open_trial
from tlsearch.stores._stores import Stores


class Spec:
    """The two things `open_trial` reads from a study definition."""

    pruner_ = optuna.pruners.NopPruner()
    sampler_ = optuna.samplers.TPESampler(seed=0, n_startup_trials=2)


def test_a_later_trial_in_the_same_thread_sees_the_trials_finished_since(tmp_path):
    storage = Stores(home=tmp_path).study_storage()
    study = optuna.create_study(study_name="s", storage=storage)
    first = open_trial(Spec, storage, "s", compat.trial_id(study.ask()), 1)
    first.suggest_float("x", 0, 1)  # fills the study object's trial cache, as sampling does
    study.tell(first.number, 1.0)
    study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 2.0)
    second = open_trial(Spec, storage, "s", compat.trial_id(study.ask()), 2)
    finished = second.study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
    assert len(finished) == 2, "the sampler of a later trial is shown the trials finished since the first"


def test_each_trial_samples_with_the_study_sampler_seeded_for_it(tmp_path):
    storage = Stores(home=tmp_path).study_storage()
    study = optuna.create_study(study_name="s", storage=storage)
    ids = [compat.trial_id(study.ask()) for _ in range(3)]
    draws = [
        open_trial(Spec, storage, "s", trial_id, seed).suggest_float("x", 0, 1)
        for trial_id, seed in zip(ids, (7, 8, 7))
    ]
    assert draws[0] != draws[1], "trials with different seeds draw differently"
    assert draws[0] == draws[2], "the same seed draws the same"
    assert open_trial(Spec, storage, "s", ids[0], 7).study.sampler is not Spec.sampler_

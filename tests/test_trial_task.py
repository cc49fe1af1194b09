"""What one trial's task opens: its study object is reused by the next trial of the same study in a worker thread."""

from __future__ import annotations

import optuna

from tlsearch import _optuna_compat as compat
from tlsearch.stores import Stores
from tlsearch.trial_task import open_trial


class Spec:
    """The two things `open_trial` reads from a study definition."""

    pruner = optuna.pruners.NopPruner()

    @staticmethod
    def sampler_factory(seed):
        return optuna.samplers.RandomSampler(seed=seed)


def test_a_worker_reuses_the_study_object_with_each_trials_own_sampler(tmp_path):
    storage = Stores(home=tmp_path).study_storage()
    study = optuna.create_study(study_name="s", storage=storage)
    first_id, second_id = (compat.trial_id(study.ask()) for _ in range(2))
    first = open_trial(Spec, storage, "s", first_id, 1, compat.study_id(study))
    first_sampler = first.study.sampler
    second = open_trial(Spec, storage, "s", second_id, 2, compat.study_id(study))
    assert second.study is first.study, "the study is not loaded again"
    assert second.study.sampler is not first_sampler and second.study.pruner is Spec.pruner
    assert compat.trial_id(second) == second_id
    expected = optuna.samplers.RandomSampler(seed=2).sample_independent(
        study, None, "x", optuna.distributions.FloatDistribution(0, 1)
    )
    assert second.suggest_float("x", 0, 1) == expected, "sampled with the trial's own seed"


def test_a_study_created_again_under_the_same_name_is_not_mixed_up(tmp_path):
    storage = Stores(home=tmp_path).study_storage()
    old = optuna.create_study(study_name="s", storage=storage)
    trial = open_trial(Spec, storage, "s", compat.trial_id(old.ask()), 0, compat.study_id(old))
    optuna.delete_study(study_name="s", storage=storage)
    new = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    reopened = open_trial(Spec, storage, "s", compat.trial_id(new.ask()), 0, compat.study_id(new))
    assert reopened.study is not trial.study
    assert compat.study_id(reopened.study) == compat.study_id(new)
    assert reopened.study.direction == optuna.study.StudyDirection.MAXIMIZE

"""Optuna's samplers through `tlsearch run` on a real LocalCluster, as users run them.

The workers sample each trial's parameters (define-by-run), so what a worker's sampler is shown decides the
search: these tests check what it sees, that it searches better than random, and that samplers whose state
lives in the study (a grid's order, a QMC sequence, a stop request) behave as they do in plain Optuna.
"""

from __future__ import annotations

import importlib.util
import statistics

import distributed
import optuna
import pytest
from optuna.trial import TrialState

from tlsearch.execution import _driver as driver
from tlsearch.execution._stop_policy import GRID_EXHAUSTED, STUDY_STOPPED
from tlsearch.reading._trials_table import trials_frame
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STUDY_FILE = """
import optuna
import tlsearch
from optuna.trial import TrialState

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class Spy(optuna.samplers.TPESampler):
    \"\"\"TPE that records which finished trials the store held as a trial's sampling began, and which the
    sampler was shown. (Each trial samples with its own copy of the study's sampler.)\"\"\"

    def infer_relative_search_space(self, study, trial):
        self.held = study._storage.get_all_trials(study._study_id, deepcopy=False, states=FINISHED)
        return super().infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        # what every Optuna sampler reads: the study's per-thread trial cache
        shown = study._get_trials(deepcopy=False, states=FINISHED, use_cache=True)
        record = {{"held": [t.number for t in self.held], "shown": [t.number for t in shown]}}
        study._storage.set_trial_system_attr(trial._trial_id, "spy", record)
        return super().sample_relative(study, trial, search_space)


def space(trial):
    {space}


def fit(params, fold, report):
    return sum((params[name] - 0.5) ** 2 for name in sorted(params) if name != "c")


spec = tlsearch.StudySpec(
    name="sampled", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit), cv=2,
    direction="minimize", n_trials={n_trials}, seed={seed}, sampler={sampler}, pruner=optuna.pruners.NopPruner(),
    callbacks={callbacks})
"""

XY = 'return {"x": trial.suggest_float("x", -4, 4), "y": trial.suggest_float("y", -4, 4)}'
XYZ = 'return {name: trial.suggest_float(name, -4, 4) for name in ("x", "y", "z")}'


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def run_study(tmp_path, client, *, sampler="None", space=XY, n_trials=12, seed=0, callbacks="()", stores=None):
    path = tmp_path / f"study_{seed}_{abs(hash(sampler)) % 10**6}.py"
    sampler = sampler if sampler == "None" else f"lambda seed: {sampler}"  # a function of the study's seed
    path.write_text(STUDY_FILE.format(sampler=sampler, space=space, n_trials=n_trials, seed=seed, callbacks=callbacks))
    stores = stores or Stores(home=tmp_path / path.stem)
    return driver.drive(load_study_file(path), stores=stores, client=client, progress="off")


def complete(study):
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


@pytest.mark.parametrize("store", ["local", "mongo"])
def test_every_trial_sampler_is_shown_the_finished_trials_the_store_holds(tmp_path, client, store, request):
    stores = None
    if store == "mongo":
        stores = Stores(request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name"), tmp_path)
    result = run_study(tmp_path, client, sampler="Spy(seed=seed, n_startup_trials=4)", n_trials=16, stores=stores)
    trials = complete(result.study)
    assert len(trials) == 16
    for trial in trials:
        spy = trial.system_attrs["spy"]
        missed = set(spy["held"]) - set(spy["shown"])
        assert not missed, f"trial {trial.number}'s sampler was not shown finished trials {sorted(missed)}"
    assert max(len(t.system_attrs["spy"]["shown"]) for t in trials) >= 12, "later trials saw the history"


def _regret(result) -> float:
    return min(t.value for t in complete(result.study))  # the optimum is 0 at (0.5, 0.5, 0.5)


def test_the_default_tpe_on_workers_searches_better_than_random(tmp_path, client):
    seeds = range(4)
    tpe = [_regret(run_study(tmp_path, client, space=XYZ, n_trials=30, seed=seed)) for seed in seeds]
    random = [
        _regret(
            run_study(
                tmp_path, client, sampler="optuna.samplers.RandomSampler(seed)", space=XYZ, n_trials=30, seed=seed
            )
        )
        for seed in seeds
    ]
    assert statistics.median(tpe) < 0.5 * statistics.median(random), (tpe, random)


def test_a_grid_is_covered_once_and_the_run_ends_as_grid_exhausted(tmp_path, client):
    grid = 'optuna.samplers.GridSampler({"x": [0.0, 0.5, 1.0], "y": [0.0, 0.5, 1.0]}, seed=seed)'
    result = run_study(tmp_path, client, sampler=grid, n_trials=20, seed=3)
    points = [(t.params["x"], t.params["y"]) for t in complete(result.study)]
    assert set(points) == {(x, y) for x in (0.0, 0.5, 1.0) for y in (0.0, 0.5, 1.0)}
    # Trials sampled after the last point was handed out and before its trial is told repeat a point (as in
    # Optuna); how many depends on timing, so only the coverage and the clean end are asserted.
    assert result.reason == GRID_EXHAUSTED and result.exit_code == 0


def test_brute_force_covers_a_discrete_space_and_ends_as_grid_exhausted(tmp_path, client):
    space = 'return {"x": trial.suggest_categorical("x", [0.0, 0.5, 1.0]), "y": trial.suggest_int("y", 0, 2)}'
    result = run_study(
        tmp_path, client, sampler="optuna.samplers.BruteForceSampler(seed=seed)", space=space, n_trials=30
    )
    points = sorted((t.params["x"], t.params["y"]) for t in result.study.trials if t.state.is_finished())
    assert set(points) == {(x, y) for x in (0.0, 0.5, 1.0) for y in range(3)}
    assert result.reason == GRID_EXHAUSTED


def test_a_callback_that_stops_the_study_ends_the_run_cleanly(tmp_path, client):
    callbacks = "[optuna.study.MaxTrialsCallback(3, states=(TrialState.COMPLETE,))]"
    result = run_study(tmp_path, client, n_trials=20, callbacks=callbacks)
    assert result.reason == STUDY_STOPPED and result.exit_code == 0
    assert 3 <= len(complete(result.study)) <= 3 + 2  # the trials in flight when it stopped finish


def test_qmc_draws_the_study_sequence_on_workers(tmp_path, client):
    result = run_study(tmp_path, client, sampler="optuna.samplers.QMCSampler(seed=seed)", n_trials=10)
    local = optuna.create_study(sampler=optuna.samplers.QMCSampler(seed=0))
    local.optimize(lambda t: t.suggest_float("x", -4, 4) + t.suggest_float("y", -4, 4), n_trials=10)
    point = lambda t: (round(t.params["x"], 9), round(t.params["y"], 9))  # noqa: E731
    drawn = {point(t) for t in complete(result.study)}
    # QMC samples its first trials at random to learn the space (two at once here), then the study's sequence
    assert len(drawn & {point(t) for t in local.trials}) >= 8


@pytest.mark.parametrize(
    "sampler, relative_key",
    [
        ("optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=4)", "tpe:relative_params"),
        ("optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=4)", "cma:"),
        pytest.param(
            "optuna.samplers.GPSampler(seed=seed, n_startup_trials=4)",
            None,
            marks=pytest.mark.skipif(
                importlib.util.find_spec("torch") is None, reason="Optuna's GPSampler needs PyTorch, not installed"
            ),
        ),
        ("optuna.samplers.PartialFixedSampler({'y': 1.0}, optuna.samplers.TPESampler(seed=seed))", None),
    ],
)
def test_samplers_run_through_the_workers(tmp_path, client, sampler, relative_key):
    result = run_study(tmp_path, client, sampler=sampler, n_trials=10)
    trials = complete(result.study)
    assert len(trials) == 10, result.summary()
    assert len({(t.params["x"], t.params["y"]) for t in trials}) == 10, "workers drew the same parameters"
    if relative_key:
        assert any(any(key.startswith(relative_key) for key in t.system_attrs) for t in trials), (
            "the relative sampler never sampled a trial"
        )
        columns = list(trials_frame(result.study))
        assert not [c for c in columns if c.startswith("system_attrs_")], "a sampler's bookkeeping is not a result"
    if "PartialFixed" in sampler:
        assert {t.params["y"] for t in trials} == {1.0}


def test_enqueued_trials_run_with_their_params(tmp_path, client):
    stores = Stores(home=tmp_path / "home")
    first = run_study(tmp_path, client, n_trials=2, stores=stores)
    first.study.enqueue_trial({"x": 0.5, "y": 0.5})
    again = run_study(tmp_path, client, n_trials=3, stores=stores)
    assert again.study.best_value == pytest.approx(0.0)


def test_nsga2_runs_a_multi_objective_study_on_workers(tmp_path, client):
    path = tmp_path / "mo.py"
    path.write_text(
        "import optuna, tlsearch\n"
        "def space(trial):\n    return {'x': trial.suggest_float('x', 0, 1)}\n"
        "def fit(params, fold, report):\n    return [params['x'], (1 - params['x']) ** 2]\n"
        "spec = tlsearch.StudySpec(name='mo', dataset='sklearn:iris', space=space, model=tlsearch.CustomLoop(fit),\n"
        "    cv=2, directions=['minimize', 'minimize'], metric=['a', 'b'], n_trials=12,\n"
        "    sampler=lambda seed: optuna.samplers.NSGAIISampler(seed=seed, population_size=4))\n"
    )
    result = driver.drive(load_study_file(path), stores=Stores(home=tmp_path / "mo"), client=client, progress="off")
    trials = complete(result.study)
    assert len(trials) == 12
    # A generation starts when the last has `population_size` complete trials in the store. Trials finished in
    # one wave are told after their replacements are submitted, so how many trials a generation takes depends
    # on timing; by the 7th trial the first generation is complete whatever the timing (a blind sampler, shown
    # no finished trial, would keep every trial in generation 0).
    assert {t.system_attrs.get("NSGAIISampler:generation") for t in trials} >= {0, 1}

"""The digits study written by hand with plain Optuna + Dask + Keras + scikit-learn, as a capable user
would write it without tlsearch: a shared study in an Optuna journal file, the dataset loaded in each task,
k-fold cross-validation with per-fold reporting and pruning, and resume. bench/lines_of_code.py compares it
with studies/digits_mlp.py (same space, same model, same folds, same budget).

Usage: python bench/baseline/digits_plain.py [--n-trials N] [--workers N] [--journal PATH] [--name NAME]
"""

import argparse
import os
import time

import numpy as np
import optuna
from dask.distributed import Client, LocalCluster, as_completed
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold


def load_data():
    # Every task loads the dataset again.
    x, y = load_digits(return_X_y=True)
    return x.astype("float32"), y.astype("int64")


def sample_params(trial):
    depth = trial.suggest_int("mlp.n_layers", 1, 2)
    params = {
        "units": [trial.suggest_int(f"mlp.units_{i}", 16, 128, log=True) for i in range(depth)],
        "dropout": trial.suggest_float("mlp.dropout", 0.0, 0.5),
        "activation": trial.suggest_categorical("mlp.activation", ["relu", "gelu", "tanh"]),
        "batch_norm": trial.suggest_categorical("mlp.batch_norm", [False, True]),
        "optimizer": trial.suggest_categorical("optimizer.name", ["adam", "sgd", "rmsprop"]),
        "learning_rate": trial.suggest_float("optimizer.learning_rate", 1e-3, 1e-1, log=True),
    }
    params["weight_decay"] = (
        trial.suggest_float("optimizer.weight_decay", 1e-6, 1e-2, log=True)
        if trial.suggest_categorical("optimizer.use_weight_decay", [False, True])
        else None
    )
    if params["optimizer"] == "sgd":
        params["momentum"] = trial.suggest_float("optimizer.momentum", 0.0, 0.99)
        params["nesterov"] = trial.suggest_categorical("optimizer.nesterov", [False, True])
    elif params["optimizer"] == "rmsprop":
        params["rho"] = trial.suggest_float("optimizer.rho", 0.8, 0.99)
    return params


def build_model(params, n_features, n_classes):
    import keras

    inputs = keras.Input((n_features,))
    x = keras.layers.Rescaling(1 / 16)(inputs)  # pixels are 0..16
    for units in params["units"]:
        x = keras.layers.Dense(units, use_bias=not params["batch_norm"])(x)
        if params["batch_norm"]:
            x = keras.layers.BatchNormalization()(x)
        x = keras.layers.Activation(params["activation"])(x)
        if params["dropout"] > 0:
            x = keras.layers.Dropout(params["dropout"])(x)
    model = keras.Model(inputs, keras.layers.Dense(n_classes, activation="softmax")(x))
    options = {"learning_rate": params["learning_rate"], "weight_decay": params["weight_decay"]}
    if params["optimizer"] == "sgd":
        optimizer = keras.optimizers.SGD(momentum=params["momentum"], nesterov=params["nesterov"], **options)
    elif params["optimizer"] == "rmsprop":
        optimizer = keras.optimizers.RMSprop(rho=params["rho"], **options)
    else:
        optimizer = keras.optimizers.Adam(**options)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def run_trial(journal, study_name, trial_number, seed, epochs, n_folds):
    import keras

    storage = JournalStorage(JournalFileBackend(journal))
    # A fresh seeded sampler per trial, or every worker draws the same parameters.
    sampler = optuna.samplers.TPESampler(seed=seed + trial_number)
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=sampler, pruner=optuna.pruners.MedianPruner(n_startup_trials=5)
    )
    trial_id = next(t._trial_id for t in study.get_trials(deepcopy=False) if t.number == trial_number)
    trial = optuna.Trial(study, trial_id)
    params = sample_params(trial)
    x, y = load_data()
    folds = StratifiedKFold(n_folds, shuffle=True, random_state=0).split(x, y)
    scores = []
    for k, (train, valid) in enumerate(folds):
        keras.utils.set_random_seed(seed + 1000 * trial_number + k)
        model = build_model(params, x.shape[1], int(y.max()) + 1)
        # Early stopping watches 10% of the fold's training rows, never its validation rows.
        stop = keras.callbacks.EarlyStopping(patience=2, restore_best_weights=True)
        model.fit(x[train], y[train], validation_split=0.1, epochs=epochs, batch_size=32, callbacks=[stop], verbose=0)
        score = model.evaluate(x[valid], y[valid], verbose=0, return_dict=True)["accuracy"]
        scores.append(score)
        trial.set_user_attr(f"split{k}_test_score", score)
        keras.backend.clear_session()
        trial.report(float(np.mean(scores)), k)
        if trial.should_prune():
            return trial_number, "pruned", None
    trial.set_user_attr("mean_test_score", float(np.mean(scores)))
    trial.set_user_attr("std_test_score", float(np.std(scores)))
    return trial_number, "complete", float(np.mean(scores))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trials", type=int, default=12)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--journal", default="baseline.journal")
    parser.add_argument("--name", default="digits-mlp-baseline")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    storage = JournalStorage(JournalFileBackend(args.journal))
    study = optuna.create_study(study_name=args.name, storage=storage, direction="maximize", load_if_exists=True)
    # Resume: trials left RUNNING by a dead driver are failed and run again.
    for trial in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.RUNNING]):
        storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    remaining = args.n_trials - len(study.get_trials(deepcopy=False, states=finished))
    started = time.time()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1) as cluster, Client(cluster) as client:
        running, numbers = as_completed(), {}

        def submit():
            trial = study.ask()
            future = client.submit(
                run_trial, args.journal, args.name, trial.number, args.seed, args.epochs, args.folds, pure=False
            )
            numbers[future] = trial.number
            running.add(future)

        for _ in range(min(remaining, args.workers)):
            submit()
        submitted = min(remaining, args.workers)
        for future in running:
            try:
                number, state, value = future.result()
            except Exception as error:
                study.tell(numbers[future], state=optuna.trial.TrialState.FAIL)
                print(f"trial {numbers[future]} failed: {error!r}")
                continue
            if state == "pruned":
                study.tell(number, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(number, value)
            print(f"trial {number} {state} {value}")
            if submitted < remaining:
                submit()
                submitted += 1
    best = study.best_trial
    print(f"best trial #{best.number}: {best.value:.4f} {best.params} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()

"""`tlsearch run`, `tlsearch resume` and `tlsearch stop`: drive a study."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from tlsearch.cli import echo, seconds, security_of, stores_of, study_name, tls_options

log = logging.getLogger(__name__)


def register(subparsers, parent) -> None:
    run = subparsers.add_parser(
        "run",
        parents=[parent, _driver_options()],
        help="run a study file to its target",
        description="Run the study defined in STUDY_FILE (a Python file with a `spec = tlsearch.StudySpec(...)`) "
        "until --n-trials trials are complete or pruned in total (or --fold-budget folds are spent), then print "
        "the best trial and write the report. Running an existing study again continues it.",
        epilog="example: tlsearch run studies/digits_mlp.py --n-trials 20 --workers 2",
    )
    run.add_argument("study_file", metavar="STUDY_FILE", help="path of the study file")
    run.add_argument("--name", type=study_name, help="study name (default: the name in the study file)")
    run.set_defaults(func=_run)

    resume = subparsers.add_parser(
        "resume",
        parents=[parent, _driver_options()],
        help="continue a study from the store",
        description="Continue study NAME from the study store, with the study file it was run with on this "
        "machine (or --study PATH), after checking that its dataset and fold plan are unchanged.",
        epilog="example: tlsearch resume digits-mlp --n-trials 40",
    )
    resume.add_argument("name", metavar="NAME", type=study_name)
    resume.add_argument(
        "--study",
        "--study-file",
        dest="study_file",
        metavar="PATH",
        help="study file to run (default: the one that ran NAME on this machine)",
    )
    resume.set_defaults(func=_resume)

    stop = subparsers.add_parser(
        "stop",
        parents=[parent],
        help="ask running drivers to finish",
        description="Ask every driver running study NAME to finish its running trials and start no new ones.",
        epilog="example: tlsearch stop digits-mlp",
    )
    stop.add_argument("name", metavar="NAME", type=study_name)
    stop.set_defaults(func=_stop)


def _driver_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, parents=[tls_options()])
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="address of an existing Dask scheduler, e.g. tcp://10.0.0.5:8786 "
        "(default: $TLSEARCH_SCHEDULER, else a local cluster)",
    )
    where.add_argument(
        "--scheduler-file",
        metavar="PATH",
        help="JSON file naming the scheduler, as `dask scheduler --scheduler-file PATH` writes it",
    )
    where.add_argument(
        "--workers", type=int, metavar="N", help="worker processes of the local cluster (default: one per core)"
    )
    parser.add_argument(
        "--parallelism", type=int, metavar="N", help="trials in flight (default: the cluster's capacity)"
    )
    parser.add_argument(
        "--n-trials", type=int, metavar="N", help="complete + pruned trials to reach, counting earlier ones"
    )
    parser.add_argument(
        "--fold-budget",
        type=int,
        metavar="N",
        help="folds to train in total, counting earlier runs' and every driver's: no trial starts unless its k "
        "folds fit; pruned and failed trials count only the folds they trained (default: the study file's)",
    )
    parser.add_argument(
        "--intensify",
        type=int,
        metavar="N",
        help="re-run leading trials' CV on fresh seeds, up to N evaluations each (N >= 2; 0: off), and pick the "
        "best by all its evaluations; re-runs count in --fold-budget (default: the study file's intensify)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help="stop starting trials after S seconds; trials still running 15 s later are failed and retried on resume",
    )
    parser.add_argument(
        "--trial-timeout",
        type=seconds,
        metavar="S",
        help="fail a trial that runs longer than S seconds (TrialTimeout) and restart its worker "
        "(default: the study file's trial_timeout)",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "bar", "log", "off"),
        default="auto",
        help="live bar, one line per trial, or nothing (default: bar on a terminal)",
    )
    parser.add_argument(
        "--report", metavar="PATH", help="where to write the HTML report (default: HOME/reports/NAME.html)"
    )
    parser.add_argument("--no-report", action="store_true", help="do not write the report")
    return parser


def _run(args) -> int:
    from tlsearch.spec._spec import load_study_file, study_file_path

    study_file = study_file_path(args.study_file)  # `example:NAME` recorded as the shipped file's path
    spec = load_study_file(study_file)
    return _drive(args, spec, args.name or spec.name, study_file, resume=False)


def _resume(args) -> int:
    from tlsearch.reading import _study_attrs as study_attrs
    from tlsearch.spec._spec import load_study_file
    from tlsearch.stores import _study_files as study_files

    stores = stores_of(args)
    hint = study_attrs.read(study_attrs.load(stores, args.name)).get(study_attrs.STUDY_FILE)
    study_file = study_files.resolve(stores, args.name, args.study_file, hint)
    return _drive(args, load_study_file(study_file), args.name, study_file, resume=True)


def _drive(args, spec, name: str, study_file, resume: bool) -> int:
    """Run the study, print its best trial, write the report; the exit code says why the run ended."""
    from tlsearch.execution import _driver as driver
    from tlsearch.reading import _trials_table as trials_table

    stores = stores_of(args)
    if args.intensify is not None:
        spec = dataclasses.replace(spec, intensify=args.intensify)  # checked as the study file's would be
    result = driver.drive(
        spec,
        stores=stores,
        # The command line's scheduler and TLS options over the other layers' (`--workers` asks for a local cluster).
        scheduler=args.settings.scheduler_address() if args.workers is None else None,
        security=security_of(args),
        n_workers=args.workers,
        parallelism=args.parallelism,
        n_trials=args.n_trials,
        timeout=args.timeout,
        trial_timeout=args.trial_timeout,
        fold_budget=args.fold_budget,
        name=name,
        study_file=study_file,
        progress="off" if args.quiet else args.progress,
        resume=resume,
    )
    if result.reason == driver.NOTHING_TO_DO:
        log.info("nothing to do: %s", result.detail)
        return result.exit_code
    echo(trials_table.best_summary(result.study))
    saved = _pruning_summary(result.study)
    if saved:
        echo(saved)
    if not args.no_report:
        from tlsearch.reading._report import write_report

        path = Path(args.report) if args.report else stores.home / "reports" / f"{name}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        echo(f"report: {write_report(result.study, path)}")
    (log.info if result.exit_code == 0 else log.warning)("%s", result.summary())
    return result.exit_code


def _pruning_summary(study) -> str | None:
    """What pruning saved, from the study's stored trials (every run of it): how many of the complete and pruned
    trials were pruned, the folds they did not train (`n_splits - n_folds_run`; a fold stopped inside, on
    epochs, counts as not trained) of all those trials' folds, and that many folds' mean stored fit time.
    None when no trial was pruned; trials without `n_splits` and `n_folds_run` are left out."""
    from optuna.trial import TrialState

    from tlsearch.reading._trials_table import number_attr

    n_trials = n_pruned = n_folds = not_trained = 0
    fit_times = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        n_splits, n_run = number_attr(trial, "n_splits", count=True), number_attr(trial, "n_folds_run", count=True)
        if n_splits is None or n_run is None:
            continue
        n_trials, n_folds = n_trials + 1, n_folds + n_splits
        if trial.state == TrialState.PRUNED:
            n_pruned, not_trained = n_pruned + 1, not_trained + n_splits - n_run
        fit_times += [t for k in range(n_run) if (t := number_attr(trial, f"split{k}_fit_time")) is not None]
    if not n_pruned:
        return None
    line = (
        f"pruning stopped {n_pruned} of {n_trials} trials early: {not_trained} of {n_folds} folds not trained "
        f"({not_trained / n_folds:.0%}"
    )
    if fit_times:
        fold_s = sum(fit_times) / len(fit_times)
        line += f", about {not_trained * fold_s:.3g} s of fitting at {fold_s:.2g} s a fold"
    return line + ")"


def _stop(args) -> int:
    from tlsearch.reading import _study_attrs as study_attrs

    study_attrs.request_stop(stores_of(args), args.name)
    echo(f"asked the drivers of {args.name!r} to stop; running trials will finish")
    return 0

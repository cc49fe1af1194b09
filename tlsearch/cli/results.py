"""`tlsearch status`, `best`, `trials`, `report`, `dashboard` and `copy`: look at studies in the store."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tlsearch.cli import echo, stores_of, study_name
from tlsearch.errors import TLSearchError


def register(subparsers, parent) -> None:
    status = subparsers.add_parser(
        "status",
        parents=[parent],
        help="studies and their progress",
        description="All studies in the store, or one: trials complete / pruned / failed / running, best value, "
        "dataset, started, last activity.",
        epilog="example: tlsearch status digits-mlp --json",
    )
    status.add_argument("name", metavar="NAME", type=study_name, nargs="?")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_status)

    best = subparsers.add_parser(
        "best",
        parents=[parent],
        help="the best trial of a study",
        description="The best trial of study NAME: params, mean ± std CV score and per-fold scores.",
        epilog="example: tlsearch best digits-mlp",
    )
    best.add_argument("name", metavar="NAME", type=study_name)
    best.add_argument("--json", action="store_true", help="machine-readable output")
    best.set_defaults(func=_best)

    trials = subparsers.add_parser(
        "trials",
        parents=[parent],
        help="the trials of a study, with per-fold scores",
        description="The trials of study NAME. The table fits the terminal: number, state, value(s), CV mean ± "
        "std, folds run, duration and params, cut or left out (and said so) when they do not fit. CSV, JSON "
        "and Parquet have every column: Optuna's trials_dataframe() led by scikit-learn's cv_results_ columns "
        "(rank_test_score, mean/std test score, fit and score times, split{k}_test_score, n_folds_run), then "
        "value (values_{metric} with several objectives), state, times, duration (seconds) and params_*.",
        epilog="example: tlsearch trials digits-mlp --top 10 --columns number,value,duration,params_lr",
    )
    trials.add_argument("name", metavar="NAME", type=study_name)
    trials.add_argument(
        "--format",
        choices=("table", "csv", "json", "parquet"),
        default="table",
        help="parquet needs pyarrow (pip install 'tlsearch[parquet]') and --output",
    )
    trials.add_argument("-o", "--output", default=None, help="file to write (default: standard output)")
    trials.add_argument(
        "--raw-csv",
        action="store_true",
        help="write CSV cells as stored; by default a text cell starting with = + - @, tab or CR gets a "
        "leading ' so a spreadsheet does not run it as a formula, and its control characters are escaped",
    )
    trials.add_argument(
        "--state",
        action="append",
        type=str.upper,
        choices=[s.name for s in TrialState],
        metavar="STATE",
        help="only trials in this state (complete, pruned, fail, running, waiting); repeatable",
    )
    trials.add_argument(
        "--columns",
        metavar="A,B,C",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        help="only these columns, in this order, named as in the CSV header (a parameter also without "
        "params_); they may name the internal ones CSV leaves out: the fold tasks' user_attrs_fold_tasks and "
        "user_attrs_split{k}_worker, the samplers' system_attrs_*",
    )
    trials.add_argument(
        "--sort",
        metavar="COLUMN",
        help="order of the rows (default: number): ascending, except value columns, best first in the study's "
        "direction (complete trials first)",
    )
    trials.add_argument("--reverse", action="store_true", help="reverse the order of --sort")
    trials.add_argument(
        "--top",
        type=int,
        metavar="N",
        help="only the N best complete trials by the objective, best first (with several objectives, by the "
        "value column --sort names)",
    )
    trials.set_defaults(func=_trials)

    report = subparsers.add_parser(
        "report",
        parents=[parent],
        help="write the HTML report of a study",
        description="Write a self-contained HTML report (opens offline), with PNGs of its figures on request.",
        epilog="example: tlsearch report digits-mlp -o report.html",
    )
    report.add_argument("name", metavar="NAME", type=study_name)
    report.add_argument("-o", "--output", default=None, help="HTML file to write (default: HOME/reports/NAME.html)")
    report.add_argument(
        "--png",
        action="store_true",
        help="also write a PNG of each figure beside the page (needs pip install 'tlsearch[png]')",
    )
    report.set_defaults(func=_report)

    dashboard = subparsers.add_parser(
        "dashboard",
        parents=[parent],
        help="serve optuna-dashboard on the study store",
        description="Serve optuna-dashboard on the study store (MongoDB or the local journal).",
        epilog="example: tlsearch dashboard --port 8080",
    )
    dashboard.add_argument(
        "name", metavar="NAME", nargs="?", help="accepted for symmetry; the dashboard lists every study"
    )
    dashboard.add_argument("--host", default="127.0.0.1")
    dashboard.add_argument("--port", type=int, default=8080)
    dashboard.set_defaults(func=_dashboard)

    copy = subparsers.add_parser(
        "copy",
        parents=[parent],
        help="copy a study between stores (e.g. local → MongoDB)",
        description="Copy study NAME from the store selected by --mongo/--home to the MongoDB at --to "
        "(optuna.copy_study underneath; the fold plan and dataset references come along).",
        epilog="example: tlsearch copy digits-mlp --to mongodb://db.example:27017",
    )
    copy.add_argument("name", metavar="NAME", type=study_name)
    copy.add_argument("--to", metavar="URI", required=True, help="MongoDB URI to copy the study into")
    copy.add_argument("--to-database", default=None, help="database there (default: --database)")
    copy.add_argument("--to-name", type=study_name, default=None, help="study name there (default: NAME)")
    copy.set_defaults(func=_copy)


def _load(args) -> optuna.Study:
    from tlsearch.reading import _study_attrs as study_attrs

    return study_attrs.load(stores_of(args), args.name)


def _status(args) -> int:
    from tlsearch.reading import _trials_table as trials_table

    stores = stores_of(args)
    storage = stores.study_storage()
    names = [s.study_name for s in storage.get_all_studies()]
    if args.name:
        if args.name not in names:
            raise TLSearchError(f"no study named {args.name!r} in {stores.describe()}")
        names = [args.name]
    rows = [trials_table.study_status(optuna.load_study(study_name=name, storage=storage)) for name in names]
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    elif not rows:
        echo(f"no studies in {stores.describe()}")
    else:
        echo(trials_table.format_rows(rows))
    return 0


def _best(args) -> int:
    from tlsearch.reading import _trials_table as trials_table

    study = _load(args)
    if args.json:  # the pick's row of `tlsearch trials --format json` (+ its estimate): one naming for both
        print(trials_table.format_frame(trials_table.best_frame(study), "json"))
    else:
        echo(trials_table.best_summary(study))
    return 0


def _trials(args) -> int:
    from tlsearch._files import write_file
    from tlsearch.reading import _trials_table as trials_table

    states = tuple(TrialState[s] for s in args.state) if args.state else None
    if args.format == "parquet" and not args.output:
        raise TLSearchError("--format parquet writes a file: give it with --output FILE.parquet")
    if args.format == "parquet":
        trials_table.require_pyarrow()  # before reading the study
    frame = trials_table.trials_frame(
        _load(args), states, columns=args.columns, sort=args.sort, reverse=args.reverse, top=args.top
    )
    if args.format == "table":
        text = trials_table.format_table(frame, compact=args.columns is None)
    else:
        text = trials_table.format_frame(frame, args.format, args.output, raw_csv=args.raw_csv)
    if text is not None and args.output:
        write_file(args.output, text)
    elif text is not None:
        print(text)
    return 0


def _report(args) -> int:
    from tlsearch.reading._report import write_report

    study = _load(args)
    path = Path(args.output) if args.output else args.settings.home / "reports" / f"{args.name}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    echo(f"report: {write_report(study, path, png=args.png)}")
    return 0


def _dashboard(args) -> int:
    try:
        import optuna_dashboard
    except ImportError:
        raise TLSearchError("optuna-dashboard is not installed: pip install 'tlsearch[dashboard]'") from None
    stores = stores_of(args)
    _refuse_busy_port(args.host, args.port)  # before the server's banner, which would say it is listening
    echo(f"optuna-dashboard on {stores.describe()}: http://{args.host}:{args.port}/  (Ctrl-C to stop)")
    try:
        optuna_dashboard.run_server(
            stores.study_storage(), host=args.host, port=args.port, artifact_store=stores.artifact_store()
        )
    except OSError as error:  # taken between the check and the server's start
        _refuse_busy_port(args.host, args.port, error)
        raise
    return 0


def _refuse_busy_port(host: str, port: int, error: OSError | None = None) -> None:
    """Raise a one-line TLSearchError if `port` is in use on `host` (or `error` says so)."""
    import errno
    import socket

    if error is None:
        try:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
                probe.bind((host, port))
        except OSError as bind_error:
            error = bind_error
    if error is not None and error.errno == errno.EADDRINUSE:
        raise TLSearchError(f"port {port} is in use on {host}: --port to choose another") from None


def _copy(args) -> int:
    from tlsearch.reading import _study_attrs as study_attrs
    from tlsearch.stores._stores import Stores

    source = stores_of(args)
    target = Stores.resolve(args.to, args.to_database or args.settings.database, args.settings.home)
    to_name = args.to_name or args.name
    if to_name == args.name and _same_store(source, target):
        raise TLSearchError(
            f"the source and the destination are both {source.describe()}: the source is the store --mongo, "
            "$TLSEARCH_MONGO_URI or the config file selects (else the local folder under --home); "
            "unset TLSEARCH_MONGO_URI to copy a local study, or give --to-name to copy it under another name"
        )
    try:
        study_attrs.copy(source, target, args.name, to_name)
    except optuna.exceptions.DuplicatedStudyError:
        raise TLSearchError(
            f"{target.describe()} has a study named {to_name!r} already: give --to-name to copy it under another name"
        ) from None
    echo(f"copied study {args.name!r} with its dataset from {source.describe()} to {target.describe()} as {to_name!r}")
    return 0


def _same_store(one, other) -> bool:
    from tlsearch.config import database_name

    if one.is_local or other.is_local:
        return one.is_local and other.is_local and one.home.resolve() == other.home.resolve()
    return (one.mongo, database_name(one.mongo, one.database)) == (
        other.mongo,
        database_name(other.mongo, other.database),
    )

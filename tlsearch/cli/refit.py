"""`tlsearch refit`: train the best trial's parameters on all the data and keep the model in the store."""

from __future__ import annotations

from tlsearch.cli import echo, study_name


def register(subparsers, parent) -> None:
    refit = subparsers.add_parser(
        "refit",
        parents=[parent],
        help="train the best params on the whole dataset and store the model",
        description="Train the best trial's parameters (or trial N's) on the study's whole dataset, save the "
        "model (.keras or .skops, never pickle), and record it as an artifact of the study with its "
        "dataset hash, params and CV score. Load it in Python with tlsearch.load_model(NAME).",
        epilog="example: tlsearch refit digits-mlp -o digits.keras",
    )
    refit.add_argument("name", metavar="NAME", type=study_name)
    refit.add_argument("--trial", type=int, metavar="N", help="refit trial N instead of the best trial")
    refit.add_argument(
        "--study",
        "--study-file",
        dest="study_file",
        metavar="PATH",
        help="study file to use (default: the one that ran NAME on this machine)",
    )
    refit.add_argument(
        "-o",
        "--output",
        help="where to save the model (default: HOME/models/NAME.keras|.skops for a local study, "
        "HOME/models/mongodb-HASH/NAME.keras|.skops for one in MongoDB, HASH naming its servers and database)",
    )
    refit.set_defaults(func=_refit)


def _refit(args) -> int:
    from tlsearch.cli import stores_of
    from tlsearch.reading._refit import refit
    from tlsearch.spec._spec import load_study_file

    spec = load_study_file(args.study_file) if args.study_file else None
    record, path = refit(args.name, stores=stores_of(args), trial_number=args.trial, spec=spec, output=args.output)
    score = "" if record.cv_score is None else f" (CV score {record.cv_score:.6g})"
    if record.test_score is not None:
        score += f", test hold-out score {record.test_score:.6g}"
    echo(f"refit trial #{record.trial_number}{score} on {record.dataset_ref}: {path}")
    echo(
        f"stored as artifact {record.artifact_id} of study {args.name!r}; "
        f"load it with tlsearch.load_model({args.name!r})"
    )
    return 0

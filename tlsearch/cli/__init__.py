"""The `tlsearch` command: one sub-command per module in this package.

Each module exposes `register(subparsers, parent)`, which adds its parser (with `parents=[parent]` for the
common options) and sets `func(args) -> int | None`.
Errors a user can fix (`TLSearchError`, bad input) print one line and exit 1; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

import tlsearch
from tlsearch import config
from tlsearch.errors import TLSearchError

# Sub-command modules, in the order `tlsearch --help` lists them.
_COMMANDS = ("study", "results", "refit", "dataset", "worker", "examples")


def common_options() -> argparse.ArgumentParser:
    """Options every sub-command accepts (flag, then environment variable, then default)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--mongo", metavar="URI", default=None,
                        help="MongoDB URI of the study and dataset stores (default: $TLSEARCH_MONGO_URI, "
                             "else the embedded default under --home)")
    parser.add_argument("--database", default=config.DEFAULT_DATABASE, help="MongoDB database (default: %(default)s)")
    parser.add_argument("--home", metavar="DIR", default=None,
                        help="folder of the embedded default (default: $TLSEARCH_HOME, else ./.tlsearch)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    return parser


def stores_of(args):
    """The stores the common options select (`--mongo`, `--database`, `--home`)."""
    from tlsearch.stores import Stores

    return Stores.resolve(args.mongo, args.database, args.home)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tlsearch",
        description="Hyperparameter search with k-fold cross-validation on Optuna + Dask, "
                    "with studies and datasets in MongoDB or a local folder.",
        epilog="example: tlsearch run studies/digits_mlp.py --n-trials 20",
    )
    parser.add_argument("--version", action="version", version=f"tlsearch {tlsearch.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parent = common_options()
    for name in _COMMANDS:
        importlib.import_module(f"tlsearch.cli.{name}").register(subparsers, parent)
    return parser


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter (inherited by worker processes) buries the progress output.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    args.mongo = config.mongo_uri(args.mongo)
    args.home = config.home(args.home)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args) or 0
    except (TLSearchError, KeyError, ValueError, FileNotFoundError) as error:
        if args.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"tlsearch: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tlsearch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

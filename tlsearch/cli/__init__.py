"""The `tlsearch` command: one sub-command per module in this package.

Each module exposes `register(subparsers, parent)`, which adds its parser (with `parents=[parent]` for the
common options) and sets `func(args) -> int | None`.
Errors a user can fix (`TLSearchError`, bad input) print one line and exit 1; `--debug` shows the traceback.
`run` and `resume` exit with the codes of `tlsearch.execution.EXIT_CODES` (README: "Faults, stopping and resuming").
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import sys

import tlsearch
from tlsearch import config
from tlsearch.errors import TLSearchError

# Sub-command modules, in the order `tlsearch --help` lists them.
_COMMANDS = ("study", "results", "refit", "dataset", "worker", "examples")


def common_options() -> argparse.ArgumentParser:
    """Options every sub-command accepts (over the environment, the config file and the defaults: see
    `tlsearch.Settings`)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--mongo",
        metavar="URI",
        default=None,
        help="MongoDB URI of the study and dataset stores (default: $TLSEARCH_MONGO_URI, "
        "else the embedded default under --home)",
    )
    parser.add_argument(
        "--database", help=f"MongoDB database (default: $TLSEARCH_DATABASE, else {config.DEFAULT_DATABASE})"
    )
    parser.add_argument(
        "--home",
        metavar="DIR",
        default=None,
        help="folder of the embedded default (default: $TLSEARCH_HOME, else ./.tlsearch)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "-v", "--verbose", action="store_true", help="more output: debug logs, Optuna's and TensorFlow's start-up logs"
    )
    loudness.add_argument("-q", "--quiet", action="store_true", help="only warnings, errors and results")
    return parser


def stores_of(args):
    """The stores the settings select (`--mongo`, `--database`, `--home`, then the other layers)."""
    from tlsearch.stores._stores import Stores

    return Stores.of(args.settings)


def settings_of(args) -> config.Settings:
    """The settings, the command line's options (those the command has) over the other layers."""
    given = {name: getattr(args, name, None) for name in config.ENVIRONMENT}
    return config.Settings.resolve(source=lambda name: f"option --{name.replace('_', '-')}", **given)


def tls_options() -> argparse.ArgumentParser:
    """Dask TLS options (default: $TLSEARCH_TLS_CA_FILE / _CERT / _KEY, else the config file's tls_* keys)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate that signed every peer's certificate")
    parser.add_argument("--tls-cert", metavar="PEM", help="this process's certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="this process's private key")
    return parser


def security_of(args):
    """The `distributed.Security` the TLS options select, or None for plain TCP."""
    from tlsearch.execution import _cluster as cluster

    return cluster.tls_security(*args.settings.tls_files())


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


def echo(text: object) -> None:
    """Print text for people on standard output, its control characters escaped (line breaks kept): whatever
    it holds from a store is shown, never obeyed by the terminal."""
    from tlsearch._text import printable

    print(printable(text, keep_newlines=True))


def study_name(text: str) -> str:
    """argparse type of a study name: refused (one line) when it holds controls, bidi controls or surrogates."""
    from tlsearch._text import name_problem, printable

    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"study name {printable(repr(text))} {problem}: choose another name")
    return text


def seconds(text: str) -> float:
    """argparse type of a duration: a finite number of seconds above 0 (not nan, inf or negative)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0: give e.g. 3600")
    return value


class _SafeText:
    """What the command prints about an error or in a log line: URIs' credentials masked (those of the URIs the
    command was given too, whatever they hold), control characters escaped."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    def __call__(self, text: str, keep_newlines: bool = False) -> str:
        from tlsearch._text import printable
        from tlsearch.mongo import mask_uris, scrub

        for uri in self.uris:
            text = scrub(text, uri)
        return printable(mask_uris(text), keep_newlines=keep_newlines)


_safe = _SafeText()


class _SafeFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return _safe(super().format(record), keep_newlines=True)


def setup_logging(args) -> None:
    """tlsearch's logs on stderr: INFO by default, WARNING with -q, DEBUG with -v or --debug. Optuna's info
    logs (and the study store's, which mirror them: "A new study created") and TensorFlow's start-up logs
    (inherited by worker processes) only with -v. Every record has its credentials masked and its control
    characters escaped."""
    import optuna

    verbose = args.verbose or args.debug
    if not verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    optuna.logging.set_verbosity(logging.INFO if verbose else logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_SafeFormatter("%(levelname)s %(name)s: %(message)s" if verbose else "tlsearch: %(message)s"))
    logger = logging.getLogger("tlsearch")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if args.quiet else logging.INFO)
    logging.getLogger("tlsearch.storage").setLevel(logging.DEBUG if verbose else logging.WARNING)
    if args.debug:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
        for root_handler in logging.getLogger().handlers:
            root_handler.setFormatter(_SafeFormatter("%(levelname)s %(name)s: %(message)s"))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args)
    _safe.uris = [uri for uri in (getattr(args, "mongo", None), getattr(args, "to", None)) if uri]
    try:
        args.settings = settings_of(args)  # reads the config file and the environment, which may be invalid
        _safe.uris += [args.settings.mongo] if args.settings.mongo else []
        return args.func(args) or 0
    except (TLSearchError, KeyError, ValueError, FileNotFoundError) as error:
        if args.debug:
            return _print_traceback()
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"tlsearch: error: {_safe(str(message))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tlsearch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tlsearch trials NAME | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141  # as a process killed by SIGPIPE, like other commands in a pipe
    except Exception:  # a bug or an unexpected failure: its traceback, masked like everything else
        return _print_traceback()


def _print_traceback() -> int:
    import traceback

    print(_safe(traceback.format_exc(), keep_newlines=True), file=sys.stderr, end="")
    return 1


if __name__ == "__main__":
    sys.exit(main())

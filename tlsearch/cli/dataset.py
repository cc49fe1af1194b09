"""`tlsearch dataset push|ls|show|rm|verify`: manage the dataset store (MongoDB with --mongo, else local)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from tlsearch.cli import echo

_EXAMPLES = {
    "push": (
        "tlsearch dataset push digits sklearn:digits\n"
        "  tlsearch dataset push churn data/churn.csv --label churned --groups customer_id\n"
        "  tlsearch dataset push churn data/churn.csv --label churned --new-version\n"
        "  tlsearch dataset push sensors data/sensors.parquet --label failed --task classification --allow-missing"
    ),
    "ls": "tlsearch dataset ls --mongo mongodb://db.example:27017",
    "show": "tlsearch dataset show digits@1",
    "rm": "tlsearch dataset rm churn@2      (rm churn removes every version)",
    "verify": "tlsearch dataset verify digits",
}
_PROGRESS_MIN_BYTES = 16 << 20


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "dataset",
        parents=[parent],
        help="push, list, show, remove and verify datasets",
        description="Manage the dataset store: MongoDB GridFS when a URI is given (--mongo or "
        "$TLSEARCH_MONGO_URI), otherwise the local folder under --home.",
        epilog="example: tlsearch dataset push digits sklearn:digits && tlsearch dataset ls",
    )
    actions = parser.add_subparsers(dest="dataset_action", metavar="ACTION", required=True)
    common = _trailing_copy(parent)

    def action(name: str, help: str, description: str, handler):
        sub = actions.add_parser(
            name,
            parents=[common],
            help=help,
            description=textwrap.fill(description, 79),
            epilog=f"example:\n  {_EXAMPLES[name]}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(func=handler)
        return sub

    push = action(
        "push",
        "store a dataset from a file or a built-in source",
        "Store PATH as dataset NAME. PATH is a .npz, .npy, .csv or .parquet file, or sklearn:digits, "
        "sklearn:wine, sklearn:breast_cancer or sklearn:iris. Content already stored is not "
        "transferred again; different content under an existing NAME needs --new-version.",
        _push,
    )
    push.add_argument("name", metavar="NAME", help="dataset name (letters, digits, '.', '_', '-')")
    push.add_argument("path", metavar="PATH", help="file or sklearn:NAME")
    push.add_argument(
        "--features",
        metavar="COLS",
        help="comma-separated feature columns (default: all but the label, groups and weights; "
        ".npy: column numbers; .npz: the features array's key)",
    )
    push.add_argument("--label", metavar="COL", help="label column (default: the last column; .npz: key, default y)")
    push.add_argument("--groups", metavar="COL", help="column of group ids, for GroupKFold and the like")
    push.add_argument("--sample-weight", metavar="COL", help="column of per-row sample weights")
    push.add_argument(
        "--task",
        choices=("classification", "regression"),
        help="store the labels as class labels (whole-number floats become integers) or as a quantity "
        "(integers become floats); default: integer, bool and text labels are classes, float labels a quantity",
    )
    push.add_argument(
        "--allow-missing",
        action="store_true",
        help="accept missing (NaN) feature values, for models that handle them (e.g. HistGradientBoostingClassifier)",
    )
    push.add_argument("--new-version", action="store_true", help="add a new version when NAME holds other content")

    action("ls", "list stored datasets", "List every stored dataset version.", _ls)

    show = action(
        "show",
        "describe one dataset",
        "Show a dataset's arrays, metadata and versions (NAME is the latest version).",
        _show,
    )
    show.add_argument("ref", metavar="NAME[@VERSION]")
    show.add_argument("--json", action="store_true", help="print the record as JSON")

    rm = action(
        "rm",
        "delete a dataset or one version",
        "Delete NAME@VERSION, or every version of NAME; "
        "stored bytes and fold plans no other version uses are removed too.",
        _rm,
    )
    rm.add_argument("ref", metavar="NAME[@VERSION]")

    verify = action(
        "verify",
        "re-read a dataset and check its hash",
        "Read every stored byte of the dataset back and check its content hash; then re-hash "
        "this host's cached copy, if there is one, fetching it again when damaged.",
        _verify,
    )
    verify.add_argument("ref", metavar="NAME[@VERSION]")
    verify.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="host cache folder (default: $TLSEARCH_CACHE_DIR, else the user cache directory)",
    )


def _trailing_copy(parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The common options again, accepted after the action (`tlsearch dataset ls --mongo URI`). Their
    default is SUPPRESS so that, when absent there, they do not override the same options given earlier."""
    copy = argparse.ArgumentParser(add_help=False)
    for option in parent._actions:  # argparse has no public way to list a parser's options
        if not option.option_strings:
            continue
        text = option.help.replace("%(default)s", str(option.default)) if option.help else option.help
        kwargs = {"dest": option.dest, "help": text, "default": argparse.SUPPRESS}
        if option.nargs == 0:
            kwargs.update(action="store_const", const=option.const if option.const is not None else True)
        else:
            kwargs["metavar"] = option.metavar
        copy.add_argument(*option.option_strings, **kwargs)
    return copy


def _store(args):
    from tlsearch.data import open_dataset_store

    settings = args.settings
    return open_dataset_store(settings.mongo, database=settings.database, home=settings.home)


def _progress(description: str, total: int):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=description,
        file=sys.stderr,
        disable=total < _PROGRESS_MIN_BYTES,
        leave=False,
    )


def _push(args) -> int:
    from tlsearch.data import push_arrays, read_source
    from tlsearch.data._npy import npy_size
    from tlsearch.errors import DatasetNotFoundError

    arrays, metadata = read_source(
        args.path, features=args.features, label=args.label, groups=args.groups, sample_weight=args.sample_weight
    )
    with _store(args) as store:
        try:
            before = store.info(args.name).ref
        except DatasetNotFoundError:
            before = None
        total = sum(npy_size(a.dtype, a.shape) for a in arrays.values())
        with _progress(f"push {args.name}", total) as bar:
            info = push_arrays(
                store,
                args.name,
                arrays,
                metadata,
                task=args.task,
                allow_missing=args.allow_missing,
                new_version=args.new_version,
                progress=bar.update,
            )
        sent = store.stats.bytes_sent
    if info.ref == before:
        echo(f"{info.ref} already holds this content (sha256 {info.hash[:12]}): nothing transferred")
        return 0
    how = f"{_size(sent)} transferred" if sent else "content already stored: nothing transferred"
    echo(f"pushed {info.ref}: {_shape_summary(info)}, sha256 {info.hash[:12]} ({how})")
    return 0


def _ls(args) -> int:
    with _store(args) as store:
        infos = store.list()
        where = store.describe()
    if not infos:
        echo(f"no datasets in {where}")
        return 0
    rows = [("NAME", "VERSION", "ROWS", "FEATURES", "SIZE", "CREATED", "SHA256")]
    for info in infos:
        x_shape = info.arrays["X"]["shape"]
        rows.append(
            (
                info.name,
                str(info.version),
                str(info.n_rows),
                str(_features(x_shape)),
                _size(info.size_bytes),
                info.created.strftime("%Y-%m-%d %H:%M"),
                info.hash[:12],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _show(args) -> int:
    import numpy as np

    with _store(args) as store:
        info = store.info(args.ref)
        versions = [v.version for v in store.versions(info.name)]
    if args.json:
        document = info.to_document()
        document["created"] = info.created.isoformat()
        print(json.dumps(document, indent=2))
        return 0
    metadata = dict(info.metadata)
    echo(info.ref)
    echo(f"  sha256    {info.hash}")
    echo(f"  created   {info.created.isoformat(timespec='seconds')}")
    echo(f"  size      {_size(info.size_bytes)}")
    echo(f"  versions  {', '.join(map(str, versions))} (latest {max(versions)})")
    if "source" in metadata:
        echo(f"  source    {metadata.pop('source')}")
    for i, (name, spec) in enumerate(info.arrays.items()):
        echo(f"  {'arrays' if i == 0 else '':<8}  {name:<13} {np.dtype(spec['dtype']).name:<8} {tuple(spec['shape'])}")
    for key, label in (("feature_names", "features"), ("class_names", "classes")):
        if key in metadata:
            echo(f"  {label:<8}  {_short_list(metadata.pop(key))}")
    for key, value in metadata.items():
        print(f"  {key:<8}  {json.dumps(value)}")
    return 0


def _rm(args) -> int:
    with _store(args) as store:
        removed = store.delete(args.ref, all_versions="@" not in args.ref)
    echo(f"removed {', '.join(info.ref for info in removed)}")
    return 0


def _verify(args) -> int:
    from tlsearch.data import HostCache
    from tlsearch.data._store import stored_size

    with _store(args) as store:
        info = store.info(args.ref)
        with _progress(f"verify {info.ref}", stored_size(info)) as bar:
            store.verify(info.ref, progress=bar.update)
        echo(f"{info.ref}: stored copy ok ({_size(store.stats.bytes_received)} read, sha256 {info.hash[:12]})")
        cache = HostCache(args.settings.cache_dir)
        state = cache.verify(store, info.ref)
        checked, damaged = cache.verify_folds(store, info.ref)
    echo(
        {
            "absent": "  not in this host's cache",
            "ok": "  this host's cached copy ok",
            "healed": "  this host's cached copy was damaged: fetched again",
        }[state]
    )
    for what in damaged:
        echo(f"  this host's {what} was damaged: removed, made again when next used")
    if checked and not damaged:
        echo(f"  this host's fold plans and layouts ok ({checked})")
    return 0


def _features(shape: list[int]) -> int:
    features = 1
    for n in shape[1:]:
        features *= n
    return features


def _shape_summary(info) -> str:
    x_shape = info.arrays["X"]["shape"]
    extras = [name for name in info.arrays if name not in ("X", "y")]
    summary = f"{info.n_rows} rows × {_features(x_shape)} features"
    summary += f" + {', '.join(extras)}" if extras else ""
    return summary + (f", {info.metadata['task']}" if "task" in info.metadata else "")


def _short_list(values: list, limit: int = 8) -> str:
    shown = ", ".join(map(str, values[:limit]))
    return f"{shown}, ... ({len(values)})" if len(values) > limit else shown


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"

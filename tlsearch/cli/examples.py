"""`tlsearch examples` and `tlsearch init`: the example studies shipped with tlsearch."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from tlsearch.errors import TLSearchError


def register(subparsers, parent) -> None:
    examples = subparsers.add_parser(
        "examples",
        parents=[parent],
        help="list the example studies shipped with tlsearch",
        description="The example study files shipped with tlsearch. Run one as `tlsearch run example:NAME`, "
        "or copy it here to edit with `tlsearch init NAME`.",
        epilog="example: tlsearch run example:wine_sklearn --n-trials 5",
    )
    examples.set_defaults(func=_examples)

    init = subparsers.add_parser(
        "init",
        parents=[parent],
        help="copy an example study into the current folder",
        description="Copy example study NAME (see `tlsearch examples`) to ./NAME.py, to edit and run.",
        epilog="example: tlsearch init digits_mlp && tlsearch run digits_mlp.py",
    )
    init.add_argument("name", metavar="NAME")
    init.add_argument("--force", action="store_true", help="overwrite ./NAME.py if it exists")
    init.set_defaults(func=_init)


def _examples(args) -> int:
    from tlsearch.spec._spec import examples

    shipped = examples()
    width = max(map(len, shipped), default=0)
    for name, path in shipped.items():
        print(f"{name.ljust(width)}  {_summary(path)}")
    return 0


def _init(args) -> int:
    from tlsearch.spec._spec import example_path

    source = example_path(args.name)
    target = Path.cwd() / source.name
    if target.exists() and not args.force:
        raise TLSearchError(f"{target} already exists: edit it, remove it, or pass --force to overwrite it")
    shutil.copyfile(source, target)
    print(f"wrote {target}; run it with: tlsearch run {source.name}")
    return 0


def _summary(path: Path) -> str:
    """The first line of the study file's docstring."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return docstring.strip().splitlines()[0] if docstring.strip() else ""

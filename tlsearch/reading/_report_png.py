"""The report's figures as PNG files beside its page (`tlsearch report --png`), drawn with Matplotlib."""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from tlsearch._files import write_file_with

_PNG_INCHES, _PNG_DPI = (11, 6), 100
_PYPLOT_LOCK = threading.Lock()  # pyplot's state is global: one report's PNGs at a time


def export_pngs(sections: list, page: Path, slugs: list[str]) -> None:
    """Draw each section's figures (`section.drawings`) with Matplotlib and save them beside the page (appending
    their paths to `section.pngs`); warn once per failed section. `slugs` are every section's, for the names."""
    try:
        import matplotlib

        chosen = matplotlib.get_backend(auto_select=False)
    except ImportError as error:
        warnings.warn(f"PNGs not written (the HTML report is complete): {error}", RuntimeWarning, stacklevel=3)
        return
    except TypeError:  # Matplotlib < 3.10 cannot tell whether a backend was chosen: keep whatever it picks
        chosen = "kept"
    if chosen is None:
        matplotlib.use("agg")
    import matplotlib.pyplot as plt

    page.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_pngs(page, slugs)
    rc = {"figure.figsize": _PNG_INCHES, "figure.dpi": _PNG_DPI}
    failures = []
    with _PYPLOT_LOCK, matplotlib.rc_context(), plt.ioff(), warnings.catch_warnings():
        # Optuna's Matplotlib functions are "experimental" and set the ggplot style globally:
        # rc_context restores the caller's rcParams afterwards.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        plt.style.use("ggplot")
        matplotlib.rcParams.update(rc)
        for section in sections:
            try:
                for i, draw in enumerate(section.drawings):
                    section.pngs.append(_save_png(draw, _png_path(page, section, i)))
            except Exception as error:  # noqa: BLE001 - one figure that cannot be drawn must not cost the others
                failures.append((section, f"{type(error).__name__}: {error}".splitlines()[0]))
    for section, reason in failures:
        warnings.warn(
            f"PNG of section {section.title!r} not written ({reason}); the HTML report and the other PNGs are",
            RuntimeWarning,
            stacklevel=3,
        )


def _png_path(page: Path, section, index: int) -> Path:
    suffix = f"-{index + 1}" if len(section.drawings) > 1 else ""
    return page.with_name(f"{page.stem}-{section.slug}{suffix}.png")


def _remove_stale_pngs(page: Path, slugs: list[str]) -> None:
    """An earlier report's PNGs beside this page would pass for this one's: the names are the report's own."""
    alternatives = "|".join(re.escape(slug) for slug in slugs)
    own = re.compile(rf"{re.escape(page.stem)}-(?:{alternatives})(?:-\d+)?\.png")
    for file in page.parent.iterdir():
        if own.fullmatch(file.name):
            file.unlink(missing_ok=True)


def _save_png(draw: Callable[[], Any], file: Path) -> Path:
    """Call `draw`, save its figure to `file` (whole or not at all), and close every figure it opened."""
    import matplotlib.pyplot as plt
    import numpy as np

    opened_before = set(plt.get_fignums())
    try:
        drawn = draw()
        if isinstance(drawn, np.ndarray):  # one Axes per parameter, all on one figure
            drawn = drawn.flat[0]
        figure = getattr(drawn, "figure", drawn)
        return write_file_with(file, lambda tmp: figure.savefig(tmp, format="png", dpi=_PNG_DPI, bbox_inches="tight"))
    finally:
        for number in set(plt.get_fignums()) - opened_before:
            plt.close(number)

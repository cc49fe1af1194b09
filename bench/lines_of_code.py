"""How much code a user writes: studies/digits_mlp.py against the same study by hand (bench/baseline/).

Counts non-blank, non-comment lines (docstrings count as code: they are lines a user keeps), then runs
both on the same small budget to show they do the same job: same data, folds, space and model.

Usage: python bench/lines_of_code.py [--n-trials N] [--no-run]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = ROOT / "studies" / "digits_mlp.py"
BASELINE = ROOT / "bench" / "baseline" / "digits_plain.py"


def code_lines(path: Path) -> int:
    """Lines holding at least one token that is not a comment (so blank and comment-only lines don't count)."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type not in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines)


def run(command: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    summary = [line for line in result.stdout.splitlines() if line.startswith("best trial")]
    return time.perf_counter() - started, (summary or result.stdout.strip().splitlines())[-1][:110]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trials", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-run", action="store_true", help="only count lines")
    args = parser.parse_args()

    ours, baseline = code_lines(OURS), code_lines(BASELINE)
    print(f"{'':28}{'lines':>8}")
    print(f"{'tlsearch study file':28}{ours:>8}   {OURS.relative_to(ROOT)}")
    print(f"{'plain Optuna+Dask+Keras':28}{baseline:>8}   {BASELINE.relative_to(ROOT)}")
    print(f"tlsearch is {100 * (1 - ours / baseline):.0f}% smaller (target: study file <= 25 lines, >= 85% smaller)")
    if args.no_run:
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ours_time, ours_last = run(
            [
                sys.executable,
                "-m",
                "tlsearch",
                "run",
                str(OURS),
                "--home",
                str(tmp / "home"),
                "--n-trials",
                str(args.n_trials),
                "--workers",
                str(args.workers),
                "--progress",
                "log",
                "--no-report",
                "--name",
                "loc-bench",
            ],
            tmp,
        )
        base_time, base_last = run(
            [
                sys.executable,
                str(BASELINE),
                "--n-trials",
                str(args.n_trials),
                "--workers",
                str(args.workers),
                "--journal",
                str(tmp / "baseline.journal"),
            ],
            tmp,
        )
    print(f"\nboth run {args.n_trials} trials on {args.workers} workers:")
    print(f"  tlsearch  {ours_time:6.0f} s   {ours_last}")
    print(f"  baseline  {base_time:6.0f} s   {base_last}")


if __name__ == "__main__":
    main()

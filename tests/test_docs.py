"""The documentation: its links resolve, its reference page matches the code's docstrings and `--help`, and
every snippet marked `<!-- runnable -->` in README.md and docs/ runs as written (CONTRIBUTING.md, Documentation)."""

from __future__ import annotations

import csv
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# The reader's MongoDB in the docs; the test runs those snippets on the test server.
PLACEHOLDER_URI = "mongodb://user:pass@db-host:27017"
_RUNNABLE = re.compile(
    r"^<!-- runnable(?:: (?P<kind>study))? -->\n```(?P<language>bash|python)\n(?P<code>.*?)^```", re.M | re.S
)
_RUN_OR_RESUME = re.compile(r"^(?P<command>(?:\S*/)?tlsearch (?P<verb>run|resume) [^#\n]*?)(?P<comment>\s*#.*)?$", re.M)
# What the test changes in a snippet, so that each page runs in a minute or two: the trial budget and workers.
TRIALS = {"run": 2, "resume": 3}
_SMALL_RUNS = (
    "import tlsearch as _t; _run = _t.run; "
    "_t.run = lambda spec, **options: _run(spec, **{**options, 'n_trials': 2, 'n_workers': 1})\n"
)


@dataclass
class Snippet:
    page: Path
    line: int
    language: str
    kind: str | None
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def runnable_snippets(page: Path) -> list[Snippet]:
    text = page.read_text()
    return [
        Snippet(page, text.count("\n", 0, m.start()) + 2, m["language"], m["kind"], m["code"])
        for m in _RUNNABLE.finditer(text)
    ]


def _small_budget(code: str) -> str:
    """`code` with each `tlsearch run|resume` given a small --n-trials and one local worker."""

    def small(match: re.Match) -> str:
        command = re.sub(r"\s--n-trials \d+", "", match["command"].rstrip())
        return f"{command} --n-trials {TRIALS[match['verb']]} --workers 1{match['comment'] or ''}"

    return _RUN_OR_RESUME.sub(small, code)


def _run(snippet: Snippet, folder: Path, env: dict) -> subprocess.CompletedProcess:
    code = (
        snippet.code.replace(PLACEHOLDER_URI, shlex.quote(env["TEST_MONGO_URI"]))
        if "TEST_MONGO_URI" in env
        else snippet.code
    )
    if snippet.kind == "study":
        name = re.match(r"# (\w+\.py)", code)
        path = folder / (name[1] if name else "study.py")
        path.write_text(code)
        command = [str(VENV_BIN / "tlsearch"), "run", path.name, "--n-trials", "2", "--workers", "1"]
    elif snippet.language == "python":
        path = folder / f"snippet_{snippet.line}.py"
        path.write_text(_SMALL_RUNS + code)
        command = [str(VENV_BIN / "python"), path.name]
    else:
        command = ["bash", "-euo", "pipefail", "-c", _small_budget(code)]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def _check_keras_logs(folder: Path) -> None:
    """Keras CSV logs a snippet wrote under logs/ have validation columns, filled."""
    for log in (folder / "logs").glob("*.csv"):
        rows = list(csv.DictReader(log.open()))
        assert rows and any(column.startswith("val_") for column in rows[0]), log
        assert all(value not in ("", "NA") for row in rows for value in row.values()), log.read_text()


_PAGES_TO_RUN = [page for page in PAGES if runnable_snippets(page)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", _PAGES_TO_RUN, ids=[str(p.relative_to(ROOT)) for p in _PAGES_TO_RUN])
def test_every_runnable_snippet_runs_as_written(page, tmp_path, request):
    """A page's snippets run in order in one empty folder (with the checkout's .venv, studies/ and search_spaces/
    linked in), with the checkout's .venv/bin first on PATH; a page that names a MongoDB runs on the test server."""
    snippets = runnable_snippets(page)
    for name in (".venv", "studies", "search_spaces"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TLSEARCH_") and k != "PYTHONPATH"}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", TLSEARCH_CACHE_DIR=str(tmp_path / "cache"))
    if any(PLACEHOLDER_URI in s.code or "TLSEARCH_MONGO_URI" in s.code for s in snippets):
        env.update(
            TEST_MONGO_URI=request.getfixturevalue("mongo_uri"),
            TLSEARCH_DATABASE=request.getfixturevalue("mongo_db_name"),
        )
    for snippet in snippets:
        result = _run(snippet, tmp_path, env)
        assert result.returncode == 0, f"{snippet}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    _check_keras_logs(tmp_path)


def test_the_runnable_snippets_are_the_ones_meant():
    """The marker is spelled right where it is used, and the snippets the docs promise to run are marked."""
    marked = {str(s) for page in PAGES for s in runnable_snippets(page)}
    assert sum(page.read_text().count("<!-- runnable") for page in PAGES) == len(marked)
    readme = [s for s in runnable_snippets(ROOT / "README.md")]
    assert any("CSVLogger" in s.code and s.kind == "study" for s in readme), marked
    assert any("tlsearch copy" in s.code for s in runnable_snippets(ROOT / "docs" / "tutorial.md")), marked


def test_the_budget_of_a_snippet_is_made_small():
    assert _small_budget(".venv/bin/tlsearch resume digits-mlp --n-trials 40      # continue it") == (
        ".venv/bin/tlsearch resume digits-mlp --n-trials 3 --workers 1      # continue it"
    )
    assert (
        _small_budget("tlsearch run example:wine_sklearn")
        == "tlsearch run example:wine_sklearn --n-trials 2 --workers 1"
    )


def _docs_script(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / script), *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.slow
def test_every_relative_link_and_anchor_resolves():
    result = _docs_script("check_links.py")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_reference_page_is_generated_from_the_current_code():
    result = _docs_script("gen_reference.py", "--check")
    assert result.returncode == 0, f"run `.venv/bin/python docs/gen_reference.py`: {result.stdout}{result.stderr}"


@pytest.mark.slow
def test_the_commands_the_docs_name_are_in_the_checkouts_environment():
    for command in (["tlsearch", "--version"], ["dask", "scheduler", "--help"]):
        result = subprocess.run([str(VENV_BIN / command[0]), *command[1:]], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr

"""The documentation's links resolve and its reference page matches the code's docstrings and `--help`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / script), *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.slow
def test_every_relative_link_and_anchor_resolves():
    result = _run("check_links.py")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_reference_page_is_generated_from_the_current_code():
    result = _run("gen_reference.py", "--check")
    assert result.returncode == 0, f"run `.venv/bin/python docs/gen_reference.py`: {result.stdout}{result.stderr}"

"""The README's demo command, run from a clean checkout as a new user would (small budget, CPU)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_demo_command() -> str:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return block.splitlines()[0].split("#")[0].strip()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_demo_runs_from_a_clean_checkout(tmp_path):
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout")
    command = _readme_demo_command()
    assert command == "bash .ci/demo"
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
    env = {**os.environ, "TLSEARCH_HOME": str(tmp_path / "home"), "TLSEARCH_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        f"{command} --n-trials 2 --workers 1 --progress log",
        shell=True,
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "best trial #" in result.stdout and "folds:" in result.stdout
    report = Path(re.search(r"report: (\S+)", result.stdout).group(1))
    assert report.is_file() and report.stat().st_size > 10_000

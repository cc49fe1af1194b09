"""Packaging: `tlsearch --version`, the example studies shipped in the package (`examples`, `init`,
`run example:NAME`), and the built wheel installed into a fresh virtual environment, run from an empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

import tlsearch
from tlsearch.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"tlsearch {tlsearch.__version__}"


def test_examples_lists_the_studies_folder(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    names = sorted(p.stem for p in (ROOT / "studies").glob("*.py"))
    assert [line.split()[0] for line in out.splitlines()] == names
    assert "Wine (13 chemical measurements" in out


def test_init_copies_an_example_and_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "wine_sklearn"]) == 0
    assert (tmp_path / "wine_sklearn.py").read_text() == (ROOT / "studies" / "wine_sklearn.py").read_text()
    assert main(["init", "wine_sklearn"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["init", "nope"]) == 1
    assert "no example study 'nope': choose one of digits_mlp, images_cnn, wine_sklearn" in capsys.readouterr().err


def _site_packages_of_the_dependencies() -> Path:
    return Path(optuna.__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_built_wheel_runs_an_example_from_an_empty_folder(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        check=True,
        cwd=tmp_path,
    )
    [wheel] = wheels.glob("tlsearch-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The fresh environment sees the already installed dependencies, not this checkout.
    Path(site, "deps.pth").write_text(f"import site; site.addsitedir({str(_site_packages_of_the_dependencies())!r})\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], check=True
    )

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TLSEARCH_HOME", "TLSEARCH_MONGO_URI")}
    tlsearch_command = venv / "bin" / "tlsearch"
    where = subprocess.run(
        [python, "-c", "import tlsearch; print(tlsearch.__file__)"],
        cwd=empty,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert where.startswith(site), where
    version = subprocess.run([tlsearch_command, "--version"], cwd=empty, env=env, capture_output=True, text=True)
    assert version.stdout.strip() == f"tlsearch {tlsearch.__version__}"
    listed = subprocess.run([tlsearch_command, "examples"], cwd=empty, env=env, capture_output=True, text=True)
    assert "wine_sklearn" in listed.stdout and "digits_mlp" in listed.stdout
    ran = subprocess.run(
        [tlsearch_command, "run", "example:wine_sklearn", "--n-trials", "2", "--workers", "1", "--progress", "off"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "best trial #" in ran.stdout and (empty / ".tlsearch").is_dir()


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("tlsearch.study", "tlsearch.spec", "load_study_file"),
        ("tlsearch.pruners", "tlsearch.cv", "KFoldPruner"),
        ("tlsearch.driver", "tlsearch.execution", "drive"),
        ("tlsearch.cluster", "tlsearch.execution", "tls_security"),
        ("tlsearch.report", "tlsearch.reading", "write_report"),
        ("tlsearch.artifacts", "tlsearch.stores", "open_artifact_store"),
    ],
)
def test_a_module_path_from_before_the_layout_by_layer_imports_with_a_warning_naming_its_removal(
    monkeypatch, old, new, name
):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(
        DeprecationWarning, match=rf"^{old} is deprecated and removed in tlsearch 3\.0: import from {new}$"
    ):
        module = __import__(old, fromlist=[name])
    assert getattr(module, name) is getattr(__import__(new, fromlist=[name]), name)
    assert name in dir(module)


def test_the_data_fold_class_has_one_name_of_its_own_and_the_old_one_warns():
    import tlsearch.data
    import tlsearch.models

    with pytest.warns(DeprecationWarning, match=r"^tlsearch\.data\.Fold is deprecated and removed in tlsearch 3\.0"):
        old = tlsearch.data.Fold
    assert old is tlsearch.data.FoldArrays and old is not tlsearch.models.Fold

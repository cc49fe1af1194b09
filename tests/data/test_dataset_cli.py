"""`tlsearch dataset ...`, driven through tlsearch.cli.main on both stores."""

from __future__ import annotations

import numpy as np
import pytest

from tlsearch.cli import main


@pytest.fixture(params=["local", "mongo"])
def where(request, tmp_path, monkeypatch):
    """Command-line options selecting a fresh store: --home DIR, or --mongo URI --database NAME."""
    monkeypatch.delenv("TLSEARCH_MONGO_URI", raising=False)
    monkeypatch.setenv("TLSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    if request.param == "local":
        return ["--home", str(tmp_path / "home")]
    return ["--mongo", request.getfixturevalue("mongo_uri"), "--database", request.getfixturevalue("mongo_db_name")]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_push_ls_show_verify_rm(where, capsys, tmp_path):
    code, out, _ = run(capsys, "dataset", "push", "digits", "sklearn:digits", *where)
    assert code == 0 and out.startswith("pushed digits@1: 1797 rows × 64 features")
    code, out, _ = run(capsys, "dataset", "push", "digits", "sklearn:digits", *where)
    assert "nothing transferred" in out

    code, _, err = run(capsys, "dataset", "push", "digits", "sklearn:wine", *where)
    assert code == 1 and err.count("\n") == 1 and "--new-version" in err
    np.savez(tmp_path / "d.npz", X=np.ones((3, 2)), y=np.arange(3))
    code, out, _ = run(capsys, "dataset", *where, "push", "digits", str(tmp_path / "d.npz"), "--new-version")
    assert code == 0 and "pushed digits@2" in out

    code, out, _ = run(capsys, "dataset", "ls", *where)
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "ROWS", "FEATURES", "SIZE", "CREATED", "SHA256"]
    assert [line.split()[:3] for line in lines[1:]] == [["digits", "1", "1797"], ["digits", "2", "3"]]

    code, out, _ = run(capsys, "dataset", "show", "digits@1", *where)
    assert "source    sklearn:digits" in out and "versions  1, 2 (latest 2)" in out and "float64" in out
    code, out, _ = run(capsys, "dataset", "show", "digits", "--json", *where)
    assert '"version": 2' in out

    code, out, _ = run(capsys, "dataset", "verify", "digits@1", *where)
    assert code == 0 and "stored copy ok" in out and "not in this host's cache" in out

    code, out, _ = run(capsys, "dataset", "rm", "digits@1", *where)
    assert out.strip() == "removed digits@1"
    code, out, _ = run(capsys, "dataset", "rm", "digits", *where)
    assert out.strip() == "removed digits@2"
    code, out, _ = run(capsys, "dataset", "ls", *where)
    assert out.startswith("no datasets in")
    code, _, err = run(capsys, "dataset", "show", "digits", *where)
    assert code == 1 and err.startswith("tlsearch: error: no dataset 'digits'")


def test_push_a_csv_with_columns(where, capsys, tmp_path):
    (tmp_path / "c.csv").write_text("a,b,g,label\n1,2,x,yes\n3,4,y,no\n5,6,x,yes\n")
    code, out, _ = run(capsys, "dataset", "push", "c", str(tmp_path / "c.csv"), "--features", "a,b", "--label", "label",
                       "--groups", "g", *where)
    assert code == 0 and "3 rows × 2 features + groups" in out
    code, _, err = run(capsys, "dataset", "push", "bad", str(tmp_path / "c.csv"), *where)
    assert code == 1 and "'g'" in err and "not numeric" in err


@pytest.mark.parametrize("action", ["push", "ls", "show", "rm", "verify"])
def test_every_action_has_help_with_an_example(action, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["dataset", action, "--help"])
    assert exit_info.value.code == 0
    assert "example:\n  tlsearch dataset " in capsys.readouterr().out


def test_options_before_the_action_are_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TLSEARCH_MONGO_URI", raising=False)
    run(capsys, "dataset", "--home", str(tmp_path / "h"), "push", "iris", "sklearn:iris")
    code, out, _ = run(capsys, "dataset", "--home", str(tmp_path / "h"), "ls")
    assert "iris" in out

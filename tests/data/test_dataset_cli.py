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
    code, out, _ = run(
        capsys,
        "dataset",
        "push",
        "c",
        str(tmp_path / "c.csv"),
        "--features",
        "a,b",
        "--label",
        "label",
        "--groups",
        "g",
        *where,
    )
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


# -- bad input: one clear line each, nothing stored ------------------------------------------------------


def _csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return str(path)


def _refused(capsys, where, *argv) -> str:
    code, _, err = run(capsys, "dataset", "push", *argv, *where)
    assert code == 1 and err.count("\n") == 1, err
    code, out, _ = run(capsys, "dataset", "ls", *where)
    # Every caller starts from an empty store; the listing's header names the database, a random hex name.
    assert out.startswith("no datasets in"), f"a refused push stored something:\n{out}"
    return err


def test_push_refuses_the_label_as_a_feature(where, capsys, tmp_path):
    source = _csv(tmp_path / "t.csv", ["a", "b"], [[0, 1], [1, 2], [0, 3]])
    err = _refused(capsys, where, "bad", source, "--label", "a", "--features", "a,b")
    assert "'a' is both the label and a feature" in err


def test_push_refuses_zero_rows_and_a_single_class(where, capsys, tmp_path):
    err = _refused(capsys, where, "bad", _csv(tmp_path / "empty.csv", ["a", "y"], []))
    assert "0 rows" in err
    err = _refused(capsys, where, "bad", _csv(tmp_path / "one.csv", ["a", "y"], [[1, 7], [2, 7], [3, 7]]))
    assert "one class only" in err


@pytest.mark.slow
def test_push_refuses_a_header_too_large_for_a_mongodb_document(where, capsys, tmp_path):
    header = [f"column_{i:06d}_" + "x" * 200 for i in range(45_000)] + ["y"]  # ≈ 9.5 MB of names
    err = _refused(capsys, where, "bad", _csv(tmp_path / "wide.csv", header, [[0] * 45_000 + [0], [1] * 45_000 + [1]]))
    assert "MiB" in err and "column names" in err


def test_unreachable_mongodb_is_reported_within_seconds(capsys, monkeypatch):
    import socket
    import time

    monkeypatch.delenv("TLSEARCH_MONGO_URI", raising=False)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    code, _, err = run(capsys, "dataset", "ls", "--mongo", f"mongodb://127.0.0.1:{port}/")
    assert code == 1 and err.count("\n") == 1 and "cannot reach MongoDB" in err
    assert time.monotonic() - started < 20  # not pymongo's 30 s server selection


def test_push_refuses_missing_features_and_says_the_task_it_inferred(where, capsys, tmp_path):
    path = tmp_path / "sensors.csv"
    path.write_text("a,b,failed\n1.0,,0.0\n2.0,1.0,1.0\n,2.0,0.0\n4.0,3.0,1.0\n")
    code, out, err = run(capsys, "dataset", "push", "sensors", str(path), *where)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("tlsearch: error: missing feature values (NaN): 'a' in 1 row, 'b' in 1 row; impute them")
    assert "--allow-missing" in err

    code, out, err = run(capsys, "dataset", "push", "sensors", str(path), "--allow-missing", *where)
    assert code == 0 and out.startswith("pushed sensors@1: 4 rows × 2 features, regression, sha256")
    assert err == (
        "tlsearch: label 'failed' is float and holds only the whole numbers 0.0, 1.0: it is treated as regression "
        "(KFold, a regression loss); to treat it as class labels, push it with --task classification (Python: "
        "push_dataset(..., task='classification'))\n"
    )
    code, out, err = run(
        capsys,
        "dataset",
        "push",
        "sensors",
        str(path),
        "--allow-missing",
        "--task",
        "classification",
        "--new-version",
        *where,
    )
    assert code == 0 and out.startswith("pushed sensors@2: 4 rows × 2 features, classification, sha256") and err == ""

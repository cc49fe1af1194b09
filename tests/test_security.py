"""Attacks by someone who can write to the study store, and by someone who can reach the workers' ports.

The invariant under test: no value read from the store decides which code runs or which local path is
written. Each attack must end in a clear refusal, with no proof file written and nothing outside tlsearch's
folders touched.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, replace

import pytest

from tlsearch import cli
from tlsearch.errors import UnsafeModelError
from tlsearch.execution import _driver as driver
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._refit import ATTR_REFIT, RefitRecord, _sha256, load_model, refit
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(300)

STUDY = """
import tlsearch
from sklearn.linear_model import LogisticRegression

def space(trial):
    return {"C": trial.suggest_float("C", 0.01, 10, log=True)}

study = tlsearch.StudySpec(name="wine-sec", dataset="sklearn:wine", space=space,
                           model=tlsearch.SklearnModel(lambda p: LogisticRegression(C=p["C"], max_iter=200)),
                           cv=2, metric="accuracy", n_trials=2)
"""

EVIL_STUDY = """
import pathlib
pathlib.Path({proof!r}).write_text("the attacker's study file ran")
raise SystemExit("attacker code ran")
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """This machine's data directory (the study-file records), private to the module."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("xdg-data")
        patch.setenv("XDG_DATA_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def refitted(tmp_path_factory, data_dir):
    """A small scikit-learn study run on the embedded default and refit: (stores, name, study file, tmp)."""
    tmp = tmp_path_factory.mktemp("sec")
    study_file = tmp / "study.py"
    study_file.write_text(STUDY)
    spec = load_study_file(study_file)
    stores = Stores(home=tmp / "home")
    driver.run(spec, stores=stores, n_workers=1, progress="off", study_file=study_file)
    refit(spec.name, stores=stores)
    return stores, spec.name, study_file, tmp


def _set_attr(stores, name, key, value):
    study = study_attrs.load(stores, name)
    study_attrs.write(study, key, value)


def _exec_skops(code: str) -> bytes:
    """A .skops file whose schema calls builtins.exec(code) when loaded (ConstructorFromReduceNode)."""
    schema = {
        "__class__": "exec",
        "__module__": "builtins",
        "__loader__": "ConstructorFromReduceNode",
        "content": {
            "__class__": "tuple",
            "__module__": "builtins",
            "__loader__": "TupleNode",
            "content": [
                {
                    "__class__": "str",
                    "__module__": "builtins",
                    "__loader__": "JsonNode",
                    "content": json.dumps(code),
                    "is_json": True,
                    "__id__": 2,
                }
            ],
            "__id__": 1,
        },
        "__id__": 0,
        "protocol": 2,
        "_skops_version": "0.16.0",
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("schema.json", json.dumps(schema))
    return buffer.getvalue()


@pytest.mark.slow
def test_skops_calling_exec_with_every_hash_updated_is_refused(refitted, tmp_path):
    stores, name, _, _ = refitted
    proof = tmp_path / "proof"
    evil = tmp_path / "evil.skops"
    evil.write_bytes(_exec_skops(f"open({str(proof)!r}, 'w').write('pwned')"))
    record = RefitRecord(**study_attrs.read(study_attrs.load(stores, name))[ATTR_REFIT])
    with open(evil, "rb") as file:
        stores.artifact_store().write(record.artifact_id, file)
    _set_attr(stores, name, ATTR_REFIT, asdict(replace(record, sha256=_sha256(evil))))
    with pytest.raises(UnsafeModelError, match="builtins.exec"):
        load_model(name, stores=stores)
    assert not proof.exists()


@pytest.mark.slow
@pytest.mark.parametrize("filename", ["ABSOLUTE", "../../escaped.skops"])
def test_model_file_name_from_the_store_never_becomes_a_path(refitted, tmp_path, monkeypatch, filename):
    stores, name, _, _ = refitted
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # so ../../ lands in tmp_path, not in /
    (tmp_path / "tmp").mkdir()
    target = tmp_path / "outside" / "proof.skops"
    target.parent.mkdir()
    filename = str(target) if filename == "ABSOLUTE" else filename
    record = RefitRecord(**study_attrs.read(study_attrs.load(stores, name))[ATTR_REFIT])
    _set_attr(stores, name, ATTR_REFIT, asdict(replace(record, filename=filename)))
    try:
        with pytest.raises(UnsafeModelError, match="filename"):
            load_model(name, stores=stores)
    finally:
        _set_attr(stores, name, ATTR_REFIT, asdict(record))
    assert not target.exists() and not (tmp_path / "escaped.skops").exists()


@pytest.mark.slow
def test_stored_study_file_path_is_never_imported(refitted, tmp_path, monkeypatch, capsys):
    stores, name, study_file, _ = refitted
    proof = tmp_path / "proof"
    evil = tmp_path / "evil_study.py"
    evil.write_text(EVIL_STUDY.format(proof=str(proof)))
    _set_attr(stores, name, study_attrs.STUDY_FILE, str(evil))
    try:
        # On another machine (no record here): refused, the store's path only named as a hint.
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "other-machine"))
        for command in (["resume", name, "--n-trials", "2", "--no-report"], ["refit", name]):
            assert cli.main([*command, "--home", str(stores.home)]) == 1
            error = capsys.readouterr().err
            assert "no record of the study file" in error and "--study PATH" in error and str(evil) in error
        assert not proof.exists()
        # On the machine that ran it: the recorded file runs, not the store's.
        monkeypatch.undo()
        assert (
            cli.main(
                ["resume", name, "--home", str(stores.home), "--n-trials", "2", "--no-report", "--progress", "off"]
            )
            == 0
        )
        assert not proof.exists()
    finally:
        _set_attr(stores, name, study_attrs.STUDY_FILE, str(study_file))


@pytest.mark.slow
def test_changed_study_file_runs_only_after_a_warning(refitted, tmp_path):
    from tlsearch.stores._study_files import StudyFileChangedWarning

    stores, name, study_file, _ = refitted
    original = study_file.read_text()
    study_file.write_text(original + "\n# edited after the run\n")
    try:
        with pytest.warns(StudyFileChangedWarning, match="changed since"):
            assert (
                cli.main(
                    ["resume", name, "--home", str(stores.home), "--n-trials", "2", "--no-report", "--progress", "off"]
                )
                == 0
            )
    finally:
        study_file.write_text(original)


@pytest.mark.slow
def test_forged_fold_plan_reference_touches_nothing_outside_the_cache(
    tmp_path, mongo_uri, mongo_db_name, mongo_client, monkeypatch, capsys
):
    cache = tmp_path / "cache"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("the user's data")
    monkeypatch.setenv("TLSEARCH_CACHE_DIR", str(cache))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY)
    stores = Stores(mongo_uri, mongo_db_name, home=tmp_path / "home")
    driver.run(load_study_file(study_file), stores=stores, n_workers=1, progress="off", study_file=study_file)
    plans = mongo_client[mongo_db_name]["fold_plans"]
    forged = "../../victim"  # cache/plans/../../victim is tmp_path/victim
    plan = study_attrs.read(study_attrs.load(stores, "wine-sec"))[study_attrs.FOLD_PLAN]
    plans.insert_one({**plans.find_one({"_id": plan}), "_id": forged})
    _set_attr(stores, "wine-sec", study_attrs.FOLD_PLAN, forged)
    code = cli.main(
        [
            "resume",
            "wine-sec",
            "--mongo",
            mongo_uri,
            "--database",
            mongo_db_name,
            "--home",
            str(stores.home),
            "--n-trials",
            "4",
            "--no-report",
            "--progress",
            "off",
        ]
    )
    assert code == 1
    assert "fold plan hash" in capsys.readouterr().err
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]


# -- network -------------------------------------------------------------------------------------------

WORKER_PROBE = """
import json, socket, subprocess, sys, time
import distributed
from distributed.comm import get_address_host, get_address_host_port

with distributed.LocalCluster(n_workers=0, host={host!r}, dashboard_address=None) as cluster, \\
        distributed.Client(cluster) as client:
    worker = subprocess.Popen([sys.executable, "-m", "tlsearch", "worker", "--scheduler", cluster.scheduler_address,
                               "--cpu-workers", "1"])
    try:
        client.wait_for_workers(1, timeout=60)
        address = next(iter(client.scheduler_info()["workers"]))
        port = get_address_host_port(address)[1]
        try:
            socket.create_connection(({host!r}, port), timeout=5).close()
            reachable = True
        except OSError:
            reachable = False
        print(json.dumps({{"worker": address, "reachable_on_{host}": reachable}}))
    finally:
        worker.terminate()
        worker.wait(30)
"""


@pytest.mark.slow
def test_tlsearch_worker_does_not_listen_on_a_non_loopback_address_by_default(tmp_path):
    """In a network namespace of its own (so no traffic leaves this test), the host has a non-loopback
    address, 192.0.2.1, and the scheduler listens there; the worker must still bind 127.0.0.1 only."""
    host = "192.0.2.1"
    script = tmp_path / "probe.py"
    script.write_text(WORKER_PROBE.format(host=host))
    setup = f"ip link set lo up && ip addr add {host}/32 dev lo"
    probe = subprocess.run(
        ["unshare", "--net", "sh", "-c", f"{setup} && exec {sys.executable} {script}"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if probe.returncode != 0 and "unshare" in probe.stderr and "Operation not permitted" in probe.stderr:
        pytest.skip("needs a network namespace of its own (root, or user namespaces)")
    assert probe.returncode == 0, probe.stderr[-2000:]
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    assert result["worker"].startswith("tcp://127.0.0.1:"), result
    assert result[f"reachable_on_{host}"] is False


def _certificates(folder):
    """A CA and one certificate it signed (for every node), made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    ca_key, ca, key, request, cert = (folder / n for n in ("ca.key", "ca.pem", "node.key", "node.csr", "node.pem"))
    commands = [
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            ca_key,
            "-out",
            ca,
            "-days",
            "1",
            "-subj",
            "/CN=tlsearch test CA",
        ],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            request,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-out",
            cert,
            "-days",
            "1",
        ],
    ]
    for command in commands:
        subprocess.run([str(c) for c in command], check=True, capture_output=True)
    return ca, cert, key


@pytest.mark.slow
def test_tls_secured_cluster_runs_a_study_end_to_end(tmp_path, data_dir, capsys):
    import distributed

    from tlsearch.execution._cluster import tls_security

    ca, cert, key = _certificates(tmp_path)
    tls = ["--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key)]
    security = tls_security(str(ca), str(cert), str(key))
    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY)
    with distributed.LocalCluster(
        n_workers=0, host="127.0.0.1", protocol="tls", security=security, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        worker = subprocess.Popen(
            [sys.executable, "-m", "tlsearch", "worker", "--scheduler", address, "--cpu-workers", "1", *tls]
        )
        try:
            with distributed.Client(cluster, security=security) as client:
                client.wait_for_workers(1, timeout=60)
                assert all(a.startswith("tls://127.0.0.1:") for a in client.scheduler_info()["workers"])
            assert (
                cli.main(
                    [
                        "run",
                        str(study_file),
                        "--home",
                        str(tmp_path / "home"),
                        "--scheduler",
                        address,
                        "--n-trials",
                        "2",
                        "--no-report",
                        "--progress",
                        "off",
                        *tls,
                    ]
                )
                == 0
            )
            assert "best" in capsys.readouterr().out.lower()
            # Without the certificates, the same cluster does not talk.
            plain = ["run", str(study_file), "--home", str(tmp_path / "home"), "--n-trials", "3", "--no-report"]
            assert cli.main([*plain, "--scheduler", address]) == 1
            assert "speaks TLS: pass --tls-ca-file" in capsys.readouterr().err
            assert cli.main([*plain, "--scheduler", address.replace("tls://", "tcp://")]) == 1
            assert "cannot reach the Dask scheduler" in capsys.readouterr().err
        finally:
            worker.terminate()
            worker.wait(30)


def test_incomplete_tls_options_are_refused(tmp_path, capsys):
    assert cli.main(["worker", "--scheduler", "tls://127.0.0.1:1", "--tls-cert", str(tmp_path / "x.pem")]) == 1
    assert "--tls-ca-file, --tls-key" in capsys.readouterr().err


# -- bad input: one clear line each ------------------------------------------------------------------------


@pytest.mark.slow
def test_full_disk_while_caching_is_one_clear_line_and_leaves_nothing_half_written(
    tmp_path, data_dir, capsys, monkeypatch
):
    import numpy as np

    from tlsearch.data import open_dataset_store

    cache = tmp_path / "cache"
    cache.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(cache)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        monkeypatch.setenv("TLSEARCH_CACHE_DIR", str(cache))
        rng = np.random.default_rng(0)
        with open_dataset_store(None, home=tmp_path / "home") as store:  # 2.4 MB, over the 1 MB disk
            store.push("big", {"X": rng.random((3000, 100)), "y": rng.integers(0, 2, 3000)})
        study_file = tmp_path / "study.py"
        study_file.write_text(STUDY.replace('dataset="sklearn:wine"', 'dataset="big"'))
        code = cli.main(
            [
                "run",
                str(study_file),
                "--home",
                str(tmp_path / "home"),
                "--workers",
                "1",
                "--no-report",
                "--progress",
                "off",
            ]
        )
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1, err
        assert f"no space left in the dataset cache {cache}" in err and "TLSEARCH_CACHE_DIR" in err
        leftovers = [p for p in (cache / "tmp").rglob("*") if p.is_file()] + list((cache / "data").glob("*"))
        assert leftovers == []
    finally:
        subprocess.run(["umount", str(cache)], check=True)


def test_study_name_over_the_stores_limit_is_refused(tmp_path, data_dir, capsys):
    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY)
    for name, says in (("n" * 300, "at most 200"), ("../escape", "no '/'")):
        code = cli.main(
            [
                "run",
                str(study_file),
                "--home",
                str(tmp_path / "home"),
                "--name",
                name,
                "--workers",
                "1",
                "--no-report",
                "--progress",
                "off",
            ]
        )
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "escape.html").exists()


def test_invalid_toml_config_is_one_clear_line(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "tlsearch.toml"
    bad.write_text('mongo = "mongodb://x"\nscheduler = \n')
    monkeypatch.setenv("TLSEARCH_CONFIG", str(bad))
    monkeypatch.delenv("TLSEARCH_MONGO_URI", raising=False)
    monkeypatch.delenv("TLSEARCH_HOME", raising=False)
    assert cli.main(["dataset", "ls"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot read config file {bad}" in err and "line 2" in err

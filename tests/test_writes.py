"""Files tlsearch writes: never through a planted symbolic link, whole or not at all on a full disk (here: past
`RLIMIT_FSIZE`, so writes fail with EFBIG), the previous model kept until the new one is whole; the study-file
record trusted only when it is the user's own (issues 22.8, 30.5, 22.9's slot counters)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from tlsearch.cli import main
from tlsearch.stores import _study_files as study_files
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(300)

STUDY = """
import tlsearch
from sklearn.tree import DecisionTreeClassifier

spec = tlsearch.StudySpec(
    name="iris-tree", dataset="sklearn:iris",
    space=lambda trial: {"max_depth": trial.suggest_int("max_depth", 1, 6)},
    model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(max_depth=p["max_depth"], random_state=0)),
    cv=3, metric="accuracy", n_trials=2)
"""


def _study(home, name: str = "plain") -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=Stores.resolve(None, None, home).study_storage())
    study.add_trial(create_trial(params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)}, value=1.0))
    return study


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _tlsearch_with_file_size_limit(limit: int, *argv) -> subprocess.CompletedProcess:
    """`tlsearch ARGV` in a process whose files cannot grow past `limit` bytes (Python ignores SIGXFSZ, so a
    write past it fails with EFBIG, as on a full disk)."""

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "tlsearch", *argv],
        preexec_fn=limit_file_size,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=240,
    )


@pytest.mark.parametrize("command", ["report", "trials"])
def test_a_planted_link_at_an_output_is_refused_and_its_target_untouched(tmp_path, capsys, command):
    home = tmp_path / "home"
    _study(home)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / ("out.html" if command == "report" else "out.csv")
    link.symlink_to(victim)
    extra = ["--format", "csv"] if command == "trials" else []
    code, text = _run(capsys, command, "plain", "--home", str(home), "-o", str(link), *extra)
    assert code == 1
    assert text.strip() == f"tlsearch: error: refusing to write {link}: it is a symbolic link " + (
        "(tlsearch never writes through one); remove it or choose another path"
    )
    assert victim.read_text() == "precious\n" and link.is_symlink()


def test_a_planted_link_at_the_default_report_path_is_refused(tmp_path, capsys):
    home = tmp_path / "home"
    _study(home)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (home / "reports").mkdir()
    (home / "reports" / "plain.html").symlink_to(victim)
    code, text = _run(capsys, "report", "plain", "--home", str(home))
    assert code == 1 and "is a symbolic link" in text
    assert victim.read_text() == "precious\n"


@pytest.mark.slow
def test_a_full_disk_leaves_the_previous_report_and_no_partial_file(tmp_path):
    home = tmp_path / "home"
    _study(home)
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("the previous report\n")
    done = _tlsearch_with_file_size_limit(100_000, "report", "plain", "--home", str(home), "-o", str(out))
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"tlsearch: error: cannot write {out}: the file-size limit (ulimit -f) (")
    assert "bytes needed" in line and "bytes free" in line and "Traceback" not in done.stderr
    assert out.read_text() == "the previous report\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]


@pytest.mark.slow
def test_refit_keeps_the_previous_model_until_the_new_one_is_whole(tmp_path, capsys):
    study_file = tmp_path / "iris_tree.py"
    study_file.write_text(STUDY)
    home = tmp_path / "home"
    assert main(["run", str(study_file), "--home", str(home), "--workers", "1", "--progress", "off"]) == 0
    model = tmp_path / "models" / "tree.skops"
    model.parent.mkdir()
    assert main(["refit", "iris-tree", "--home", str(home), "-o", str(model)]) == 0
    before = model.read_bytes()
    assert len(before) > 2_000
    done = _tlsearch_with_file_size_limit(1_000, "refit", "iris-tree", "--home", str(home), "-o", str(model))
    assert done.returncode == 1, done.stderr
    assert f"cannot write {model}: the file-size limit" in done.stderr and "Traceback" not in done.stderr
    assert model.read_bytes() == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["tree.skops"]

    # The trial-slot counter: a link planted there is refused, a forged count is refused, not obeyed.
    counter = home / "studies.journal.slots-0"
    assert counter.is_file()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for forged in ("-20", "1000", "x"):
        counter.write_text(f"{forged}\n")
        code, text = _run(capsys, "resume", "iris-tree", "--home", str(home), "--workers", "1", "--n-trials", "6")
        assert code == 1, (forged, text)
        assert f"trial-slot counter {counter} holds '{forged}', not a count in 0..6 (the trial budget)" in text
    counter.unlink()
    counter.symlink_to(victim)
    code, text = _run(capsys, "resume", "iris-tree", "--home", str(home), "--workers", "1", "--n-trials", "6")
    assert code == 1 and f"refusing to write {counter}: it is a symbolic link" in text
    assert victim.read_text() == "precious\n"


def test_a_study_file_record_others_could_write_is_ignored_with_a_warning(tmp_path, capsys):
    home = tmp_path / "home"
    _study(home)
    study_file = tmp_path / "planted.py"
    study_file.write_text("raise RuntimeError('imported the planted file')\n")
    study_files.remember(Stores.resolve(None, None, home), "plain", study_file)
    [record] = [p for p in study_files.record_dir().iterdir() if p.read_text().find(str(study_file)) >= 0]
    assert record.stat().st_mode & 0o077 == 0  # written private
    record.chmod(0o666)
    with pytest.warns(study_files.UntrustedRecordWarning, match="is writable by others"):
        code, text = _run(capsys, "resume", "plain", "--home", str(home))
    assert code == 1 and "has no record of the study file of 'plain'" in text
    assert "imported the planted file" not in text
    record.unlink()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (needs root and a kernel that lets us mount one); skipped where it cannot be mounted."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.slow
def test_a_full_filesystem_gives_one_line_and_keeps_the_previous_report(tmp_path, small_tmpfs, capsys):
    home = tmp_path / "home"
    _study(home)
    out = small_tmpfs / "report.html"
    out.write_text("the previous report\n")
    code, text = _run(capsys, "report", "plain", "--home", str(home), "-o", str(out))
    assert code == 1
    [line] = text.strip().splitlines()
    assert line.startswith(f"tlsearch: error: cannot write {out}: no space left on the device (")
    assert out.read_text() == "the previous report\n"
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["report.html"]


def test_a_link_planted_at_the_host_caches_download_log_is_refused(tmp_path):
    import numpy as np

    from tlsearch.data import HostCache
    from tlsearch.errors import SymlinkRefusedError

    store = Stores(home=tmp_path / "home").dataset_store()
    store.push("d", {"X": np.zeros((4, 2)), "y": np.array([0, 1, 0, 1])})
    cache = tmp_path / "cache"
    cache.mkdir()
    target = tmp_path / "victim"
    target.write_text("untouched")
    (cache / "downloads.log").symlink_to(target)
    with pytest.raises(SymlinkRefusedError, match="downloads.log"):
        HostCache(cache).open(store, "d")
    assert target.read_text() == "untouched"


def test_a_forged_slot_counter_on_mongodb_is_refused_not_obeyed(tmp_path, mongo_uri, mongo_db_name, mongo_client):
    stores = Stores(mongo_uri, mongo_db_name, tmp_path)
    study = optuna.create_study(study_name="forged", storage=stores.study_storage())
    storage = stores.study_storage()
    assert storage.claim_trial_slot(study._study_id, 6, lambda: 0) == 1
    mongo_client[mongo_db_name]["studies"].update_one({"name": "forged"}, {"$set": {"trial_slots": -20}})
    from tlsearch.errors import SlotCounterError

    with pytest.raises(SlotCounterError, match="holds -20, not a count of trials"):
        storage.claim_trial_slot(study._study_id, 6, lambda: 0)

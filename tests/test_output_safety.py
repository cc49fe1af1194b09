"""What a database writer puts in a study is data on the way out too: printed with its control characters escaped,
written to CSV without starting a formula; forged scores, counters and journal lines give one line, never a
traceback or a wrong run; inputs that cannot be shown safely are refused (issues 22.6, 22.7, 22.9, 30.6)."""

from __future__ import annotations

import csv
import io
import json
import sys

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tlsearch.cli import main
from tlsearch.errors import StudySpecError
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(300)

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes the clipboard
CLEAR = "\x1b[2J"
RLO = "\u202e"  # right-to-left override
CSI_C1 = "\x9b31m"
EVIL = f"x{OSC52}{CLEAR}{RLO}{CSI_C1}y"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")
FORMULA = '=HYPERLINK("http://evil.example","x")'


def _storage(home):
    return Stores.resolve(None, None, home).study_storage()


def _forged_study(home, name: str, *, user_attrs: dict | None = None) -> optuna.Study:
    """A study as a database writer could leave it: controls in its params, attributes, errors and references."""
    study = optuna.create_study(study_name=name, storage=_storage(home), direction="maximize")
    study_attrs.write(study, study_attrs.DATASET_REF, EVIL)
    study_attrs.write(study, study_attrs.STUDY_FILE, f"/tmp/{EVIL}.py")
    distributions = {EVIL: CategoricalDistribution([EVIL, FORMULA]), "lr": FloatDistribution(-5.0, 5.0)}
    attrs = {"mean_test_score": 0.5, "std_test_score": 0.1, "split0_test_score": 0.5, "note": EVIL}
    study.add_trial(
        create_trial(
            params={EVIL: FORMULA, "lr": -1.5},
            distributions=distributions,
            value=0.5,
            user_attrs={**attrs, **(user_attrs or {})},
        )
    )
    study.add_trial(
        create_trial(
            params={EVIL: EVIL, "lr": 2.0},
            distributions=distributions,
            state=TrialState.FAIL,
            user_attrs={"error_type": "ValueError", "error_message": f"-{EVIL}", "formula": "@SUM(A1:A9)"},
        )
    )
    return study


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    _forged_study(home, "forged")
    _forged_study(home, f"name-{EVIL}")
    return home


def test_no_command_prints_a_raw_control_character_from_the_store(home, capsys):
    outputs = {}
    for argv in (
        ["status"],
        ["status", "--json"],
        ["status", "forged"],
        ["best", "forged"],
        ["best", "forged", "--json"],
        ["trials", "forged"],
        ["trials", "forged", "--format", "csv"],
        ["trials", "forged", "--format", "json"],
        ["resume", "forged"],  # no record of its study file: the error shows the store's hint
        ["copy", "forged", "--to-name", "copy", "--to", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200"],
    ):
        code, outputs[" ".join(argv)] = _run(capsys, *argv, "--home", str(home))
        assert code in (0, 1), argv
    for command, text in outputs.items():
        assert not any(c in text for c in RAW_CONTROLS), (command, text)
    assert "\\x1b]52;c;" in outputs["status"]  # shown escaped, not dropped
    assert "\\u202e" in outputs["best forged"]
    assert "x1b" in outputs["resume forged"]  # the study-file hint, escaped


def test_csv_cells_cannot_start_a_formula_unless_asked_and_json_stays_exact(home, capsys):
    code, text = _run(capsys, "trials", "forged", "--home", str(home), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(text)))
    complete = next(row for row in rows if row["state"] == "COMPLETE")
    failed = next(row for row in rows if row["state"] == "FAIL")
    evil_column = next(column for column in complete if column.startswith("params_x"))
    assert complete[evil_column] == "'" + FORMULA
    assert complete["params_lr"] == "-1.5"  # a negative number stays a number
    assert failed["user_attrs_formula"] == "'@SUM(A1:A9)"
    assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for row in rows for cell in row.values())

    code, raw = _run(capsys, "trials", "forged", "--home", str(home), "--format", "csv", "--raw-csv")
    assert code == 0
    assert next(iter(csv.DictReader(io.StringIO(raw))))[f"params_{EVIL}"] == FORMULA

    code, text = _run(capsys, "trials", "forged", "--home", str(home), "--format", "json")
    records = json.loads(text)
    assert records[0][f"params_{EVIL}"] == FORMULA and records[1]["params_lr"] == 2.0
    assert records[1][f"params_{EVIL}"] == EVIL  # exact, escaped only by JSON itself


def test_raw_csv_is_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["trials", "--help"])
    assert "--raw-csv" in capsys.readouterr().out


def test_forged_scores_are_shown_as_missing_with_a_warning(tmp_path, capsys):
    home = tmp_path / "home"
    forged = {"mean_test_score": "0.99", "std_test_score": {"$gt": 1}, "n_folds_run": "many"}
    _forged_study(home, "forged", user_attrs=forged)
    report = ["report", "forged", "-o", str(tmp_path / "report.html")]
    for argv in (["best", "forged"], ["trials", "forged"], ["trials", "forged", "--format", "csv"], report):
        code, text = _run(capsys, *argv, "--home", str(home))
        assert code == 0, (argv, text)
        assert "Traceback" not in text
    code, text = _run(capsys, "best", "forged", "--home", str(home))
    assert "CV score" not in text and "best trial #0" in text
    assert "trial 0: mean_test_score is '0.99', not a number: shown as missing" in text
    code, text = _run(capsys, "trials", "forged", "--home", str(home))
    assert "n_folds_run is 'many'" in text and "std_test_score is {'$gt': 1}" in text


def test_a_journal_value_nested_200000_deep_is_journal_damage(tmp_path, capsys):
    home = tmp_path / "home"
    _forged_study(home, "forged")
    with open(home / "studies.journal", "a") as journal:
        journal.write('{"op_code": 5, "deep": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    code, text = _run(capsys, "status", "--home", str(home))
    assert code == 1
    assert "is damaged at line" in text and "RecursionError" not in text


def test_a_study_file_that_exits_at_import_is_an_error(tmp_path, capsys):
    study_file = tmp_path / "exits.py"
    study_file.write_text("raise SystemExit(0)\n")
    code, text = _run(capsys, "run", str(study_file), "--home", str(tmp_path / "home"))
    assert code == 1
    assert "failed to import" in text and "SystemExit" in text


@pytest.mark.parametrize("timeout", ["nan", "inf", "-5", "0", "soon"])
def test_timeout_must_be_a_finite_number_of_seconds_above_zero(tmp_path, capsys, timeout):
    with pytest.raises(SystemExit) as exited:
        main(["run", str(tmp_path / "none.py"), f"--timeout={timeout}"])
    assert exited.value.code == 2
    assert "is not a number of seconds above 0" in capsys.readouterr().err


BAD_NAMES = ["a\u202eb", "a\x9bb", "a\udc80b", "a\x1b[2Jb", "tab\there"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_unsafe_study_names_are_refused_on_the_command_line(tmp_path, capsys, name):
    with pytest.raises(SystemExit) as exited:
        main(["run", str(tmp_path / "none.py"), "--name", name])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "must not hold control, bidi or surrogate characters" in err
    assert not any(c in err for c in (*RAW_CONTROLS, "\udc80"))
    with pytest.raises(SystemExit):
        main(["best", name])


@pytest.mark.parametrize("name", BAD_NAMES)
def test_unsafe_study_names_are_refused_by_studyspec(name):
    from sklearn.tree import DecisionTreeClassifier

    import tlsearch

    with pytest.raises(StudySpecError, match="StudySpec.name must not hold control") as raised:
        tlsearch.StudySpec(
            name=name,
            dataset="sklearn:iris",
            space={"max_depth": optuna.distributions.IntDistribution(1, 3)},
            model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(**p)),
        )
    assert len(str(raised.value).splitlines()) == 1
    str(raised.value).encode("utf-8")  # printable: the surrogate is shown escaped, not raw


@pytest.mark.slow
def test_the_progress_line_escapes_a_trial_error(tmp_path, capsys):
    study_file = tmp_path / "fails.py"
    study_file.write_text(
        "import tlsearch\n"
        "def fit(params, fold, report):\n"
        f"    raise ValueError({EVIL!r})\n"
        "spec = tlsearch.StudySpec(name='fails', dataset='sklearn:iris',\n"
        "    space=lambda trial: {'x': trial.suggest_float('x', 0, 1)},\n"
        "    model=tlsearch.CustomLoop(fit), cv=2, metric='accuracy', n_trials=2)\n"
    )
    code, text = _run(
        capsys, "run", str(study_file), "--home", str(tmp_path / "home"), "--workers", "1", "--progress", "log"
    )
    assert code != 0
    assert "trial 0 FAIL" in text and "\\x1b]52" in text
    assert not any(c in text for c in RAW_CONTROLS), text


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("POSIX terminals", allow_module_level=True)

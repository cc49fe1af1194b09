"""Settings through the command a user runs: defaults < config file < environment < command line, and a bad
value in any layer is one line naming that layer."""

from __future__ import annotations

import pytest

from tlsearch.cli import main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def layers(tmp_path, monkeypatch):
    """A clean environment with a config file at $TLSEARCH_CONFIG; `write(**keys)` fills the file."""
    for variable in ("TLSEARCH_MONGO_URI", "TLSEARCH_DATABASE", "TLSEARCH_HOME", "TLSEARCH_CACHE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)  # the default home, ./.tlsearch, lands here
    config = tmp_path / "tlsearch.toml"
    monkeypatch.setenv("TLSEARCH_CONFIG", str(config))

    def write(**keys) -> None:
        config.write_text("".join(f"{key} = {value!r}\n".replace("'", '"') for key, value in keys.items()))

    write()
    return write


def _pushed_homes(tmp_path) -> list[str]:
    """The folders under `tmp_path` whose local dataset store holds a dataset."""
    return sorted(store.parent.name for store in tmp_path.rglob("datasets") if store.is_dir() and any(store.iterdir()))


@pytest.mark.parametrize(
    ("toml", "env", "cli", "winner"),
    [
        (False, False, False, ".tlsearch"),
        (True, False, False, "from-toml"),
        (True, True, False, "from-env"),
        (True, True, True, "from-cli"),
    ],
)
def test_home_comes_from_the_highest_layer_that_gives_it(layers, tmp_path, monkeypatch, toml, env, cli, winner):
    if toml:
        layers(home=str(tmp_path / "from-toml"))
    if env:
        monkeypatch.setenv("TLSEARCH_HOME", str(tmp_path / "from-env"))
    where = ["--home", str(tmp_path / "from-cli")] if cli else []
    assert main(["dataset", "push", "iris", "sklearn:iris", *where]) == 0
    assert _pushed_homes(tmp_path) == [winner]


def test_database_comes_from_the_highest_layer_that_gives_it(layers, mongo_uri, mongo_client, monkeypatch):
    databases = ["tls_cfg_toml", "tls_cfg_env", "tls_cfg_cli"]
    for name in databases:
        mongo_client.drop_database(name)
    try:
        layers(mongo=mongo_uri, database="tls_cfg_toml")
        assert main(["dataset", "push", "iris", "sklearn:iris"]) == 0
        monkeypatch.setenv("TLSEARCH_DATABASE", "tls_cfg_env")
        assert main(["dataset", "push", "wine", "sklearn:wine"]) == 0
        assert main(["dataset", "push", "digits", "sklearn:digits", "--database", "tls_cfg_cli"]) == 0
        held = {name: sorted(mongo_client[name]["datasets"].distinct("name")) for name in databases}
        assert held == {"tls_cfg_toml": ["iris"], "tls_cfg_env": ["wine"], "tls_cfg_cli": ["digits"]}
    finally:
        for name in databases:
            mongo_client.drop_database(name)


@pytest.mark.parametrize(
    ("layer", "says"),
    [
        ("toml", "(key database): database 'a/b' is not a MongoDB database name"),
        ("env", "environment variable TLSEARCH_DATABASE: database 'a/b' is not a MongoDB database name"),
        ("cli", "option --database: database 'a/b' is not a MongoDB database name"),
    ],
)
def test_a_bad_value_in_any_layer_is_one_line_naming_the_layer(layers, tmp_path, monkeypatch, capsys, layer, says):
    if layer == "toml":
        layers(database="a/b")
    elif layer == "env":
        monkeypatch.setenv("TLSEARCH_DATABASE", "a/b")
    assert main(["dataset", "ls", *(["--database", "a/b"] if layer == "cli" else [])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    if layer == "toml":
        assert f"config file {tmp_path / 'tlsearch.toml'}" in err


def test_a_mongo_uri_that_is_not_one_and_an_unknown_config_key_are_refused(layers, monkeypatch, capsys):
    monkeypatch.setenv("TLSEARCH_MONGO_URI", "localhost:27017")
    assert main(["dataset", "ls"]) == 1
    assert "environment variable TLSEARCH_MONGO_URI: mongo 'localhost:27017' is not a MongoDB URI" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("TLSEARCH_MONGO_URI")
    layers(mongo_uri="mongodb://localhost")
    assert main(["dataset", "ls"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key(s) mongo_uri" in err, err


def test_the_old_names_of_renamed_keywords_still_work_with_a_deprecation_warning(tmp_path):
    from tlsearch import open_dataset_store
    from tlsearch.stores._artifacts import open_artifact_store

    with pytest.warns(
        DeprecationWarning,
        match=r"open_dataset_store\(root=...\) is deprecated and removed in tlsearch 3\.0: use home=",
    ):
        store = open_dataset_store(root=tmp_path / "old")
    with store:
        assert store.root == tmp_path / "old" / "datasets"
    with pytest.warns(
        DeprecationWarning,
        match=r"open_artifact_store\(mongo_uri=...\) is deprecated and removed in tlsearch 3\.0: use mongo=",
    ):
        open_artifact_store(mongo_uri=None, home=tmp_path / "new")
    assert (tmp_path / "new" / "artifacts").is_dir()
    with pytest.raises(TypeError, match="give home= only"):
        open_dataset_store(root=tmp_path, home=tmp_path)

"""The database a MongoDB URI names is the one every store opens, as pymongo's default database."""

from __future__ import annotations

import optuna
import pytest

from tlsearch.cli import main
from tlsearch.errors import TLSearchError
from tlsearch.storage import MongoStorage


def with_database(uri: str, database: str) -> str:
    """`uri` naming `database` (kept options after it)."""
    base, _, options = uri.partition("?")
    base = base.rstrip("/")
    if base.count("/") > 2:  # the URI already names one
        base = base.rsplit("/", 1)[0]
    return f"{base}/{database}" + (f"?{options}" if options else "")


def test_mongo_storage_opens_the_database_the_uri_names(mongo_uri, mongo_db_name, mongo_client):
    storage = MongoStorage(with_database(mongo_uri, mongo_db_name))
    optuna.create_study(study_name="named", storage=storage)
    assert "named" in {s["name"] for s in mongo_client[mongo_db_name]["studies"].find()}
    same = optuna.load_study(study_name="named", storage=MongoStorage(mongo_uri, mongo_db_name))
    assert same.study_name == "named"


def test_a_database_that_differs_from_the_uris_is_refused_naming_both(mongo_uri, mongo_db_name):
    with pytest.raises(TLSearchError, match=f"names database '{mongo_db_name}' but database 'other'"):
        MongoStorage(with_database(mongo_uri, mongo_db_name), database="other")


def test_the_commands_read_the_database_the_uri_names(tmp_path, mongo_uri, mongo_db_name, capsys):
    optuna.create_study(study_name="seen", storage=MongoStorage(mongo_uri, mongo_db_name))
    assert main(["status", "--mongo", with_database(mongo_uri, mongo_db_name), "--home", str(tmp_path)]) == 0
    assert "seen" in capsys.readouterr().out

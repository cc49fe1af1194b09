import pymongo
import pytest

from tlsearch.testing import TestMongoServer


def test_test_server_speaks_the_wire_protocol(mongo_client, mongo_db_name):
    collection = mongo_client[mongo_db_name]["values"]
    collection.insert_one({"_id": 1, "nan": float("nan"), "inf": float("inf"), "nested": [[1.5, -2]]})
    doc = collection.find_one({"_id": 1})
    assert doc["nan"] != doc["nan"] and doc["inf"] == float("inf") and doc["nested"] == [[1.5, -2]]


@pytest.mark.slow
def test_persistent_server_keeps_data_across_restart(persistent_mongo_server):
    client = pymongo.MongoClient(persistent_mongo_server.uri)
    client.db.items.insert_one({"_id": "kept"})
    client.close()
    uri = persistent_mongo_server.restart()
    client = pymongo.MongoClient(uri)
    assert client.db.items.find_one({"_id": "kept"}) == {"_id": "kept"}
    client.close()


@pytest.mark.slow
def test_stopped_server_leaves_no_process(tmp_path):
    server = TestMongoServer()
    server.start()
    process = server._process
    server.stop()
    assert process.poll() is not None

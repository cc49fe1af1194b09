"""Helpers for tlsearch's own tests and benchmarks (and for users testing code that uses tlsearch)."""

from tlsearch.testing.mongo_server import TestMongoServer, test_mongo_uri

__all__ = ["TestMongoServer", "test_mongo_uri"]

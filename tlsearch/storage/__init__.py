"""Where trials live: `MongoStorage`, an Optuna storage on MongoDB, and the embedded default's journal file."""

from tlsearch.errors import MongoUnavailableError
from tlsearch.storage._journal import JournalStorage
from tlsearch.storage._mongo import MongoStorage

__all__ = ["JournalStorage", "MongoStorage", "MongoUnavailableError"]

"""Where trials live: `MongoStorage`, an Optuna storage on MongoDB."""

from tlsearch.storage._client import MongoUnavailableError
from tlsearch.storage._mongo import MongoStorage

__all__ = ["MongoStorage", "MongoUnavailableError"]

"""The one MongoDB layer of the study store, the dataset store and the artifact store: a client that fails fast
and clearly when the server cannot be reached (`connect`), retries while it is briefly away (`retrying`), and
URIs shown without their credentials or secret options (`mask_uri`, `scrub`), and GridFS files written from a
stream (`write_gridfs_file`) and read back chunk by chunk, checked (`read_gridfs_chunks`)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from typing import Any, TypeVar

import pymongo
from bson import Binary, ObjectId
from pymongo.collection import Collection
from pymongo.errors import AutoReconnect, ConfigurationError, CursorNotFound, OperationFailure, PyMongoError

from tlsearch.errors import GridFSDamagedError, MongoUnavailableError

_logger = logging.getLogger(__name__)
T = TypeVar("T")

CONNECT_TIMEOUT_S = 3.0  # a server that is not there is reported within this (plus a little)
RETRY_WINDOW_S = 30.0  # how long an operation keeps retrying while the connection is lost

# Server errors that mean "try again" (shutting down, stepping down, not yet primary).
_TRANSIENT_CODES = frozenset({6, 7, 89, 91, 189, 9001, 10107, 11600, 11602, 13435, 13436})

# Everything between the scheme and the last "@" is user-info, whatever it holds ("/", "#", "?", "@", spaces):
# masking a little too much (an "@" in an option) is safe, showing a password is not.
_SCHEME = re.compile(r"^(\s*[A-Za-z][A-Za-z0-9+.-]*://)")
_URI_IN_TEXT = re.compile(r"(mongodb(?:\+srv)?://)\S*@")
_DELIMITERS = re.compile(r"[/?#@: ]+")
# Options whose values are secrets: any *password*, *secret* or *token* option, and authMechanismProperties
# (it can carry an AWS session token).
_SECRET_OPTIONS = re.compile(r"(?i)((?:password|secret|token|authMechanismProperties)[^=&]*=)[^&#]*")


def mask_uri(uri: str) -> str:
    """`uri` with its credentials (user-info before the last `@`, and secret options) replaced by ***, whether
    or not it parses as a URI."""
    match = _SCHEME.match(uri)
    scheme, rest = (match.group(1), uri[match.end() :]) if match else ("", uri)
    at = rest.rfind("@")
    masked = scheme + ("***" + rest[at:] if at >= 0 else rest)
    return _SECRET_OPTIONS.sub(r"\1***", masked)


def mask_uris(text: str) -> str:
    """`text` (a log line, an error, a traceback) with the user-info of every MongoDB URI in it masked; a URI
    whose password holds spaces is masked whole only by `scrub`, which knows it."""
    return _SECRET_OPTIONS.sub(r"\1***", _URI_IN_TEXT.sub(r"\1***@", text))


def scrub(text: str, uri: str) -> str:
    """`text` (e.g. an error message) with any credentials from `uri` masked: the URI itself, its user-info,
    user name and password (as written and percent-decoded), and every piece of them a parser may have split."""
    text = mask_uris(text.replace(uri, mask_uri(uri)))
    for secret in sorted(_secrets(uri), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _secrets(uri: str) -> set[str]:
    from urllib.parse import unquote_plus

    match = _SCHEME.match(uri)
    rest = uri[match.end() :] if match else uri
    userinfo = rest[: rest.rfind("@")] if "@" in rest else ""
    pieces = {userinfo, *userinfo.split(":", 1), *_DELIMITERS.split(userinfo)}
    decoded = {unquote_plus(piece) for piece in pieces}
    pieces |= decoded | {part for piece in decoded for part in _DELIMITERS.split(piece)}
    return {piece for piece in pieces if len(piece) >= 3}


def _unescaped_userinfo(uri: str) -> bool:
    """Whether the user-info of `uri` holds characters a URI parser splits at (they must be percent-encoded)."""
    match = _SCHEME.match(uri)
    rest = uri[match.end() :] if match else uri
    return "@" in rest and bool(re.search(r"[/?@]", rest[: rest.rfind("@")]))


def connect(uri: str, **options) -> pymongo.MongoClient:
    """A client for `uri` that has answered a ping; MongoUnavailableError within about CONNECT_TIMEOUT_S if not.

    Timeouts given in the URI win over ours."""
    timeout_ms = int(CONNECT_TIMEOUT_S * 1000)
    timeouts = {
        option: timeout_ms
        for option in ("serverSelectionTimeoutMS", "connectTimeoutMS")
        if f"{option.lower()}=" not in uri.lower()
    }
    if _unescaped_userinfo(uri):
        raise ValueError(
            f"invalid MongoDB URI {mask_uri(uri)}: its user name or password holds '/', '?' or '@'; "
            "percent-encode them (urllib.parse.quote_plus)"
        )
    try:
        client = pymongo.MongoClient(uri, **timeouts, **options)
    except (ConfigurationError, ValueError) as exc:
        raise ValueError(f"invalid MongoDB URI {mask_uri(uri)}: {scrub(str(exc), uri)}") from None
    try:
        ping(client)
    except MongoUnavailableError as exc:
        client.close()
        raise MongoUnavailableError(f"cannot reach MongoDB at {mask_uri(uri)}: {scrub(str(exc), uri)}") from None
    except OperationFailure as exc:
        client.close()
        reason = scrub(str(exc), uri)
        raise MongoUnavailableError(f"MongoDB at {mask_uri(uri)} refused the connection: {reason}") from None
    return client


def ping(client: pymongo.MongoClient) -> None:
    """One ping, no retries; MongoUnavailableError if the server cannot be reached."""
    try:
        client.admin.command("ping")
    except AutoReconnect as exc:
        raise MongoUnavailableError(_first_line(exc)) from None


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` means the connection or the server was briefly away (so trying again may succeed)."""
    if isinstance(exc, AutoReconnect):
        return True
    return isinstance(exc, OperationFailure) and exc.code in _TRANSIENT_CODES


def retrying(operation: Callable[[], T], describe: Callable[[], str], window_s: float = RETRY_WINDOW_S) -> T:
    """Run `operation`, running it again while it fails transiently, for up to `window_s` seconds.

    Only for operations that are safe to repeat (reads, idempotent updates); the others check what a lost
    attempt did themselves. Gives up with MongoUnavailableError."""
    deadline = time.monotonic() + window_s
    delay = 0.05
    while True:
        try:
            return operation()
        except PyMongoError as exc:
            if not is_transient(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise MongoUnavailableError(
                    f"lost MongoDB at {describe()} for more than {window_s:.0f} s: {_first_line(exc)}"
                ) from None
            _logger.warning("MongoDB at %s is unavailable (%s); retrying", describe(), _first_line(exc))
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _first_line(exc: BaseException) -> str:
    text = str(exc).split(", Timeout:")[0].split(" (configured timeouts")[0]
    return text.splitlines()[0] if text else type(exc).__name__


def read_gridfs_chunks(
    chunks: Collection, file_id: Any, length: int, chunk_size: int, *, first: int = 0, batch_bytes: int = 8 << 20
) -> Iterator[bytes]:
    """The chunks of a GridFS file from chunk `first` on, in order, about `batch_bytes` per server reply, each
    checked (its number and size): GridFSDamagedError when one is missing, extra or cut. A cursor the server
    dropped (a reader slower than the cursor timeout) is reopened where it stopped."""
    n_chunks = -(-length // chunk_size) if length else 0
    n = first
    while True:
        query: dict[str, Any] = {"files_id": file_id, **({"n": {"$gte": n}} if n else {})}
        cursor = chunks.find(query, {"_id": 0, "n": 1, "data": 1}).sort("n", 1)
        cursor.batch_size(max(1, batch_bytes // chunk_size))
        try:
            for doc in cursor:
                size = chunk_size if n < n_chunks - 1 else length - chunk_size * (n_chunks - 1)
                if doc["n"] != n or n >= n_chunks or len(doc["data"]) != size:
                    raise GridFSDamagedError("damaged", f"chunk {n}")
                yield doc["data"]
                n += 1
            break
        except CursorNotFound:
            continue
        finally:
            cursor.close()
    if n != n_chunks:
        raise GridFSDamagedError("truncated", f"{n} of {n_chunks} chunks")


# The files document of a GridFS file being written carries this field until its last chunk is in.
UPLOADING = "uploading"


def write_gridfs_file(
    files: Collection,
    chunks: Collection,
    pieces: Iterable[bytes | memoryview],
    *,
    filename: str,
    metadata: dict | None = None,
    chunk_size: int,
    batch_bytes: int = 16 << 20,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[ObjectId, int]:
    """Write one GridFS file (the standard layout) from byte pieces of any length; (its id, its length).

    The files document goes first, marked `UPLOADING` (length 0) until the last chunk is in, so a cleanup by
    its filename or metadata finds the chunks of an upload that died halfway, and readers that list files skip
    it; then its length and `uploadDate` are set, so the newest `uploadDate` is the newest complete file.
    Chunks go in batches of about `batch_bytes`; `on_batch(nbytes)` runs after each. On an error the file and
    its chunks are deleted and the error propagates."""
    file_id, n, length, batch, in_batch = ObjectId(), 0, 0, [], 0
    document = {
        "_id": file_id,
        "length": 0,
        "chunkSize": chunk_size,
        "uploadDate": datetime.now(timezone.utc),
        "filename": filename,
    }
    files.insert_one({**document, **({"metadata": metadata} if metadata is not None else {}), UPLOADING: True})
    try:
        for chunk in _rechunk(pieces, chunk_size):
            batch.append({"files_id": file_id, "n": n, "data": Binary(chunk)})
            n, length, in_batch = n + 1, length + len(chunk), in_batch + len(chunk)
            if in_batch >= batch_bytes:
                _insert_chunks(chunks, batch, in_batch, on_batch)
                batch, in_batch = [], 0
        if batch:
            _insert_chunks(chunks, batch, in_batch, on_batch)
        files.update_one(
            {"_id": file_id},
            {"$set": {"length": length, "uploadDate": datetime.now(timezone.utc)}, "$unset": {UPLOADING: ""}},
        )
    except BaseException:
        chunks.delete_many({"files_id": file_id})
        files.delete_one({"_id": file_id})
        raise
    return file_id, length


def _insert_chunks(chunks: Collection, batch: list[dict], nbytes: int, on_batch: Callable[[int], None] | None) -> None:
    chunks.insert_many(batch, ordered=True)
    if on_batch is not None:
        on_batch(nbytes)


def _rechunk(pieces: Iterable[bytes | memoryview], size: int) -> Iterator[bytes]:
    """Byte pieces of any length → consecutive chunks of exactly `size` bytes (the last may be shorter)."""
    buffer = bytearray()
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while view.nbytes:
            take = min(size - len(buffer), view.nbytes)
            buffer += view[:take]
            view = view[take:]
            if len(buffer) == size:
                yield bytes(buffer)
                buffer = bytearray()
    if buffer:
        yield bytes(buffer)

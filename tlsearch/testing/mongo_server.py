"""A MongoDB wire-protocol server for tests and benchmarks: mongo-java-server, started on a free port.

`python -m tlsearch.testing.mongo_server [--h2 FILE]` starts one by hand and prints its URI.
The jars are resolved by `bash .ci/setup` into `.ci/mongo/lib` (never committed).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_SERVER_DIR = Path(os.environ.get("TLSEARCH_MONGO_SERVER_DIR", Path(__file__).resolve().parents[2] / ".ci" / "mongo"))


class TestMongoServer:
    """One mongo-java-server process on 127.0.0.1.

    With `h2_file`, data is kept in that file and survives `restart()`; otherwise it lives in memory.
    The server exits when this process dies (it watches its standard input), so none outlives a test run.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, h2_file: str | os.PathLike | None = None, port: int = 0) -> None:
        self.h2_file = None if h2_file is None else str(h2_file)
        self.port = port
        self.host = "127.0.0.1"
        self._process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"mongodb://{self.host}:{self.port}/?serverSelectionTimeoutMS=5000"

    def start(self, timeout: float = 30.0) -> str:
        """Start the server and return its URI once it accepts connections."""
        classes, lib = _SERVER_DIR / "classes", _SERVER_DIR / "lib"
        if not (classes / "TestMongoServer.class").exists():
            raise RuntimeError(f"the test MongoDB server is not built in {_SERVER_DIR}; run `bash .ci/setup` first")
        args = [
            "java",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-cp",
            f"{classes}{os.pathsep}{lib}/*",
            "TestMongoServer",
            self.host,
            str(self.port),
        ]
        if self.h2_file:
            args.append(self.h2_file)
        self._process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        line = self._process.stdout.readline()
        if not line.startswith("listening ") or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"the test MongoDB server did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        return self.uri

    def stop(self) -> None:
        """Stop the server, letting it flush its H2 file."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for stream in (process.stdin, process.stdout):
            if stream:
                stream.close()

    def restart(self) -> str:
        """Stop and start again on the same port (the H2 backend keeps its data)."""
        self.stop()
        return self.start()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def test_mongo_uri() -> str | None:
    """The real MongoDB the tests should use, if `$TLSEARCH_TEST_MONGO_URI` names one."""
    return os.environ.get("TLSEARCH_TEST_MONGO_URI") or None


test_mongo_uri.__test__ = False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tlsearch.testing.mongo_server",
        description="Start the MongoDB wire-protocol server used by tlsearch's tests and benchmarks; "
        "prints its URI and runs until Ctrl-C.",
        epilog="example: python -m tlsearch.testing.mongo_server --h2 /tmp/studies.h2 --port 27017",
    )
    parser.add_argument("--h2", metavar="FILE", help="keep the data in this H2 file (survives restarts)")
    parser.add_argument("--port", type=int, default=0, help="port to bind on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    server = TestMongoServer(args.h2, args.port)
    print(server.start(), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())

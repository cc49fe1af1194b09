"""No password of a MongoDB URI is ever printed, whatever characters it holds and whether or not the URI parses
(issue 30.3): `tlsearch status --mongo URI` against a closed local port, with and without --debug."""

from __future__ import annotations

import re
import socket

import pytest

from tlsearch.cli import main
from tlsearch.mongo import mask_uri, scrub

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: connecting there is refused


# (user-info, the pieces of it that must never be printed)
USERINFOS = [
    ("alice:s3/cr3tHunter", ["s3/cr3t", "cr3tHunter"]),
    ("alice:s3cr3t#Hunter", ["s3cr3t", "Hunter"]),
    ("alice:s3cr3t?Hunter", ["s3cr3t", "Hunter"]),
    ("alice:s3cr3t@Hunter", ["s3cr3t", "Hunter"]),
    ("alice:s3cr3t Hunter", ["s3cr3t", "Hunter"]),
    ("alice:s3cr3t%20Hunter", ["s3cr3t", "Hunter"]),
    ("alice:p%ZZs3cr3tHunter", ["s3cr3tHunter"]),
    ("al/ice:s3cr3t/Hunter", ["s3cr3t", "Hunter"]),
    ("alice:s3cr3t:Hunter", ["s3cr3t", "Hunter"]),
]


def _uris(port: int):
    for userinfo, secrets in USERINFOS:
        yield f"mongodb://{userinfo}@127.0.0.1:{port}/", secrets
        yield f"mongodb+srv://{userinfo}@cluster0.invalid/", secrets
    yield f"mongodb://127.0.0.1:{port}/?authMechanismProperties=AWS_SESSION_TOKEN:s3cr3tTok", ["s3cr3tTok"]
    yield f"mongodb://bob:s3cr3tPw@127.0.0.1:{port}/?tlsCertificateKeyFilePassword=s3cr3tKey", ["s3cr3tPw", "s3cr3tKey"]


@pytest.mark.slow
@pytest.mark.parametrize("debug", [False, True])
def test_status_never_prints_the_password_of_any_uri(closed_port, capsys, debug):
    checked = 0
    for uri, secrets in _uris(closed_port):
        argv = ["status", "--mongo", uri, *(["--debug"] if debug else [])]
        assert main(argv) == 1, uri
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert "error" in text.lower(), (uri, text)
        for secret in secrets:
            assert secret not in text, (uri, text)
        assert "***" in text, (uri, text)
        checked += 1
    assert checked == 2 * len(USERINFOS) + 2


def test_invalid_and_refused_uris_give_one_line_naming_the_masked_uri(closed_port, capsys):
    assert main(["status", "--mongo", f"mongodb://alice:s3/cr3t@127.0.0.1:{closed_port}/"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()]
    assert f"invalid MongoDB URI mongodb://***@127.0.0.1:{closed_port}/" in err and "percent-encode" in err
    assert main(["status", "--mongo", f"mongodb://alice:s3%2Fcr3t@127.0.0.1:{closed_port}/"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach MongoDB at mongodb://***@127.0.0.1:{closed_port}/" in err


@pytest.mark.parametrize("userinfo, secrets", USERINFOS)
def test_mask_uri_and_scrub_hide_every_piece_of_the_user_info(userinfo, secrets):
    uri = f"mongodb://{userinfo}@db.example:27017/?appName=x"
    assert mask_uri(uri) == "mongodb://***@db.example:27017/?appName=x"
    assert mask_uri(f"{userinfo}@db.example") == "***@db.example"  # not even a URI
    password = userinfo.split(":", 1)[1]
    piece = re.split(r"[/?#@: ]|%20", password)[-1]  # what a parser splitting at a delimiter may print
    message = f"failed for {uri}; password {password} parsed as host {piece}"
    assert not any(secret in scrub(message, uri) for secret in secrets)

"""Hostile input II (issue 44), findings 5 and 7: what a request can make the services write back.

- Text-mode logs: a path with ``%0a``, ``%0d`` or an ESC does not start a new log line; the
  controls are written as escapes (JSON mode already escaped them).
- Redirects: a trailing-slash request with a forged ``Host`` gets no ``Location`` on that host, on
  each of the three services (there is no slash redirect: the usual 404 error body).
- nginx (deploy/nginx/nginx.conf): the ``@too_large`` and ``@upstream_down`` bodies are valid JSON
  whatever path and ``X-Request-ID`` the client sent.
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.integration.cluster import Nginx
from tests.servers import free_port, nginx_binary
from verilive.config import Settings
from verilive.server.app import create_service_app
from verilive.server.logs import TextFormatter, escape_controls

KEY = Path(__file__).parent / "fixtures" / "capture_test_key.pem"
SERVICES = ("face", "voice", "capture")
FORGED = "2026-11-28 06:00:00,000 INFO verilive.audit: back-office access key=admin"
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def service_settings(tmp: Path) -> Settings:
    # No lifespan runs (no `with`): no model is loaded; routing and the middleware are all we need.
    return Settings(
        capture_private_keys=[str(KEY)],
        capture_replay_url=f"sqlite:///{tmp}/replay.sqlite3",
        bi_database_url=f"sqlite:///{tmp}/bi.sqlite3",
    )


def app_client(service: str, tmp: Path) -> TestClient:
    return TestClient(create_service_app(service, service_settings(tmp)), raise_server_exceptions=False)


@pytest.fixture()
def text_log() -> Iterator[io.StringIO]:
    """What the root logger writes in text mode (`VERILIVE_LOG_JSON=false`)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


# --------------------------------------------------------------------------- logs (finding 5)


def test_controls_in_the_path_do_not_start_a_log_line(text_log: io.StringIO, tmp_path: Path) -> None:
    client = app_client("face", tmp_path)
    forged = FORGED.replace(" ", "%20")
    r = client.get(f"/x%0a{forged}%0d%0a{forged}%1b[31mred%e2%80%a8{forged}%c2%85end")
    assert r.status_code == 404
    lines = text_log.getvalue().splitlines()
    access = [line for line in lines if "GET /x" in line]
    assert len(access) == 1, lines
    assert not [line for line in lines if line.startswith(FORGED)], lines
    assert all(RECORD_START.match(line) for line in lines), lines
    assert "/x\\n2026-11-28" in access[0]
    assert "\\r\\n2026-11-28" in access[0]
    assert "\\x1b[31mred" in access[0]
    assert "\\u2028" in access[0] and "\\x85end" in access[0]
    assert "\x1b" not in text_log.getvalue() and "\r" not in text_log.getvalue()


def test_text_formatter_escapes_args_and_keeps_tracebacks_apart() -> None:
    log = logging.getLogger("verilive.test")
    try:
        raise ValueError(f"bad\n{FORGED}")
    except ValueError as exc:
        record = log.makeRecord(log.name, logging.ERROR, __file__, 1, "got %s", (f"a\n{FORGED}",), None)
        record.exc_info = (type(exc), exc, exc.__traceback__)
    text = TextFormatter().format(record)
    first, *rest = text.split("\n")
    assert first.endswith(f"got a\\n{FORGED}")
    assert rest and all(line.startswith("  | ") for line in rest), text
    assert any(line == f"  | {FORGED}" for line in rest)
    assert escape_controls("a\\b\u2029\x7f\t") == "a\\\\b\\u2029\\x7f\\t"


# --------------------------------------------------------------------------- redirects (finding 7a)


@pytest.mark.parametrize("service", SERVICES)
def test_trailing_slash_with_forged_host_is_not_redirected_there(service: str, tmp_path: Path) -> None:
    client = app_client(service, tmp_path)
    unknown = client.get("/no_such_route").json()  # the service's normal 404 body
    for path in ("/bi_records/", "/health/", "/api_version/", "/metrics/"):
        r = client.get(path, headers={"host": "evil.example"}, follow_redirects=False)
        assert "evil.example" not in r.headers.get("location", ""), (path, r.headers)
        assert r.status_code == 404, (path, r.status_code)
        body = r.json()
        assert (body["error_code"], body["path"]) == (unknown["error_code"], path)
    # The documented paths still answer, and the Swagger redirect stays relative.
    assert client.get("/health", headers={"host": "evil.example"}).status_code in (200, 503)
    docs = client.get("/docs", headers={"host": "evil.example"}, follow_redirects=False)
    assert docs.headers["location"] == "/swagger-ui/index.html"


# --------------------------------------------------------------------------- nginx (finding 7b)


def raw_request(port: int, request: bytes) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture()
def nginx_without_replicas(tmp_path: Path) -> Iterator[Nginx]:
    nginx_binary()  # fails with the install hint when nginx is missing
    # Each upstream is a port nobody listens on: every proxied request ends in @upstream_down.
    nginx = Nginx.configure(tmp_path / "nginx", {s: [free_port()] for s in SERVICES})
    nginx.start()
    try:
        yield nginx
    finally:
        nginx.stop()


HOSTILE_PATH = b"/x%22%0a%5c%22,%22status%22:1,%0d%1b"
HOSTILE_RID = b'r"\\"}, "x": "'


@pytest.mark.slow
def test_nginx_error_bodies_are_json_whatever_the_request(nginx_without_replicas: Nginx) -> None:
    for service, port in nginx_without_replicas.ports.items():
        requests = {
            503: b"GET "
            + HOSTILE_PATH
            + b" HTTP/1.1\r\nHost: a\r\nX-Request-ID: "
            + HOSTILE_RID
            + b"\r\nConnection: close\r\n\r\n",
            # Above client_max_body_size (51m): refused from the header, no body sent.
            413: b"POST "
            + HOSTILE_PATH
            + b" HTTP/1.1\r\nHost: a\r\nX-Request-ID: "
            + HOSTILE_RID
            + b"\r\nContent-Length: 60000000\r\nConnection: close\r\n\r\n",
        }
        for status, request in requests.items():
            got, body = raw_request(port, request)
            assert got == status, (service, got, body)
            doc = json.loads(body)
            assert doc["status"] == status, (service, doc)
            assert doc["path"] == "", (service, doc)
            # The client's id is replaced by nginx's own (hex).
            assert re.fullmatch(r"[0-9a-f]{32}", doc["request_id"]), (service, doc)
        # An ordinary path and id are still echoed.
        got, body = raw_request(
            port, b"GET /bi_records HTTP/1.1\r\nHost: a\r\nX-Request-ID: abc-123\r\nConnection: close\r\n\r\n"
        )
        doc = json.loads(body)
        assert (got, doc["path"], doc["request_id"]) == (503, "/bi_records", "abc-123"), (service, doc)

"""API keys with scopes (issue 34; docs/security.md#api-keys).

For each scope: no key and a wrong key are 401, a key without the scope 403, the right key passes,
in the service's error body. /health and the version endpoints stay open. Keys are compared in
constant time and never logged or echoed; bad headers are 401, never a 5xx; rate limits hold
across two replicas sharing Redis; with no keys configured nothing changes.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from common.capture_samples import genuine_bundle
from fastapi.testclient import TestClient

from tests.helpers import assert_error
from tests.servers import redis_server
from verilive.capture.bundle import public_key_b64
from verilive.config import ApiKeyEntry, Settings
from verilive.server import auth
from verilive.server.app import create_service_app, open_routes_warning
from verilive.server.auth import ApiScope, KeyRing, key_digest, presented_key, scope_of

CHECK_KEY = "check-key-0123456789abcdefghijklmnopqrstuvwx"
BACKOFFICE_KEY = "backoffice-key-0123456789abcdefghijklmnopqrst"
METRICS_KEY = "metrics-key-0123456789abcdefghijklmnopqrstuv"
ALL_KEY = "all-scopes-key-0123456789abcdefghijklmnopqrst"
KEYS = [
    ApiKeyEntry(name="frontend", sha256=key_digest(CHECK_KEY), scopes=("check",)),
    ApiKeyEntry(name="fraud-desk", sha256=key_digest(BACKOFFICE_KEY), scopes=("backoffice",)),
    ApiKeyEntry(name="prometheus", sha256=key_digest(METRICS_KEY), scopes=("metrics",)),
    ApiKeyEntry(name="admin", sha256=key_digest(ALL_KEY), scopes=("check", "backoffice", "metrics")),
]
KEY_OF_SCOPE = {"check": CHECK_KEY, "backoffice": BACKOFFICE_KEY, "metrics": METRICS_KEY}
CAPTURE_KEY = Path(__file__).parent / "fixtures" / "capture_test_key.pem"
FACE = "data/face/pad_silentface/image_T1.jpg"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wav() -> bytes:
    buf = io.BytesIO()
    t = np.arange(16000) / 16000.0
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16), 16000, format="WAV")
    return buf.getvalue()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestClient]]:
    """The three services with keys and no models: the key check answers before any model runs.
    Routes that need no model (audio decoding, BI, metrics) answer 200 with the right key."""
    tmp = tmp_path_factory.mktemp("keys")
    s = Settings(
        models_dir=tmp / "models",
        model_mirror=None,
        require_models=False,
        api_keys=KEYS,
        bi_database_url=f"sqlite:///{tmp}/bi.sqlite3",
        capture_replay_url=f"sqlite:///{tmp}/replay.sqlite3",
        capture_private_keys=[str(CAPTURE_KEY)],
    )
    clients = {}
    try:
        for name in ("face", "voice", "capture"):
            c = TestClient(create_service_app(name, s), raise_server_exceptions=False)
            c.__enter__()
            clients[name] = c
        yield clients
    finally:
        for c in clients.values():
            c.__exit__(None, None, None)


# (service, method, path, scope, request kwargs that make the route answer 200 when allowed)
WAV_PART = {"files": {"wav_file": ("a.wav", wav(), "audio/wav")}}
ROUTES: list[tuple[str, str, str, str, dict[str, Any]]] = [
    ("voice", "POST", "/core/read_as_pcm16_samples", "check", WAV_PART),
    ("voice", "GET", "/metrics", "metrics", {}),
    ("face", "GET", "/bi_records", "backoffice", {}),
    ("face", "GET", "/bi_report", "backoffice", {}),
    ("face", "GET", "/metrics", "metrics", {}),
    ("capture", "GET", "/bi_records", "backoffice", {}),
    ("capture", "GET", "/sdk/messages.json", "check", {}),
    ("capture", "GET", "/metrics", "metrics", {}),
]  # fmt: skip


@pytest.mark.parametrize(("service", "method", "path", "scope", "kwargs"), ROUTES)
def test_each_scope_needs_its_key(
    keyed: dict[str, TestClient], service: str, method: str, path: str, scope: str, kwargs: dict[str, Any]
) -> None:
    c = keyed[service]
    body = assert_error(c.request(method, path, **kwargs), 401)
    assert "API key" in body["message"]
    assert c.request(method, path, **kwargs).headers["www-authenticate"].startswith("Bearer")
    assert_error(c.request(method, path, headers=bearer("not-a-key-of-ours"), **kwargs), 401)
    for other, key in KEY_OF_SCOPE.items():
        if other != scope:
            forbidden = assert_error(c.request(method, path, headers=bearer(key), **kwargs), 403)
            assert scope in forbidden["message"]
    assert c.request(method, path, headers=bearer(KEY_OF_SCOPE[scope]), **kwargs).status_code == 200
    assert c.request(method, path, headers={"X-API-Key": KEY_OF_SCOPE[scope]}, **kwargs).status_code == 200
    assert c.request(method, path, headers=bearer(ALL_KEY), **kwargs).status_code == 200


def test_error_bodies_keep_each_services_shape(keyed: dict[str, TestClient]) -> None:
    assert assert_error(keyed["face"].get("/bi_records"), 401)["error_code"] == "UNAUTHORIZED"
    assert (
        assert_error(keyed["voice"].get("/metrics", headers=bearer(CHECK_KEY)), 403)["error_code"]
        == "FORBIDDEN"
    )
    # The capture interface lists its own error codes; others are UNKNOWN there, as for every error.
    assert assert_error(keyed["capture"].get("/bi_records"), 401)["error_code"] == "UNKNOWN"


@pytest.mark.slow
def test_backoffice_extract_routes_need_the_backoffice_scope(
    models_settings: Settings, tmp_path: Path, shared_dir: Path
) -> None:
    """On the real capture service (its engine needs the models): the photo inside a bundle is
    handed out only to a back-office key, and that key cannot ask for decisions."""
    s = models_settings.model_copy(
        update={
            "api_keys": KEYS,
            "capture_private_keys": [str(CAPTURE_KEY)],
            "capture_replay_url": f"sqlite:///{tmp_path}/replay.sqlite3",
            "bi_database_url": f"sqlite:///{tmp_path}/bi.sqlite3",
        }
    )
    # A genuine capture with a bound head-turn burst: the 3D check is required by default.
    blob = genuine_bundle(public_key_b64(CAPTURE_KEY.read_bytes()), shared_dir)
    octet = {"Content-Type": "application/octet-stream"}
    with TestClient(create_service_app("capture", s), raise_server_exceptions=False) as c:
        assert_error(c.post("/extract_image", content=blob, headers=octet), 401)
        assert_error(c.post("/extract_image", content=blob, headers={**octet, **bearer(CHECK_KEY)}), 403)
        r = c.post("/extract_image", content=blob, headers={**octet, **bearer(BACKOFFICE_KEY)})
        assert r.status_code == 200 and r.content[:2] == b"\xff\xd8"
        r = c.post("/extract_data?types=external", content=blob, headers={**octet, **bearer(BACKOFFICE_KEY)})
        assert r.status_code == 200, r.text
        no = c.post("/check_capture_liveness", content=blob, headers={**octet, **bearer(BACKOFFICE_KEY)})
        assert_error(no, 403)
        yes = c.post("/check_capture_liveness", content=blob, headers={**octet, **bearer(CHECK_KEY)})
        assert yes.status_code == 200 and yes.json()["capture_liveness"]["rejection"] == [], yes.text


@pytest.mark.parametrize("service", ["face", "voice", "capture"])
def test_health_and_versions_stay_open(keyed: dict[str, TestClient], service: str) -> None:
    c = keyed[service]
    health = c.get("/health")  # 503: these test services have no models, which /health says
    assert health.status_code in (200, 503) and health.json()["service"] == service
    assert c.get("/openapi.json").status_code == 200
    version = "/core/get_build_info" if service == "voice" else "/api_version"
    assert c.get(version).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic " + CHECK_KEY},
        {"X-API-Key": ""},
        {"Authorization": "Bearer " + "k" * 100_000},
        {"X-API-Key": "x" * 5000},
        {"X-API-Key": "ключ".encode()},
        {"Authorization": ("Bearer " + CHECK_KEY + "é").encode()},
        {"Authorization": "Bearer " + CHECK_KEY[:-1]},
        {"Authorization": "Bearer " + CHECK_KEY + " " + CHECK_KEY},
    ],
)
def test_bad_key_headers_are_401_never_5xx(keyed: dict[str, TestClient], headers: dict[str, Any]) -> None:
    files = {"wav_file": ("a.wav", wav(), "audio/wav")}
    assert_error(keyed["voice"].post("/core/read_as_pcm16_samples", files=files, headers=headers), 401)


def test_keys_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every configured hash is compared with hmac.compare_digest, whichever matches (first, last,
    none): the time does not tell how far a key got."""
    calls: list[bytes] = []
    real = auth.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(a)
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    ring = KeyRing(KEYS)
    for key, name in ((CHECK_KEY, "frontend"), (ALL_KEY, "admin"), ("wrong", None), (None, None), ("", None)):
        calls.clear()
        found = ring.identify(key)
        assert (found.name if found else None) == name
        assert len(calls) == len(KEYS)


def test_a_key_never_appears_in_logs_or_bodies(
    keyed: dict[str, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    c = keyed["face"]
    with caplog.at_level(logging.DEBUG):
        answers = [
            c.get("/bi_records", headers=bearer(BACKOFFICE_KEY)),
            c.get("/bi_records", headers=bearer(CHECK_KEY)),
            c.get("/bi_records", headers={"X-API-Key": METRICS_KEY + "x"}),
            c.get("/metrics", headers=bearer(METRICS_KEY)),
        ]
    texts = [r.text for r in answers] + [
        json.dumps({**r.__dict__, "msg": r.getMessage()}, default=str) for r in caplog.records
    ]
    for key in (BACKOFFICE_KEY, CHECK_KEY, METRICS_KEY):
        assert not any(key in t for t in texts)
    assert any(getattr(r, "key", None) == "fraud-desk" for r in caplog.records)


def test_every_backoffice_access_writes_an_audit_line(
    keyed: dict[str, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    c = keyed["face"]
    with caplog.at_level(logging.INFO, logger="verilive.audit"):
        listed = c.get("/bi_records", headers=bearer(BACKOFFICE_KEY))
        c.get("/bi_report", headers=bearer(BACKOFFICE_KEY))
        c.get("/bi_records", headers=bearer(CHECK_KEY))
        c.post("/check_liveness", headers=bearer(CHECK_KEY))  # a decision: no audit line
    lines = [r for r in caplog.records if r.name == "verilive.audit"]
    got = [(r.key, r.route, r.status, getattr(r, "records", None)) for r in lines]  # type: ignore[attr-defined]
    assert got[0] == ("fraud-desk", "/bi_records", 200, len(listed.json()))
    assert got[1][:3] == ("fraud-desk", "/bi_report", 200)
    assert got[2][:3] == ("frontend", "/bi_records", 403)
    assert len(got) == 3


def test_paths_have_the_documented_scopes() -> None:
    assert scope_of("/health") is None and scope_of("/api_version") is None
    assert scope_of("/swagger-ui/index.html") is None
    assert scope_of("/metrics") is ApiScope.METRICS
    for p in ("/bi_records", "/bi_report", "/extract_image", "/extract_data"):
        assert scope_of(p) is ApiScope.BACKOFFICE
    for p in (
        "/check_liveness",
        "/check_capture_liveness",
        "/demo",
        "/sdk/placement",
        "/voice_template_factory/x",
    ):
        assert scope_of(p) is ApiScope.CHECK
    assert presented_key([(b"authorization", b"bearer  abc ")]) == "abc"
    assert presented_key([(b"x-api-key", b"abc")]) == "abc"
    assert presented_key([(b"authorization", b"Bearer "), (b"x-api-key", b"abc")]) == "abc"


# Issue 44, finding 2: the scope is decided on the route path, not on scope["path"], which holds
# the prefix of uvicorn's --root-path or of a mount while routing matches the path without it.
PREFIXED_ROUTES = [("/bi_records", "backoffice"), ("/bi_report", "backoffice"), ("/metrics", "metrics")]


def assert_scopes_hold_under_prefix(c: TestClient, prefix: str, face: bool = True) -> None:
    for path, scope in PREFIXED_ROUTES if face else [r for r in PREFIXED_ROUTES if r[0] != "/bi_report"]:
        url = f"{prefix}{path}"
        assert_error(c.get(url), 401)
        forbidden = assert_error(c.get(url, headers=bearer(CHECK_KEY)), 403)
        assert scope in forbidden["message"]
        assert c.get(url, headers=bearer(KEY_OF_SCOPE[scope])).status_code == 200
    assert c.get(f"{prefix}/health").status_code not in (401, 403)  # open routes stay open


def test_scopes_hold_under_a_root_path(keyed: dict[str, TestClient]) -> None:
    """Served as `verilive serve face --root-path /face` (uvicorn puts the prefix in scope["path"])."""
    for service in ("face", "capture"):
        c = TestClient(keyed[service].app, root_path="/face", raise_server_exceptions=False)
        assert_scopes_hold_under_prefix(c, "/face", face=service == "face")
    voice = TestClient(keyed["voice"].app, root_path="/voice", raise_server_exceptions=False)
    assert_error(voice.get("/voice/metrics", headers=bearer(CHECK_KEY)), 403)
    assert voice.get("/voice/metrics", headers=bearer(METRICS_KEY)).status_code == 200


def test_scopes_hold_under_a_mount(keyed: dict[str, TestClient]) -> None:
    """Mounted under a prefix in a parent app (a Mount sets root_path, keeps the full path)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    parent = Starlette(
        routes=[Mount("/api/face", app=keyed["face"].app), Mount("/capture", app=keyed["capture"].app)]
    )
    c = TestClient(parent, raise_server_exceptions=False)
    assert_scopes_hold_under_prefix(c, "/api/face")
    assert_scopes_hold_under_prefix(c, "/capture", face=False)


def test_route_path_strips_the_root_path_whether_or_not_path_holds_it() -> None:
    assert auth.route_path({"path": "/face/bi_records", "root_path": "/face"}) == "/bi_records"
    assert auth.route_path({"path": "/bi_records", "root_path": "/face"}) == "/bi_records"
    assert auth.route_path({"path": "/face/metrics", "root_path": "/face/"}) == "/metrics"
    assert auth.route_path({"path": "/facebook/bi_records", "root_path": "/face"}) == "/facebook/bi_records"
    assert auth.route_path({"path": "/metrics", "root_path": ""}) == "/metrics"
    assert auth.route_path({"path": "/metrics"}) == "/metrics"


def test_rate_limits_hold_across_two_replicas_sharing_redis(tmp_path: Path) -> None:
    limited = ApiKeyEntry(
        name="scraper", sha256=key_digest(METRICS_KEY), scopes=("metrics",), rate_per_minute=4
    )
    with redis_server() as url:
        s = Settings(
            models_dir=tmp_path / "models",
            model_mirror=None,
            require_models=False,
            api_keys=[limited],
            capture_replay_url=url,
        )
        with (
            TestClient(create_service_app("voice", s), raise_server_exceptions=False) as a,
            TestClient(create_service_app("voice", s), raise_server_exceptions=False) as b,
        ):
            statuses = [
                (a if i % 2 else b).get("/metrics", headers=bearer(METRICS_KEY)).status_code for i in range(6)
            ]
            assert statuses == [200, 200, 200, 200, 429, 429], statuses
            r = a.get("/metrics", headers=bearer(METRICS_KEY))
            body = assert_error(r, 429, "RATE_LIMITED")
            assert r.headers["retry-after"] == "60" and "scraper" in body["message"]
            assert a.get("/health").json()["service"] == "voice"  # open routes: neither counted nor limited


def test_with_no_keys_everything_answers_as_before(tmp_path: Path) -> None:
    s = Settings(
        models_dir=tmp_path / "models",
        model_mirror=None,
        require_models=False,
        bi_database_url=f"sqlite:///{tmp_path}/bi.sqlite3",
    )
    app = create_service_app("face", s)
    assert not any(m.cls is auth.ApiKeyMiddleware for m in app.user_middleware)
    with TestClient(app, raise_server_exceptions=False) as c:
        assert c.get("/bi_records").status_code == 200
        assert c.get("/metrics").status_code == 200


def test_an_open_service_beyond_loopback_is_warned_about(tmp_path: Path) -> None:
    base = {"models_dir": tmp_path / "m", "model_mirror": None, "require_models": False}
    app = create_service_app("capture", Settings(**base))
    warning = open_routes_warning(Settings(**base, host="0.0.0.0"), app)
    assert warning is not None
    for p in ("/bi_records", "/extract_image", "/extract_data", "/metrics"):
        assert p in warning
    assert open_routes_warning(Settings(**base, host="127.0.0.1"), app) is None
    assert open_routes_warning(Settings(**base, host="::1"), app) is None
    assert open_routes_warning(Settings(**base, host="0.0.0.0", api_keys=KEYS), app) is None


def test_key_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        Settings(api_keys=[{"name": "a", "sha256": "00", "scopes": ["check"]}])
    with pytest.raises(ValueError):
        Settings(api_keys=[{"name": "a", "sha256": key_digest("x"), "scopes": []}])
    with pytest.raises(ValueError):
        Settings(api_keys=[{"name": "a", "sha256": key_digest("x"), "scopes": ["admin"]}])
    with pytest.raises(ValueError):  # two entries, one name
        Settings(api_keys=[KEYS[0], KEYS[0].model_copy(update={"sha256": key_digest("y")})])

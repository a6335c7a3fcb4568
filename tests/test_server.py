"""Cross-cutting HTTP behaviour: one error shape, limits, health, metrics, Swagger UI, request ids."""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.helpers import assert_error
from verilive.config import Settings
from verilive.server.app import create_service_app


@pytest.fixture
def empty_models(tmp_path) -> Settings:
    return Settings(models_dir=tmp_path / "models", model_mirror=None, require_models=False)


def client_for(service: str, settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_service_app(service, settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def voice(models_settings: Settings) -> Iterator[TestClient]:
    yield from client_for("voice", models_settings)


@pytest.fixture
def capture(models_settings: Settings) -> Iterator[TestClient]:
    yield from client_for("capture", models_settings)


# ------------------------------------------------------------------ health and licence


@pytest.mark.slow
@pytest.mark.parametrize("service", ["voice", "face", "capture"])
def test_health_up_with_models(models_settings: Settings, service: str) -> None:
    for c in client_for(service, models_settings):
        r = c.get("/health")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "UP" and body["problems"] == []
        assert body["service"] == service
        assert all(m["loaded"] for m in body["models"].values())


@pytest.mark.parametrize("service", ["voice", "face", "capture"])
def test_health_503_when_models_missing(empty_models: Settings, service: str) -> None:
    for c in client_for(service, empty_models):
        r = c.get("/health")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "DOWN"
        assert any("model" in p for p in body["problems"])


@pytest.mark.slow
def test_health_503_when_model_file_corrupt(models_settings: Settings, tmp_path) -> None:
    import shutil

    broken_dir = tmp_path / "models"
    shutil.copytree(models_settings.models_dir, broken_dir)
    onnx = next((broken_dir / "silero_vad").glob("*.onnx"))
    onnx.write_bytes(b"not an onnx model")
    settings = models_settings.model_copy(update={"models_dir": broken_dir})
    for c in client_for("voice", settings):
        r = c.get("/health")
        assert r.status_code == 503
        assert any("silero_vad" in p for p in r.json()["problems"])


@pytest.mark.slow
def test_health_503_after_licence_expiry(models_settings: Settings) -> None:
    yesterday = dt.date.today() - dt.timedelta(days=1)
    settings = models_settings.model_copy(update={"license_expiration_date": yesterday})
    for c in client_for("face", settings):
        r = c.get("/health")
        assert r.status_code == 503
        assert any("licence expired" in p for p in r.json()["problems"])


@pytest.mark.slow
def test_expiration_date_reported_everywhere(models_settings: Settings) -> None:
    settings = models_settings.model_copy(update={"license_expiration_date": dt.date(2031, 5, 17)})
    for c in client_for("voice", settings):
        assert c.get("/core/get_expiration_date").json() == "2031-05-17"
        assert c.get("/core/get_build_info").json()["licenseExpirationDate"] == "2031-05-17"
        metrics = c.get("/metrics").text
        ts = dt.datetime(2031, 5, 17, 23, 59, 59, tzinfo=dt.UTC).timestamp()
        m = re.search(r'verilive_license_expiration_timestamp_seconds\{service="voice"\} (\S+)', metrics)
        assert m and float(m.group(1)) == ts
    for service in ("face", "capture"):
        for c in client_for(service, settings):
            assert c.get("/api_version").json()["expirationDate"] == "2031-05-17T23:59:59Z"


# ------------------------------------------------------------------ metrics


@pytest.mark.slow
def test_metrics_count_requests_by_route_and_status(voice: TestClient) -> None:
    voice.get("/core/get_expiration_date")
    voice.get("/core/get_expiration_date")
    voice.get("/no/such/path")
    text = voice.get("/metrics").text
    assert re.search(
        r"verilive_http_requests_total\{"
        r'method="GET",route="/core/get_expiration_date",service="voice",status="200"\} 2\.0',
        text,
    ), text
    assert 'route="<unmatched>",service="voice",status="404"' in text
    assert "verilive_http_request_duration_seconds_bucket" in text
    assert re.search(r'verilive_model_info\{.*model="silero_vad".*\} 1\.0', text)
    assert "verilive_build_info{" in text


@pytest.mark.slow
def test_metrics_are_per_service(models_settings: Settings) -> None:
    for voice in client_for("voice", models_settings):
        for face in client_for("face", models_settings):
            voice.get("/core/get_expiration_date")
            assert "/core/get_expiration_date" not in face.get("/metrics").text


# ------------------------------------------------------------------ errors


@pytest.mark.slow
def test_unknown_path_and_method(voice: TestClient) -> None:
    assert_error(voice.get("/nope"), 404, "NOT_FOUND")
    assert_error(voice.get("/core/read_as_pcm16_samples"), 405, "METHOD_NOT_ALLOWED")


@pytest.mark.slow
def test_request_id_is_echoed_and_in_errors(voice: TestClient) -> None:
    r = voice.get("/nope", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert r.json()["request_id"] == "abc-123"
    r = voice.get("/health", headers={"X-Request-ID": "bad id with spaces"})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


@pytest.mark.slow
def test_body_over_limit_is_413_by_content_length(models_settings: Settings) -> None:
    settings = models_settings.model_copy(update={"max_body_bytes": 1000})
    for c in client_for("voice", settings):
        r = c.post(
            "/voice_template_factory/create_voice_template_from_samples?sample_rate=16000",
            content=b"\0" * 5000,
            headers={"content-type": "application/octet-stream"},
        )
        assert_error(r, 413, "PAYLOAD_TOO_LARGE")


@pytest.mark.slow
def test_streamed_body_over_limit_is_413(models_settings: Settings) -> None:
    settings = models_settings.model_copy(update={"max_body_bytes": 1000})

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"\0" * 400

    for c in client_for("voice", settings):
        r = c.post(
            "/voice_template_factory/create_voice_template_from_samples?sample_rate=16000",
            content=chunks(),
            headers={"content-type": "application/octet-stream"},
        )
        assert "content-length" not in r.request.headers
        assert_error(r, 413, "PAYLOAD_TOO_LARGE")
        r = c.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.wav", io.BytesIO(b"x" * 5000))})
        assert_error(r, 413, "PAYLOAD_TOO_LARGE")
        # The service keeps working after refusing.
        assert c.get("/core/get_expiration_date").status_code == 200


@pytest.mark.slow
def test_capture_errors_use_unknown_code(capture: TestClient) -> None:
    r = capture.post(
        "/check_capture_liveness", content=b"", headers={"content-type": "application/octet-stream"}
    )
    assert_error(r, 400, "UNKNOWN")
    assert_error(capture.get("/nope"), 404, "UNKNOWN")


@pytest.mark.slow
def test_capture_200_mode_has_no_21_endpoints(models_settings: Settings) -> None:
    settings = models_settings.model_copy(update={"capture_api_version": "2.0.0"})
    for c in client_for("capture", settings):
        assert c.get("/api_version").json()["version"] == "2.0.0"
        assert c.post("/extract_data?types=photo", content=b"x").status_code == 404
        assert "/extract_data" not in c.get("/openapi.json").json()["paths"]
    for c in client_for("capture", models_settings):
        assert c.get("/api_version").json()["version"] == "2.1.0"


# ------------------------------------------------------------------ no 500 for any endpoint


@pytest.mark.slow
@pytest.mark.parametrize("service", ["voice", "face", "capture"])
def test_no_endpoint_answers_500_to_empty_or_junk_requests(models_settings: Settings, service: str) -> None:
    for c in client_for(service, models_settings):
        paths = c.get("/openapi.json").json()["paths"]
        for path, ops in paths.items():
            for method in ops:
                for kwargs in (
                    {},
                    {"content": b"\x00\xff junk", "headers": {"content-type": "application/octet-stream"}},
                    {"content": b"{not json", "headers": {"content-type": "application/json"}},
                    {
                        "content": b"--x\r\nbroken",
                        "headers": {"content-type": "multipart/form-data; boundary=x"},
                    },
                    {"files": {"junk": ("j.bin", b"junk")}},
                ):
                    r = c.request(method.upper(), path, **kwargs)
                    assert r.status_code < 500 or r.status_code == 503, (path, method, kwargs, r.text)
                    if r.status_code >= 400:
                        assert_error(r, r.status_code)


# ------------------------------------------------------------------ Swagger UI, OpenAPI


@pytest.mark.slow
@pytest.mark.parametrize("service", ["voice", "face", "capture"])
def test_swagger_ui_is_served_offline(models_settings: Settings, service: str) -> None:
    for c in client_for(service, models_settings):
        r = c.get("/swagger-ui/index.html")
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        html = r.text
        assert "swagger-ui-bundle.js" in html and "../openapi.json" in html
        # Nothing may be fetched from another host.
        assert not re.search(r'(src|href)="(https?:)?//', html)
        js = c.get("/swagger-ui/swagger-ui-bundle.js")
        assert js.status_code == 200 and len(js.content) > 500_000
        assert "SwaggerUIBundle" in js.text
        assert c.get("/swagger-ui/swagger-ui.css").status_code == 200
        doc = c.get("/openapi.json").json()
        assert doc["openapi"].startswith("3.")
        assert "/health" in doc["paths"] and "/metrics" in doc["paths"]

"""Security properties of docs/security.md that code can check.

- The demo's back-end route answers with the verdict only: no ``rejection`` and no ``score`` reach
  the browser, while the reasons are kept in the BI records.
- The demo page posts to that route, not to ``/check_capture_liveness``.
- Server logs carry neither the capture's external data, nor image bytes, nor private-key material,
  even for rejected captures and unloadable keys.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.helpers import KEY, PUBLIC, settings_for
from verilive.capture.client import build_bundle
from verilive.capture.sdk_routes import STATIC_DIR, client_answer
from verilive.config import Settings
from verilive.server.app import create_service_app
from verilive.server.logs import JsonFormatter

OCTET = {"content-type": "application/octet-stream"}
MARKER = "order-5f3a-CONFIDENTIAL-77"  # external data that must never be logged


class Lines(logging.Handler):
    """Every log line as the JSON formatter writes it (message, extras and tracebacks)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture()
def log_lines() -> Iterator[list[str]]:
    root = logging.getLogger()
    handler, level = Lines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture(scope="module")
def capture(models_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # These tests are about the other detectors; the 3D check is tests/test_capture_binding.py.
    settings = settings_for(models_settings, tmp_path_factory.mktemp("security"))
    with TestClient(create_service_app("capture", settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def face(shared_dir: Path) -> np.ndarray:
    img = cv2.imread(str(shared_dir / "data/face/pad_silentface/image_T1.jpg"))
    assert img is not None
    return img


_count = iter(range(1, 10**6))


def camera_jpeg(bgr: np.ndarray) -> bytes:
    """A new JPEG of ``bgr`` per call (one pixel differs): the replay store remembers image hashes."""
    img = bgr.copy()
    n = next(_count)
    img[n % img.shape[0], 1] = (n % 256, 255 - n % 256, 99)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 92])[1].tobytes()


def newest_bi_record(c: TestClient) -> dict[str, object]:
    records = c.get("/bi_records").json()
    assert records, "no BI record was written"
    return records[-1]


def test_client_answer_holds_the_verdict_only() -> None:
    assert client_answer(0.2).model_dump() == {"capture_liveness": {"accepted": False}}
    assert client_answer(0.97).model_dump() == {"capture_liveness": {"accepted": True}}
    assert client_answer(0.5).model_dump() == {"capture_liveness": {"accepted": True}}


@pytest.mark.slow
def test_demo_answer_does_not_count_the_reasons(capture: TestClient, face: np.ndarray) -> None:
    """With a live face, one reason and three reasons must look the same to the browser. Before,
    (logit(face probability) - logit(capture probability)) / 3 gave the number of reasons."""
    one = build_bundle(PUBLIC, None, camera_jpeg(face), environment={"webdriver": True})
    three = build_bundle(
        PUBLIC,
        None,
        camera_jpeg(face),
        environment={"webdriver": True, "userAgent": "Mozilla/5.0 (iPhone) Mobile", "platform": "Win32"},
        sdk={"name": "someone-else", "version": "1", "digest": "0" * 64},
    )
    answers = []
    for blob in (one, three):
        r = capture.post("/demo/check_capture_liveness", content=blob, headers=OCTET)
        assert r.status_code == 200, r.text
        answers.append(r.json())
    assert answers[0] == answers[1] == {"capture_liveness": {"accepted": False}}
    # The back end does see the difference.
    reasons = str(newest_bi_record(capture)["rejection"]).split(",")
    assert len(reasons) >= 3, reasons


@pytest.mark.slow
def test_demo_route_hides_rejection_reasons_and_keeps_them_in_bi(
    capture: TestClient, face: np.ndarray
) -> None:
    # A webdriver-driven browser: rejected (UNTRUSTED_ENVIRONMENT) on the server.
    blob = build_bundle(PUBLIC, None, camera_jpeg(face), environment={"webdriver": True})
    r = capture.post("/demo/check_capture_liveness", content=blob, headers=OCTET)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {"capture_liveness": {"accepted": False}}
    assert "rejection" not in r.text and "UNTRUSTED" not in r.text and "score" not in r.text
    record = newest_bi_record(capture)
    assert record["endpoint"] and "UNTRUSTED_ENVIRONMENT" in str(record["rejection"])

    # The interface endpoint itself still gives the integrator's back end the reasons.
    blob = build_bundle(PUBLIC, None, camera_jpeg(face), environment={"webdriver": True})
    full = capture.post("/check_capture_liveness", content=blob, headers=OCTET).json()
    assert "UNTRUSTED_ENVIRONMENT" in full["capture_liveness"]["rejection"]


@pytest.mark.slow
def test_demo_route_accepts_a_clean_capture_and_maps_errors(capture: TestClient, face: np.ndarray) -> None:
    blob = build_bundle(PUBLIC, None, camera_jpeg(face))
    r = capture.post("/demo/check_capture_liveness", content=blob, headers=OCTET)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {"capture_liveness": {"accepted": True}}, body
    assert newest_bi_record(capture)["rejection"] is None

    # An unusable image gets the same 400 error body as the interface endpoint.
    small = cv2.resize(face, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    r = capture.post("/demo/check_capture_liveness", content=build_bundle(PUBLIC, None, camera_jpeg(small)))
    assert r.status_code == 400 and r.json()["error_code"] == "IMAGE_TOO_SMALL", r.text
    # Garbage is refused like any bundle, never a 500.
    r = capture.post("/demo/check_capture_liveness", content=b"not a bundle", headers=OCTET)
    assert r.status_code == 400, r.text


def test_demo_page_posts_to_the_demo_route() -> None:
    page = (STATIC_DIR / "demo.html").read_text()
    assert 'fetch("/demo/check_capture_liveness"' in page
    assert 'fetch("/check_capture_liveness"' not in page


@pytest.mark.slow
def test_logs_hold_no_external_data_image_or_bundle(
    capture: TestClient, face: np.ndarray, log_lines: list[str]
) -> None:
    image = camera_jpeg(face)
    rejected = build_bundle(PUBLIC, None, image, environment={"webdriver": True}, external_data=MARKER)
    for path in ("/check_capture_liveness", "/demo/check_capture_liveness", "/extract_data?types=external"):
        assert capture.post(path, content=rejected, headers=OCTET).status_code == 200
    # A tampered bundle: the refusal is logged with its reason.
    broken = bytearray(build_bundle(PUBLIC, None, camera_jpeg(face), external_data=MARKER))
    broken[-20] ^= 0xFF
    assert capture.post("/check_capture_liveness", content=bytes(broken), headers=OCTET).status_code == 400
    text = "\n".join(log_lines)
    assert "capture rejected" in text and "capture bundle refused" in text  # the lines were written
    assert MARKER not in text
    assert base64.b64encode(image[:48]).decode() not in text
    assert image[:48].hex() not in text


@pytest.mark.slow
def test_private_key_material_is_never_logged(
    models_settings: Settings, tmp_path: Path, log_lines: list[str]
) -> None:
    pem = KEY.read_text()
    body_lines = [ln for ln in pem.splitlines() if ln and not ln.startswith("-----")]
    broken = tmp_path / "broken.pem"
    broken.write_text(pem.replace(body_lines[1], body_lines[1][::-1]))  # a corrupt key file
    settings = models_settings.model_copy(
        update={
            "capture_private_keys": [str(broken)],
            "capture_replay_url": f"sqlite:///{tmp_path}/replay.sqlite3",
            "bi_database_url": f"sqlite:///{tmp_path}/bi.sqlite3",
        }
    )
    with TestClient(create_service_app("capture", settings), raise_server_exceptions=False) as c:
        r = c.post("/check_capture_liveness", content=b"x" * 200, headers=OCTET)
    assert r.status_code == 503 and "private keys cannot be loaded" in r.json()["message"], r.text
    text = "\n".join(log_lines)
    assert "capture keys cannot be loaded" in text
    assert str(broken) in text  # the operator learns which file...
    for line in body_lines:  # ...but never its content
        assert line not in text and line[::-1] not in text
    assert "BEGIN" not in text

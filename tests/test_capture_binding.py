"""The burst bound to the still (capture/binding.py, docs/motion3d.md "Binding"), end to end through
/check_capture_liveness on real models: a genuine capture (a real head-turn clip, the still being its
first frame at full resolution) is accepted; bundles assembled as an attacker with the public key
would build them are refused in `use` and `require`; a burst is used once, across replicas too."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.helpers import KEY, PUBLIC, env, settings_for
from tests.motion_data import clip_frames, jpeg
from verilive.capture import bundle as B
from verilive.capture.binding import timing_problems
from verilive.capture.client import CaptureClient, build_bundle, new_nonce
from verilive.config import Settings
from verilive.face.detector import FaceDetector
from verilive.face.image import decode_image
from verilive.models.sessions import ModelRegistry
from verilive.server.app import create_service_app

pytestmark = pytest.mark.slow

OCTET = {"content-type": "application/octet-stream"}
OTHER = "data/face/pad_silentface/image_T1.jpg"  # another person
PRINT = "data/face/pad_silentface/image_F2.jpg"  # a real printed photo
UPSCALE = 1.4  # the clip is 368x656; a still needs 480 px on its shorter side


@pytest.fixture(scope="module")
def turn(shared_dir: Path) -> list[np.ndarray]:
    """A real head turn, 10 frames at 5 fps, at the still's resolution (515x918)."""
    return [cv2.resize(f, None, fx=UPSCALE, fy=UPSCALE) for f in clip_frames(shared_dir, 0.6, 2.6, 5.0)]


@pytest.fixture(scope="module")
def later_turn(shared_dir: Path) -> list[np.ndarray]:
    """Another real head turn of the same person, later in the clip."""
    return [cv2.resize(f, None, fx=UPSCALE, fy=UPSCALE) for f in clip_frames(shared_dir, 9.0, 11.0, 5.0)]


@pytest.fixture(scope="module")
def detector(models_settings: Settings) -> FaceDetector:
    return FaceDetector.from_registry(ModelRegistry(models_settings))


def app(models_settings: Settings, tmp: Path, mode: str, **update: Any) -> TestClient:
    s = settings_for(models_settings, tmp, capture_motion3d=mode, **update)
    return TestClient(create_service_app("capture", s), raise_server_exceptions=False)


@pytest.fixture(params=["use", "require"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def decide(client: TestClient, blob: bytes) -> dict[str, Any]:
    r = client.post("/check_capture_liveness", content=blob, headers=OCTET)
    assert r.status_code == 200, r.text
    return r.json()["capture_liveness"]


def record(client: TestClient) -> dict[str, Any]:
    return client.get("/bi_records").json()[-1]


def bound(still: np.ndarray, frames: list[np.ndarray], **kw: Any) -> bytes:
    """A bundle as the libraries make it: the still is frame ``still_index`` at full resolution."""
    index = kw.pop("still_index", 0)
    return build_bundle(
        PUBLIC, None, jpeg(still, 95), environment=env(), burst=frames, still_index=index, **kw
    )


def resized(shared_dir: Path, rel: str, like: np.ndarray) -> np.ndarray:
    """A photo made the size of ``like`` (so that only the picture, not the geometry, differs)."""
    img = decode_image((shared_dir / rel).read_bytes()).bgr
    return cv2.resize(img, (like.shape[1], like.shape[0]), interpolation=cv2.INTER_AREA)


def test_genuine_capture_is_accepted_when_required(
    models_settings: Settings, tmp_path: Path, turn: list[np.ndarray]
) -> None:
    with app(models_settings, tmp_path, "require") as c:
        body = decide(c, bound(turn[0], turn))
        assert body["rejection"] == [] and body["probability"] >= 0.5, body
        assert record(c)["motion3d"] == "3d"
        # The kiosk path of the Python library: one stream, the still taken from it.
        client = CaptureClient(PUBLIC, environment=env())
        out = client.capture(burst=later_turn_like(turn), still_index=0)
        assert decide(c, out["encryptedFile"])["rejection"] == []


def later_turn_like(turn: list[np.ndarray]) -> list[np.ndarray]:
    """The same turn mirrored: a different burst (new bytes, new movement) of a real head."""
    return [np.ascontiguousarray(f[:, ::-1]) for f in turn]


def test_old_bundles_without_a_burst(
    models_settings: Settings, tmp_path: Path, turn: list[np.ndarray], caplog: pytest.LogCaptureFixture
) -> None:
    plain = build_bundle(PUBLIC, None, jpeg(turn[0], 95), environment=env())
    with (
        app(models_settings, tmp_path / "r", "require") as c,
        caplog.at_level(logging.INFO, "verilive.capture"),
    ):
        body = decide(c, plain)
        assert body["rejection"] == ["UNTRUSTED_CONTENT"] and body["probability"] < 0.5
        assert "no burst (required)" in caplog.text
        assert record(c)["motion3d"] is None
    plain = build_bundle(PUBLIC, None, jpeg(turn[0], 95), environment=env())
    with app(models_settings, tmp_path / "u", "use") as c:
        body = decide(c, plain)
        assert body["rejection"] == [] and body["probability"] >= 0.5, body


def test_another_persons_still_with_a_real_burst_is_refused(
    models_settings: Settings,
    tmp_path: Path,
    mode: str,
    turn: list[np.ndarray],
    shared_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with app(models_settings, tmp_path, mode) as c, caplog.at_level(logging.INFO, "verilive.capture"):
        for rel in (OTHER, PRINT):  # another person; a real print photo
            frames = later_turn_like(turn) if rel == PRINT else turn  # a new burst: no replay
            body = decide(c, bound(resized(shared_dir, rel, turn[0]), frames))
            assert "UNTRUSTED_CONTENT" in body["rejection"] and body["probability"] < 0.5, body
            assert record(c)["motion3d"] == "unbound"
        assert "still is not burst frame 0" in caplog.text


def test_hand_built_bundle_with_another_still_is_refused(
    models_settings: Settings, tmp_path: Path, mode: str, turn: list[np.ndarray], shared_dir: Path
) -> None:
    """Built byte by byte, as someone without our library would: meta with still_index, honest
    digests over an unrelated still."""
    still = jpeg(resized(shared_dir, OTHER, turn[0]), 95)
    frames = [jpeg(cv2.resize(f, (359, 640), interpolation=cv2.INTER_AREA), 80) for f in turn]
    part = B.encode_burst(frames)
    photo = jpeg(cv2.resize(decode_image(still).bgr, (180, 320)), 85)
    digests, sizes = B.part_digests(still, photo, "", part)
    meta = {
        "context": {"resolution": {"width": 515, "height": 918}, "camera_label": "cam"},
        "environment": env(),
        "sdk": {"name": "hand", "version": "1", "digest": "0" * 64},
        "nonce": new_nonce(),
        "timestamp_ms": 0,
        "digests": digests,
        "sizes": sizes,
        "burst": {"t_ms": [200 * i for i in range(len(frames))], "still_index": 0},
    }
    blob = B.seal(B.encode_payload(meta, still, photo, "", part), PUBLIC, B.key_id_of_pem(KEY.read_bytes()))
    with app(models_settings, tmp_path, mode) as c:
        body = decide(c, blob)
        assert "UNTRUSTED_CONTENT" in body["rejection"] and body["probability"] < 0.5
        assert record(c)["motion3d"] == "unbound"


def test_a_face_spliced_into_the_stills_frame_is_refused(
    models_settings: Settings,
    tmp_path: Path,
    mode: str,
    turn: list[np.ndarray],
    shared_dir: Path,
    detector: FaceDetector,
) -> None:
    """The still is the burst's frame 0 exactly, but frame 0 shows another face pasted over the real
    one: the turn that follows is not linked to the still's face, so it proves nothing."""
    other = decode_image((shared_dir / OTHER).read_bytes()).bgr
    x0, y0, x1, y1 = (int(v) for v in detector.detect(other)[0].box)
    a0, b0, a1, b1 = (int(v) for v in detector.detect(turn[0])[0].box)
    spliced = turn[0].copy()
    spliced[b0:b1, a0:a1] = cv2.resize(other[y0:y1, x0:x1], (a1 - a0, b1 - b0))
    with app(models_settings, tmp_path, mode) as c:
        body = decide(c, bound(spliced, [spliced, *turn[1:]]))
        assert "UNTRUSTED_CONTENT" in body["rejection"] and body["probability"] < 0.5, body
        assert record(c)["motion3d"] == "unbound"


def test_a_burst_of_another_size_or_timing_is_refused(
    models_settings: Settings, tmp_path: Path, mode: str, turn: list[np.ndarray]
) -> None:
    # A 640x480 still (the frame in the middle of a wider picture) with a portrait burst.
    landscape = np.full((480, 640, 3), 128, np.uint8)
    landscape[:, 185:455] = cv2.resize(turn[0], (270, 480), interpolation=cv2.INTER_AREA)
    with app(models_settings, tmp_path, mode) as c:
        body = decide(c, bound(landscape, later_turn_like(turn)))
        assert "UNTRUSTED_CONTENT" in body["rejection"] and body["probability"] < 0.5
        # Ten frames in 90 ms is no head turn a person made.
        body = decide(c, bound(turn[0], turn, burst_t_ms=[10 * i for i in range(len(turn))]))
        assert "UNTRUSTED_CONTENT" in body["rejection"] and body["probability"] < 0.5
        # A still_index that names a frame other than the still.
        body = decide(c, bound(turn[0], later_turn_like(turn)[::-1], still_index=5))
        assert "UNTRUSTED_CONTENT" in body["rejection"] and body["probability"] < 0.5


def test_timing_rules() -> None:
    assert timing_problems([200 * i for i in range(12)]) == []
    assert timing_problems([0, 10, 20, 900])  # too close
    assert timing_problems([0, 100, 3000])  # a gap
    assert timing_problems([0, 100, 200, 300])  # too short for a turn
    assert timing_problems([1000 * i for i in range(12)])  # too long


def test_a_burst_is_used_once_even_re_encoded(
    models_settings: Settings, tmp_path: Path, mode: str, turn: list[np.ndarray]
) -> None:
    with app(models_settings, tmp_path, mode) as c:
        first = decide(c, bound(turn[0], turn))
        assert "SUSPICIOUS_ACTIVITY" not in first["rejection"]
        if mode == "require":
            assert first["rejection"] == []
        # The same burst bytes with a fresh still of frame 0 and a new nonce.
        honest = B.KeyRing.from_entries([str(KEY)]).decrypt(bound(turn[0], turn))
        blob = build_bundle(
            PUBLIC,
            None,
            jpeg(turn[0], 90),
            environment=env(),
            burst=list(honest.burst),
            still_index=0,
        )
        again = decide(c, blob)
        assert "SUSPICIOUS_ACTIVITY" in again["rejection"] and again["probability"] < 0.5
        # Re-encoded at another quality and size, and cropped by 2 % all round: the movement is the same.
        h, w = turn[0].shape[:2]
        m = round(0.02 * min(h, w))
        copy = [cv2.resize(f[m : h - m, m : w - m], (w, h)) for f in turn]
        frames = [jpeg(f, 60) for f in copy]
        blob = build_bundle(PUBLIC, None, jpeg(copy[0], 85), environment=env(), burst=frames, still_index=0)
        body = decide(c, blob)
        assert "SUSPICIOUS_ACTIVITY" in body["rejection"] and body["probability"] < 0.5


def test_two_real_turns_of_one_person_are_not_replays(
    models_settings: Settings, tmp_path: Path, turn: list[np.ndarray], later_turn: list[np.ndarray]
) -> None:
    with app(models_settings, tmp_path, "require") as c:
        assert "SUSPICIOUS_ACTIVITY" not in decide(c, bound(turn[0], turn))["rejection"]
        assert "SUSPICIOUS_ACTIVITY" not in decide(c, bound(later_turn[0], later_turn))["rejection"]


@pytest.fixture(params=["sqlite", "redis"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/shared-replay.sqlite3"
    else:
        from tests.servers import redis_server

        with redis_server() as url:
            yield url


def test_a_burst_replayed_to_another_replica_is_refused(
    models_settings: Settings, tmp_path: Path, turn: list[np.ndarray], shared_store: str
) -> None:
    """Two replicas (two apps, two BI files) sharing one replay store."""
    one = app(models_settings, tmp_path / "a", "require", capture_replay_url=shared_store)
    two = app(models_settings, tmp_path / "b", "require", capture_replay_url=shared_store)
    with one as a, two as b:
        assert decide(a, bound(turn[0], turn))["rejection"] == []
        again = decide(b, bound(turn[0], turn))  # new nonce, new still bytes, the same movement
        assert "SUSPICIOUS_ACTIVITY" in again["rejection"] and again["probability"] < 0.5


def test_refusals_are_logged_and_records_carry_the_request_id(
    models_settings: Settings, tmp_path: Path, turn: list[np.ndarray], caplog: pytest.LogCaptureFixture
) -> None:
    """An operator goes from a BI record to its log lines by the request id; a validation refusal
    (400) is logged like any other rejection."""
    tiny = cv2.resize(turn[0], (240, 427))  # under 480 px: IMAGE_TOO_SMALL
    with app(models_settings, tmp_path, "require") as c, caplog.at_level(logging.INFO, "verilive.capture"):
        r = c.post(
            "/check_capture_liveness", content=build_bundle(PUBLIC, None, jpeg(tiny, 95)), headers=OCTET
        )
        assert r.status_code == 400 and r.json()["error_code"] == "IMAGE_TOO_SMALL"
        assert "capture rejected: image validation IMAGE_TOO_SMALL" in caplog.text
        rid = r.headers["x-request-id"]
        assert record(c)["request_id"] == rid and record(c)["error_code"] == "IMAGE_TOO_SMALL"
        r = c.post("/check_capture_liveness", content=bound(turn[0], turn), headers=OCTET)
        assert r.status_code == 200 and record(c)["request_id"] == r.headers["x-request-id"] != rid

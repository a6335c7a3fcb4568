"""POST /sdk/placement: where the faces are in a small preview frame (the SDK's hints where the browser
has no FaceDetector). Real CenterFace on real photos; every bad input is a clear 4xx; nothing is stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.helpers import assert_error, settings_for
from verilive.capture.placement import MAX_BYTES
from verilive.config import Settings
from verilive.server.app import create_service_app

FACE = "data/face/pad_silentface/image_T1.jpg"
JPEG = {"content-type": "image/jpeg"}


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("placement")


@pytest.fixture(scope="module")
def client(models_settings: Settings, app_dir: Path) -> Iterator[TestClient]:
    with TestClient(
        create_service_app("capture", settings_for(models_settings, app_dir)), raise_server_exceptions=False
    ) as c:
        yield c


def preview(bgr: np.ndarray, height: int = 320) -> np.ndarray:
    """The SDK's copy: the centred 3:4 part, 240 x 320."""
    h, w = bgr.shape[:2]
    cw = min(w, round(h * 0.75))
    x = (w - cw) // 2
    return cv2.resize(bgr[:, x : x + cw], (round(height * 0.75), height), interpolation=cv2.INTER_AREA)


def jpeg(bgr: np.ndarray, quality: int = 70) -> bytes:
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


@pytest.fixture(scope="module")
def face(shared_dir: Path) -> np.ndarray:
    img = cv2.imread(str(shared_dir / FACE))
    assert img is not None
    return img


def tables(path: Path) -> dict[str, int]:
    """Row counts of every table of a SQLite file (0 tables when it does not exist yet)."""
    if not path.exists():
        return {}
    with sqlite3.connect(path) as db:
        names = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        return {n: db.execute(f'select count(*) from "{n}"').fetchone()[0] for n in names}


@pytest.mark.slow
def test_a_face_is_found_where_it_is(client: TestClient, face: np.ndarray, app_dir: Path) -> None:
    frame = preview(face)
    r = client.post("/sdk/placement", content=jpeg(frame), headers=JPEG)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert (body["width"], body["height"]) == (240, 320)
    assert len(body["faces"]) == 1
    f = body["faces"][0]
    x, y, w, h = f["box"]
    assert 0.5 < f["score"] <= 1 and -90 <= f["yaw"] <= 90 and -90 <= f["pitch"] <= 90
    assert 0.25 <= h <= 0.7 and abs(x + w / 2 - 0.5) < 0.12 and 0.2 < y + h / 2 < 0.6  # in the oval
    # The same face, shrunk to 40 % on a grey wall: found, small, where it was put.
    wall = np.full_like(frame, 118)
    small = cv2.resize(frame, None, fx=0.4, fy=0.4, interpolation=cv2.INTER_AREA)
    sh, sw = small.shape[:2]
    wall[160 - sh // 2 : 160 - sh // 2 + sh, 120 - sw // 2 : 120 - sw // 2 + sw] = small
    g = client.post("/sdk/placement", content=jpeg(wall), headers=JPEG).json()["faces"]
    assert len(g) == 1 and 0.1 < g[0]["box"][3] < 0.25 and g[0]["box"][3] < 0.5 * h
    # Nothing stored: no BI record, no replay-store entry (this service has decided nothing yet).
    stored = {p.name: tables(p) for p in app_dir.glob("*.sqlite3")}
    assert "replay.sqlite3" in stored  # the engine (and its store) was built for the request
    assert all(n == 0 for t in stored.values() for n in t.values()), stored


@pytest.mark.slow
def test_no_face_on_a_wall_and_a_skin_coloured_wall(client: TestClient) -> None:
    rng = np.random.default_rng(1)
    grey = np.clip(128 + rng.normal(0, 4, (320, 240, 3)), 0, 255).astype(np.uint8)
    skin = np.clip(np.array([120, 150, 200]) + rng.normal(0, 6, (320, 240, 3)), 0, 255).astype(np.uint8)
    for frame in (grey, skin):
        r = client.post("/sdk/placement", content=jpeg(frame), headers=JPEG)
        assert r.status_code == 200 and r.json()["faces"] == [], r.text


@pytest.mark.slow
def test_bad_frames_are_clear_4xx(client: TestClient, face: np.ndarray) -> None:
    good = jpeg(preview(face))
    assert_error(client.post("/sdk/placement"), 400)  # missing: no body
    assert_error(client.post("/sdk/placement", content=b"", headers=JPEG), 400)  # empty
    assert_error(client.post("/sdk/placement", json={"image": "x"}), 415)  # wrong type
    body = assert_error(client.post("/sdk/placement", content=good[: len(good) // 2], headers=JPEG), 400)
    assert "truncated" in body["message"]
    corrupted = bytearray(good)
    corrupted[2:600] = bytes(598)
    assert_error(client.post("/sdk/placement", content=bytes(corrupted), headers=JPEG), 400)
    assert_error(client.post("/sdk/placement", content=b"not an image at all", headers=JPEG), 400)
    noise = np.random.default_rng(2).integers(0, 256, (1000, 1000, 3), dtype=np.uint8)
    huge = jpeg(noise, 95)
    assert len(huge) > MAX_BYTES
    body = assert_error(client.post("/sdk/placement", content=huge, headers=JPEG), 413)
    assert "KiB" in body["message"]
    wide = assert_error(
        client.post("/sdk/placement", content=jpeg(np.zeros((40, 1500, 3), np.uint8)), headers=JPEG), 400
    )
    assert "1024" in wide["message"]
    tiny = assert_error(
        client.post("/sdk/placement", content=jpeg(np.zeros((16, 16, 3), np.uint8)), headers=JPEG), 400
    )
    assert "32" in tiny["message"]
    assert client.get("/sdk/placement").status_code == 405

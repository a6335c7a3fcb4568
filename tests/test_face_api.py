"""Face liveness service over HTTP, on the real models (face-liveness.md, docs/face.md)."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.helpers import assert_error
from verilive.config import Settings
from verilive.server.app import create_service_app

pytestmark = pytest.mark.slow  # every test runs the service on the real models

PAD = "data/face/pad_silentface"
MISC = "data/face/real_faces_misc"


@pytest.fixture(scope="module")
def face(models_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("bi") / "bi.sqlite3"
    settings = models_settings.model_copy(update={"bi_database_url": f"sqlite:///{db}"})
    with TestClient(create_service_app("face", settings), raise_server_exceptions=False) as c:
        yield c


def read(shared_dir: Path, rel: str) -> bytes:
    return (shared_dir / rel).read_bytes()


def jpeg(img: np.ndarray, quality: int = 92) -> bytes:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with one tiny IDAT: a decompression bomb's header."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def live(face: TestClient, data: bytes, name: str = "image", **kw) -> dict:  # type: ignore[no-untyped-def]
    r = face.post("/check_liveness", files={name: ("a.jpg", data, "image/jpeg")}, **kw)
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------------ api_version


def test_api_version(face: TestClient) -> None:
    body = face.get("/api_version").json()
    assert set(body) == {"product", "version", "defaultPipeline", "availablePipelines", "expirationDate"}
    assert body["defaultPipeline"] in body["availablePipelines"]
    assert set(body["availablePipelines"]) >= {"ensemble", "fast"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT23:59:59Z", body["expirationDate"])


# ------------------------------------------------------------------ decisions on real images


def test_live_and_attack_images(face: TestClient, shared_dir: Path) -> None:
    t1 = live(face, read(shared_dir, f"{PAD}/image_T1.jpg"))
    f2 = live(face, read(shared_dir, f"{PAD}/image_F2.jpg"))  # screen replay
    assert set(t1) == {"probability", "quality", "score"}, t1
    assert set(f2) == {"probability", "quality", "score"}, f2
    assert t1["probability"] >= 0.5 > f2["probability"]
    assert t1["score"] > 0 > f2["score"]
    # The printed photo holds a head turned about 33 degrees, within the yaw limit (35) since issue 47:
    # judged. REGULAR, set at 2 % of live faces rejected on collections never seen, lets this print
    # through; HARDENED (8 %) does not (docs/model-facepad.md, "Leaving one collection out").
    f1_bytes = read(shared_dir, f"{PAD}/image_F1.jpg")
    f1 = live(face, f1_bytes)
    assert "error_code" not in f1 and 0.5 <= f1["probability"] < 0.9, f1
    hard = {"pipelines": [{"pipeline": "ensemble", "calibration": "HARDENED"}]}
    r = face.post(
        "/check_image", data={"data": orjson.dumps(hard).decode()}, files={"image": ("f.jpg", f1_bytes)}
    )
    assert r.status_code == 200 and r.json()["results"][0]["probability"] < 0.5, r.text
    for body in (t1, f2):
        assert 0.0 <= body["probability"] <= 1.0 and 0.0 <= body["quality"] <= 1.0
        assert body["probability"] == pytest.approx(1 / (1 + np.exp(-body["score"])), abs=1e-9)


def test_pipelines_differ_and_unknown_pipeline_is_a_request_error(face: TestClient, shared_dir: Path) -> None:
    data = read(shared_dir, f"{PAD}/image_T1.jpg")
    ensemble = live(face, data, params={"pipeline": "ensemble"})
    fast = live(face, data, params={"pipeline": "fast"})
    default = live(face, data)
    assert default == ensemble
    assert fast["score"] != ensemble["score"] and fast["probability"] >= 0.5
    r = face.post("/check_liveness?pipeline=nope", files={"image": ("a.jpg", data)})
    assert r.status_code == 200
    assert r.json() == {"error": r.json()["error"], "error_code": None} and "nope" in r.json()["error"]


def test_series_accumulates_valid_frames(face: TestClient, shared_dir: Path) -> None:
    t1 = read(shared_dir, f"{PAD}/image_T1.jpg")
    t2 = read(shared_dir, f"{PAD}/image_T2.jpg")
    blank = jpeg(np.full((480, 640, 3), 128, np.uint8))
    one, two = live(face, t1), live(face, t2)
    files = [("image", ("1.jpg", t1)), ("image", ("2.jpg", t2)), ("image", ("3.jpg", blank))]
    series = face.post("/check_liveness", files=files).json()
    # The blank frame fails validation and is skipped; the score is the mean of the others.
    assert series["score"] == pytest.approx((one["score"] + two["score"]) / 2, abs=1e-6)
    assert series["quality"] == pytest.approx((one["quality"] + two["quality"]) / 2, abs=1e-6)
    # Only failing frames: the first frame's rejection.
    only_blank = face.post("/check_liveness", files=[("frames", ("a", blank)), ("frames", ("b", blank))])
    assert only_blank.json()["error_code"] == "FACE_NOT_FOUND"


def test_any_part_name_is_an_image(face: TestClient, shared_dir: Path) -> None:
    data = read(shared_dir, f"{PAD}/image_T1.jpg")
    assert live(face, data, name="file") == live(face, data, name="image")


def test_batch_entries_by_file_name(face: TestClient, shared_dir: Path) -> None:
    names = ["image_T1.jpg", "image_T2.jpg", "image_F1.jpg", "image_F2.jpg"]
    files = [("images", (n, read(shared_dir, f"{PAD}/{n}"), "image/jpeg")) for n in names]
    files.append(("images", ("broken.jpg", b"not an image", "image/jpeg")))
    r = face.post("/check_liveness_batch", files=files)
    assert r.status_code == 200, r.text
    entries = {e["file_name"]: e for e in r.json()}
    assert set(entries) == {*names, "broken.jpg"}
    assert entries["broken.jpg"] == {
        "file_name": "broken.jpg",
        "error": entries["broken.jpg"]["error"],
        "error_code": "FAILED_TO_READ_IMAGE",
    }
    single = live(face, read(shared_dir, f"{PAD}/image_T1.jpg"))
    assert entries["image_T1.jpg"]["score"] == pytest.approx(single["score"], abs=1e-5)
    assert entries["image_T1.jpg"]["probability"] >= 0.5 > entries["image_F2.jpg"]["probability"]
    bad = face.post("/check_liveness_batch?pipeline=nope", files=files[:1])
    assert bad.status_code == 200 and bad.json()["error_code"] is None and "nope" in bad.json()["error"]


def test_check_image_calibrations(face: TestClient, shared_dir: Path) -> None:
    data = {
        "domain": "GENERAL",
        "pipelines": [
            {"pipeline": "ensemble", "calibration": "REGULAR"},
            {"pipeline": "ensemble", "calibration": "HARDENED"},
            {"pipeline": "ensemble", "calibration": "SOFT"},
            {"pipeline": "fast", "calibration": "REGULAR"},
        ],
    }
    img = read(shared_dir, f"{PAD}/image_F2.jpg")
    r = face.post("/check_image", data={"data": orjson.dumps(data).decode()}, files={"image": ("f.jpg", img)})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"serverVersion", "licenseExpirationDate", "results"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", body["licenseExpirationDate"])
    res = body["results"]
    assert [(e["pipeline"], e["calibration"]) for e in res] == [
        (p["pipeline"], p["calibration"]) for p in data["pipelines"]
    ]
    regular, hardened, soft = res[0], res[1], res[2]
    assert regular["score"] == hardened["score"] == soft["score"]  # the raw score is not calibrated
    assert hardened["probability"] < regular["probability"] < soft["probability"]
    # No pipelines given: the default pipeline, REGULAR.
    r2 = face.post("/check_image", data={"data": "{}"}, files={"image": ("f.jpg", img)})
    assert [(e["pipeline"], e["calibration"]) for e in r2.json()["results"]] == [("ensemble", "REGULAR")]
    # A rejected image is an entry with error and error_code, still 200.
    blank = jpeg(np.zeros((480, 640, 3), np.uint8))
    r3 = face.post("/check_image", data={"data": "{}"}, files={"image": ("b.jpg", blank)})
    assert r3.status_code == 200
    assert r3.json()["results"] == [
        {
            "pipeline": "ensemble",
            "calibration": "REGULAR",
            "error": r3.json()["results"][0]["error"],
            "error_code": "FACE_NOT_FOUND",
        }
    ]


@pytest.mark.parametrize(
    "data",
    [
        "{not json",
        "[]",
        '{"pipelines": [{"pipeline": "ensemble", "calibration": "EXTREME"}]}',
        '{"pipelines": [{"pipeline": "nope"}]}',
        '{"pipelines": [{"calibration": "REGULAR"}]}',
        '{"pipelines": "ensemble"}',
        '{"domain": "MOON"}',
    ],
    ids=[
        "not-json",
        "not-object",
        "unknown-calibration",
        "unknown-pipeline",
        "no-pipeline",
        "wrong-type",
        "domain",
    ],
)
def test_check_image_malformed_data_is_400(face: TestClient, shared_dir: Path, data: str) -> None:
    img = read(shared_dir, f"{PAD}/image_T1.jpg")
    assert_error(face.post("/check_image", data={"data": data}, files={"image": ("a.jpg", img)}), 400)


def test_check_image_missing_parts_are_400(face: TestClient, shared_dir: Path) -> None:
    img = read(shared_dir, f"{PAD}/image_T1.jpg")
    assert_error(face.post("/check_image", files={"image": ("a.jpg", img)}), 400)
    assert_error(face.post("/check_image", data={"data": "{}"}, files={"other": ("a.jpg", img)}), 400)
    assert_error(face.post("/check_image", data={"data": "{}"}), 415)  # not multipart at all


# ------------------------------------------------------------------ bad input: always 200 with an error


def _png(img: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", img)
    assert ok
    return buf.tobytes()


def test_unreadable_images(face: TestClient, shared_dir: Path) -> None:
    t1 = read(shared_dir, f"{PAD}/image_T1.jpg")
    for data in (b"", b"hello, not an image", t1[: len(t1) // 2], png_header_only(20000, 20000)):
        body = live(face, data)
        assert body["error_code"] == "FAILED_TO_READ_IMAGE", body
        assert set(body) == {"error", "error_code"} and body["error"]
    tiny = _png(np.zeros((1, 1, 3), np.uint8))
    assert live(face, tiny)["error_code"] == "FACE_NOT_FOUND"


def test_rgba_greyscale_and_exif(face: TestClient, shared_dir: Path) -> None:
    rgba = live(face, read(shared_dir, f"{MISC}/face_recognition/32bit.png"))
    assert "probability" in rgba, rgba
    upright = cv2.imread(str(shared_dir / PAD / "image_T1.jpg"))  # cv2.imread applies EXIF orientation
    grey = cv2.cvtColor(upright, cv2.COLOR_BGR2GRAY)
    assert "probability" in live(face, _png(grey))
    # image_T1.jpg stores landscape pixels with EXIF orientation 6: the result must equal that of the
    # upright pixels without EXIF.
    with Image.open(shared_dir / PAD / "image_T1.jpg") as im:
        assert im.getexif().get(0x0112) == 6 and im.size == (640, 480)
    exif = live(face, read(shared_dir, f"{PAD}/image_T1.jpg"))
    plain = live(face, _png(upright))
    assert exif["score"] == pytest.approx(plain["score"], abs=0.05)
    # A face lying on its side (EXIF orientation lost, a phone held sideways) is judged upright.
    for turn in (cv2.ROTATE_90_COUNTERCLOCKWISE, cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180):
        turned = live(face, _png(cv2.rotate(upright, turn)))
        assert turned["score"] == pytest.approx(plain["score"], abs=0.05), (turn, turned)


def test_too_many_parts_and_not_multipart(face: TestClient) -> None:
    files = [("image", (f"{i}.png", b"x")) for i in range(100)]
    r = face.post("/check_liveness", files=files)
    assert r.status_code == 200 and "Too many images" in r.json()["error"]
    r = face.post("/check_liveness_batch", files=files)
    assert r.status_code == 200 and "Too many images" in r.json()["error"]
    r = face.post("/check_liveness", content=b"{}", headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["error_code"] is None
    r = face.post("/check_liveness", data={"field": "no file"}, files={})
    assert r.status_code == 200 and "Expected multipart" in r.json()["error"]
    only_field = b'--xx\r\nContent-Disposition: form-data; name="field"\r\n\r\nvalue\r\n--xx--\r\n'
    r = face.post(
        "/check_liveness", content=only_field, headers={"content-type": "multipart/form-data; boundary=xx"}
    )
    assert r.status_code == 200 and "No image" in r.json()["error"]


@pytest.mark.parametrize("meta", ["{bad", "[1]", '{"OS": "WINDOWS95"}', '{"OS": 3}', '{"MODEL": ["x"]}'])
def test_malformed_meta(face: TestClient, shared_dir: Path, meta: str) -> None:
    data = read(shared_dir, f"{PAD}/image_T1.jpg")
    body = live(face, data, headers={"Meta": meta})
    assert body["error_code"] == "INVALID_META", body
    r = face.post("/check_liveness_batch", files={"image": ("a.jpg", data)}, headers={"Meta": meta})
    assert r.status_code == 200 and r.json()["error_code"] == "INVALID_META"


# ------------------------------------------------------------------ BI records, report, metrics


def test_bi_records_report_and_metrics(face: TestClient, shared_dir: Path) -> None:
    data = read(shared_dir, f"{PAD}/image_T1.jpg")
    meta = '{"OS": "IOS", "OS_VERSION": "17.1", "MANUFACTURE": "Apple", "MODEL": "iPhone15,2"}'
    live(face, data, headers={"Meta": meta}, params={"pipeline": "fast"})
    live(face, b"garbage", headers={"Meta": meta}, params={"pipeline": "fast"})
    records = face.get("/bi_records").json()
    mine = [r for r in records if r["platform"] == "IOS" and r["pipeline"] == "fast"]
    assert len(mine) == 2
    ok = next(r for r in mine if r["error_code"] is None)
    assert ok["endpoint"] == "check_liveness" and ok["calibration"] == "REGULAR"
    assert ok["image_width"] == 480 and ok["image_height"] == 640  # EXIF-rotated size
    assert 0 <= ok["probability"] <= 1 and ok["latency_ms"] > 0
    assert not any(isinstance(v, str) and len(v) > 200 for r in records for v in r.values())  # no image data
    report = face.get("/bi_report").json()
    assert report["total"] == len(records)
    assert report["fast_IOS_FAILED_TO_READ_IMAGE"] == 1
    bucket = int(min(ok["probability"], 0.999) * 10)
    assert report[f"fast_IOS_probability_{bucket / 10:.1f}-{(bucket + 1) / 10:.1f}"] >= 1
    today = records[-1]["time"][:10]
    assert face.get(f"/bi_report?date_from={today}&date_to={today}").json()["total"] == len(records)
    assert face.get("/bi_report?date_to=2000-01-01").json()["total"] == 0
    for bad in ("2026-13-01", "yesterday", "2026/01/01", "20260101"):
        assert_error(face.get(f"/bi_report?date_from={bad}"), 400)
        assert_error(face.get(f"/bi_records?date_to={bad}"), 400)
    metrics = face.get("/metrics").text
    assert re.search(
        r'verilive_face_decisions_total\{error_code="",outcome="live",pipeline="fast"\} \d', metrics
    )
    assert 'error_code="FAILED_TO_READ_IMAGE",outcome="rejected",pipeline="fast"' in metrics
    assert "verilive_face_decision_duration_seconds_bucket" in metrics

"""The 3D check from motion end to end: /check_liveness series and capture bundles with a burst, on
real models and real frames (docs/motion3d.md). A live burst is a real head turn from a development
clip; a print burst is a real printed photo moved as a plane (simulated, common/flat_motion_sim.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.helpers import KEY, PUBLIC, env, settings_for
from tests.motion_data import clip_frames, jpeg
from tests.motion_data import print_burst as make_print_burst
from verilive.capture import bundle as B
from verilive.capture.bundle import KeyRing
from verilive.capture.client import build_bundle
from verilive.config import Settings
from verilive.face.burst import BurstCheck
from verilive.face.deps import face_engine
from verilive.face.engine import FLAT_SCORE
from verilive.face.motion3d import Motion3D, SeriesMode, Unjudged, Verdict
from verilive.server.app import create_service_app

pytestmark = pytest.mark.slow

PAD = "data/face/pad_silentface"
OCTET = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def live_burst(shared_dir: Path) -> list[np.ndarray]:
    """10 frames at 5 fps over the clip's first deliberate head turn (from 0.6 s)."""
    return clip_frames(shared_dir, 0.6, 2.6, 5.0)


@pytest.fixture(scope="module")
def print_burst(shared_dir: Path, models_settings: Settings) -> list[np.ndarray]:
    return make_print_burst(shared_dir, models_settings)


@pytest.fixture(scope="module")
def face(models_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("bi3d") / "bi.sqlite3"
    settings = models_settings.model_copy(update={"bi_database_url": f"sqlite:///{db}"})
    with TestClient(create_service_app("face", settings), raise_server_exceptions=False) as c:
        yield c


def series(client: TestClient, frames: list[bytes]) -> dict[str, Any]:
    files = [("image", (f"f{i}.jpg", data, "image/jpeg")) for i, data in enumerate(frames)]
    r = client.post("/check_liveness", files=files)
    assert r.status_code == 200, r.text
    return r.json()


def batch_mean(client: TestClient, frames: list[bytes]) -> float:
    files = [("image", (f"f{i}.jpg", data, "image/jpeg")) for i, data in enumerate(frames)]
    r = client.post("/check_liveness_batch", files=files)
    scores = [e["score"] for e in r.json() if "score" in e]
    assert scores
    return float(np.mean(scores))


def last_record(client: TestClient) -> dict[str, Any]:
    records = client.get("/bi_records").json()
    return records[-1]


# ---------------------------------------------------------------------------- face service series


def test_live_series_is_judged_3d_and_keeps_its_score(face: TestClient, live_burst: list[np.ndarray]) -> None:
    frames = [jpeg(f) for f in live_burst]
    body = series(face, frames)
    assert set(body) == {"probability", "quality", "score"}
    rec = last_record(face)
    assert rec["endpoint"] == "check_liveness" and rec["motion3d"] == "3d"
    # 3D is no evidence of life (a replayed video is 3D in content): the score is the frames' mean.
    assert body["score"] == pytest.approx(batch_mean(face, frames), abs=1e-6)


def test_print_series_is_not_judged_3d(face: TestClient, print_burst: list[np.ndarray]) -> None:
    frames = [jpeg(f) for f in print_burst]
    body = series(face, frames)
    rec = last_record(face)
    # The mesh reads a tilted print as little turn: "cannot judge" (or flat), never 3D.
    assert rec["motion3d"] in {"cannot_judge", "flat"}
    result = face_engine(face.app.state.ctx).motion3d(frames).result
    assert result is not None and result.verdict.value == rec["motion3d"]
    if rec["motion3d"] == "cannot_judge" and not result.not_rigid:
        assert body["score"] == pytest.approx(batch_mean(face, frames), abs=1e-6)
    else:  # flat, or turned but not rigid: held against the series under the default "use"
        assert body["score"] <= FLAT_SCORE and body["probability"] < 1e-3


def test_identical_frames_cannot_be_judged_and_change_nothing(face: TestClient, shared_dir: Path) -> None:
    data = (shared_dir / PAD / "image_T1.jpg").read_bytes()
    body = series(face, [data] * 5)
    assert last_record(face)["motion3d"] == "cannot_judge"
    single = face.post("/check_liveness", files=[("image", ("a.jpg", data, "image/jpeg"))]).json()
    assert body["score"] == pytest.approx(single["score"], abs=1e-6)
    assert last_record(face)["motion3d"] is None  # one image: no 3D check


def test_bursts_that_are_not_one_face_are_skipped_not_errors(
    face: TestClient, live_burst: list[np.ndarray], shared_dir: Path
) -> None:
    frames = [jpeg(f) for f in live_burst[:4]]
    other = (shared_dir / PAD / "image_T1.jpg").read_bytes()  # another person, another size
    for parts in (frames[:2], [*frames[:3], other], [frames[0], other, frames[1]]):
        body = series(face, parts)
        assert "score" in body or "error_code" in body
        assert last_record(face)["motion3d"] is None
    # Undecodable and empty frames are skipped by the series as before; the rest still counts.
    body = series(face, [*frames, b"", b"\xff\xd8garbage"])
    assert "score" in body
    # A long series (more frames than MAX_FRAMES) is subsampled, not refused.
    body = series(face, frames * 10)
    assert "score" in body
    # Different sizes of the same clip: skipped.
    small = [jpeg(cv2.resize(f, None, fx=0.5, fy=0.5)) for f in live_burst[4:7]]
    series(face, frames + small)
    assert last_record(face)["motion3d"] is None


def test_a_flat_verdict_makes_the_series_a_spoof(face: TestClient, live_burst: list[np.ndarray]) -> None:
    """The rule, with the verdict forced: flat gives at most FLAT_SCORE whatever the models say."""
    engine = face_engine(face.app.state.ctx)
    flat = BurstCheck(Motion3D(Verdict.FLAT, 0.005, 12.0, 1.0, 10))

    class Flat:
        def check_encoded(self, images: Any, max_pixels: int) -> BurstCheck:
            return flat

    saved = engine.burst
    engine.burst = Flat()  # type: ignore[assignment]
    try:
        body = series(face, [jpeg(f) for f in live_burst[:5]])
    finally:
        engine.burst = saved
    assert body["score"] == FLAT_SCORE and body["probability"] < 1e-4
    assert last_record(face)["motion3d"] == "flat"


@contextmanager
def series_mode(
    client: TestClient, mode: SeriesMode, verdict: BurstCheck | None = None
) -> Iterator[list[int]]:
    """The face engine in ``mode`` for the block; with ``verdict``, its 3D check forced to answer it.
    Yields a list that counts the forced check's calls."""
    engine = face_engine(client.app.state.ctx)
    calls: list[int] = []

    class Forced:
        def check_encoded(self, images: Any, max_pixels: int) -> BurstCheck:
            calls.append(len(images))
            assert verdict is not None
            return verdict

    saved = engine.motion3d_mode, engine.burst
    engine.motion3d_mode = mode
    if verdict is not None:
        engine.burst = Forced()  # type: ignore[assignment]
    try:
        yield calls
    finally:
        engine.motion3d_mode, engine.burst = saved


FORCED = {
    "3d": BurstCheck(Motion3D(Verdict.THREE_D, 0.05, 14.0, 0.3, 10)),
    "flat": BurstCheck(Motion3D(Verdict.FLAT, 0.005, 12.0, 1.0, 10)),
    "not_rigid": BurstCheck(Motion3D(Verdict.CANNOT_JUDGE, 0.04, 12.0, 1.1, 10, (), Unjudged.NOT_RIGID)),
    "no_turn": BurstCheck(Motion3D(Verdict.CANNOT_JUDGE, 0.01, 3.0, 1.0, 10, (), Unjudged.NO_TURN)),
    "not_one_face": BurstCheck(None, "the face jumps between frames (a cut or another person)"),
}


@pytest.mark.parametrize(
    ("mode", "forced", "capped"),
    [
        ("use", "3d", False),
        ("use", "flat", True),
        ("use", "not_rigid", True),
        ("use", "no_turn", False),
        ("use", "not_one_face", False),
        ("require", "3d", False),
        ("require", "flat", True),
        ("require", "not_rigid", True),
        ("require", "no_turn", True),
        ("require", "not_one_face", True),
    ],
)
def test_each_series_mode_rule_with_forced_verdicts(
    face: TestClient, live_burst: list[np.ndarray], mode: SeriesMode, forced: str, capped: bool
) -> None:
    """The rule of each VERILIVE_FACE_MOTION3D mode, with the verdict forced on live frames."""
    frames = [jpeg(f) for f in live_burst[:5]]
    with series_mode(face, mode, FORCED[forced]) as calls:
        body = series(face, frames)
    assert calls == [5]
    result = FORCED[forced].result
    assert last_record(face)["motion3d"] == (result.verdict.value if result is not None else None)
    if capped:
        assert body["score"] == FLAT_SCORE and body["probability"] < 1e-4
    else:
        assert body["score"] == pytest.approx(batch_mean(face, frames), abs=1e-6)
        assert body["score"] > FLAT_SCORE


def test_require_caps_series_the_check_cannot_run_on(face: TestClient, live_burst: list[np.ndarray]) -> None:
    """Fewer than 3 frames: no check (the forced one is not called); require caps, use does not."""
    frames = [jpeg(f) for f in live_burst[:2]]
    cases: tuple[tuple[SeriesMode, bool], ...] = (("use", False), ("require", True))
    for mode, capped in cases:
        with series_mode(face, mode, FORCED["3d"]) as calls:
            body = series(face, frames)
        assert calls == [] and last_record(face)["motion3d"] is None
        assert (body["score"] == FLAT_SCORE) is capped


def test_off_runs_no_check(face: TestClient, live_burst: list[np.ndarray]) -> None:
    frames = [jpeg(f) for f in live_burst[:5]]
    with series_mode(face, "off", FORCED["flat"]) as calls:
        body = series(face, frames)
    assert calls == [] and last_record(face)["motion3d"] is None
    assert body["score"] == pytest.approx(batch_mean(face, frames), abs=1e-6)


def test_real_head_turn_keeps_its_score_under_use_and_require(
    face: TestClient, live_burst: list[np.ndarray]
) -> None:
    frames = [jpeg(f) for f in live_burst]
    mean = batch_mean(face, frames)
    modes: tuple[SeriesMode, ...] = ("use", "require")
    for mode in modes:
        with series_mode(face, mode):
            body = series(face, frames)
        assert last_record(face)["motion3d"] == "3d"
        assert body["score"] == pytest.approx(mean, abs=1e-6) and body["probability"] > 0.5


def test_print_series_is_capped_under_require(face: TestClient, print_burst: list[np.ndarray]) -> None:
    frames = [jpeg(f) for f in print_burst]
    with series_mode(face, "require"):
        body = series(face, frames)
    assert last_record(face)["motion3d"] in {"cannot_judge", "flat"}
    assert body["score"] <= FLAT_SCORE and body["probability"] < 1e-3


# ---------------------------------------------------------------------------- capture bundles


def _capture(models_settings: Settings, tmp: Path, mode: str) -> TestClient:
    s = settings_for(models_settings, tmp, capture_motion3d=mode)
    return TestClient(create_service_app("capture", s), raise_server_exceptions=False)


def _big(frames: list[np.ndarray]) -> list[np.ndarray]:
    """The clip (368x656) at a still's resolution (480 px or more on the shorter side)."""
    return [cv2.resize(f, None, fx=1.4, fy=1.4) for f in frames]


def decide(client: TestClient, blob: bytes) -> dict[str, Any]:
    r = client.post("/check_capture_liveness", content=blob, headers=OCTET)
    assert r.status_code == 200, r.text
    return r.json()


def test_capture_burst_use_and_require(
    models_settings: Settings,
    tmp_path: Path,
    live_burst: list[np.ndarray],
    print_burst: list[np.ndarray],
) -> None:
    """Bound bursts (the still is the burst's frame 0 at full resolution): a real head turn keeps the
    face score in both modes; a print moved as a plane passes neither (capture/binding.py binds)."""
    assert KEY.exists()
    live = _big(live_burst)
    prints = _big(print_burst) if min(print_burst[0].shape[:2]) < 480 else print_burst

    def bundle(frames: list[np.ndarray] | None, still: np.ndarray, quality: int = 95) -> bytes:
        index = 0 if frames is not None else None
        data = jpeg(still, quality)
        return build_bundle(PUBLIC, None, data, environment=env(), burst=frames, still_index=index)

    with _capture(models_settings, tmp_path / "use", "use") as c:
        plain = decide(c, bundle(None, live[0], 94))  # other bytes: not "image seen before"
        body = decide(c, bundle(live, live[0]))
        assert last_record(c)["motion3d"] == "3d"
        assert body["face_liveness"]["probability"] == pytest.approx(
            plain["face_liveness"]["probability"], abs=0.02
        )
        assert body["capture_liveness"]["rejection"] == [] and body["capture_liveness"]["probability"] >= 0.5
        flat = decide(c, bundle(prints, prints[0]))
        assert last_record(c)["motion3d"] in {"cannot_judge", "flat"}
        if last_record(c)["motion3d"] == "flat":
            assert flat["face_liveness"]["probability"] < 1e-3
    with _capture(models_settings, tmp_path / "require", "require") as c:
        mirrored = [np.ascontiguousarray(f[:, ::-1]) for f in live]  # a new burst, not a replay
        body = decide(c, bundle(mirrored, mirrored[0]))
        assert body["capture_liveness"]["probability"] >= 0.5 and body["face_liveness"]["probability"] >= 0.5
        other_print = [np.ascontiguousarray(f[:, ::-1]) for f in prints]
        for frames, still in ((other_print, other_print[0]), (None, live[0])):
            body = decide(c, bundle(frames, still))
            # The face part fails, and with it the capture, under the reason a spoofed face has
            # always had (UNTRUSTED_CONTENT: "the face liveness model calls it an attack").
            assert body["face_liveness"]["probability"] < 1e-3
            assert body["capture_liveness"]["probability"] < 0.5
            assert "UNTRUSTED_CONTENT" in body["capture_liveness"]["rejection"]
        assert last_record(c)["motion3d"] is None  # no burst: the check did not run


def test_capture_burst_with_a_changed_frame_is_corrupted(
    models_settings: Settings, tmp_path: Path, live_burst: list[np.ndarray]
) -> None:
    """A public-key holder can seal anything, so the inner digests are the check: one byte changed in
    one frame after the digests were taken is UNTRUSTED_CORRUPTED_PAYLOAD, and the frames go unused."""
    live = _big(live_burst)
    ring = KeyRing.from_entries([str(KEY)])
    honest = ring.decrypt(
        build_bundle(PUBLIC, None, jpeg(live[0], 95), environment=env(), burst=live, still_index=0)
    )
    part = bytearray(B.encode_burst(honest.burst))
    part[len(part) // 2] ^= 0x01  # inside the middle frame
    meta = B.dump_meta(honest.meta)
    payload = B.encode_payload(meta, honest.image, honest.photo, honest.external_data, bytes(part))
    blob = B.seal(payload, PUBLIC, honest.key_id)
    with _capture(models_settings, tmp_path, "use") as c:
        body = decide(c, blob)
        assert "UNTRUSTED_CORRUPTED_PAYLOAD" in body["capture_liveness"]["rejection"]
        assert body["capture_liveness"]["probability"] < 0.5
        assert last_record(c)["motion3d"] is None

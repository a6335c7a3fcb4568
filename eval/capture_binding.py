"""The burst bound to the still (capture/binding.py): genuine captures kept, assembled bundles refused.

Conditions: 12-frame bursts at 5 fps from every 1.5 s of the live development clips
(../shared/data/face/video_motion), each frame scaled so that its shorter side is at least 480 px
(the still) and sent as the Python library sends it (burst frames at 640 px, JPEG 80; still JPEG 95).
Only windows whose whole burst the 3D check judges "3d" count as genuine captures (the others are
refused by `require` whatever the binding says). Attacks are assembled from the same windows:

- another person's still: a live portrait of pad_silentface or real_faces_misc, made the still's size;
- a print's still: a real printed photo of pad_feni_sfas, made the still's size;
- a face spliced in: the still's frame with another face pasted over the real one (frame 0 of the
  burst is that frame, so picture and geometry agree; only the continuity of the face can tell);
- another camera size: a still of another shape (16:9 for 4:3 clips, else 4:3) with the burst;
- a replay: the burst's bytes again, and a copy re-encoded (JPEG 60), rescaled and cropped by 3 %;
- two genuine turns (other windows of the same clip): must not count as replays.

Prints the table and writes docs/capture_binding.png. Usage: ``python -m eval.capture_binding``.
"""

from __future__ import annotations

import argparse
import csv
import glob
import time
from pathlib import Path

import cv2
import numpy as np
from common.video import read_video

from verilive.capture.binding import bind, burst_replays
from verilive.capture.bundle import KeyRing
from verilive.capture.client import build_bundle
from verilive.capture.replay import SqliteReplayStore
from verilive.config import Settings
from verilive.face.burst import BurstChecker
from verilive.face.detector import FaceDetector
from verilive.face.image import decode_image
from verilive.face.mesh import FaceMesh
from verilive.models.sessions import ModelRegistry

REPO = Path(__file__).resolve().parents[1]
DOCS_PNG = REPO / "docs" / "capture_binding.png"
CLIPS = "data/face/video_motion"
KEY = REPO / "tests" / "fixtures" / "capture_test_key.pem"
FRAMES, FPS, EVERY_S = 12, 5.0, 1.5


def jpeg(bgr: np.ndarray, q: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, q])
    assert ok
    return buf.tobytes()


def windows(shared: Path) -> list[tuple[str, list[np.ndarray]]]:
    out = []
    with open(shared / CLIPS / "labels.csv") as fh:
        live = [r["file"] for r in csv.DictReader(fh) if r["label"] == "live"]
    for rel in live:
        frames, fps = read_video(shared / CLIPS / rel)
        step = fps / FPS
        scale = max(1.0, 480.0 / min(frames[0].shape[:2]))
        for start in range(0, len(frames) - int(FRAMES * step), int(fps * EVERY_S)):
            w = [frames[round(start + i * step)] for i in range(FRAMES)]
            out.append((rel, [cv2.resize(f, None, fx=scale, fy=scale) for f in w] if scale > 1 else w))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    args = ap.parse_args()
    shared: Path = args.shared
    settings = Settings()
    reg = ModelRegistry(settings)
    det = FaceDetector.from_registry(reg)
    checker = BurstChecker(det, FaceMesh.from_registry(reg))
    ring = KeyRing.from_entries([str(KEY)])
    from verilive.capture.bundle import public_key_b64

    public = public_key_b64(KEY.read_bytes())
    others = sorted(glob.glob(str(shared / "data/face/pad_silentface/image_T*.jpg")))
    others += sorted(glob.glob(str(shared / "data/face/real_faces_misc/**/*.jpg"), recursive=True))
    with open(shared / "data/face/pad_feni_sfas/labels.csv") as fh:
        prints = [
            str(shared / "data/face/pad_feni_sfas" / r["file"])
            for r in csv.DictReader(fh)
            if r["attack_type"].startswith("print")
        ][:40]
    other_faces = []
    for p in others:
        img = decode_image(Path(p).read_bytes()).bgr
        faces = det.detect(img)
        if faces:
            other_faces.append((img, faces[0].box))

    def outcome(
        still: np.ndarray, frames: list[np.ndarray], store: SqliteReplayStore | None = None, **kw: object
    ):
        blob = build_bundle(public, None, jpeg(still, 95), burst=frames, still_index=0, **kw)  # type: ignore[arg-type]
        b = ring.decrypt(blob)
        image = decode_image(b.image)
        t0 = time.perf_counter()
        check = checker.check_encoded(b.burst)
        t1 = time.perf_counter()
        bound = bind(b, image, check.track, checker)
        replays = burst_replays(b, check.track, store, 86400.0, 1e9) if store is not None else []
        t2 = time.perf_counter()
        accepted = bound.bound and bound.result is not None and bound.result.verdict.value == "3d"
        return check, accepted, replays, (t1 - t0) * 1000, (t2 - t1) * 1000

    rows: dict[str, list[bool]] = {k: [] for k in (
        "genuine accepted", "another person's still refused", "a print's still refused",
        "face spliced into the still's frame refused", "another camera size refused",
        "byte-identical burst replay refused", "re-encoded, rescaled, cropped replay refused",
        "another genuine turn of the same clip not taken for a replay",
    )}  # fmt: skip
    check_ms, bind_ms = [], []
    by_clip: dict[str, list[list[np.ndarray]]] = {}
    for i, (rel, w) in enumerate(windows(shared)):
        store = SqliteReplayStore(":memory:")
        check, ok, reps, cms, bms = outcome(w[0], w, store)
        if check.result is None or check.result.verdict.value != "3d":
            continue  # no 3D turn in this window: refused under require whatever the binding says
        by_clip.setdefault(rel, []).append(w)
        rows["genuine accepted"].append(ok and not reps)
        check_ms.append(cms)
        bind_ms.append(bms)
        h, wd = w[0].shape[:2]
        img, box = other_faces[i % len(other_faces)]
        rows["another person's still refused"].append(not outcome(cv2.resize(img, (wd, h)), w)[1])
        pr = decode_image(Path(prints[i % len(prints)]).read_bytes()).bgr
        rows["a print's still refused"].append(not outcome(cv2.resize(pr, (wd, h)), w)[1])
        faces = det.detect(w[0])
        if faces:
            x0, y0, x1, y1 = (int(v) for v in box)
            a0, b0, a1, b1 = (int(v) for v in faces[0].box)
            spliced = w[0].copy()
            spliced[b0:b1, a0:a1] = cv2.resize(img[y0:y1, x0:x1], (a1 - a0, b1 - b0))
            rows["face spliced into the still's frame refused"].append(
                not outcome(spliced, [spliced, *w[1:]])[1]
            )
        # A still of another shape: 16:9 where the clip is about 4:3, else 4:3; the clip's frame in
        # the middle of it, grey around (what another camera, or the same one set otherwise, gives).
        aspect = 16 / 9 if abs(wd / h - 4 / 3) < 0.1 or abs(h / wd - 4 / 3) < 0.1 else 4 / 3
        wide = np.full((h, max(wd + 2, round(h * aspect))), 128, np.uint8)
        wide = cv2.cvtColor(wide, cv2.COLOR_GRAY2BGR)
        x = (wide.shape[1] - wd) // 2
        wide[:, x : x + wd] = w[0]
        rows["another camera size refused"].append(not outcome(wide, w)[1])
        # The library encodes the same frames to the same bytes: a byte-identical burst, new still bytes.
        again = outcome(w[0], w, store)[2]
        rows["byte-identical burst replay refused"].append(bool(again))
        m = round(0.03 * min(h, wd))
        copy = [
            cv2.resize(cv2.imdecode(np.frombuffer(jpeg(f[m : h - m, m : wd - m], 60), np.uint8), 1), (wd, h))
            for f in w
        ]
        rows["re-encoded, rescaled, cropped replay refused"].append(bool(outcome(copy[0], copy, store)[2]))
    for clip_windows in by_clip.values():
        for a, b in zip(clip_windows, clip_windows[2:], strict=False):  # 3 s or more apart
            store = SqliteReplayStore(":memory:")
            outcome(a[0], a, store)
            rows["another genuine turn of the same clip not taken for a replay"].append(
                not outcome(b[0], b, store)[2]
            )
    print("| what (development clips, assembled from real frames) | share | n |")
    print("|---|---:|---:|")
    for k, v in rows.items():
        print(f"| {k} | {100.0 * np.mean(v):.1f} % | {len(v)} |")
    print(
        f"\n3D check on the burst: median {np.median(check_ms):.1f} ms; binding and replay keys on top:"
        f" median {np.median(bind_ms):.1f} ms, p95 {np.percentile(bind_ms, 95):.1f} ms (in process)"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    names = list(rows)
    ax.barh(range(len(names)), [100.0 * np.mean(rows[k]) for k in names], color="#4a7")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of windows (development clips)")
    ax.set_title("Burst bound to the still: genuine kept, assembled refused")
    fig.tight_layout()
    fig.savefig(DOCS_PNG, dpi=110)
    print(f"wrote {DOCS_PNG.relative_to(REPO)}")


if __name__ == "__main__":
    main()

"""The face photo collections of issue 47: rows of the source indexes and of ``../shared/data/face``, and
collection weights. Shared by train.face_pad_loco (PAD and validation leaving one collection out) and
train.face_occlusion (the occlusion model).

A *collection* is one repository's photos, or one folder of ``../shared/data/face`` (the live videos of
``video_motion`` are one collection each, three frames per video).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

FIELDS = ("collection", "label", "attack_type", "camera", "role", "path")
VIDEO_FRAMES = (1 / 6, 1 / 2, 5 / 6)


def shared_rows(root: Path, frames_dir: Path) -> Iterator[dict[str, str]]:
    """The face folders of ``../shared/data`` as collections (video frames are written to ``frames_dir``)."""
    face = root / "face"
    with open(face / "pad_feni_sfas" / "labels.csv") as f:
        for r in csv.DictReader(f):
            kind = r["attack_type"]
            at = "none" if r["label"] == "live" else "print" if kind.startswith("print") else "replay"
            at = "other" if kind.startswith("recapture") else at
            label = "live" if r["label"] == "live" else "attack"
            yield _row("pad_feni_sfas", label, at, "phone", "train", face / "pad_feni_sfas" / r["file"])
    for name, at in (
        ("image_T1", "none"),
        ("image_T2", "none"),
        ("image_F1", "print"),
        ("image_F2", "replay"),
    ):
        label = "live" if at == "none" else "attack"
        yield _row("pad_silentface", label, at, "unknown", "train", face / "pad_silentface" / f"{name}.jpg")
    # Partial faces (cut by the frame, correctly refused) and the group photo are not live selfies.
    for p in sorted((face / "real_faces_misc" / "face_recognition").glob("*.jpg")):
        if "partial" not in p.name:
            yield _row("face_recognition", "live", "none", "unknown", "train", p)
    yield _row(
        "insightface",
        "live",
        "none",
        "unknown",
        "train",
        face / "real_faces_misc/insightface/Tom_Hanks_54745.png",
    )
    frames_dir.mkdir(parents=True, exist_ok=True)
    with open(face / "video_motion" / "labels.csv") as f:
        for r in csv.DictReader(f):
            video = face / "video_motion" / r["file"]
            cap = cv2.VideoCapture(str(video))
            n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
            label = "live" if r["label"] == "live" else "attack"
            coll = "video_" + r["file"].split("/")[0]
            for share in VIDEO_FRAMES:
                k = int(share * n)
                cap.set(cv2.CAP_PROP_POS_FRAMES, k)
                ok, frame = cap.read()
                if not ok:
                    continue
                out = frames_dir / f"{video.parent.name}_{video.stem}_{k}.png"
                cv2.imwrite(str(out), frame)
                yield _row(
                    coll, label, "none" if label == "live" else "replay", "video-frame", "choose-only", out
                )
            cap.release()


def _row(collection: str, label: str, attack_type: str, camera: str, role: str, path: Path) -> dict[str, str]:
    return dict(zip(FIELDS, (collection, label, attack_type, camera, role, str(path)), strict=True))


def index_rows(path: Path) -> Iterator[dict[str, str]]:
    """Rows of an index written by a source builder (paths relative to the index's folder or absolute)."""
    with open(path) as f:
        for r in csv.DictReader(f):
            p = Path(r["path"])
            yield {k: r.get(k, "") for k in FIELDS} | {"path": str(p if p.is_absolute() else path.parent / p)}


def balanced(coll: np.ndarray, sel: np.ndarray, cap: int | None = None) -> np.ndarray:
    """Weights that give each collection the same total among ``sel`` (the unit a deployment meets), or
    with ``cap``, each photo weight 1 until a collection counts ``cap`` photos: a collection of one photo
    must not weigh as much as one of hundreds, nor the largest outweigh the rest."""
    w = np.zeros(len(coll))
    for c in np.unique(coll[sel]):
        m = sel & (coll == c)
        w[m] = (1.0 if cap is None else min(int(m.sum()), cap)) / m.sum()
    return w

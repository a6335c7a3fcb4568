"""Frames of one face -> the 3D check from motion (face/motion3d.py) on face-mesh tracks.

The first frame's face comes from CenterFace; the mesh then tracks it from frame to frame
(face/mesh.py) and is re-seeded by the detector when it loses the face. The check is skipped, with
the reason, when the frames cannot be one burst of one face: fewer than two frames with the face,
frames of different sizes, or a face that jumps between frames (another person, a cut).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from verilive.face.detector import FaceDetector
from verilive.face.image import ImageError, decode_image
from verilive.face.mesh import FaceMesh, Mesh, Roi, roi_from_face, roi_from_points
from verilive.face.motion3d import RIGID_POINTS, Motion3D, Thresholds, Verdict, judge, shape_rotation
from verilive.unionfind import find_root

# The mesh's face-presence probability under which the track is lost and the detector re-seeds it.
MIN_PRESENCE = 0.5
# Between consecutive frames, a face whose centre moves by more than this many eye distances, or whose
# size changes by more than this factor, is not the same face moving (a cut, another person).
MAX_JUMP_IOD = 2.5
MAX_SIZE_STEP = 1.6
MIN_FRAMES = 3
MAX_FRAMES = 32
# Encoded frames are checked at most this long side: the geometry is in eye distances and degrees, and
# the mesh sees a 192 px crop, so larger frames only cost decoding memory and detection time.
MAX_SIDE = 640


# Appearance continuity (docs/motion3d.md, "Binding"): two frames at most LINK_SPAN apart are linked
# when the later face, aligned onto the earlier by a similarity transform of their rigid landmarks,
# correlates with it by at least LINK_MIN_CORR inside the face. Consecutive live frames at 5 fps: median
# 0.98, 2-3 % under 0.6 (blur, a misfit mesh); another person's face pasted in place: at most 0.57.
LINK_MIN_CORR = 0.6
LINK_MAX_COLOUR = 2.5  # ... or when their mean skin colour (CIELAB a*, b*) differs by at most this
LINK_SPAN = 2
LINK_SIDE = 96  # px: faces are compared at most this wide


@dataclass(frozen=True)
class BurstTrack:
    """The decoded frames (shrunk to MAX_SIDE), the face mesh of each (None: no face), the index of
    each in the frames as sent (undecodable frames are left out) and the decoded size of the frames."""

    frames: tuple[np.ndarray, ...]
    meshes: tuple[Mesh | None, ...]
    indices: tuple[int, ...]
    size: tuple[int, int]  # (width, height) as decoded, before shrinking

    def position(self, sent_index: int) -> int | None:
        """Where the frame sent at ``sent_index`` is in this track (None: it was not decoded)."""
        try:
            return self.indices.index(sent_index)
        except ValueError:
            return None


@dataclass(frozen=True)
class BurstCheck:
    """The check's result, or why it could not run (``result`` None and ``skipped`` set). ``track``
    is what the check saw, for checks that bind the burst to other evidence (capture bundles)."""

    result: Motion3D | None
    skipped: str | None = None
    track: BurstTrack | None = None

    @property
    def verdict(self) -> Verdict:
        return self.result.verdict if self.result is not None else Verdict.CANNOT_JUDGE


class BurstChecker:
    """Thread-safe: the detector and the mesh are; no per-call state on ``self``."""

    def __init__(
        self,
        detector: FaceDetector,
        mesh: FaceMesh,
        thresholds: Thresholds = Thresholds(),
    ) -> None:
        self.detector = detector
        self.mesh = mesh
        self.thresholds = thresholds

    def meshes(self, frames_bgr: list[np.ndarray]) -> list[Mesh | None]:
        """The tracked mesh of each frame (None where no face is found)."""
        out: list[Mesh | None] = []
        prev: Mesh | None = None
        for frame in frames_bgr:
            mesh = None
            if prev is not None:
                mesh = self.mesh.fit(frame, _roi(prev))
                if mesh.presence < MIN_PRESENCE:
                    mesh = None
            if mesh is None:
                faces = self.detector.detect(frame)
                if faces:
                    first = self.mesh.fit(frame, roi_from_face(faces[0]))
                    mesh = self.mesh.fit(frame, _roi(first), refine=False)
                    if mesh.presence < MIN_PRESENCE:
                        mesh = None
            out.append(mesh)
            prev = mesh if mesh is not None else prev
        return out

    def check_encoded(self, images: Sequence[bytes], max_pixels: int = 40_000_000) -> BurstCheck:
        """The check on encoded frames (JPEG, PNG, ...; EXIF orientation applied). Frames that cannot
        be decoded are left out; each is shrunk to MAX_SIDE as soon as it is decoded, so a long series
        of large images never sits in memory at full size."""
        if len(images) < MIN_FRAMES:
            return BurstCheck(None, f"fewer than {MIN_FRAMES} frames")
        sent = list(range(len(images)))
        if len(images) > MAX_FRAMES:
            sent = [round(i) for i in np.linspace(0, len(images) - 1, MAX_FRAMES)]
        frames: list[np.ndarray] = []
        indices: list[int] = []
        sizes = set()
        for i in sent:
            try:
                img = decode_image(images[i], max_pixels).bgr
            except ImageError:
                continue
            sizes.add(img.shape[:2])
            scale = MAX_SIDE / max(img.shape[:2])
            if scale < 1.0:
                img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
            frames.append(img)
            indices.append(i)
        if len(sizes) > 1:
            return BurstCheck(None, "the frames differ in size")
        (h, w), *_ = sizes or {(0, 0)}
        return self.check(frames, indices=indices, size=(w, h))

    def check(
        self,
        frames_bgr: list[np.ndarray],
        *,
        indices: Sequence[int] | None = None,
        size: tuple[int, int] | None = None,
    ) -> BurstCheck:
        if len(frames_bgr) < MIN_FRAMES:
            return BurstCheck(None, f"fewer than {MIN_FRAMES} frames")
        idx = list(indices) if indices is not None else list(range(len(frames_bgr)))
        if len(frames_bgr) > MAX_FRAMES:
            keep = [round(i) for i in np.linspace(0, len(frames_bgr) - 1, MAX_FRAMES)]
            frames_bgr, idx = [frames_bgr[i] for i in keep], [idx[i] for i in keep]
        sizes = {f.shape[:2] for f in frames_bgr}
        if len(sizes) != 1:
            return BurstCheck(None, "the frames differ in size")
        h, w = frames_bgr[0].shape[:2]
        all_meshes = self.meshes(frames_bgr)
        track = BurstTrack(tuple(frames_bgr), tuple(all_meshes), tuple(idx), size or (w, h))
        meshes = [m for m in all_meshes if m is not None]
        if len(meshes) < MIN_FRAMES:
            return BurstCheck(None, "the face was found in fewer than three frames", track)
        if _jumps(meshes):
            return BurstCheck(None, "the face jumps between frames (a cut or another person)", track)
        points = np.stack([m.points for m in meshes])
        return BurstCheck(judge(points, w, h, self.thresholds), None, track)

    def judge_positions(self, track: BurstTrack, positions: Sequence[int]) -> Motion3D | None:
        """The 3D check on the given track positions alone (in time order); None when fewer than
        MIN_FRAMES of them have a face."""
        meshes = [m for i in sorted(positions) if (m := track.meshes[i]) is not None]
        if len(meshes) < MIN_FRAMES or _jumps(meshes):
            return None
        h, w = track.frames[0].shape[:2]
        return judge(np.stack([m.points for m in meshes]), w, h, self.thresholds)


def _jumps(meshes: Sequence[Mesh]) -> bool:
    """Whether the face moves or changes size between consecutive meshes more than a face does."""
    for a, b in itertools.pairwise(meshes):
        iod = max(min(a.interocular, b.interocular), 1e-6)
        jump = float(np.hypot(*(a.points[:, :2].mean(axis=0) - b.points[:, :2].mean(axis=0)))) / iod
        step = max(a.interocular, b.interocular) / iod
        if jump > MAX_JUMP_IOD or step > MAX_SIZE_STEP:
            return True
    return False


def aligned_similarity(
    lab_a: np.ndarray, a: np.ndarray, lab_b: np.ndarray, b: np.ndarray
) -> tuple[float, float]:
    """(correlation, colour difference) of the face of landmarks ``a`` (468 x 2+, frame pixels) in the
    CIELAB frame ``lab_a`` and the face of ``b`` warped onto it by the similarity transform of their
    rigid landmarks, inside the convex hull of ``a``: the Pearson correlation of L*, and the larger
    difference of mean a* and b*. Only the box of a's face is warped and compared."""
    idx = list(RIGID_POINTS)
    m, _ = cv2.estimateAffinePartial2D(b[idx, :2].astype(np.float32), a[idx, :2].astype(np.float32))
    if m is None:
        return 0.0, math.inf
    h, w = lab_a.shape[:2]
    hull = cv2.convexHull(a[:, :2].astype(np.int32))
    x0, y0, bw, bh = cv2.boundingRect(hull)
    x0, y0 = max(0, x0), max(0, y0)
    x1, y1 = min(w, x0 + bw), min(h, y0 + bh)
    if x1 - x0 < 8 or y1 - y0 < 8:
        return 0.0, math.inf
    shift = m.copy()
    shift[:, 2] -= (x0, y0)
    warped = cv2.warpAffine(lab_b, shift, (x1 - x0, y1 - y0))
    crop = lab_a[y0:y1, x0:x1]
    mask = np.zeros(crop.shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, hull - np.array([x0, y0], np.int32), 1)
    inside = mask > 0
    if int(inside.sum()) < 64:
        return 0.0, math.inf
    ma, mb = cv2.mean(crop, mask), cv2.mean(warped, mask)
    colour = max(abs(ma[1] - mb[1]), abs(ma[2] - mb[2]))
    return pearson(crop[..., 0][inside].astype(np.float32), warped[..., 0][inside].astype(np.float32)), colour


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two equally shaped arrays (0 when either is constant)."""
    da, db = a - a.mean(), b - b.mean()
    denom = float(np.sqrt((da * da).sum() * (db * db).sum()))
    return float((da * db).sum() / denom) if denom > 1e-9 else 0.0


def linked_frames(track: BurstTrack, anchor: int) -> set[int]:
    """The track positions that one continuous face connects to position ``anchor``: frames with a
    face, linked to a frame at most LINK_SPAN earlier or later by their aligned appearance. A cut to
    another face, or another person pasted into some frames, splits the burst; a single blurred frame
    only drops out."""
    faces = [i for i, m in enumerate(track.meshes) if m is not None]
    if track.meshes[anchor] is None:
        return set()
    parent = {i: i for i in faces}

    def root(i: int) -> int:
        return find_root(parent, i)

    # Compared inside the box of all the burst's faces, with faces at most LINK_SIDE px across: finer
    # detail is noise at 5 fps, and costs time.
    allpts = np.concatenate([m.points[:, :2] for m in track.meshes if m is not None])
    h, w = track.frames[anchor].shape[:2]
    (bx0, by0), (bx1, by1) = np.floor(allpts.min(axis=0)), np.ceil(allpts.max(axis=0))
    bx0, by0, bx1, by1 = (
        max(0, int(bx0) - 2),
        max(0, int(by0) - 2),
        min(w, int(bx1) + 2),
        min(h, int(by1) + 2),
    )
    widest = max(float(np.ptp(m.points[:, 0])) for m in track.meshes if m is not None)
    scale = min(1.0, LINK_SIDE / max(widest, 1.0))
    small: dict[int, np.ndarray] = {}
    points: dict[int, np.ndarray] = {}
    for i in faces:
        mesh = track.meshes[i]
        assert mesh is not None
        box = track.frames[i][by0:by1, bx0:bx1]
        small[i] = cv2.cvtColor(_shrink(box, scale), cv2.COLOR_BGR2LAB)
        points[i] = (mesh.points[:, :2] - (bx0, by0)) * scale
    for k, i in enumerate(faces):
        for j in faces[k + 1 : k + 1 + LINK_SPAN]:
            if root(i) == root(j):
                continue  # already one face through the frame between
            corr, colour = aligned_similarity(small[i], points[i], small[j], points[j])
            if corr >= LINK_MIN_CORR or colour <= LINK_MAX_COLOUR:
                parent[root(j)] = root(i)
    return {i for i in faces if root(i) == root(anchor)}


def _shrink(img: np.ndarray, scale: float) -> np.ndarray:
    """``img`` scaled by ``scale`` (at most 1): halved by Gaussian pyramid steps, then bilinear (an
    area resize by an odd factor costs several times more)."""
    while scale <= 0.5:
        img = cv2.pyrDown(img)
        scale *= 2.0
    if scale < 1.0:
        img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    return img


def pose_signature(track: BurstTrack, positions: Sequence[int] | None = None) -> list[float] | None:
    """How the head moved over the burst, per frame against the first frame with a face: yaw and
    pitch (degrees, from the rigid landmarks' 3D shape), centre shift (eye distances) and scale
    (percent). A re-encoded, rescaled or slightly cropped copy of a burst gives nearly the same
    numbers; two real head turns never do (the burst replay key, docs/motion3d.md). Over the given
    track positions (default all); None unless each has a face and there are at least two."""
    chosen = sorted(positions) if positions is not None else range(len(track.meshes))
    meshes = [track.meshes[i] for i in chosen]
    if len(meshes) < 2 or any(m is None for m in meshes):
        return None
    idx = list(RIGID_POINTS)
    first = meshes[0]
    assert first is not None
    iod0 = max(first.interocular, 1e-6)
    c0 = first.points[idx, :2].mean(axis=0)
    out: list[float] = []
    for m in meshes[1:]:
        assert m is not None
        yaw, pitch = yaw_pitch(first.points[idx], m.points[idx])
        shift = (m.points[idx, :2].mean(axis=0) - c0) / iod0
        scale = 100.0 * math.log(max(m.interocular, 1e-6) / iod0)
        out += [yaw, pitch, float(shift[0]) * 10.0, float(shift[1]) * 10.0, scale]
    return out


def yaw_pitch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Signed yaw and pitch (degrees) of the 3D point set ``b`` against ``a``."""
    rot = shape_rotation(a, b)
    yaw = math.degrees(math.asin(float(np.clip(rot[0, 2], -1.0, 1.0))))
    return yaw, math.degrees(math.asin(float(np.clip(-rot[1, 2], -1.0, 1.0))))


def _roi(mesh: Mesh) -> Roi:
    return roi_from_points(mesh.points)

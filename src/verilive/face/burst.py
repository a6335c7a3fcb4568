"""Frames of one face -> the 3D check from motion (face/motion3d.py) on face-mesh tracks.

The first frame's face comes from CenterFace; the mesh then tracks it from frame to frame
(face/mesh.py) and is re-seeded by the detector when it loses the face. The check is skipped, with
the reason, when the frames cannot be one burst of one face: fewer than two frames with the face,
frames of different sizes, or a face that jumps between frames (another person, a cut).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from verilive.face.detector import FaceDetector
from verilive.face.image import ImageError, decode_image
from verilive.face.mesh import FaceMesh, Mesh, Roi, roi_from_face, roi_from_points
from verilive.face.motion3d import RIGID_POINTS, Motion3D, Thresholds, Verdict, judge, shape_turn

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


@dataclass(frozen=True)
class BurstCheck:
    """The check's result, or why it could not run (``result`` None and ``skipped`` set)."""

    result: Motion3D | None
    skipped: str | None = None

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
        if len(images) > MAX_FRAMES:
            images = [images[round(i)] for i in np.linspace(0, len(images) - 1, MAX_FRAMES)]
        frames: list[np.ndarray] = []
        sizes = set()
        for data in images:
            try:
                img = decode_image(data, max_pixels).bgr
            except ImageError:
                continue
            sizes.add(img.shape[:2])
            scale = MAX_SIDE / max(img.shape[:2])
            if scale < 1.0:
                img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
            frames.append(img)
        if len(sizes) > 1:
            return BurstCheck(None, "the frames differ in size")
        return self.check(frames)

    def check(self, frames_bgr: list[np.ndarray]) -> BurstCheck:
        if len(frames_bgr) < MIN_FRAMES:
            return BurstCheck(None, f"fewer than {MIN_FRAMES} frames")
        if len(frames_bgr) > MAX_FRAMES:
            frames_bgr = [frames_bgr[round(i)] for i in np.linspace(0, len(frames_bgr) - 1, MAX_FRAMES)]
        sizes = {f.shape[:2] for f in frames_bgr}
        if len(sizes) != 1:
            return BurstCheck(None, "the frames differ in size")
        all_meshes = self.meshes(frames_bgr)
        meshes = [m for m in all_meshes if m is not None]
        if len(meshes) < MIN_FRAMES:
            return BurstCheck(None, "the face was found in fewer than three frames")
        for a, b in itertools.pairwise(meshes):
            iod = max(min(a.interocular, b.interocular), 1e-6)
            jump = float(np.hypot(*(a.points[:, :2].mean(axis=0) - b.points[:, :2].mean(axis=0)))) / iod
            step = max(a.interocular, b.interocular) / iod
            if jump > MAX_JUMP_IOD or step > MAX_SIZE_STEP:
                return BurstCheck(None, "the face jumps between frames (a cut or another person)")
        h, w = frames_bgr[0].shape[:2]
        points = np.stack([m.points for m in meshes])
        return BurstCheck(judge(points, w, h, self.thresholds))


def _roi(mesh: Mesh) -> Roi:
    return roi_from_points(mesh.points)


def turn_degrees(a: Mesh, b: Mesh) -> float:
    """Head turn (yaw and pitch, degrees) between two meshes; what a capture client checks on the device."""
    idx = list(RIGID_POINTS)
    return shape_turn(a.points[idx], b.points[idx])

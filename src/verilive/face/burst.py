"""Frames of one face -> the 3D check from motion (face/motion3d.py) on face-mesh tracks.

The first frame's face comes from CenterFace; the mesh then tracks it from frame to frame
(face/mesh.py) and is re-seeded by the detector when it loses the face. The check is skipped, with
the reason, when the frames cannot be one burst of one face: fewer than two frames with the face,
frames of different sizes, or a face that jumps between frames (another person, a cut).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import cv2
import numpy as np

from verilive.face.detector import FaceDetector
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
# Optical-flow tracks: corners inside the face (the mesh's outline shrunk by FACE_SHRINK towards its
# centre, so no background corner at the face's edge joins), kept if they come back to within
# FB_MAX_PX when tracked backwards and survive every frame; at least MIN_TRACKS of them.
FACE_SHRINK = 0.85
MAX_CORNERS = 200
FB_MAX_PX = 1.0
MIN_TRACKS = 16
LK_WINDOW = (21, 21)
LK_LEVELS = 3


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
        *,
        optical_flow: bool = False,
    ) -> None:
        self.detector = detector
        self.mesh = mesh
        self.thresholds = thresholds
        # Optical-flow tracks instead of the mesh's x, y in the homography test: measured, not adopted
        # (docs/motion3d.md, "What we tried").
        self.optical_flow = optical_flow

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
        with_face = [f for f, m in zip(frames_bgr, all_meshes, strict=True) if m is not None]
        tracks = flow_tracks(with_face, meshes) if self.optical_flow else None
        points = np.stack([m.points for m in meshes])
        return BurstCheck(judge(points, w, h, self.thresholds, tracks=tracks))


def flow_tracks(frames_bgr: list[np.ndarray], meshes: list[Mesh]) -> np.ndarray | None:
    """(frames, K, 2) optical-flow tracks of corners on the face, or None when too few survive.

    Each frame's flow starts from where the mesh's own motion (a homography between the two frames'
    rigid landmarks) puts the point, so that fast motion at a few frames per second stays within the
    pyramid's reach; the flow then follows the image, not the mesh's idea of a face."""
    gray = [cv2.cvtColor(f, cv2.COLOR_BGR2GRAY) for f in frames_bgr]
    rigid = list(RIGID_POINTS)
    hull_pts = meshes[0].points[:, :2]
    centre = hull_pts.mean(axis=0)
    hull = cv2.convexHull(((hull_pts - centre) * FACE_SHRINK + centre).astype(np.float32))
    mask = np.zeros(gray[0].shape, np.uint8)
    cv2.fillConvexPoly(mask, hull.astype(np.int32), 255)
    min_dist = max(2.0, meshes[0].interocular / 15.0)
    corners = cv2.goodFeaturesToTrack(gray[0], MAX_CORNERS, 0.005, min_dist, mask=mask)
    if corners is None or len(corners) < MIN_TRACKS:
        return None
    pts = corners.reshape(-1, 2).astype(np.float32)
    alive = np.ones(len(pts), bool)
    track = [pts.copy()]
    for k in range(1, len(gray)):
        h, _ = cv2.findHomography(meshes[k - 1].points[rigid, :2], meshes[k].points[rigid, :2], 0)
        prev = track[-1]
        guess = prev if h is None else cv2.perspectiveTransform(prev.reshape(-1, 1, 2), h).reshape(-1, 2)
        guess = guess.astype(np.float32)
        nxt, st, _ = cv2.calcOpticalFlowPyrLK(
            gray[k - 1], gray[k], prev, guess.copy(), winSize=LK_WINDOW, maxLevel=LK_LEVELS,
            flags=cv2.OPTFLOW_USE_INITIAL_FLOW,
        )  # fmt: skip
        back, st2, _ = cv2.calcOpticalFlowPyrLK(
            gray[k], gray[k - 1], nxt, prev.copy(), winSize=LK_WINDOW, maxLevel=LK_LEVELS,
            flags=cv2.OPTFLOW_USE_INITIAL_FLOW,
        )  # fmt: skip
        fb = np.linalg.norm(back - prev, axis=1)
        alive &= (st.ravel() == 1) & (st2.ravel() == 1) & (fb < FB_MAX_PX)
        track.append(nxt)
    if alive.sum() < MIN_TRACKS:
        return None
    return np.stack([t[alive] for t in track]).astype(np.float64)


def _roi(mesh: Mesh) -> Roi:
    return roi_from_points(mesh.points)


def turn_degrees(a: Mesh, b: Mesh) -> float:
    """Head turn (yaw and pitch, degrees) between two meshes; what a capture client checks on the device."""
    idx = list(RIGID_POINTS)
    return shape_turn(a.points[idx], b.points[idx])

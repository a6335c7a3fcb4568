"""Simulated flat attacks in motion: a printed photo, cut-out or paper mask moved in front of a camera.

These are *simulations* (label them so). A sheet (a real printed photo, or a live photo given a print
look) is placed in 3D at a physical scale (its face 14 cm wide), moved along a hand-held or head-worn
trajectory, and projected with a pinhole camera into 640 x 480 frames: flat sheets are exact
homographies; a folded sheet (a crease down the nose) is two planes; a bent sheet (a cylinder around the
vertical axis, 2-3 cm of sag at the face's edges) is rendered as 24 planar strips. Each frame gets a
background, exposure drift, motion blur along the face's motion, sensor noise and JPEG.

There are no real print or mask videos in any reachable source (shared/data/face/video_motion
README), so the 3D check's flat-attack figures come from these.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import cv2
import numpy as np

from common.face_attack_sim import _background, jpeg

FRAME_W, FRAME_H = 640, 480
FOCAL = 0.9 * FRAME_W  # the simulated camera: about 70 degrees across the long side
FACE_CM = 14.0
SHAPES = ("flat", "cutout", "folded", "bent")
MOTIONS = ("approach", "hand_tilt", "hand_mixed", "head_turn")


@dataclass(frozen=True)
class Burst:
    frames: list[np.ndarray]
    shape: str
    motion: str
    description: str


def _rot(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """Rotation (degrees): yaw about y, pitch about x, roll about z (x right, y down, z ahead)."""
    a, b, c = (math.radians(v) for v in (yaw, pitch, roll))
    ry = np.array([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]])
    rx = np.array([[1, 0, 0], [0, math.cos(b), -math.sin(b)], [0, math.sin(b), math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rz @ rx @ ry


def _trajectory(motion: str, n: int, rng: np.random.Generator) -> tuple[list[dict], str]:
    """Per frame: yaw, pitch, roll (deg), translation (cm) and the pivot (cm, object coordinates)."""
    t = np.linspace(0.0, 1.0, n)
    bump = np.sin(np.pi * t)  # out and back, as when following "turn, then back"
    tremor = lambda s: rng.normal(0.0, s, n)  # noqa: E731
    yaw = np.zeros(n)
    pitch = np.zeros(n)
    roll = np.zeros(n)
    tx, ty, tz = tremor(0.2), tremor(0.2), tremor(0.3)
    pivot = np.zeros(3)
    approach = np.ones(n)
    if motion == "approach":
        k = rng.uniform(1.2, 1.5)
        approach = 1.0 / (1.0 + (k - 1.0) * t)  # distance as a share of the first frame's
        yaw, pitch, roll = tremor(1.5), tremor(1.5), tremor(1.5)
        desc = f"approach x{k:.2f}"
    elif motion == "hand_tilt":
        amp = rng.uniform(10.0, 30.0) * rng.choice([-1.0, 1.0])
        axis = rng.choice(["yaw", "pitch", "both"])
        if axis in ("yaw", "both"):
            yaw = amp * bump
        if axis in ("pitch", "both"):
            pitch = 0.7 * amp * bump * rng.choice([-1.0, 1.0])
        yaw, pitch = yaw + tremor(1.0), pitch + tremor(1.0)
        pivot = np.array([0.0, rng.uniform(0.0, 15.0), rng.uniform(0.0, 5.0)])  # centre .. wrist
        desc = f"hand tilt {axis} {amp:+.0f} deg"
    elif motion == "hand_mixed":
        yaw = rng.uniform(-15, 15) * t + tremor(1.0)
        pitch = rng.uniform(-15, 15) * t + tremor(1.0)
        roll = rng.uniform(-15, 15) * t + tremor(1.0)
        tx = tx + rng.uniform(-5, 5) * t
        ty = ty + rng.uniform(-3, 3) * t
        tz = tz + rng.uniform(-12, 8) * t
        pivot = np.array([0.0, rng.uniform(0.0, 15.0), 0.0])
        desc = "hand mixed"
    elif motion == "head_turn":
        amp = rng.uniform(10.0, 30.0) * rng.choice([-1.0, 1.0])
        yaw = amp * bump + tremor(0.8)
        pitch = rng.uniform(-8, 8) * bump + tremor(0.8)
        roll = tremor(1.0)
        pivot = np.array([0.0, 2.0, rng.uniform(8.0, 11.0)])  # the neck, behind the face
        desc = f"head turn {amp:+.0f} deg"
    else:
        raise ValueError(f"unknown motion {motion!r}")
    poses = [
        {"rot": _rot(yaw[i], pitch[i], roll[i]), "t": np.array([tx[i], ty[i], tz[i]]), "pivot": pivot,
         "approach": approach[i]}
        for i in range(n)
    ]  # fmt: skip
    return poses, desc


def _surface(shape: str, rng: np.random.Generator, half_w: float) -> tuple[np.ndarray, str]:
    """Strip edges (cm, object x) and their depth z (cm, larger = further from the camera)."""
    if shape in ("flat", "cutout"):
        xs = np.array([-200.0, 200.0])
        return np.stack([xs, np.zeros(2)], axis=1), ""
    if shape == "folded":
        fold = rng.uniform(15.0, 35.0)
        xs = np.array([-200.0, 0.0, 200.0])
        z = np.abs(xs) * math.tan(math.radians(fold))
        return np.stack([xs, z], axis=1), f"fold {fold:.0f} deg"
    if shape == "bent":
        sag = rng.uniform(2.0, 3.0)
        radius = (half_w**2 + sag**2) / (2.0 * sag)
        xs = np.linspace(-min(radius * 0.99, 3 * half_w), min(radius * 0.99, 3 * half_w), 25)
        z = radius - np.sqrt(np.maximum(radius**2 - xs**2, 0.0))
        return np.stack([xs, z], axis=1), f"bent, sag {sag:.1f} cm at the face edges"
    raise ValueError(f"unknown shape {shape!r}")


def flat_burst(
    sheet: np.ndarray,
    face_box: tuple[float, float, float, float],
    rng: np.random.Generator,
    *,
    shape: str = "flat",
    motion: str = "hand_tilt",
    frames: int = 10,
) -> Burst:
    """A burst of ``frames`` 640 x 480 BGR frames of ``sheet`` (BGR uint8, the printed face at
    ``face_box`` x1, y1, x2, y2 in its pixels) moving along ``motion``."""
    h_s, w_s = sheet.shape[:2]
    x1, y1, x2, y2 = face_box
    cm_per_px = FACE_CM / max(x2 - x1, 1.0)
    cu, cv = (x1 + x2) / 2.0, (y1 + y2) / 2.0 + 0.05 * (y2 - y1)
    edges, shape_desc = _surface(shape, rng, FACE_CM / 2.0)
    poses, motion_desc = _trajectory(motion, frames, rng)
    face_frac = rng.uniform(0.25, 0.42)
    dist = FOCAL * FACE_CM / (face_frac * FRAME_W)
    off = np.array([rng.uniform(-3, 3), rng.uniform(-3, 2), 0.0])
    bg = _background(rng, FRAME_H, FRAME_W)
    alpha = np.ones((h_s, w_s), np.float32)
    if shape == "cutout":  # cut along an ellipse around the face; the room shows around it
        cut = np.zeros((h_s, w_s), np.uint8)
        axes = (int(0.62 * (x2 - x1)), int(0.75 * (y2 - y1)))
        cv2.ellipse(cut, (int(cu), int(cv)), axes, 0, 0, 360, 255, -1)
        alpha = cut.astype(np.float32) / 255.0
    gain0 = rng.uniform(0.85, 1.1)
    drift = rng.uniform(-0.12, 0.12)
    noise = rng.uniform(1.5, 4.0)
    quality = int(rng.integers(60, 92))
    k = np.array([[FOCAL, 0, FRAME_W / 2.0], [0, FOCAL, FRAME_H / 2.0], [0, 0, 1.0]])
    out: list[np.ndarray] = []
    centres = []
    for i, p in enumerate(poses):
        t = p["t"] + np.array([0.0, 0.0, dist * (p["approach"] - 1.0)])
        canvas = bg * (1.0 + rng.normal(0, 0.005))
        # Strips far first, so nearer ones cover them (painter's order).
        strips = []
        for a, b in itertools.pairwise(edges):
            u0 = cu + a[0] / cm_per_px
            u1 = cu + b[0] / cm_per_px
            lo, hi = max(u0, 0.0), min(u1, float(w_s))
            if hi <= lo:
                continue
            za = a[1] + (b[1] - a[1]) * (lo - u0) / max(u1 - u0, 1e-9)
            zb = a[1] + (b[1] - a[1]) * (hi - u0) / max(u1 - u0, 1e-9)
            src = np.array([[lo, 0], [hi, 0], [hi, h_s], [lo, h_s]], np.float64)
            obj = np.array(
                [
                    [(u - cu) * cm_per_px, (v - cv) * cm_per_px, z]
                    for (u, v), z in zip(src, [za, zb, zb, za], strict=True)
                ]
            )
            cam = (p["rot"] @ (obj - p["pivot"]).T).T + p["pivot"] + t + off + np.array([0, 0, dist])
            proj = (k @ cam.T).T
            dst = proj[:, :2] / proj[:, 2:3]
            strips.append((float(cam[:, 2].mean()), src, dst))
        strips.sort(key=lambda s: -s[0])
        for _, src, dst in strips:
            h = cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32))
            sub = np.zeros((h_s, w_s), np.float32)
            lo, hi = math.floor(src[0, 0]), math.ceil(src[1, 0])
            sub[:, lo:hi] = alpha[:, lo:hi]
            warped = cv2.warpPerspective(
                sheet.astype(np.float32), h, (FRAME_W, FRAME_H), flags=cv2.INTER_LINEAR
            )
            m = cv2.warpPerspective(sub, h, (FRAME_W, FRAME_H), flags=cv2.INTER_LINEAR)[..., None]
            canvas = canvas * (1.0 - m) + warped * m
        centre = cv2.perspectiveTransform(np.array([[[cu, cv]]], np.float64), h)[0, 0]
        centres.append(centre)
        gain = gain0 + drift * i / max(frames - 1, 1)
        f = canvas * gain
        if i:  # motion blur along the face's image motion: a third of the frame interval exposed
            d = (centres[-1] - centres[-2]) / 3.0
            length = float(np.hypot(*d))
            if length > 1.0:
                ksize = math.ceil(length) * 2 + 1
                kern = np.zeros((ksize, ksize), np.float32)
                c = ksize // 2
                e = d / max(length, 1e-9) * (length / 2.0)
                cv2.line(
                    kern,
                    (round(c - e[0]), round(c - e[1])),
                    (round(c + e[0]), round(c + e[1])),
                    1.0,
                    1,
                )
                f = cv2.filter2D(f, -1, kern / max(kern.sum(), 1e-6))
        f = f + rng.normal(0, noise, f.shape)
        out.append(jpeg(f.clip(0, 255).astype(np.uint8), quality))
    desc = f"{shape} {shape_desc}, {motion_desc}, face {face_frac:.2f} of the width, JPEG {quality}".replace(
        "  ", " "
    )
    return Burst(out, shape, motion, desc)

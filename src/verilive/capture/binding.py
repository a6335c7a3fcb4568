"""The burst bound to the still: one person, one moment, one use (docs/motion3d.md, "Binding").

Anyone with the public key can build a bundle, so a burst proves nothing by being there: an attacker
could record a head turn once and attach it to a photo of someone else. A burst vouches for the still
only when every check below holds; otherwise the capture is judged as one without a 3D burst.

- ``meta.burst.still_index`` names the burst frame recorded at the same moment as the still.
- Geometry: that frame is the still scaled down (same aspect ratio within SIZE_TOLERANCE_PX, never
  larger), and agrees with ``context.resolution``.
- Timing: ``t_ms`` rises by at least T_STEP_MIN_MS a frame, with no gap over T_GAP_MAX_MS, and spans
  T_SPAN_MIN_MS to T_SPAN_MAX_MS (the SDKs record 12 frames at 5 fps, 2.2 s, plus the still).
- Picture: the still scaled to the frame correlates with it by STILL_MIN_CORR over the whole frame and
  FACE_MIN_CORR over the face (the same frame through two JPEG encoders: 0.999 and more; a frame
  200 ms later: median 0.95 on the face; another face pasted in place: at most 0.54).
- Person: the 3D check is made only on the frames that one continuous face links to the still
  (face/burst.py, ``linked_frames``); a cut to another face leaves the turn unlinked, so unproven.

Replay (``burst_replays``): the burst's bytes are remembered, and so is how the head moved
(``pose_signature``), which a re-encoded, rescaled or slightly cropped copy keeps.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from verilive.capture.bundle import Bundle
from verilive.capture.replay import ReplayStore
from verilive.face.burst import BurstChecker, BurstTrack, linked_frames, pearson, pose_signature
from verilive.face.image import DecodedImage
from verilive.face.motion3d import Motion3D

__all__ = ["BoundBurst", "bind", "burst_replays", "timing_problems"]

SIZE_TOLERANCE_PX = 1.5
T_STEP_MIN_MS = 30
T_GAP_MAX_MS = 2_000
T_SPAN_MIN_MS = 800
T_SPAN_MAX_MS = 10_000
STILL_MIN_CORR = 0.9
FACE_MIN_CORR = 0.9
COMPARE_WIDTH = 96  # px: the whole-frame comparison, after an area resize
FACE_SIDE = 48  # px: the face comparison
FACE_PAD = 0.15  # the face box is the landmarks' box widened by this share on each side
# Near-duplicate bursts: pose signatures (every frame with a face, against the first) whose coordinates
# agree within this (degrees, tenths of an eye distance, percent of size) on 90 % of coordinates.
# Development bursts with a 3D turn re-encoded at JPEG 60, cropped by 3 % and rescaled: 95 % within
# 3.5; 233 pairs of real turns of the same person in the same clip: none within 3.89.
REPLAY_TOLERANCE = 3.5
# Only bursts with a turn get a near-duplicate key: a still head's signature is all zeros, like every
# other still head's (and a still head is never judged 3D, so it cannot pass as one anyway).
REPLAY_MIN_TURN = 8.0
REPLAY_TURN_BIN = 4.0  # degrees


@dataclass(frozen=True)
class BoundBurst:
    """What the burst proves for this still: ``problems`` empty when it is bound, and the 3D check on
    the frames continuous with the still (None when it could not be made)."""

    problems: tuple[str, ...]
    result: Motion3D | None = None
    linked: tuple[int, ...] = ()

    @property
    def bound(self) -> bool:
        return not self.problems


def still_index(bundle: Bundle) -> int | None:
    info = bundle.meta.get("burst")
    value = info.get("still_index") if isinstance(info, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def timing_problems(t_ms: Sequence[int]) -> list[str]:
    if len(t_ms) < 2:
        return ["burst has fewer than two frame times"]
    steps = [b - a for a, b in itertools.pairwise(t_ms)]
    out = []
    if min(steps) < T_STEP_MIN_MS:
        out.append(f"burst frames {min(steps)} ms apart (at least {T_STEP_MIN_MS})")
    if max(steps) > T_GAP_MAX_MS:
        out.append(f"burst gap of {max(steps)} ms (at most {T_GAP_MAX_MS})")
    span = t_ms[-1] - t_ms[0]
    if not T_SPAN_MIN_MS <= span <= T_SPAN_MAX_MS:
        out.append(f"burst spans {span} ms ({T_SPAN_MIN_MS} to {T_SPAN_MAX_MS})")
    return out


def geometry_problems(bundle: Bundle, still: DecodedImage, track: BurstTrack) -> list[str]:
    bw, bh = track.size
    out = []
    if bw > still.width + SIZE_TOLERANCE_PX or bh > still.height + SIZE_TOLERANCE_PX:
        out.append(f"burst frames {bw}x{bh} larger than the still {still.width}x{still.height}")
    if abs(bh - still.height * bw / still.width) > SIZE_TOLERANCE_PX:
        out.append(f"burst frames {bw}x{bh} are not the still {still.width}x{still.height} scaled")
    res = bundle.context.get("resolution")
    rw, rh = (res.get("width"), res.get("height")) if isinstance(res, dict) else (None, None)
    if isinstance(rw, int | float) and isinstance(rh, int | float) and rw > 0 and rh > 0:
        if abs(bh - rh * bw / rw) > SIZE_TOLERANCE_PX:
            out.append(f"burst frames {bw}x{bh} disagree with context resolution {rw:.0f}x{rh:.0f}")
    else:
        out.append("context has no resolution")
    return out


def _grey(bgr: np.ndarray, width: int) -> np.ndarray:
    h, w = bgr.shape[:2]
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    return cv2.resize(grey, (width, max(1, round(h * width / w))), interpolation=cv2.INTER_AREA).astype(
        np.float64
    )


def picture_similarity(still: np.ndarray, frame: np.ndarray, face_points: np.ndarray) -> tuple[float, float]:
    """(whole frame, face) correlation of the still scaled to ``frame``'s size with ``frame``; the
    face is the box of ``face_points`` (frame pixels) widened by FACE_PAD."""
    h, w = frame.shape[:2]
    small = cv2.resize(still, (w, h), interpolation=cv2.INTER_AREA)
    whole = pearson(_grey(small, min(COMPARE_WIDTH, w)), _grey(frame, min(COMPARE_WIDTH, w)))
    (x0, y0), (x1, y1) = face_points[:, :2].min(axis=0), face_points[:, :2].max(axis=0)
    px, py = FACE_PAD * (x1 - x0), FACE_PAD * (y1 - y0)
    a, b = max(0, int(x0 - px)), max(0, int(y0 - py))
    c, d = min(w, int(x1 + px) + 1), min(h, int(y1 + py) + 1)
    if c - a < 8 or d - b < 8:
        return whole, 0.0
    side = (FACE_SIDE, FACE_SIDE)
    fa = cv2.resize(cv2.cvtColor(small[b:d, a:c], cv2.COLOR_BGR2GRAY), side, interpolation=cv2.INTER_AREA)
    fb = cv2.resize(cv2.cvtColor(frame[b:d, a:c], cv2.COLOR_BGR2GRAY), side, interpolation=cv2.INTER_AREA)
    return whole, pearson(fa.astype(np.float64), fb.astype(np.float64))


def bind(
    bundle: Bundle,
    still: DecodedImage,
    track: BurstTrack | None,
    checker: BurstChecker,
    whole_check: Motion3D | None = None,
) -> BoundBurst:
    """Every binding check of the module docstring; the 3D check on the frames linked to the still
    (``whole_check``: the check already made on every frame with a face, reused when all are linked)."""
    index = still_index(bundle)
    if index is None:
        return BoundBurst(("meta.burst.still_index missing or not an integer",))
    if not 0 <= index < len(bundle.burst):
        return BoundBurst((f"still_index {index} outside the burst's {len(bundle.burst)} frames",))
    problems = timing_problems(bundle.burst_t_ms)
    if track is None or not track.frames:
        return BoundBurst((*problems, "burst frames unreadable"))
    problems += geometry_problems(bundle, still, track)
    pos = track.position(index)
    mesh = track.meshes[pos] if pos is not None else None
    if pos is None or mesh is None:
        return BoundBurst((*problems, "no face in the still's burst frame"))
    whole, face = picture_similarity(still.bgr, track.frames[pos], mesh.points)
    if whole < STILL_MIN_CORR or face < FACE_MIN_CORR:
        problems.append(f"still is not burst frame {index} (correlation {whole:.2f}, face {face:.2f})")
    linked = tuple(sorted(linked_frames(track, pos)))
    faces = tuple(i for i, m in enumerate(track.meshes) if m is not None)
    # Every frame with a face is linked (the usual case): the check already made is the one wanted.
    reuse = whole_check is not None and linked == faces
    result = whole_check if reuse else checker.judge_positions(track, linked)
    if result is None:
        problems.append(f"only {len(linked)} frames continuous with the still's face")
    return BoundBurst(tuple(problems), result, linked)


def replay_keys(track: BurstTrack) -> list[tuple[str, list[str], list[float]]]:
    """The near-duplicate keys of a burst: its pose signature over every frame with a face, under two
    families of buckets, each (namespace, buckets to probe with the first its own, signature): the
    frame count with the frame of the largest turn, and the frame count with the size of that turn
    in REPLAY_TURN_BIN degree bins, each with its neighbours as probes. A copy whose largest turn
    moved by a frame or two still meets its original in the other family. None without a turn."""
    faces = [i for i, m in enumerate(track.meshes) if m is not None]
    sig = pose_signature(track, faces)
    if sig is None:
        return []
    turns = np.abs(np.asarray(sig, dtype=np.float64).reshape(-1, 5)[:, :2]).max(axis=1)
    if float(turns.max()) < REPLAY_MIN_TURN:
        return []
    n, peak = len(turns), int(np.argmax(turns))
    size = int(turns.max() // REPLAY_TURN_BIN)
    # The side of the turn is not in a bucket: where the head mostly nods, its small yaw flips sign.
    return [
        ("burst_pose", [f"{n}:{p}" for p in (peak, peak - 1, peak + 1) if 0 <= p < n], sig),
        ("burst_turn", [f"{n}:{b}" for b in (size, size - 1, size + 1) if b >= 0], sig),
    ]


def burst_replays(
    bundle: Bundle,
    track: BurstTrack | None,
    replay: ReplayStore,
    ttl_s: float,
    now_s: float,
) -> list[str]:
    """SUSPICIOUS_ACTIVITY findings: a burst whose bytes, or whose head movement, was seen in an
    earlier capture within ``ttl_s``. Both are recorded as a side effect."""
    out = []
    h = hashlib.sha256()
    for frame in bundle.burst:
        h.update(len(frame).to_bytes(4, "big"))
        h.update(frame)
    if replay.remember("burst", h.hexdigest(), ttl_s, now=now_s):
        out.append("burst seen in an earlier capture")
    keys = replay_keys(track) if track is not None else []
    # Every family is recorded, even when the bytes were seen, so that every copy's movement is kept.
    seen = [replay.similar(ns, buckets, sig, REPLAY_TOLERANCE, ttl_s, now=now_s) for ns, buckets, sig in keys]
    if any(seen) and not out:
        out.append("burst movement seen in an earlier capture (a re-encoded copy)")
    return out


def describe(bound: BoundBurst) -> list[str]:
    """Log details for UNTRUSTED_CONTENT (server side only)."""
    return [f"burst not bound to the still: {p}" for p in bound.problems]

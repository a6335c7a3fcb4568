"""Capture liveness decisions: a decrypted bundle -> validation -> six detectors -> score (no HTTP).

The rules, thresholds and the score are documented in docs/capture.md; this module is the reference
implementation. One call of :meth:`CaptureEngine.check` does, in order:

1. remember the capture (nonce, device) for SUSPICIOUS_ACTIVITY, before anything can fail;
2. the face engine's public assessment of the image (``FaceEngine.assess``: decode, validation,
   liveness log-odds), the same path as the face service's /check_liveness;
3. refuse images under ``min_image_side`` (shorter side) as IMAGE_TOO_SMALL, then the face validation
   codes with the capture spec's messages;
4. the six rejection detectors (``verilive.capture.detectors``);
5. the 3D check from motion on the bundle's burst, when it has one (docs/motion3d.md), made only
   when the burst is bound to the still (capture/binding.py: the still is the burst frame at
   ``still_index``, one continuous face, plausible timing and sizes) and only on the frames that
   face links to the still; a burst seen before (its bytes or its movement) is SUSPICIOUS_ACTIVITY.
   A face judged flat, or a burst that is not bound, gets the face score FLAT_SCORE; with
   ``motion3d`` "require" (the default), so does any capture whose burst is missing or not judged 3D;
6. score = face log-odds (or a fixed prior) - a penalty per rejection reason, capped below 0 when
   anything is rejected, so that a rejection always gives probability < 0.5.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from verilive.capture.binding import BoundBurst, bind, burst_replays, describe
from verilive.capture.bundle import BURST_MAX_FRAME_PIXELS, Bundle
from verilive.capture.detectors import (
    Reason,
    Windows,
    corrupted_payload,
    sdk_integrity,
    suspicious_activity,
    untrusted_content,
    untrusted_device,
    untrusted_environment,
)
from verilive.capture.jpeg import jpeg_info
from verilive.capture.placement import FoundFace, locate_faces
from verilive.capture.replay import ReplayStore
from verilive.capture.sdk_allowlist import SdkAllowList
from verilive.capture.useragent import platform_of
from verilive.config import Settings
from verilive.face.engine import FLAT_SCORE, ErrorCode, FaceEngine
from verilive.face.image import DecodedImage
from verilive.face.pipelines import DEFAULT_PIPELINE, Domain
from verilive.numeric import sigmoid

__all__ = [
    "MESSAGES",
    "CaptureConfig",
    "CaptureDecision",
    "CaptureEngine",
    "CaptureInputError",
    "CaptureValidationError",
    "Reason",
    "combine",
]


# The spec's message for each image validation code (capture-liveness.md, Errors). The codes are the
# face engine's; FACE_TOO_SMALL_RELATIVE is the capture spec's message for a FACE_TOO_SMALL whose
# face is large enough in pixels but small for the image.
MESSAGES: dict[str, str] = {
    ErrorCode.FACE_NOT_FOUND: "Face not found",
    ErrorCode.FACE_CROPPED: "Face is cropped",
    ErrorCode.FACE_IS_OCCLUDED: "Face is occluded",
    ErrorCode.TOO_MANY_FACES: "Too many faces detected",
    ErrorCode.FACE_ANGLE_TOO_LARGE: "Facial out-of-plane rotation angle is extremely large",
    ErrorCode.FACE_TOO_SMALL: "Absolute face size is too small",
    "FACE_TOO_SMALL_RELATIVE": "Relative face size is too small",
    ErrorCode.FACE_CLOSE_TO_BORDER: "Face is too close to one or more borders",
    ErrorCode.IMAGE_TOO_SMALL: "Image too small to be processed",
}
# The validation codes a capture answer passes through (every other error is UNKNOWN there).
VALIDATION_CODES = frozenset(str(c) for c in MESSAGES if c != "FACE_TOO_SMALL_RELATIVE")

# Score: without the face model the capture starts from this prior (sigmoid(3) = 0.95).
PRIOR_SCORE = 3.0
# Each rejection reason subtracts this much log-odds ...
REASON_PENALTY = 3.0
# ... and any rejection caps the score here (probability <= sigmoid(-2) = 0.12).
REJECTED_SCORE_CAP = -2.0


@dataclass(frozen=True)
class CaptureConfig:
    """Every threshold that is a setting (README configuration table)."""

    timestamp_window_s: float = 300.0
    device_captures_per_minute: int = 10
    image_hash_ttl_s: float = 30 * 86400.0
    min_image_side: int = 480
    face_liveness: bool = True
    pipeline: str = DEFAULT_PIPELINE
    # The 3D check on the bundle's burst: "off", "use" (a flat face or a burst not bound to the still
    # is a spoof; no burst or no verdict changes nothing) or "require" (only a bound burst judged 3D
    # keeps the face score).
    motion3d: Literal["off", "use", "require"] = "require"

    @classmethod
    def from_settings(cls, s: Settings) -> CaptureConfig:
        return cls(
            timestamp_window_s=s.capture_timestamp_window_s,
            device_captures_per_minute=s.capture_device_captures_per_minute,
            image_hash_ttl_s=s.capture_image_hash_ttl_s,
            min_image_side=s.capture_min_image_side,
            face_liveness=s.capture_face_liveness,
            motion3d=s.capture_motion3d,
        )

    @property
    def windows(self) -> Windows:
        return Windows(self.timestamp_window_s, self.device_captures_per_minute, self.image_hash_ttl_s)

    @property
    def nonce_ttl_s(self) -> float:
        return self.windows.nonce_ttl_s


class CaptureInputError(Exception):
    """The bundle decrypted but its image cannot be read: the spec's 'Failed to read a meta data'."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class CaptureValidationError(Exception):
    """An image validation code with the spec's message (400 in 2.1.0)."""

    def __init__(self, code: str, message: str, width: int | None, height: int | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.width = width
        self.height = height


@dataclass
class CaptureDecision:
    probability: float
    score: float
    rejection: list[str]
    face_probability: float | None
    face_score: float | None
    # Reason -> what the detector saw. For logs and tests only: never sent to the capture client.
    findings: dict[str, list[str]] = field(default_factory=dict)
    width: int = 0
    height: int = 0
    quality: float | None = None
    latency_ms: float = 0.0
    # The 3D check's verdict on the burst ("3d", "flat", "cannot_judge", or "unbound" for a burst not
    # bound to the still); None when it did not run.
    motion3d: str | None = None


# The verdict of a burst that does not vouch for the still (capture/binding.py).
UNBOUND = "unbound"


def motion3d_fold(score: float, verdict: str | None, mode: str) -> float:
    """The face score after the 3D check: FLAT_SCORE at most for a flat face or an unbound burst, and
    under "require" for anything but a 3D verdict (no burst, a corrupted one, a person who did not
    turn, a mask)."""
    if mode == "off":
        return score
    if verdict in ("flat", UNBOUND) or (mode == "require" and verdict != "3d"):
        return min(score, FLAT_SCORE)
    return score


@dataclass(frozen=True)
class BurstOutcome:
    """The burst's part in a decision: the verdict for the fold and the BI record, and findings."""

    verdict: str | None = None
    bound: BoundBurst | None = None
    replays: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()


def combine(face_score: float | None, reasons: Sequence[str]) -> tuple[float, float]:
    """(score, probability): face log-odds (or the prior) minus the penalties, capped on rejection."""
    score = (PRIOR_SCORE if face_score is None else face_score) - REASON_PENALTY * len(reasons)
    if reasons:
        score = min(score, REJECTED_SCORE_CAP)
    return score, sigmoid(score)


class CaptureEngine:
    """Thread-safe when its face engine and replay store are (both are)."""

    def __init__(
        self,
        face: FaceEngine,
        replay: ReplayStore,
        allowlist: SdkAllowList,
        config: CaptureConfig = CaptureConfig(),
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.face = face
        self.replay = replay
        self.allowlist = allowlist
        self.config = config
        self.clock_ms = clock_ms

    def close(self) -> None:
        self.replay.close()

    def check(self, bundle: Bundle, now_ms: int | None = None) -> CaptureDecision:
        """Decide on one decrypted bundle. Raises CaptureInputError (image unreadable) or
        CaptureValidationError (a validation code); every other outcome is a decision."""
        t0 = time.perf_counter()
        now_ms = self.clock_ms() if now_ms is None else now_ms
        windows = self.config.windows
        findings: dict[str, list[str]] = {}
        # Recorded before validation: a replayed bundle stays a replay even if it failed before.
        findings[Reason.SUSPICIOUS_ACTIVITY] = suspicious_activity(bundle, self.replay, windows, now_ms)
        domain = Domain.DESKTOP if platform_of(bundle.environment) == "DESKTOP" else Domain.GENERAL
        assessment = self.face.assess(
            bundle.image, self.config.pipeline, domain, score=self.config.face_liveness
        )
        image = assessment.image
        if image is None:
            detail = assessment.rejection.message if assessment.rejection else "unreadable image"
            raise CaptureInputError(detail)
        if min(image.width, image.height) < self.config.min_image_side:
            raise CaptureValidationError(
                ErrorCode.IMAGE_TOO_SMALL, MESSAGES[ErrorCode.IMAGE_TOO_SMALL], image.width, image.height
            )
        if assessment.rejection is not None:
            r = assessment.rejection
            relative = r.code == ErrorCode.FACE_TOO_SMALL and r.relative_only
            message = MESSAGES.get("FACE_TOO_SMALL_RELATIVE" if relative else r.code, r.message)
            raise CaptureValidationError(str(r.code), message, image.width, image.height)
        burst = self._burst(bundle, image, now_ms)
        verdict = burst.verdict
        face_score = assessment.score
        if face_score is not None:
            face_score = motion3d_fold(face_score, verdict, self.config.motion3d)
        elif motion3d_fold(PRIOR_SCORE, verdict, self.config.motion3d) != PRIOR_SCORE:
            face_score = FLAT_SCORE  # no face model, but the 3D check decided
        face_probability = sigmoid(face_score) if face_score is not None else None
        jpeg = jpeg_info(bundle.image)
        findings[Reason.UNTRUSTED_ENVIRONMENT] = untrusted_environment(bundle)
        findings[Reason.UNTRUSTED_DEVICE] = untrusted_device(bundle)
        findings[Reason.SDK_INTEGRITY_VIOLATION] = sdk_integrity(bundle, self.allowlist)
        findings[Reason.UNTRUSTED_CORRUPTED_PAYLOAD] = corrupted_payload(bundle, image, jpeg)
        findings[Reason.UNTRUSTED_CONTENT] = untrusted_content(
            bundle, image, jpeg, self.replay, windows, now_ms, face_probability
        ) + list(burst.untrusted)
        findings[Reason.SUSPICIOUS_ACTIVITY] += burst.replays
        reasons = [r.value for r in Reason if findings.get(r)]
        score, probability = combine(face_score, reasons)
        return CaptureDecision(
            probability=probability,
            score=score,
            rejection=reasons,
            face_probability=face_probability,
            face_score=face_score,
            findings={k: v for k, v in findings.items() if v},
            width=image.width,
            height=image.height,
            quality=assessment.quality,
            latency_ms=1000.0 * (time.perf_counter() - t0),
            motion3d=verdict,
        )

    def placement(self, data: bytes) -> tuple[int, int, list[FoundFace]]:
        """Faces in a small preview frame, for the SDK's hints; decides and stores nothing."""
        return locate_faces(self.face.detector, data)

    def _burst(self, bundle: Bundle, image: DecodedImage, now_ms: int) -> BurstOutcome:
        """The burst bound to the still and its 3D check (capture/binding.py); the verdict is None
        when there is no usable burst (none, or frames dropped as corrupted) or the check is off."""
        mode = self.config.motion3d
        if mode == "off":
            return BurstOutcome()
        if not bundle.burst:
            missing = "no burst (required)" if mode == "require" else None
            return BurstOutcome(untrusted=(missing,) if missing else ())
        checker = self.face.burst
        if checker is None:  # the face engine was built without the 3D check
            return BurstOutcome(untrusted=("the 3D check is not available",) if mode == "require" else ())
        check = checker.check_encoded(bundle.burst, min(self.face.max_pixels, BURST_MAX_FRAME_PIXELS))
        bound = bind(bundle, image, check.track, checker, check.result)
        replays = burst_replays(
            bundle, check.track, self.replay, self.config.image_hash_ttl_s, now_ms / 1000.0
        )
        if not bound.bound:
            return BurstOutcome(UNBOUND, bound, tuple(replays), tuple(describe(bound)))
        verdict = bound.result.verdict.value if bound.result is not None else None
        untrusted = (
            (f"burst judged {verdict} (3d required)",) if mode == "require" and verdict != "3d" else ()
        )
        return BurstOutcome(verdict, bound, tuple(replays), untrusted)


def summarise(findings: Mapping[str, list[str]]) -> str:
    """One log line's worth of findings (server logs only)."""
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in findings.items())

"""Capture liveness decisions: a decrypted bundle -> validation -> six detectors -> score (no HTTP).

The rules, thresholds and the score are documented in docs/capture.md; this module is the reference
implementation. One call of :meth:`CaptureEngine.check` does, in order:

1. decode the image (once; the face engine reuses the pixels);
2. refuse images under ``min_height`` (shorter side) as IMAGE_TOO_SMALL;
3. the face service's validation (FACE_NOT_FOUND ... FACE_IS_OCCLUDED);
4. face liveness (MiniFASNet log-odds) when enabled;
5. the six rejection detectors, each a small pure function returning its findings;
6. score = face log-odds (or a fixed prior) - a penalty per rejection reason, capped below 0 when
   anything is rejected, so that a rejection always gives probability < 0.5.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import cv2
import numpy as np
from PIL import Image

from verilive.capture.bundle import Bundle
from verilive.capture.replay import ReplayStore
from verilive.capture.sdk_allowlist import SdkAllowList
from verilive.config import Settings
from verilive.face.engine import ErrorCode, FaceEngine, ImageResult, sigmoid
from verilive.face.image import DecodedImage, ImageError, decode_image
from verilive.face.pipelines import DEFAULT_PIPELINE, Domain

__all__ = [
    "MESSAGES",
    "CaptureConfig",
    "CaptureDecision",
    "CaptureEngine",
    "CaptureInputError",
    "CaptureValidationError",
    "Reason",
]


class Reason(StrEnum):
    """The spec's rejection reasons, in the order they are reported."""

    SUSPICIOUS_ACTIVITY = "SUSPICIOUS_ACTIVITY"
    UNTRUSTED_ENVIRONMENT = "UNTRUSTED_ENVIRONMENT"
    UNTRUSTED_DEVICE = "UNTRUSTED_DEVICE"
    SDK_INTEGRITY_VIOLATION = "SDK_INTEGRITY_VIOLATION"
    UNTRUSTED_CORRUPTED_PAYLOAD = "UNTRUSTED_CORRUPTED_PAYLOAD"
    UNTRUSTED_CONTENT = "UNTRUSTED_CONTENT"


# The spec's message for each image validation code (capture-liveness.md, Errors).
MESSAGES: dict[str, str] = {
    "FACE_NOT_FOUND": "Face not found",
    "FACE_CROPPED": "Face is cropped",
    "FACE_IS_OCCLUDED": "Face is occluded",
    "TOO_MANY_FACES": "Too many faces detected",
    "FACE_ANGLE_TOO_LARGE": "Facial out-of-plane rotation angle is extremely large",
    "FACE_TOO_SMALL": "Absolute face size is too small",
    "FACE_TOO_SMALL_RELATIVE": "Relative face size is too small",
    "FACE_CLOSE_TO_BORDER": "Face is too close to one or more borders",
    "IMAGE_TOO_SMALL": "Image too small to be processed",
}

# Score: without the face model the capture starts from this prior (sigmoid(3) = 0.95).
PRIOR_SCORE = 3.0
# Each rejection reason subtracts this much log-odds ...
REASON_PENALTY = 3.0
# ... and any rejection caps the score here (probability <= sigmoid(-2) = 0.12).
REJECTED_SCORE_CAP = -2.0

# SUSPICIOUS_ACTIVITY
BURST_WINDOW_S = 60.0
# UNTRUSTED_CORRUPTED_PAYLOAD: the photo against the image, both reduced to this width.
PHOTO_COMPARE_WIDTH = 64
PHOTO_MIN_CORRELATION = 0.9
PHOTO_MAX_MEAN_ABS_DIFF = 20.0
PHOTO_MAX_ASPECT_DIFF = 0.03


@dataclass(frozen=True)
class CaptureConfig:
    """Every threshold that is a setting (README configuration table)."""

    timestamp_window_s: float = 300.0
    burst_limit: int = 10
    image_hash_ttl_s: float = 30 * 86400.0
    min_height: int = 480
    face_liveness: bool = True
    pipeline: str = DEFAULT_PIPELINE

    @classmethod
    def from_settings(cls, s: Settings) -> CaptureConfig:
        return cls(
            timestamp_window_s=s.capture_timestamp_window_s,
            burst_limit=s.capture_burst_limit,
            image_hash_ttl_s=s.capture_image_hash_ttl_s,
            min_height=s.capture_min_height,
            face_liveness=s.capture_face_liveness,
        )

    @property
    def nonce_ttl_s(self) -> float:
        # A bundle is accepted while |now - timestamp| <= window, a span of 2 x window; its nonce
        # must be remembered that long after it is first seen.
        return 2.0 * self.timestamp_window_s


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


# ---------------------------------------------------------------------------------------- helpers


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def ua_os(ua: str) -> str | None:
    """The operating system a user agent claims: ios, ipados, android, windows, macos, chromeos,
    linux, or None (not a browser user agent: every browser's starts with "Mozilla/")."""
    if not ua.startswith("Mozilla/"):
        return None
    u = ua.lower()
    if "iphone" in u or "ipod" in u:
        return "ios"
    if "ipad" in u:
        return "ipados"
    if "android" in u:
        return "android"
    if "windows" in u:
        return "windows"
    if "cros" in u:
        return "chromeos"
    if "macintosh" in u or "mac os x" in u:
        return "macos"
    if "linux" in u or "x11" in u:
        return "linux"
    return None


def ua_is_phone(ua: str) -> bool:
    u = ua.lower()
    return "iphone" in u or "ipod" in u or ("android" in u and "mobile" in u)


def platform_family(platform: str) -> str | None:
    p = platform.strip().lower()
    if not p:
        return None
    if p.startswith("win"):
        return "windows"
    if p.startswith("mac"):
        return "macos"
    if p in ("iphone", "ipod", "iphone simulator", "ipod simulator"):
        return "ios"
    if p in ("ipad", "ipad simulator"):
        return "ipados"
    if p.startswith("linux") or p == "android" or p.startswith("arm"):
        return "linux"
    if "cros" in p or "chrome os" in p:
        return "chromeos"
    return "other"


# navigator.platform values each user-agent OS can honestly report. iPadOS Safari reports
# "MacIntel" (desktop mode); Android and ChromeOS report "Linux ..." strings.
_UA_PLATFORMS: dict[str, frozenset[str]] = {
    "ios": frozenset({"ios"}),
    "ipados": frozenset({"ipados", "macos"}),
    "android": frozenset({"linux"}),
    "windows": frozenset({"windows"}),
    "macos": frozenset({"macos"}),
    "chromeos": frozenset({"linux", "chromeos"}),
    "linux": frozenset({"linux"}),
}
# userAgentData.platform values (Chromium) for each user-agent OS.
_UA_DATA_PLATFORMS: dict[str, frozenset[str]] = {
    "ios": frozenset({"ios"}),
    "ipados": frozenset({"ios"}),
    "android": frozenset({"android"}),
    "windows": frozenset({"windows"}),
    "macos": frozenset({"macos"}),
    "chromeos": frozenset({"chrome os", "chromeos", "chromium os"}),
    "linux": frozenset({"linux"}),
}


# ----------------------------------------------------------------------------- SUSPICIOUS_ACTIVITY


def device_fingerprint(bundle: Bundle) -> str:
    """A stable hash of what the device claims about itself; bursts are counted per fingerprint."""
    env, ctx = bundle.environment, bundle.context
    claims = {
        k: env.get(k)
        for k in (
            "client",
            "userAgent",
            "platform",
            "screen",
            "hardwareConcurrency",
            "deviceMemory",
            "languages",
            "timezone",
        )
    }
    claims["camera_label"] = ctx.get("camera_label")
    text = json.dumps(claims, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def suspicious_activity(bundle: Bundle, replay: ReplayStore, config: CaptureConfig, now_ms: int) -> list[str]:
    """A nonce seen before, a capture time outside the window, more than ``burst_limit`` captures
    of one device fingerprint in the last minute. Records the nonce and the capture."""
    out = []
    if replay.remember("nonce", bundle.nonce, config.nonce_ttl_s, now=now_ms / 1000.0):
        out.append("nonce seen before")
    skew_s = (now_ms - bundle.timestamp_ms) / 1000.0
    if abs(skew_s) > config.timestamp_window_s:
        out.append(f"capture time {skew_s:+.0f} s from server time")
    n = replay.count("device", device_fingerprint(bundle), BURST_WINDOW_S, now=now_ms / 1000.0)
    if n > config.burst_limit:
        out.append(f"{n} captures from one device in {BURST_WINDOW_S:.0f} s")
    return out


# --------------------------------------------------------------------------- UNTRUSTED_ENVIRONMENT

HEADLESS_UA = re.compile(r"headless|phantomjs|slimerjs|htmlunit|selenium|puppeteer|playwright|electron", re.I)
# Camera labels of virtual, fake and loopback cameras (and Chromium's own fake device).
VIRTUAL_CAMERA = re.compile(
    r"fake|virtual|\bobs\b|manycam|v4l2loopback|loopback|dummy|snap camera|xsplit|splitcam|e2esoft|"
    r"\bvcam\b|camtwist|webcamoid|akvcam|droidcam|iriun|epoccam|\bndi\b|mmhmm|youcam",
    re.I,
)
# A camera named like a file path or a video file: a browser fed from a file (Chromium names its
# file-backed fake camera after the file).
FILE_CAMERA = re.compile(r"^(/|[a-z]:\\|file:)|\.(y4m|mjpe?g|mp4|webm|avi|mkv|mov)\b", re.I)
EMULATOR = re.compile(
    r"android sdk built for|sdk_gphone|\bemulator\b|generic_x86|goldfish|ranchu|genymotion|bluestacks|"
    r"\bnox\b|memu|ldplayer|simulator",
    re.I,
)


def untrusted_environment(bundle: Bundle) -> list[str]:
    """Automation (webdriver, headless user agents, automation globals), virtual cameras, emulators."""
    env, ctx = bundle.environment, bundle.context
    out = []
    if env.get("webdriver") is True:
        out.append("navigator.webdriver is true")
    ua = _text(env.get("userAgent"))
    if HEADLESS_UA.search(ua):
        out.append("automation user agent")
    automation = env.get("automation")
    flags: list[str] = []
    if isinstance(automation, dict):
        flags = sorted(str(k) for k, v in automation.items() if v not in (False, None, 0, "", [], {}))
    elif isinstance(automation, list):
        flags = sorted(str(v) for v in automation if v)
    if flags:
        out.append("automation flags: " + ", ".join(flags[:8]))
    label = _text(ctx.get("camera_label"))
    track = _dict(ctx.get("track_settings"))
    camera_text = " ".join([label, _text(track.get("deviceId")), _text(track.get("groupId"))])
    if VIRTUAL_CAMERA.search(label):
        out.append(f"virtual camera label {label[:60]!r}")
    elif FILE_CAMERA.search(label.strip()):
        out.append("camera label is a file path")
    elif VIRTUAL_CAMERA.search(camera_text):
        out.append("virtual camera device")
    device_text = " ".join(
        [ua, _text(env.get("platform")), json.dumps(env.get("userAgentData"), default=str), label]
    )
    if EMULATOR.search(device_text):
        out.append("emulator signs")
    return out


# ------------------------------------------------------------------------------- UNTRUSTED_DEVICE


def untrusted_device(bundle: Bundle) -> list[str]:
    """Device claims that contradict each other (user agent, platform, userAgentData, touch,
    screen). Only browser claims are checked: the Python client makes no device claims."""
    env = bundle.environment
    out: list[str] = []
    ua = _text(env.get("userAgent"))
    claimed = ua_os(ua)
    browser = env.get("client") == "browser" or claimed is not None
    if not browser:
        return out
    if claimed is None:
        out.append("browser without a recognisable user agent")
        return out
    fam = platform_family(_text(env.get("platform")))
    if fam is not None and fam not in _UA_PLATFORMS[claimed]:
        out.append(f"user agent says {claimed}, platform says {env.get('platform')!r}")
    uad = env.get("userAgentData")
    if isinstance(uad, dict):
        u = ua.lower()
        if "firefox/" in u or ("safari/" in u and "chrome/" not in u and "chromium/" not in u):
            out.append("userAgentData from a browser that has none")
        up = _text(uad.get("platform")).strip().lower()
        if up and up not in _UA_DATA_PLATFORMS[claimed]:
            out.append(f"userAgentData.platform {uad.get('platform')!r} against user agent {claimed}")
        mobile = uad.get("mobile")
        if isinstance(mobile, bool) and mobile != ua_is_phone(ua) and claimed != "android":
            # Android tablets say mobile=false with an "Android" UA that lacks "Mobile"; elsewhere
            # the two must agree.
            out.append("userAgentData.mobile contradicts the user agent")
        if claimed == "android" and isinstance(mobile, bool) and mobile != ("mobile" in u):
            out.append("userAgentData.mobile contradicts the user agent")
    touch_points = _num(env.get("maxTouchPoints"))
    if ua_is_phone(ua) and touch_points is not None and touch_points < 1:
        out.append("phone user agent without touch")
    screen = env.get("screen")
    if isinstance(screen, dict):
        w, h = _num(screen.get("width")), _num(screen.get("height"))
        dpr = _num(screen.get("devicePixelRatio"))
        if w is not None and h is not None:
            short, long = sorted((w, h))
            if short < 200 or long > 16384:
                out.append(f"impossible screen {w:.0f}x{h:.0f}")
            elif ua_is_phone(ua) and short > 1100:
                # CSS pixels: the widest phones (foldables, open) are well under 1100.
                out.append(f"phone user agent with a {w:.0f}x{h:.0f} screen")
        if dpr is not None and not 0.25 <= dpr <= 8:
            out.append(f"impossible devicePixelRatio {dpr}")
    return out


# ------------------------------------------------------------------------ SDK_INTEGRITY_VIOLATION


def sdk_integrity(bundle: Bundle, allowlist: SdkAllowList) -> list[str]:
    return allowlist.problems(bundle.sdk)


# -------------------------------------------------------------------- UNTRUSTED_CORRUPTED_PAYLOAD


def _grey_small(bgr: np.ndarray, width: int) -> np.ndarray:
    h, w = bgr.shape[:2]
    size = (width, max(1, round(h * width / w)))
    # Grey first: the area resize then handles one channel instead of three.
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA).astype(np.float32)


def photo_problems(image: DecodedImage, photo: bytes) -> list[str]:
    """The photo must be the image scaled down: same aspect ratio, same picture."""
    if not photo:
        return ["photo missing"]
    try:
        p = decode_image(photo, max_pixels=image.width * image.height + 1)
    except ImageError:
        return ["photo is not a readable image or is larger than the image"]
    if p.width > image.width or p.height > image.height:
        return ["photo larger than the image"]
    if abs(p.width / p.height - image.width / image.height) > PHOTO_MAX_ASPECT_DIFF * (
        image.width / image.height
    ):
        return ["photo aspect ratio differs from the image"]
    width = min(PHOTO_COMPARE_WIDTH, p.width)
    a = _grey_small(image.bgr, width)
    b = _grey_small(p.bgr, width)
    if a.shape != b.shape:
        b = cv2.resize(b, (a.shape[1], a.shape[0]), interpolation=cv2.INTER_AREA)
    mad = float(np.mean(np.abs(a - b)))
    da, db = a - a.mean(), b - b.mean()
    denom = float(np.sqrt((da * da).sum() * (db * db).sum()))
    corr = float((da * db).sum() / denom) if denom > 1e-6 else (1.0 if mad < 1.0 else 0.0)
    if corr < PHOTO_MIN_CORRELATION or mad > PHOTO_MAX_MEAN_ABS_DIFF:
        return [f"photo is not the image scaled down (correlation {corr:.2f}, mean difference {mad:.0f})"]
    return []


def corrupted_payload(bundle: Bundle, image: DecodedImage, jpeg: JpegInfo) -> list[str]:
    """Inner digest/size mismatches, an image that is not a JPEG, a context resolution other than
    the image's, a photo that is not the image scaled down."""
    out = list(bundle.integrity_problems)
    if not jpeg.is_jpeg:
        out.append(f"image is {image.format}, not JPEG")
    res = _dict(bundle.context.get("resolution"))
    rw, rh = _num(res.get("width")), _num(res.get("height"))
    if rw is None or rh is None:
        out.append("context has no resolution")
    elif (rw, rh) not in ((image.width, image.height), (image.height, image.width)):
        out.append(f"context resolution {rw:.0f}x{rh:.0f} but image {image.width}x{image.height}")
    out += photo_problems(image, bundle.photo)
    return out


# ----------------------------------------------------------------------------- UNTRUSTED_CONTENT

# Names of editing software, looked for in EXIF Software/ProcessingSoftware, XMP CreatorTool and
# softwareAgent, and JPEG comments (never in the raw XMP packet, whose namespaces say "adobe").
EDITORS = re.compile(
    r"photoshop|adobe|lightroom|gimp|snapseed|pixelmator|affinity|paint\.net|facetune|faceapp|picsart|"
    r"photopea|canva|meitu|vsco|luminar|capture one|darktable|rawtherapee|imagemagick|graphicsmagick|"
    r"photoscape|acdsee|corel|paintshop|inkscape|krita|fotor|befunky|remini|airbrush|youcam",
    re.I,
)
_XMP_HEADER = b"http://ns.adobe.com/xap/1.0/\x00"
_XMP_TOOLS = re.compile(rb"(?:CreatorTool|softwareAgent)(?:=\"|>)([^\"<]{1,200})")
_EXIF_SOFTWARE_TAGS = (0x0131, 0x000B)  # Software, ProcessingSoftware


@dataclass(frozen=True)
class JpegInfo:
    is_jpeg: bool
    progressive: bool = False
    # Software names the file declares (EXIF, XMP, comments).
    software: tuple[str, ...] = ()
    photoshop_block: bool = False  # APP13 "Photoshop 3.0" (image resources of Adobe software)
    adobe_marker: bool = False  # APP14 "Adobe" (Adobe encoders; browsers and cameras do not write it)


def _exif_software(app1: bytes) -> list[str]:
    try:
        exif = Image.Exif()
        exif.load(app1)
        return [str(exif[t]).strip("\x00 ") for t in _EXIF_SOFTWARE_TAGS if exif.get(t)]
    except Exception:  # malformed EXIF is common and not our concern here
        return []


def jpeg_info(data: bytes) -> JpegInfo:
    """Walk the JPEG segments up to the scan: frame type and what software wrote it. Never raises."""
    if len(data) < 4 or data[:2] != b"\xff\xd8":
        return JpegInfo(False)
    pos, n = 2, len(data)
    progressive = photoshop = adobe = False
    software: list[str] = []
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        body = data[pos + 4 : pos + 2 + length]
        if marker in (0xC2, 0xC6, 0xCA, 0xCE):
            progressive = True
        elif marker == 0xE1 and body.startswith(b"Exif\x00"):
            software += _exif_software(body)
        elif marker == 0xE1 and body.startswith(_XMP_HEADER):
            software += [m.decode("utf-8", "replace") for m in _XMP_TOOLS.findall(body)]
        elif marker == 0xED and body.startswith(b"Photoshop 3.0"):
            photoshop = True
        elif marker == 0xEE and body.startswith(b"Adobe"):
            adobe = True
        elif marker == 0xFE:
            software.append(body[:200].decode("latin-1"))
        elif marker == 0xDA:  # start of scan: no more headers
            break
        pos += 2 + length
    return JpegInfo(True, progressive, tuple(software), photoshop, adobe)


def editing_signs(jpeg: JpegInfo) -> list[str]:
    out = []
    editors = sorted({m.group(0).lower() for s in jpeg.software if (m := EDITORS.search(s))})
    if editors:
        out.append("written by editing software (" + ", ".join(editors) + ")")
    if jpeg.photoshop_block or jpeg.adobe_marker:
        out.append("Adobe/Photoshop segments")
    if jpeg.progressive:
        out.append("progressive JPEG (camera streams are encoded baseline)")
    return out


def untrusted_content(
    bundle: Bundle,
    image: DecodedImage,
    jpeg: JpegInfo,
    replay: ReplayStore,
    config: CaptureConfig,
    now_ms: int,
    face_probability: float | None,
) -> list[str]:
    """Signs that the image did not come from the camera stream: editing software metadata, a
    progressive (re-saved) JPEG, an image seen in an earlier capture, and the face liveness model
    calling it an attack."""
    out = editing_signs(jpeg)
    digest = hashlib.sha256(bundle.image).hexdigest()
    if replay.remember("image", digest, config.image_hash_ttl_s, now=now_ms / 1000.0):
        out.append("image seen in an earlier capture")
    if face_probability is not None and face_probability < 0.5:
        out.append(f"face liveness {face_probability:.2f}")
    return out


# ------------------------------------------------------------------------------------- the engine


def platform_of(bundle: Bundle) -> str:
    """The BI platform: IOS, ANDROID, DESKTOP (a desktop browser) or UNKNOWN (e.g. Python kiosks)."""
    claimed = ua_os(_text(bundle.environment.get("userAgent")))
    if claimed in ("ios", "ipados"):
        return "IOS"
    if claimed == "android":
        return "ANDROID"
    if claimed is not None:
        return "DESKTOP"
    return "UNKNOWN"


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

    def _validate(self, image: DecodedImage, domain: Domain) -> Any:
        """The face engine's checked face, or CaptureValidationError with the spec's message."""
        if min(image.width, image.height) < self.config.min_height:
            raise CaptureValidationError(
                "IMAGE_TOO_SMALL", MESSAGES["IMAGE_TOO_SMALL"], image.width, image.height
            )
        checked = self.face.validate(image, domain)
        if not isinstance(checked, ImageResult):
            return checked
        code = str(checked.error_code)
        message = MESSAGES.get(code, checked.error or code)
        if code == ErrorCode.FACE_TOO_SMALL and self._too_small_relative_only(image, domain):
            message = MESSAGES["FACE_TOO_SMALL_RELATIVE"]
        raise CaptureValidationError(code, message, image.width, image.height)

    def _too_small_relative_only(self, image: DecodedImage, domain: Domain) -> bool:
        # The face engine has one code for both cases; the spec has two messages. Only on this
        # rare path is the face detected again to tell them apart.
        faces = self.face.detector.detect(image.bgr)
        if not faces:
            return False
        v = self.face.validation.for_domain(domain)
        f = faces[0]
        absolute = f.height < v.min_face_px or f.interpupillary_distance < v.min_interpupillary_px
        return not absolute

    def check(self, bundle: Bundle, now_ms: int | None = None) -> CaptureDecision:
        """Decide on one decrypted bundle. Raises CaptureInputError (image unreadable) or
        CaptureValidationError (a validation code); every other outcome is a decision."""
        t0 = time.perf_counter()
        now_ms = self.clock_ms() if now_ms is None else now_ms
        try:
            image = decode_image(bundle.image, self.face.max_pixels)
        except ImageError as exc:
            raise CaptureInputError(exc.message) from None
        findings: dict[str, list[str]] = {}
        # Recorded before validation: a replayed bundle stays a replay even if it failed before.
        findings[Reason.SUSPICIOUS_ACTIVITY] = suspicious_activity(bundle, self.replay, self.config, now_ms)
        domain = Domain.DESKTOP if platform_of(bundle) == "DESKTOP" else Domain.GENERAL
        checked = self._validate(image, domain)
        face_score = face_probability = None
        if self.config.face_liveness:
            face_score = float(self.face.raw_scores([checked], self.config.pipeline)[0])
            face_probability = sigmoid(face_score)
        jpeg = jpeg_info(bundle.image)
        findings[Reason.UNTRUSTED_ENVIRONMENT] = untrusted_environment(bundle)
        findings[Reason.UNTRUSTED_DEVICE] = untrusted_device(bundle)
        findings[Reason.SDK_INTEGRITY_VIOLATION] = sdk_integrity(bundle, self.allowlist)
        findings[Reason.UNTRUSTED_CORRUPTED_PAYLOAD] = corrupted_payload(bundle, image, jpeg)
        findings[Reason.UNTRUSTED_CONTENT] = untrusted_content(
            bundle, image, jpeg, self.replay, self.config, now_ms, face_probability
        )
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
            quality=checked.quality,
            latency_ms=1000.0 * (time.perf_counter() - t0),
        )


def summarise(findings: Mapping[str, list[str]]) -> str:
    """One log line's worth of findings (server logs only)."""
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in findings.items())

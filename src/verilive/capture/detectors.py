"""The six rejection detectors of a capture, each a small pure function returning its findings.

A finding is a short sentence for server logs; a detector with findings puts its reason in the
answer (docs/capture.md has the rules). They read the decrypted bundle, the decoded image and the
JPEG headers; the two that remember things (SUSPICIOUS_ACTIVITY, UNTRUSTED_CONTENT) write to the
replay store.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import cv2
import numpy as np

from verilive.capture.bundle import Bundle
from verilive.capture.jpeg import JpegInfo, editing_signs
from verilive.capture.replay import ReplayStore
from verilive.capture.sdk_allowlist import SdkAllowList
from verilive.capture.useragent import UA_DATA_PLATFORMS, UA_PLATFORMS, platform_family, ua_is_phone, ua_os
from verilive.face.image import DecodedImage, ImageError, decode_image

__all__ = [
    "Reason",
    "Windows",
    "corrupted_payload",
    "device_fingerprint",
    "photo_problems",
    "sdk_integrity",
    "suspicious_activity",
    "untrusted_content",
    "untrusted_device",
    "untrusted_environment",
]


class Reason(StrEnum):
    """The spec's rejection reasons, in the order they are reported."""

    SUSPICIOUS_ACTIVITY = "SUSPICIOUS_ACTIVITY"
    UNTRUSTED_ENVIRONMENT = "UNTRUSTED_ENVIRONMENT"
    UNTRUSTED_DEVICE = "UNTRUSTED_DEVICE"
    SDK_INTEGRITY_VIOLATION = "SDK_INTEGRITY_VIOLATION"
    UNTRUSTED_CORRUPTED_PAYLOAD = "UNTRUSTED_CORRUPTED_PAYLOAD"
    UNTRUSTED_CONTENT = "UNTRUSTED_CONTENT"


@dataclass(frozen=True)
class Windows:
    """The time rules of the replay-store detectors (settings; see CaptureConfig)."""

    timestamp_window_s: float = 300.0
    device_captures_per_minute: int = 10
    image_hash_ttl_s: float = 30 * 86400.0

    @property
    def nonce_ttl_s(self) -> float:
        # A bundle is accepted while |now - timestamp| <= window, a span of 2 x window; its nonce
        # must be remembered that long after it is first seen.
        return 2.0 * self.timestamp_window_s


# SUSPICIOUS_ACTIVITY
BURST_WINDOW_S = 60.0
# UNTRUSTED_CORRUPTED_PAYLOAD: the photo against the image, both reduced to this width.
PHOTO_COMPARE_WIDTH = 64
PHOTO_MIN_CORRELATION = 0.9
PHOTO_MAX_MEAN_ABS_DIFF = 20.0
PHOTO_MAX_ASPECT_DIFF = 0.03


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


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


def suspicious_activity(bundle: Bundle, replay: ReplayStore, config: Windows, now_ms: int) -> list[str]:
    """A nonce seen before, a capture time outside the window, more than
    ``device_captures_per_minute`` captures of one device fingerprint in the last minute. Records the
    nonce and the capture."""
    out = []
    if replay.remember("nonce", bundle.nonce, config.nonce_ttl_s, now=now_ms / 1000.0):
        out.append("nonce seen before")
    skew_s = (now_ms - bundle.timestamp_ms) / 1000.0
    if abs(skew_s) > config.timestamp_window_s:
        out.append(f"capture time {skew_s:+.0f} s from server time")
    n = replay.count("device", device_fingerprint(bundle), BURST_WINDOW_S, now=now_ms / 1000.0)
    if n > config.device_captures_per_minute:
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
    if fam is not None and fam not in UA_PLATFORMS[claimed]:
        out.append(f"user agent says {claimed}, platform says {env.get('platform')!r}")
    uad = env.get("userAgentData")
    if isinstance(uad, dict):
        u = ua.lower()
        if "firefox/" in u or ("safari/" in u and "chrome/" not in u and "chromium/" not in u):
            out.append("userAgentData from a browser that has none")
        up = _text(uad.get("platform")).strip().lower()
        if up and up not in UA_DATA_PLATFORMS[claimed]:
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


def untrusted_content(
    bundle: Bundle,
    image: DecodedImage,
    jpeg: JpegInfo,
    replay: ReplayStore,
    config: Windows,
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

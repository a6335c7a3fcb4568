"""Simulated presentation attacks made from a bona fide face photo (numpy and OpenCV only).

These are *simulations*: a photo of a printed photo or of a screen is approximated by image
operations on the original, with seeded randomness so every run builds the same suite. They model
the cues a real recapture leaves (dot pattern, paper, perspective, gamut; pixel grid, bezel,
glare, colour cast, defocus), not the full physics of a print or a display.

* :func:`print_attack` -- a printed photo held in front of the camera: gamut compression and
  desaturation (ink on paper cannot reach screen colours), halftone dots or error diffusion, paper
  texture, a white paper margin, a perspective warp, a background and a hand holding the sheet.
* :func:`replay_attack` -- the photo shown on a phone or monitor and filmed: RGB sub-pixel grid
  resampled by the camera (moiré), a white-balance / colour cast and raised black level, a black
  screen border and device frame, a specular glare blob, recapture blur and JPEG.
* :func:`camera_augment` -- mild changes a real camera makes to a bona fide photo (JPEG quality,
  brightness, slight blur, a 640-pixel frame), for the bona fide side.
* :func:`paper_mask_attack`, :func:`cutout_attack`, :func:`mannequin_attack` -- a printed face worn
  as a paper mask over another photograph's head (at its pose; eye holes, a nose fold, a cut edge and
  its shadow, gloss), cut out and held up by a hand, or on a bald mannequin head. Their print look
  (:class:`PaperLook`) is measured on real prints (train.face_pad_data), not guessed.

Every function takes a BGR uint8 image and a :class:`numpy.random.Generator` and returns a BGR
uint8 image plus a short description of the random choices made.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

__all__ = [
    "DEFAULT_LOOK",
    "FRAME_LONG",
    "FRAME_SHORT",
    "PaperLook",
    "camera_augment",
    "cutout_attack",
    "jpeg",
    "mannequin_attack",
    "paper_mask_attack",
    "print_attack",
    "render_print",
    "replay_attack",
]

# The camera frame every attack ends in: 640x480, in the orientation of the source photo.
FRAME_LONG, FRAME_SHORT = 640, 480


def jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """Round trip through JPEG at ``quality``."""
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError("JPEG encoding failed")
    out = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    assert out is not None
    return out


def _frame_size(img: np.ndarray) -> tuple[int, int]:
    """(width, height) of the camera frame, portrait when the source is portrait."""
    h, w = img.shape[:2]
    return (FRAME_SHORT, FRAME_LONG) if h > w else (FRAME_LONG, FRAME_SHORT)


def _fit(img: np.ndarray, long_side: int) -> np.ndarray:
    h, w = img.shape[:2]
    s = long_side / max(h, w)
    interp = cv2.INTER_AREA if s < 1 else cv2.INTER_CUBIC
    return cv2.resize(img, (max(1, round(w * s)), max(1, round(h * s))), interpolation=interp)


def _smooth_noise(rng: np.random.Generator, h: int, w: int, cells: int) -> np.ndarray:
    """Low-frequency noise in [-1, 1]: a coarse random grid upsampled smoothly."""
    g = rng.uniform(-1, 1, (max(2, cells * h // max(h, w)), max(2, cells * w // max(h, w)))).astype(
        np.float32
    )
    return cv2.resize(g, (w, h), interpolation=cv2.INTER_CUBIC).clip(-1, 1)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A plain indoor-ish background: a random colour with a gradient and smooth blotches."""
    base = rng.uniform(40, 200, 3).astype(np.float32)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    grad = ((xx / w - 0.5) * np.cos(angle) + (yy / h - 0.5) * np.sin(angle))[..., None]
    blotch = _smooth_noise(rng, h, w, 6)[..., None]
    bg = base + 60 * grad + 25 * blotch + rng.normal(0, 3, (h, w, 3)).astype(np.float32)
    return bg.clip(0, 255)


def _camera_finish(
    rng: np.random.Generator, img: np.ndarray, blur: float, noise: float, quality: int
) -> np.ndarray:
    """Defocus, sensor noise and JPEG: the second camera that films the attack."""
    f = img.astype(np.float32)
    if blur > 0:
        f = cv2.GaussianBlur(f, (0, 0), blur)
    f += rng.normal(0, noise, f.shape).astype(np.float32)
    return jpeg(f.clip(0, 255).astype(np.uint8), quality)


def _warp_into(
    content: np.ndarray,
    frame: np.ndarray,
    rng: np.random.Generator,
    cover: float,
    tilt: float,
    mask_value: float = 1.0,
    interpolation: int = cv2.INTER_LINEAR,
) -> tuple[np.ndarray, np.ndarray]:
    """Warp ``content`` onto ``frame`` (float32) as a plane seen in perspective.

    The plane covers about ``cover`` of the frame's size (aspect kept), centred with a small random
    shift; ``tilt`` is the largest corner displacement as a fraction of the plane size. Returns the
    composite and the warped coverage mask (H, W, 1).
    """
    fh, fw = frame.shape[:2]
    ch, cw = content.shape[:2]
    s = cover * min(fw / cw, fh / ch)
    pw, ph = cw * s, ch * s
    cx = fw / 2 + rng.uniform(-0.04, 0.04) * fw
    cy = fh / 2 + rng.uniform(-0.04, 0.04) * fh
    dst = np.array(
        [
            [cx - pw / 2, cy - ph / 2],
            [cx + pw / 2, cy - ph / 2],
            [cx + pw / 2, cy + ph / 2],
            [cx - pw / 2, cy + ph / 2],
        ],
        np.float32,
    )
    dst += rng.uniform(-tilt, tilt, (4, 2)).astype(np.float32) * np.array([pw, ph], np.float32)
    src = np.array([[0, 0], [cw, 0], [cw, ch], [0, ch]], np.float32)
    m = cv2.getPerspectiveTransform(src, dst)
    warped = cv2.warpPerspective(content.astype(np.float32), m, (fw, fh), flags=interpolation)
    mask = cv2.warpPerspective(
        np.full((ch, cw), mask_value, np.float32), m, (fw, fh), flags=cv2.INTER_LINEAR
    )[..., None]
    return frame * (1 - mask) + warped * mask, mask


# ------------------------------------------------------------------ print


def _gamut(img: np.ndarray, saturation: float, black: float, white: float) -> np.ndarray:
    """Ink on paper: less chroma, black ink is not black, paper white is not white."""
    f = img.astype(np.float32)
    grey = f.mean(axis=2, keepdims=True)
    f = grey + saturation * (f - grey)
    return black + f * (white - black) / 255.0


def _halftone(img: np.ndarray, rng: np.random.Generator, period: float) -> np.ndarray:
    """Clustered-dot halftone: one rotated cosine screen per channel (as CMY screens are rotated)."""
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty_like(img, dtype=np.float32)
    base = rng.uniform(0, 90)
    for c, extra in enumerate((15.0, 75.0, 0.0)):
        a = np.deg2rad(base + extra)
        u = xx * np.cos(a) + yy * np.sin(a)
        v = -xx * np.sin(a) + yy * np.cos(a)
        screen = 0.5 + 0.5 * np.cos(2 * np.pi * u / period) * np.cos(2 * np.pi * v / period)
        out[..., c] = np.where(img[..., c] / 255.0 > screen, 255.0, 0.0)
    return out


def _error_diffusion(img: np.ndarray) -> np.ndarray:
    """Binary error diffusion, column by column (all rows at once, so it runs in numpy): each
    pixel's quantisation error goes to the next column, 1/4 up, 1/2 level, 1/4 down."""
    f = img.astype(np.float32).copy()
    w = f.shape[1]
    out = np.empty_like(f)
    for x in range(w):
        col = f[:, x]
        q = np.where(col >= 127.5, 255.0, 0.0).astype(np.float32)
        out[:, x] = q
        if x + 1 < w:
            err = col - q
            nxt = f[:, x + 1]
            nxt += 0.5 * err
            nxt[1:] += 0.25 * err[:-1]
            nxt[:-1] += 0.25 * err[1:]
    return out


def _hand(frame: np.ndarray, rng: np.random.Generator, paper_mask: np.ndarray) -> np.ndarray:
    """A skin-coloured thumb and fingers gripping the sheet at its left or right edge."""
    h, w = frame.shape[:2]
    cols = np.flatnonzero(paper_mask[..., 0].max(axis=0) > 0.5)
    if cols.size == 0:
        return frame
    left = bool(rng.integers(2))
    edge = int(cols[0] if left else cols[-1])
    skin = np.array([rng.uniform(90, 150), rng.uniform(130, 175), rng.uniform(170, 225)], np.float32)
    layer = np.zeros((h, w), np.float32)
    y = int(rng.uniform(0.55, 0.8) * h)
    tw, th = int(0.09 * w), int(0.06 * h)
    thumb_x = edge + (tw // 2 if left else -tw // 2)
    cv2.ellipse(layer, (thumb_x, y), (tw, th), float(rng.uniform(-20, 20)), 0, 360, 1.0, -1)
    # The palm and other fingers sit outside the sheet.
    outside = edge - 2 * tw if left else edge + 2 * tw
    cv2.ellipse(layer, (outside, y + th), (2 * tw, 4 * th), 0, 0, 360, 1.0, -1)
    layer = cv2.GaussianBlur(layer, (0, 0), 2.0)[..., None]
    shade = 1.0 + 0.15 * _smooth_noise(rng, h, w, 4)[..., None]
    return frame * (1 - layer) + (skin * shade) * layer


def print_attack(
    img: np.ndarray, rng: np.random.Generator, method: str = "halftone"
) -> tuple[np.ndarray, str]:
    """A printed photo of ``img`` filmed by a camera; ``method`` is "halftone" or "diffusion"."""
    fw, fh = _frame_size(img)
    # The print is rendered at about twice the camera's pixel density, so the camera averages
    # several dots per pixel (what a real lens does to a 150-300 lpi print).
    paper = _fit(img, int(2.2 * FRAME_LONG))
    sat = rng.uniform(0.45, 0.8)
    black, white = rng.uniform(20, 45), rng.uniform(215, 240)
    inked = _gamut(paper, sat, black, white)
    if method == "halftone":
        period = rng.uniform(3.0, 5.0)
        dots = _halftone(inked, rng, period)
        detail = f"halftone period {period:.1f}px"
    elif method == "diffusion":
        dots = _error_diffusion(inked)
        detail = "error diffusion"
    else:
        raise ValueError(f"unknown print method {method!r}")
    # Ink dots print with the paper's white and the ink's black, then bleed a little.
    dots = black + dots * (white - black) / 255.0
    dots = cv2.GaussianBlur(dots, (0, 0), rng.uniform(0.6, 1.0))
    ph, pw = dots.shape[:2]
    texture = 1.0 + 0.03 * _smooth_noise(rng, ph, pw, 40)[..., None] + rng.normal(0, 0.015, (ph, pw, 1))
    dots = dots * texture.astype(np.float32)
    margin = rng.uniform(0.04, 0.08)
    mh, mw = int(margin * ph), int(margin * pw)
    sheet = cv2.copyMakeBorder(dots, mh, mh, mw, mw, cv2.BORDER_CONSTANT, value=(white,) * 3)
    frame = _background(rng, fh, fw)
    cover = rng.uniform(0.88, 1.0)
    tilt = rng.uniform(0.02, 0.07)
    frame, mask = _warp_into(sheet, frame, rng, cover, tilt, interpolation=cv2.INTER_AREA)
    frame = _hand(frame, rng, mask)
    # Room light falls unevenly on the sheet.
    light = 1.0 + rng.uniform(0.05, 0.2) * _smooth_noise(rng, fh, fw, 3)[..., None]
    frame = frame * light
    blur, q = rng.uniform(0.3, 1.0), int(rng.integers(80, 93))
    out = _camera_finish(rng, frame, blur, rng.uniform(1.5, 3.5), q)
    return out, f"{detail}, saturation {sat:.2f}, cover {cover:.2f}, tilt {tilt:.2f}, jpeg {q}"


# ------------------------------------------------------------------ replay


def _pixel_grid(img: np.ndarray, k: int, gap: float) -> np.ndarray:
    """Each source pixel becomes k x k sensor-visible sub-pixels: R, G, B vertical stripes and a
    dark line between pixels (what a macro photo of an LCD shows)."""
    big = np.repeat(np.repeat(img.astype(np.float32), k, axis=0), k, axis=1)
    h, w = big.shape[:2]
    stripe = (np.arange(w) % k) * 3 // k  # 0, 1, 2 = which sub-pixel column
    mask = np.zeros((h, w, 3), np.float32)
    for c_bgr, sub in ((2, 0), (1, 1), (0, 2)):  # R stripe first, then G, then B
        mask[:, stripe == sub, c_bgr] = 3.0
    dark = np.ones((h, w, 1), np.float32)
    dark[np.arange(h) % k == k - 1] *= 1 - gap
    dark[:, np.arange(w) % k == k - 1] *= 1 - gap
    # The camera's exposure makes up for the light lost in the gaps.
    return big * mask * (dark / dark.mean())


def replay_attack(img: np.ndarray, rng: np.random.Generator, framed: bool = True) -> tuple[np.ndarray, str]:
    """``img`` shown on a screen and filmed. ``framed``: the screen's black border and the device
    frame are in view; otherwise the screen fills the camera frame (a close-up)."""
    fw, fh = _frame_size(img)
    # The displayed picture, at the screen's own resolution.
    screen_long = int(rng.uniform(0.45, 0.7) * FRAME_LONG)
    shown = _fit(img, screen_long).astype(np.float32)
    # White balance towards blue, raised black level, a different gamma.
    cast = np.array([rng.uniform(1.05, 1.2), rng.uniform(0.97, 1.05), rng.uniform(0.8, 0.93)], np.float32)
    gamma = rng.uniform(0.85, 1.15)
    black = rng.uniform(8, 25)
    shown = black + (255 - black) * (shown / 255.0) ** gamma * cast
    k = int(rng.integers(3, 5))
    gap = rng.uniform(0.2, 0.45)
    screen = _pixel_grid(shown.clip(0, 255), k, gap)
    if framed:
        # Black glass border around the active area, then the device body.
        sh, sw = screen.shape[:2]
        b = int(rng.uniform(0.02, 0.05) * max(sh, sw))
        screen = cv2.copyMakeBorder(screen, b, b, b, b, cv2.BORDER_CONSTANT, value=(8, 8, 8))
        body = rng.uniform(20, 70)
        d = int(rng.uniform(0.015, 0.03) * max(sh, sw))
        screen = cv2.copyMakeBorder(screen, d, d, d, d, cv2.BORDER_CONSTANT, value=(body,) * 3)
        cover = rng.uniform(0.88, 0.98)
    else:
        cover = rng.uniform(1.02, 1.1)  # the screen edge is outside the camera frame
    frame = _background(rng, fh, fw)
    tilt = rng.uniform(0.01, 0.05)
    # INTER_LINEAR samples the sub-pixel grid without averaging it away: the beat between the
    # screen's pixel pitch and the camera's is the moiré pattern.
    frame, _ = _warp_into(screen, frame, rng, cover, tilt, interpolation=cv2.INTER_LINEAR)
    # Specular glare: a bright soft ellipse from a lamp or window reflected by the glass.
    yy, xx = np.mgrid[0:fh, 0:fw].astype(np.float32)
    gx, gy = rng.uniform(0.1, 0.9) * fw, rng.uniform(0.1, 0.9) * fh
    rx, ry = rng.uniform(0.06, 0.2) * fw, rng.uniform(0.06, 0.2) * fh
    glare_strength = rng.uniform(0.25, 0.7)
    glare = np.exp(-(((xx - gx) / rx) ** 2 + ((yy - gy) / ry) ** 2))[..., None]
    frame = frame + glare_strength * glare * (270 - frame)
    blur, q = rng.uniform(0.8, 1.8), int(rng.integers(70, 91))
    out = _camera_finish(rng, frame, blur, rng.uniform(2.0, 4.0), q)
    desc = (
        f"{'framed' if framed else 'close-up'}, grid {k}px gap {gap:.2f}, cast B/G/R "
        f"{cast[0]:.2f}/{cast[1]:.2f}/{cast[2]:.2f}, glare {glare_strength:.2f}, blur {blur:.1f}, jpeg {q}"
    )
    return out, desc


# ------------------------------------------------------------------ bona fide


def camera_augment(img: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Mild, camera-like changes to a bona fide photo: a 640-pixel frame (half the time), a
    brightness change of up to +-12 %, a slight blur (half the time) and JPEG quality 70-95."""
    out = img
    parts = []
    if rng.random() < 0.5:
        out = _fit(out, FRAME_LONG)
        parts.append("640px")
    gain = rng.uniform(0.88, 1.12)
    f = out.astype(np.float32) * gain
    parts.append(f"brightness x{gain:.2f}")
    if rng.random() < 0.5:
        sigma = rng.uniform(0.5, 1.0)
        f = cv2.GaussianBlur(f, (0, 0), sigma)
        parts.append(f"blur {sigma:.1f}")
    q = int(rng.integers(70, 96))
    parts.append(f"jpeg {q}")
    return jpeg(f.clip(0, 255).astype(np.uint8), q), ", ".join(parts)


# ------------------------------------------------------------------ masks, cut-outs, mannequins
#
# No public mask or cut-out data may be used for training (docs/face-eval.md), so these attacks are
# composited from real photographs: the face of one photograph (the "source"), printed, worn over or
# held in front of another (the "target"). The print's colour and contrast are not guessed: each
# rendering draws its ink levels and chroma from a real print in pad_feni_sfas (:class:`PaperLook`,
# measured by train.face_pad_data on the prints of the training folds).


@dataclass(frozen=True)
class PaperLook:
    """What one real print looks like on camera, measured on its face crop: ``chroma_ratio`` = its
    mean chroma over the median chroma of live faces, ``black`` and ``white`` its 1st and 99th
    luminance percentiles, ``sharpness`` its Laplacian std over the live median."""

    chroma_ratio: float
    black: float
    white: float
    sharpness: float

    def __post_init__(self) -> None:
        if not (0.0 <= self.black < self.white <= 255.0) or self.chroma_ratio < 0 or self.sharpness <= 0:
            raise ValueError(f"implausible paper look {self}")


# Used when no measured looks are given (tests): the medians over the 411 real prints of pad_feni_sfas.
DEFAULT_LOOK = PaperLook(chroma_ratio=0.79, black=38.0, white=179.0, sharpness=0.42)


def _similarity(src_pts: np.ndarray, dst_pts: np.ndarray) -> np.ndarray:
    m, _ = cv2.estimateAffinePartial2D(
        np.asarray(src_pts, np.float32), np.asarray(dst_pts, np.float32), method=cv2.LMEDS
    )
    if m is None:
        raise ValueError("landmarks do not define a similarity transform")
    return m


def render_print(face: np.ndarray, rng: np.random.Generator, look: PaperLook) -> np.ndarray:
    """A face image (BGR, float32 or uint8) as it looks printed and filmed: the chroma, ink black and
    paper white of a real print, a print process (halftone, error diffusion or continuous-tone photo
    paper), paper grain, and the real print's softness."""
    f = face.astype(np.float32)
    lum = f.mean(axis=2, keepdims=True)
    # Chroma relative to this face's own: live faces vary, so the ratio (not an absolute) transfers.
    sat = float(np.clip(look.chroma_ratio * rng.uniform(0.85, 1.15), 0.0, 1.3))
    f = lum + sat * (f - lum)
    lo, hi = np.percentile(f.mean(axis=2), [1, 99])
    f = look.black + (f - lo) * (look.white - look.black) / max(hi - lo, 1.0)
    process = rng.choice(["halftone", "diffusion", "photo"], p=[0.35, 0.15, 0.5])
    if process != "photo":
        # Dots at about twice the crop's pixel density, so the camera averages a few per pixel.
        big = cv2.resize(f.clip(0, 255), None, fx=2.0, fy=2.0, interpolation=cv2.INTER_CUBIC)
        dots = _halftone(big, rng, rng.uniform(2.5, 4.5)) if process == "halftone" else _error_diffusion(big)
        dots = look.black + dots * (look.white - look.black) / 255.0
        dots = cv2.GaussianBlur(dots, (0, 0), rng.uniform(0.6, 1.0))
        f = cv2.resize(dots, (f.shape[1], f.shape[0]), interpolation=cv2.INTER_AREA)
    h, w = f.shape[:2]
    grain = 1.0 + 0.03 * _smooth_noise(rng, h, w, 60)[..., None] + rng.normal(0, 0.012, (h, w, 1))
    f = f * grain.astype(np.float32)
    # A real print's softness relative to live skin (below 1 = softer): blur to match it.
    if look.sharpness < 1.0:
        f = cv2.GaussianBlur(f, (0, 0), float(np.clip((1.0 / look.sharpness - 1.0) * 1.2, 0.3, 2.5)))
    return f.clip(0, 255)


def _face_ellipse(lm: np.ndarray, grow: float) -> tuple[tuple[float, float], tuple[float, float], float]:
    """Centre, semi-axes and angle (degrees) of an ellipse over a face from its 5 landmarks."""
    lm = np.asarray(lm, np.float64)
    eyes = (lm[0] + lm[1]) / 2.0
    mouth = (lm[3] + lm[4]) / 2.0
    d = max(float(np.hypot(*(lm[1] - lm[0]))), 0.9 * float(np.hypot(*(mouth - eyes))), 1.0)
    angle = float(np.degrees(np.arctan2(lm[1][1] - lm[0][1], lm[1][0] - lm[0][0])))
    centre = eyes + 0.45 * (mouth - eyes)
    return (float(centre[0]), float(centre[1])), (grow * 1.05 * d, grow * 1.45 * d), angle


def _printed_face(
    source: np.ndarray,
    source_lm: np.ndarray,
    dst_lm: np.ndarray,
    size: tuple[int, int],
    rng: np.random.Generator,
    look: PaperLook,
    max_grow: float,
) -> tuple[np.ndarray, np.ndarray, tuple[tuple[float, float], tuple[float, float], float]]:
    """``source``'s face printed (:func:`render_print`) and aligned to ``dst_lm`` in a frame of ``size``
    (w, h); the filled face ellipse (grown by a random 1..``max_grow``) as a 0/1 mask; that ellipse."""
    w, h = size
    m = _similarity(source_lm, dst_lm)
    printed = render_print(cv2.warpAffine(source, m, (w, h), borderMode=cv2.BORDER_REFLECT), rng, look)
    centre, axes, angle = _face_ellipse(dst_lm, rng.uniform(1.0, max_grow))
    mask = np.zeros((h, w), np.float32)
    cv2.ellipse(
        mask, (round(centre[0]), round(centre[1])), (round(axes[0]), round(axes[1])), angle, 0, 360, 1.0, -1
    )
    return printed, mask, (centre, axes, angle)


def _shade_plane(rng: np.random.Generator, h: int, w: int, strength: float) -> np.ndarray:
    """Light on a flat sheet: a linear gradient in a random direction (no 3-D shading)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    g = (xx / w - 0.5) * np.cos(a) + (yy / h - 0.5) * np.sin(a)
    return (1.0 + strength * g)[..., None]


def paper_mask_attack(
    target: np.ndarray,
    target_lm: np.ndarray,
    source: np.ndarray,
    source_lm: np.ndarray,
    rng: np.random.Generator,
    look: PaperLook = DEFAULT_LOOK,
) -> tuple[np.ndarray, str]:
    """A paper mask of ``source``'s face worn over ``target``'s head, at the target's pose.

    The printed face is aligned to the target's landmarks; around it stay the target's real hair, ears
    and neck. Random extras: eye holes (the target's real eyes show through), a vertical fold along
    the nose (the two halves catch different light), a visible paper edge with its shadow, gloss.
    """
    h, w = target.shape[:2]
    printed, mask, ellipse = _printed_face(source, source_lm, target_lm, (w, h), rng, look, 1.25)
    centre, axes, angle = ellipse
    parts = []
    lm = np.asarray(target_lm, np.float64)
    ipd = max(float(np.hypot(*(lm[1] - lm[0]))), 1.0)
    holes = np.zeros((h, w), np.float32)
    if rng.random() < 0.5:
        for eye in lm[:2]:
            cv2.ellipse(
                holes,
                (round(eye[0]), round(eye[1])),
                (round(0.26 * ipd), round(0.13 * ipd)),
                angle,
                0,
                360,
                1.0,
                -1,
            )
        parts.append("eye holes")
    # Feathered by a pixel: a cut edge is sharp, the camera's lens is not.
    cut = cv2.GaussianBlur(mask * (1 - holes), (0, 0), 0.8)[..., None]
    light = target.astype(np.float32).mean() / max(printed.mean(), 1.0)
    printed = printed * float(np.clip(light * rng.uniform(0.85, 1.1), 0.6, 1.6))
    printed = printed * _shade_plane(rng, h, w, rng.uniform(0.05, 0.3))
    if rng.random() < 0.5:
        # Folded along the nose line: one half turned towards the light, the other away.
        eyes, mouth = (lm[0] + lm[1]) / 2.0, (lm[3] + lm[4]) / 2.0
        nx, ny = mouth[1] - eyes[1], -(mouth[0] - eyes[0])
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        side = np.sign((xx - lm[2][0]) * nx + (yy - lm[2][1]) * ny)[..., None]
        fold = rng.uniform(0.06, 0.2)
        printed = printed * (1.0 + fold * side)
        parts.append(f"nose fold {fold:.2f}")
    if rng.random() < 0.4:
        gx, gy = centre[0] + rng.uniform(-0.5, 0.5) * axes[0], centre[1] + rng.uniform(-0.5, 0.5) * axes[1]
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        sheen = np.exp(-(((xx - gx) / (0.5 * axes[0])) ** 2 + ((yy - gy) / (0.4 * axes[1])) ** 2))[..., None]
        printed = printed + rng.uniform(0.15, 0.45) * sheen * (255 - printed)
        parts.append("gloss")
    out = target.astype(np.float32)
    if rng.random() < 0.6:
        # The sheet stands off the face: a soft shadow just outside its edge, and its white cut edge.
        ring = cv2.GaussianBlur(mask, (0, 0), max(1.0, 0.04 * ipd))[..., None]
        out = out * (1 - rng.uniform(0.2, 0.45) * ring * (1 - mask[..., None]))
        edge = cv2.morphologyEx(mask, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))[..., None]
        out = out * (1 - edge) + edge * rng.uniform(170, 235)
        parts.append("edge")
    out = out * (1 - cut) + printed * cut
    q = int(rng.integers(75, 95))
    out = _camera_finish(rng, out, rng.uniform(0.2, 0.8), rng.uniform(1.0, 3.0), q)
    return out, ", ".join(parts) or "plain"


def cutout_attack(
    background: np.ndarray,
    background_lm: np.ndarray | None,
    source: np.ndarray,
    source_lm: np.ndarray,
    rng: np.random.Generator,
    look: PaperLook = DEFAULT_LOOK,
) -> tuple[np.ndarray, str]:
    """A printed face cut out of its photo and held up by a hand, in front of the target's own face
    (``background_lm`` given: scaled to cover it) or in front of a room (``background_lm`` None)."""
    h, w = background.shape[:2]
    if background_lm is not None:
        dst_lm = np.asarray(background_lm, np.float64)
        dst_lm = dst_lm.mean(axis=0) + (dst_lm - dst_lm.mean(axis=0)) * rng.uniform(1.0, 1.25)
    else:
        ipd = rng.uniform(0.12, 0.2) * min(h, w)
        cx, cy = rng.uniform(0.4, 0.6) * w, rng.uniform(0.4, 0.55) * h
        canon = np.array([[-0.5, -0.45], [0.5, -0.45], [0.0, 0.1], [-0.4, 0.6], [0.4, 0.6]])
        dst_lm = np.array([cx, cy]) + canon * ipd
    # Held by hand: a small roll and a slight perspective instead of the head's pose.
    roll = np.deg2rad(rng.uniform(-12, 12))
    rot = np.array([[np.cos(roll), -np.sin(roll)], [np.sin(roll), np.cos(roll)]])
    c = dst_lm.mean(axis=0)
    dst_lm = c + (dst_lm - c) @ rot.T
    m = _similarity(source_lm, dst_lm)
    printed = render_print(cv2.warpAffine(source, m, (w, h), borderMode=cv2.BORDER_REFLECT), rng, look)
    centre, axes, angle = _face_ellipse(dst_lm, rng.uniform(1.1, 1.4))
    sheet = np.zeros((h, w), np.float32)
    shape = "oval" if rng.random() < 0.6 else "rectangle"
    if shape == "oval":
        cv2.ellipse(
            sheet,
            (round(centre[0]), round(centre[1])),
            (round(axes[0]), round(axes[1])),
            angle,
            0,
            360,
            1.0,
            -1,
        )
    else:
        box = cv2.boxPoints(((centre[0], centre[1]), (2.1 * axes[0], 2.0 * axes[1]), angle))
        cv2.fillConvexPoly(sheet, box.astype(np.int32), 1.0)
    tilt = rng.uniform(0.0, 0.06) * max(axes)
    src4 = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    dst4 = src4 + rng.uniform(-tilt, tilt, (4, 2)).astype(np.float32)
    p = cv2.getPerspectiveTransform(src4, dst4)
    printed = cv2.warpPerspective(printed, p, (w, h), borderMode=cv2.BORDER_REFLECT)
    sheet = cv2.warpPerspective(sheet, p, (w, h))
    # White paper margin around the cut face, for a rectangle or a loose oval cut.
    inner = cv2.erode(sheet, np.ones((3, 3), np.uint8), iterations=int(rng.integers(0, 4)))
    printed = printed * inner[..., None] + (1 - inner[..., None]) * rng.uniform(200, 240)
    printed = printed * _shade_plane(rng, h, w, rng.uniform(0.05, 0.3))
    out = background.astype(np.float32)
    shadow = cv2.GaussianBlur(
        np.roll(sheet, (int(rng.integers(2, 8)), int(rng.integers(-5, 6))), (0, 1)), (0, 0), 4
    )
    out = out * (1 - 0.35 * shadow[..., None])
    a = cv2.GaussianBlur(sheet, (0, 0), 0.8)[..., None]
    out = out * (1 - a) + printed * a
    out = _hand(out, rng, a)
    q = int(rng.integers(75, 95))
    out = _camera_finish(rng, out, rng.uniform(0.2, 0.9), rng.uniform(1.0, 3.0), q)
    where = "over a face" if background_lm is not None else "before a room"
    return out, f"{shape} cut-out {where}"


def mannequin_attack(
    source: np.ndarray, source_lm: np.ndarray, rng: np.random.Generator, look: PaperLook = DEFAULT_LOOK
) -> tuple[np.ndarray, str]:
    """A printed face on a bald, smoothly shaded mannequin head in a room (640x480 frame)."""
    fw, fh = _frame_size(source)
    frame = _background(rng, fh, fw)
    ipd = rng.uniform(0.1, 0.16) * min(fw, fh)
    cx, cy = rng.uniform(0.42, 0.58) * fw, rng.uniform(0.42, 0.52) * fh
    canon = np.array([[-0.5, -0.45], [0.5, -0.45], [0.0, 0.1], [-0.4, 0.6], [0.4, 0.6]])
    dst_lm = np.array([cx, cy]) + canon * ipd
    yy, xx = np.mgrid[0:fh, 0:fw].astype(np.float32)
    hx, hy = 1.35 * ipd, 1.9 * ipd
    r2 = ((xx - cx) / hx) ** 2 + ((yy - (cy - 0.15 * ipd)) / hy) ** 2
    head = (r2 <= 1.0).astype(np.float32)
    neck = ((np.abs(xx - cx) < 0.7 * ipd) & (yy > cy) & (yy < cy + 3.5 * ipd)).astype(np.float32)
    body = np.clip(head + neck, 0, 1)
    colour = np.array([rng.uniform(120, 200), rng.uniform(140, 210), rng.uniform(160, 230)], np.float32)
    # Smooth plastic: Lambert-like shading of an ellipsoid lit from one side, and a specular spot.
    lx = rng.uniform(-0.6, 0.6)
    nz = np.sqrt(np.clip(1 - r2, 0, 1))
    shade = (0.55 + 0.45 * np.clip(nz + lx * (xx - cx) / hx, 0, 1.3))[..., None]
    skin = colour * shade
    a = cv2.GaussianBlur(body, (0, 0), 1.0)[..., None]
    frame = frame * (1 - a) + skin * a
    printed, face, _ = _printed_face(source, source_lm, dst_lm, (fw, fh), rng, look, 1.2)
    f = cv2.GaussianBlur(face * head, (0, 0), 0.8)[..., None]
    frame = frame * (1 - f) + printed * shade * f
    q = int(rng.integers(75, 95))
    out = _camera_finish(rng, frame, rng.uniform(0.3, 1.0), rng.uniform(1.5, 3.0), q)
    return out, "mannequin"

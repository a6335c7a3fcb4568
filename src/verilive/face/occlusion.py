"""Face occlusion from the face's own appearance: is something covering the eyes, nose or mouth?

image + face box + 5 landmarks -> similarity warp to a small canonical face (:data:`CANON` px, the eyes
:data:`IPD` px apart) -> Lab -> a skin reference from the face's own visible skin (forehead, cheeks,
nose bridge; the patches that agree in colour win, so one occluded patch does not spoil it) -> per region
cues -> per region scores in 0..1 -> overall score = the largest region score.

The cues (docs/face-quality.md, "Occlusion"):

- eyes: an open or closed eye is the most contrasted structure of the face (sclera, iris, lashes, lid
  crease) on a skin background. A hand or a patch over it is flat; a dark lens is flat *and* dark over
  the whole eye socket, where there should be lid and under-eye skin.
- nose and mouth: mostly skin or lip coloured. A mask, scarf or object is another colour over most of
  the region, or (hand) skin coloured but without the nostril and lip structure.
- lower_face: cheeks and chin, skin coloured unless covered (a mask reaches the cheeks).

Everything is measured against this face's reference, never against absolute colours, so skin tone,
white balance and exposure matter little. Landmarks from the detector are used as given: under a hand the
detector still places them where the eye should be, which is where the cues look.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

# Canonical face: CANON x CANON px, eyes IPD px apart, eye midpoint at (CANON/2, EYE_Y).
CANON = 96
IPD = 32.0
EYE_Y = 36.0
# Landmark template in IPD units from the eye midpoint (x right in the image, y down), in the detector's
# order: subject's right eye, left eye, nose tip, right and left mouth corners. Proportions of a mean
# adult frontal face (nose tip 0.57 IPD and mouth line 1.15 IPD below the eye line).
TEMPLATE_IPD = np.array(
    [[-0.5, 0.0], [0.5, 0.0], [0.0, 0.57], [-0.41, 1.15], [0.41, 1.15]],
    dtype=np.float64,
)

DEFAULT_THRESHOLD = 0.5

# Colour agreement (OpenCV 8-bit Lab a*, b* units): chromas closer than this agree whatever their hue;
# otherwise their hues must be within HUE_TOL_DEG.
CHROMA_NEAR = 6.0
HUE_TOL_DEG = 20.0
DARK_REL = 0.35  # a pixel darker than this x the reference lightness has no reliable colour: not skin
EYE_DARK_REL = 0.5  # "dark" in an eye socket: below this x the reference lightness
# Ramps (value at score 0, value at score 1), measured on the faces in docs/face-quality.md.
EYE_FLAT = (0.32, 0.18)  # eye core contrast (p95 - p5 lightness / reference): open and closed eyes >= 0.30
EYE_DARK = (0.65, 0.85)  # share of the eye socket that is dark: clean <= 0.59, dark lenses >= 0.87
NOSE_NONSKIN = (0.45, 0.8)
MOUTH_NONSKIN = (0.75, 0.95)
MOUTH_FLAT = (0.34, 0.2)
LOWER_NONSKIN = (0.6, 0.95)
LOWER_WEIGHT = 0.6

REGIONS = ("right_eye", "left_eye", "nose", "mouth", "lower_face")


@dataclass(frozen=True)
class Occlusion:
    """Occlusion of one face.

    ``score`` is 0 when nothing covers the face and 1 when it is heavily covered (the largest region
    score). ``regions`` has one score per name in :data:`REGIONS` ("right_eye"/"left_eye" are the
    subject's, as the detector's landmarks). ``occluded`` is ``score >= threshold``.
    """

    score: float
    regions: dict[str, float]
    occluded: bool


# Pixel-centre coordinates of the canonical face in IPD units from the eye midpoint.
_YS, _XS = np.mgrid[0:CANON, 0:CANON].astype(np.float64)
_U = (_XS + 0.5 - CANON / 2) / IPD
_V = (_YS + 0.5 - EYE_Y) / IPD


def _rect(u0: float, u1: float, v0: float, v1: float) -> np.ndarray:
    """Boolean mask of a rectangle given in IPD units around the eye midpoint."""
    return (u0 <= _U) & (u1 > _U) & (v0 <= _V) & (v1 > _V)


def _ellipse(cu: float, cv: float, ru: float, rv: float) -> np.ndarray:
    return ((_U - cu) / ru) ** 2 + ((_V - cv) / rv) ** 2 <= 1.0


# Reference skin patches (IPD units). Each can be covered (hair, glasses, mask); the majority decides.
REF_PATCHES: dict[str, np.ndarray] = {
    "forehead": _rect(-0.3, 0.3, -0.75, -0.45),
    "right_cheek": _rect(-0.8, -0.4, 0.45, 0.8),
    "left_cheek": _rect(0.4, 0.8, 0.45, 0.8),
    "bridge": _rect(-0.1, 0.1, -0.05, 0.2),
}
# Eye: a core ellipse on the eye, and the socket a lens covers (lids, under-eye skin).
EYE_CORE = {"right_eye": _ellipse(-0.5, 0.0, 0.28, 0.16), "left_eye": _ellipse(0.5, 0.0, 0.28, 0.16)}
EYE_SOCKET = {"right_eye": _ellipse(-0.5, 0.05, 0.4, 0.3), "left_eye": _ellipse(0.5, 0.05, 0.4, 0.3)}
NOSE = _rect(-0.2, 0.2, 0.2, 0.78)
MOUTH = _rect(-0.55, 0.55, 0.95, 1.38)
LOWER_FACE = (
    _rect(-0.85, -0.3, 0.45, 1.1) | _rect(0.3, 0.85, 0.45, 1.1) | _rect(-0.35, 0.35, 1.42, 1.65)
) & ~(NOSE | MOUTH)


def _similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (rotation, uniform scale, translation) mapping src points onto dst: 2x3."""
    ms, md = src.mean(0), dst.mean(0)
    s, d = src - ms, dst - md
    # For z = a + ib acting on complex points: z = sum(conj(s) * d) / sum(|s|^2).
    sc = s[:, 0] + 1j * s[:, 1]
    dc = d[:, 0] + 1j * d[:, 1]
    z = np.sum(np.conj(sc) * dc) / max(float(np.sum(np.abs(sc) ** 2)), 1e-12)
    a, b = float(z.real), float(z.imag)
    t = md - np.array([a * ms[0] - b * ms[1], b * ms[0] + a * ms[1]])
    return np.array([[a, -b, t[0]], [b, a, t[1]]], dtype=np.float64)


def canonical_face(image_bgr: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """The face warped to CANON x CANON BGR uint8 with the eyes IPD px apart and level."""
    return _canonical_with_valid(image_bgr, landmarks)[0]


def _canonical_with_valid(image_bgr: np.ndarray, landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    src = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    dst = TEMPLATE_IPD * IPD + np.array([CANON / 2, EYE_Y])
    m = _similarity(src, dst)
    valid = _valid_mask(m, image_bgr.shape)
    scale = float(np.hypot(m[0, 0], m[1, 0]))
    img = image_bgr
    if scale < 0.5:
        # Shrinking a lot in one bilinear warp aliases skin texture into false structure: halve the face's
        # region with pyrDown (a cheap low-pass) until the warp shrinks by less than 2.
        x0, y0, x1, y1 = _source_roi(m, img.shape)
        img = img[y0:y1, x0:x1]
        m = m @ np.array([[1.0, 0.0, x0], [0.0, 1.0, y0], [0.0, 0.0, 1.0]])
        while scale < 0.5 and min(img.shape[:2]) >= 4:
            h, w = img.shape[:2]
            img = cv2.pyrDown(img)
            fx, fy = w / img.shape[1], h / img.shape[0]
            m = m @ np.array([[fx, 0.0, 0.0], [0.0, fy, 0.0], [0.0, 0.0, 1.0]])
            scale *= 2.0
    face = cv2.warpAffine(img, m, (CANON, CANON), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return face, valid


def _source_roi(m: np.ndarray, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Integer image rectangle that the canonical square comes from (clipped, at least 1 px)."""
    inv = cv2.invertAffineTransform(m)
    corners = np.array([[0, 0, 1], [CANON, 0, 1], [0, CANON, 1], [CANON, CANON, 1]], dtype=np.float64)
    pts = corners @ inv.T
    h, w = shape[:2]
    x0 = int(np.clip(np.floor(pts[:, 0].min()) - 2, 0, w - 1))
    y0 = int(np.clip(np.floor(pts[:, 1].min()) - 2, 0, h - 1))
    x1 = int(np.clip(np.ceil(pts[:, 0].max()) + 2, x0 + 1, w))
    y1 = int(np.clip(np.ceil(pts[:, 1].max()) + 2, y0 + 1, h))
    return x0, y0, x1, y1


def _valid_mask(m: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Canonical pixels whose source lies inside the image (a face cut by the border has none there)."""
    inv = cv2.invertAffineTransform(m)
    sx = inv[0, 0] * _XS + inv[0, 1] * _YS + inv[0, 2]
    sy = inv[1, 0] * _XS + inv[1, 1] * _YS + inv[1, 2]
    h, w = shape[:2]
    return (sx >= 0) & (sx <= w - 1) & (sy >= 0) & (sy <= h - 1)


def _chroma_agree(c1: np.ndarray, c2: np.ndarray) -> bool:
    """Two skin patches agree when their hues agree (light changes chroma more than hue) or both are close.

    Under one light, a highlight (forehead) and a shadowed cheek keep their hue while their chroma differs
    by up to 3x; low-chroma colours have no reliable hue and must simply be near each other.
    """
    d = float(np.hypot(*(c1 - c2)))
    if d < CHROMA_NEAR:
        return True
    r1, r2 = float(np.hypot(*c1)), float(np.hypot(*c2))
    if min(r1, r2) < CHROMA_NEAR:
        return False
    dh = abs((np.degrees(np.arctan2(c1[1], c1[0]) - np.arctan2(c2[1], c2[0])) + 180.0) % 360.0 - 180.0)
    return bool(dh < HUE_TOL_DEG and max(r1, r2) / min(r1, r2) < 3.0)


def _skin_like(c: np.ndarray) -> bool:
    """Loose prior on a patch's median chroma: near-neutral, or in the red-yellow wedge of all skin tones.

    Only used to keep a blue/green/purple occluder (mask, scarf, background) from becoming the reference.
    """
    a, b = float(c[0]), float(c[1])
    if np.hypot(a, b) < CHROMA_NEAR:
        return True
    return bool(-5.0 <= np.degrees(np.arctan2(b, a)) <= 95.0)


def _ramp(x: float, lo: float, hi: float) -> float:
    """0 at lo, 1 at hi, linear between (lo > hi gives a falling ramp)."""
    return float(np.clip((x - lo) / (hi - lo), 0.0, 1.0))


def occlusion_cues(image_bgr: np.ndarray, landmarks: np.ndarray) -> dict[str, float]:
    """Raw cues per region, before they are mapped to scores (for tuning, eval and docs)."""
    face, valid = _canonical_with_valid(image_bgr, np.asarray(landmarks, dtype=np.float64))
    lab = cv2.cvtColor(face, cv2.COLOR_BGR2LAB).astype(np.float32)
    lum, ab = lab[..., 0], lab[..., 1:] - 128.0
    cues: dict[str, float] = {}

    # --- skin reference from the patches that agree with each other ---
    cand = {k: m & valid for k, m in REF_PATCHES.items() if np.mean(valid[m]) > 0.5}
    if not cand:  # the face is almost entirely outside the image: use what there is
        cand = {k: m for k, m in REF_PATCHES.items()}
    med = {k: np.median(ab[m], axis=0) for k, m in cand.items()}
    plausible = [k for k in med if _skin_like(med[k])] or list(med)
    support = {k: sum(_chroma_agree(med[k], med[j]) for j in plausible) for k in plausible}
    order = list(REF_PATCHES)  # ties: upper face first (masks and hands cover cheeks more often)
    lead = max(plausible, key=lambda k: (support[k], -order.index(k)))
    ref_mask = np.zeros((CANON, CANON), dtype=bool)
    for k in plausible:
        if _chroma_agree(med[k], med[lead]):
            ref_mask |= cand[k]
    ref_ab = np.median(ab[ref_mask], axis=0)
    ref_l = max(float(np.median(lum[ref_mask])), 1.0)
    cues["reference_patches"] = float(sum(_chroma_agree(med[k], med[lead]) for k in plausible))

    # --- per-pixel skin consistency: near the reference chroma, or same hue at another chroma ---
    ref_c = float(np.hypot(*ref_ab))
    dev = np.hypot(ab[..., 0] - ref_ab[0], ab[..., 1] - ref_ab[1])
    spread = float(np.percentile(dev[ref_mask], 90))
    near = dev < max(CHROMA_NEAR, 1.5 * spread)
    if ref_c >= CHROMA_NEAR:
        pc = np.hypot(ab[..., 0], ab[..., 1])
        hue = np.degrees(np.arctan2(ab[..., 1], ab[..., 0]))
        ref_hue = float(np.degrees(np.arctan2(ref_ab[1], ref_ab[0])))
        dh = np.abs((hue - ref_hue + 180.0) % 360.0 - 180.0)
        same_hue = (dh < HUE_TOL_DEG) & (pc > ref_c / 3.0) & (pc < ref_c * 3.0)
        near |= same_hue
    skin = near & (lum > DARK_REL * ref_l)

    def inside(m: np.ndarray) -> np.ndarray:
        # Judge only what the image shows; a region mostly outside it is judged on the replicated border.
        mv = m & valid
        return mv if mv.sum() >= 0.3 * m.sum() else m

    def contrast(m: np.ndarray) -> float:
        v = lum[m]
        return float(np.percentile(v, 95) - np.percentile(v, 5)) / ref_l

    for name in EYE_CORE:
        core, sock = inside(EYE_CORE[name]), inside(EYE_SOCKET[name])
        cues[f"{name}_contrast"] = contrast(core)
        cues[f"{name}_dark"] = float(np.mean(lum[sock] < EYE_DARK_REL * ref_l))
    for name, m0 in (("nose", NOSE), ("mouth", MOUTH), ("lower_face", LOWER_FACE)):
        m = inside(m0)
        cues[f"{name}_nonskin"] = 1.0 - float(np.mean(skin[m]))
        cues[f"{name}_contrast"] = contrast(m)
    return cues


def region_scores(cues: dict[str, float]) -> dict[str, float]:
    """Map the raw cues to a 0..1 occlusion score per region (constants in docs/face-quality.md)."""
    out: dict[str, float] = {}
    for name in EYE_CORE:
        flat = _ramp(cues[f"{name}_contrast"], *EYE_FLAT)
        dark = _ramp(cues[f"{name}_dark"], *EYE_DARK)
        out[name] = max(flat, dark)
    out["nose"] = _ramp(cues["nose_nonskin"], *NOSE_NONSKIN)
    out["mouth"] = max(
        _ramp(cues["mouth_nonskin"], *MOUTH_NONSKIN), _ramp(cues["mouth_contrast"], *MOUTH_FLAT)
    )
    out["lower_face"] = _ramp(cues["lower_face_nonskin"], *LOWER_NONSKIN)
    return out


def occlusion(
    image_bgr: np.ndarray,
    box: tuple[float, float, float, float],
    landmarks: np.ndarray,
    threshold: float = DEFAULT_THRESHOLD,
) -> Occlusion:
    """Occlusion of the face with these 5 landmarks (detector order) in an H x W x 3 uint8 BGR image.

    ``box`` is accepted for a uniform call signature with the other face checks; the landmarks alone fix
    the canonical frame, which is more precise than the box. Score = max over regions, with the
    lower face weighted by LOWER_WEIGHT: it is the least specific region (beards, yaw bring in
    non-skin) and is mainly there to report how far a mask reaches.
    """
    del box
    img = np.asarray(image_bgr)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"expected an HxWx3 uint8 BGR image, got {img.shape} {img.dtype}")
    lm = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    regions = region_scores(occlusion_cues(img, lm))
    weights = {"lower_face": LOWER_WEIGHT}
    score = max(weights.get(k, 1.0) * v for k, v in regions.items())
    return Occlusion(score=float(score), regions=regions, occluded=bool(score >= threshold))

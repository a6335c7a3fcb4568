"""The face occlusion model (issue 47): is something covering an eye, or the nose and mouth?

    python -m train.face_occlusion faces --index /tmp/vl-occ/index.csv --index /tmp/vl-faces/index.csv
    python -m train.face_occlusion train [--leave-out COLLECTION] [--write]

``faces`` detects the largest face of every photo (shared face folders and the given source indexes),
warps it to the canonical face of :mod:`verilive.face.occlusion` and caches the faces with their labels
in ``$VERILIVE_FACEPAD_CACHE/occlusion_faces.npz``. A face is *covered* when the photo's label says
``occluded``, its collection is one of COVERED_COLLECTIONS, or ``train/face_covered_live.csv`` lists it
(a visual check of contact sheets: pad_feni_sfas's live captures include masked people, and a few live
photos of other collections wear dark sunglasses or a mask).

``train`` trains a small CNN on the canonical faces with three outputs: the subject's right eye, left
eye, and nose and mouth covered. Training faces: the uncovered and covered faces of train-role
collections chosen in TRAIN_COLLECTIONS, each uncovered face also drawn over with a synthetic occluder
(mask, scarf, hand, phone, sunglasses; :func:`occlude`) whose coverage of each region is its label, and
clear glasses as a negative. Every other collection is never trained on: it chooses the threshold and is
scored (``--leave-out`` also holds out one training collection, to score it). ``--write`` exports the
model to ``src/verilive/face/occlusion_model.onnx`` with its threshold in the metadata.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import cv2
import numpy as np

from train.face_pad_data import CACHE
from verilive.face import occlusion as occ

REPO = Path(__file__).resolve().parents[1]
COVERED_LIVE = Path(__file__).with_name("face_covered_live.csv")
FACES = "occlusion_faces.npz"
# Trained on (train role: Apache-2.0 and MIT); every other collection only chooses and scores.
TRAIN_COLLECTIONS = ("pad_feni_sfas", "chandrikadeb7_fmd")
# Live collections of masked people (live for PAD, covered for validation; seen on a contact sheet).
COVERED_COLLECTIONS = ("Linzaer+masked_face",)
SEED = 47
S = occ.CANON
# Canonical landmark positions (px) of the 96 px face: eyes, nose tip, mouth corners.
LM = occ.TEMPLATE_IPD * occ.IPD + np.array([S / 2, occ.EYE_Y])
R_EYE, L_EYE, NOSE, R_MOUTH, L_MOUTH = (LM[i] for i in range(5))
# Region masks of the labels, in IPD units around the eye midpoint of the canonical face: the eye cores,
# and the nose with the mouth. An occluder covering more than 45 % of a region covers it.
_YS, _XS = np.mgrid[0:S, 0:S].astype(np.float64)
_U, _V = (_XS + 0.5 - S / 2) / occ.IPD, (_YS + 0.5 - occ.EYE_Y) / occ.IPD
EYE_MASKS = tuple(((_U - cu) / 0.28) ** 2 + (_V / 0.16) ** 2 <= 1.0 for cu in (-0.5, 0.5))
NOSE_MOUTH = ((np.abs(_U) < 0.2) & (_V >= 0.2) & (_V < 0.78)) | (
    (np.abs(_U) < 0.55) & (_V >= 0.95) & (_V < 1.38)
)
OUTPUTS = occ.REGIONS


def covered_live() -> tuple[set[tuple[str, str]], set[tuple[str, str]], set[tuple[str, str]]]:
    """(collection, file) of photos a visual check found covered, doubtful, or uncovered despite their
    label (the face the detector picks is not the covered one)."""
    out: dict[str, set[tuple[str, str]]] = {"covered": set(), "doubtful": set(), "uncovered": set()}
    with open(COVERED_LIVE) as f:
        for r in csv.DictReader(f):
            out[r["state"]].add((r["collection"], r["file"]))
    return out["covered"], out["doubtful"], out["uncovered"]


def live_key(collection: str, path: str) -> tuple[str, str]:
    """The key of a photo in COVERED_LIVE: pad_feni_sfas by its path in that folder, others by file name."""
    return collection, path.split("pad_feni_sfas/")[-1] if collection == "pad_feni_sfas" else Path(path).name


def relabel(z: dict[str, np.ndarray]) -> None:
    """Covered flags of cached faces from the current COVERED_LIVE (the list grows by visual checks)."""
    covered, _, uncovered = covered_live()
    keys = [live_key(c, p) for c, p in zip(z["collection"], z["path"], strict=True)]
    z["covered"] = (z["covered"] | np.array([k in covered for k in keys])) & ~np.array(
        [k in uncovered for k in keys]
    )


def faces(rows: list[dict[str, str]], out: Path) -> None:
    """Canonical faces of every row's largest detected face, with labels, into ``out``."""
    from verilive.config import Settings
    from verilive.face.detector import FaceDetector
    from verilive.face.image import ImageError, decode_image
    from verilive.models.sessions import ModelRegistry

    detector = FaceDetector.from_registry(ModelRegistry(Settings()))
    covered, doubtful, uncovered = covered_live()
    keep: dict[str, list] = {k: [] for k in ("face", "covered", "collection", "role", "kind", "path", "size")}
    for r in rows:
        if r["label"] not in ("live", "occluded"):
            continue
        key = live_key(r["collection"], r["path"])
        if key in doubtful:
            continue
        try:
            img = decode_image(Path(r["path"]).read_bytes(), 40_000_000).bgr
        except (OSError, ImageError):
            continue
        found = detector.detect(img)
        if not found:
            continue
        face = found[0]
        labelled = r["label"] == "occluded" or r["collection"] in COVERED_COLLECTIONS or key in covered
        is_covered = labelled and key not in uncovered
        keep["face"].append(occ.canonical_face(img, face.landmarks))
        keep["covered"].append(is_covered)
        keep["collection"].append(r["collection"])
        keep["role"].append(r["role"])
        keep["kind"].append(
            r["attack_type"] if is_covered and r["label"] == "occluded" else "mask" if is_covered else "none"
        )
        keep["path"].append(r["path"])
        keep["size"].append(face.interpupillary_distance)
    np.savez_compressed(out, **{k: np.asarray(v) for k, v in keep.items()})
    print(f"wrote {out}: {len(keep['face'])} faces, {int(np.sum(keep['covered']))} covered")


# ------------------------------------------------------------------------------------------ occluders


def _texture(rng: np.random.Generator, colour: np.ndarray, faces_pool: np.ndarray) -> np.ndarray:
    """An S x S BGR fabric or object surface: a solid colour with shading, noise, pleats or a print."""
    base = np.empty((S, S, 3), np.float32)
    base[:] = colour
    kind = rng.integers(0, 4)
    if kind == 1:  # pleats or stripes
        period = rng.uniform(4, 14)
        phase = rng.uniform(0, 2 * np.pi)
        yy = np.arange(S, dtype=np.float32)[:, None] + rng.uniform(-0.3, 0.3) * np.arange(S)[None, :]
        base *= (1 + rng.uniform(0.05, 0.25) * np.sin(2 * np.pi * yy / period + phase))[..., None]
    elif kind == 2:  # a print: another face's picture, blurred, tinted
        other = faces_pool[rng.integers(0, len(faces_pool))].astype(np.float32)
        other = cv2.GaussianBlur(other, (0, 0), rng.uniform(0.5, 3))
        base = 0.5 * base + 0.5 * other
    elif kind == 3:  # knit or woven noise
        n = rng.normal(0, rng.uniform(4, 20), (S // 2, S // 2, 1)).astype(np.float32)
        base += cv2.resize(n, (S, S))[..., None]
    # Light falls across it: a linear gradient.
    g = np.linspace(-1, 1, S, dtype=np.float32)
    ang = rng.uniform(0, 2 * np.pi)
    grad = np.cos(ang) * g[None, :] + np.sin(ang) * g[:, None]
    base *= (1 + rng.uniform(0, 0.35) * grad)[..., None]
    return np.clip(base, 0, 255)


def _poly_mask(pts: np.ndarray, blur: float) -> np.ndarray:
    m = np.zeros((S, S), np.float32)
    cv2.fillPoly(m, [np.round(pts * 4).astype(np.int32)], 1.0, lineType=cv2.LINE_AA, shift=2)
    return cv2.GaussianBlur(m, (0, 0), blur) if blur > 0 else m


def _ellipse_mask(c: np.ndarray, axes: tuple[float, float], angle: float) -> np.ndarray:
    m = np.zeros((S, S), np.float32)
    cv2.ellipse(m, (int(c[0] * 4), int(c[1] * 4)), (int(axes[0] * 4), int(axes[1] * 4)), angle, 0, 360,
                1.0, -1, cv2.LINE_AA, 2)  # fmt: skip
    return m


def _skin(face: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A skin colour near this face's cheeks (another hand of the same person, or someone else's)."""
    cheek = face[50:64, 14:30].reshape(-1, 3).astype(np.float32)
    c = np.median(cheek, axis=0)
    if rng.random() < 0.3:  # someone else's hand: a skin tone between light and dark (BGR)
        t = rng.random()
        c = (1 - t) * np.array([185, 205, 240], np.float32) + t * np.array([45, 65, 105], np.float32)
    return c * rng.uniform(0.8, 1.2)


def _hand(face: np.ndarray, centre: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A hand: a palm and three to four fingers, skin coloured, with darker gaps and shading."""
    m = np.zeros((S, S), np.float32)
    ang = rng.uniform(-70, 70)
    t = np.deg2rad(ang)
    d = np.array([np.sin(t), -np.cos(t)])  # finger direction
    n = np.array([np.cos(t), np.sin(t)])
    width = rng.uniform(5, 8)
    palm = centre - d * rng.uniform(6, 16)
    m = np.maximum(m, _ellipse_mask(palm, (rng.uniform(14, 22), rng.uniform(12, 18)), ang))
    for k in range(int(rng.integers(3, 5))):
        off = (k - 1.5) * width * 1.05
        base = palm + n * off
        tip = base + d * rng.uniform(18, 34)
        cv2.line(
            m,
            tuple(np.round(base).astype(int)),
            tuple(np.round(tip).astype(int)),
            1.0,
            int(width),
            cv2.LINE_AA,
        )
    colour = _skin(face, rng)
    tex = np.empty((S, S, 3), np.float32)
    tex[:] = colour
    tex += rng.normal(0, 3, (S, S, 1)).astype(np.float32)
    edges = cv2.morphologyEx(m, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    tex *= (1 - 0.35 * edges)[..., None]
    return cv2.GaussianBlur(m, (0, 0), 0.7), np.clip(tex, 0, 255)


def _lens(c: np.ndarray, ax: tuple[float, float], shape: str) -> np.ndarray:
    """One lens mask around the eye centre ``c``: round, rectangular or aviator (wider below)."""
    if shape == "round":
        return _ellipse_mask(c, ax, 0)
    if shape == "rect":
        box = cv2.boxPoints(((float(c[0]), float(c[1])), (2 * ax[0], 2 * ax[1]), 0.0))
        return np.clip(_poly_mask(box, 1.2) * 1.3, 0, 1)
    t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    lower = np.where(np.sin(t) > 0, 1.35, 0.85)  # the lower half hangs lower, as an aviator lens does
    pts = np.stack([c[0] + ax[0] * np.cos(t), c[1] + ax[1] * lower * np.sin(t)], 1)
    return _poly_mask(pts, 0.4)


def _glasses(
    rng: np.random.Generator, jitter: np.ndarray, pool: np.ndarray, clear: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Sunglasses (dark, tinted, gradient or mirrored lenses: the eyes covered) or clear glasses (the frame
    and a faint reflection: the eyes visible). Returns the blend weight (its opacity included) and the
    surface."""
    shape = str(rng.choice(["round", "rect", "aviator"]))
    ax = (rng.uniform(11, 16), rng.uniform(8, 13))
    lens = np.zeros((S, S), np.float32)
    for e in (R_EYE, L_EYE):
        lens = np.maximum(lens, _lens(e + jitter + np.array([0, rng.uniform(-1, 2)]), ax, shape))
    edge = cv2.morphologyEx((lens > 0.5).astype(np.uint8), cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    frame = cv2.dilate(edge, np.ones((int(rng.integers(1, 3)),) * 2, np.uint8)).astype(np.float32)
    cv2.line(frame, tuple(np.round(R_EYE + jitter + [ax[0], 0]).astype(int)),
             tuple(np.round(L_EYE + jitter - [ax[0], 0]).astype(int)), 1.0, 2, cv2.LINE_AA)  # fmt: skip
    # Mostly black or brown frames; some metal; a few coloured.
    frame_colour = [rng.uniform(5, 45) * np.ones(3), rng.uniform(140, 220) * np.array([0.75, 0.9, 1.0]),
                    rng.uniform(30, 230, 3)][int(rng.choice(3, p=[0.65, 0.2, 0.15]))]  # fmt: skip
    surface = np.empty((S, S, 3), np.float32)
    look = (
        "clear"
        if clear
        else str(rng.choice(["dark", "tint", "gradient", "mirror"], p=[0.35, 0.2, 0.2, 0.25]))
    )
    if look == "mirror":  # the scene in front: another picture or a bright sky, blurred
        other = pool[rng.integers(0, len(pool))].astype(np.float32)[:, ::-1]
        sky = np.linspace(rng.uniform(150, 255), rng.uniform(40, 150), S, dtype=np.float32)[:, None, None]
        scene = other if rng.random() < 0.5 else sky * rng.uniform(0.6, 1.0, 3).astype(np.float32)
        surface[:] = cv2.GaussianBlur(np.broadcast_to(scene, (S, S, 3)).copy(), (0, 0), rng.uniform(0.5, 2))
        surface *= rng.uniform(0.5, 1.0)
        opacity = np.full((S, S), rng.uniform(0.9, 1.0), np.float32)
    elif look == "clear":
        surface[:] = rng.uniform(120, 255, 3)
        opacity = np.full((S, S), rng.uniform(0.0, 0.25), np.float32)  # a faint reflection on clear glass
    else:
        tint = rng.uniform(5, 60, 3) if look == "dark" else rng.uniform(20, 130) * rng.uniform(0.3, 1.0, 3)
        surface[:] = tint
        opacity = np.full(
            (S, S), rng.uniform(0.8, 1.0) if look == "dark" else rng.uniform(0.72, 0.95), np.float32
        )
        if look == "gradient":  # darker at the top
            ramp = np.clip((np.arange(S, dtype=np.float32) - (R_EYE[1] - 12)) / 24, 0, 1)[:, None]
            opacity *= 1.0 - 0.25 * ramp
    # A highlight on one lens.
    shine = _ellipse_mask(R_EYE + jitter + rng.uniform(-5, 5, 2), (rng.uniform(2, 6), 2), rng.uniform(0, 180))
    surface += shine[..., None] * rng.uniform(0, 150)
    alpha = np.maximum(lens * opacity, frame)
    tex = surface * (1 - frame[..., None]) + frame[..., None] * frame_colour
    return alpha, np.clip(tex, 0, 255)


def occlude(face: np.ndarray, rng: np.random.Generator, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One synthetic occluder over an uncovered canonical face: the new face and its three labels."""
    kinds = ["mask", "mask_low", "scarf", "hand_mouth", "hand_eye", "phone", "sunglasses", "glasses"]
    kind = rng.choice(kinds, p=[0.16, 0.06, 0.08, 0.14, 0.13, 0.09, 0.22, 0.12])
    jitter = rng.normal(0, 2.0, 2)
    if kind in ("mask", "mask_low", "scarf"):
        top = {"mask": NOSE[1] - rng.uniform(6, 14), "mask_low": NOSE[1] + rng.uniform(2, 6),
               "scarf": NOSE[1] - rng.uniform(10, 18)}[kind]  # fmt: skip
        half = rng.uniform(30, 44)
        cx = S / 2 + jitter[0]
        sag = rng.uniform(-4, 6)
        xs = np.linspace(cx - half, cx + half, 12)
        # The top edge rises over the nose and falls to the cheeks, as a mask on a face does.
        upper = np.stack(
            [xs, top - sag * (1 - ((xs - cx) / half) ** 2) + rng.uniform(2, 8) * ((xs - cx) / half) ** 2], 1
        )
        lower = np.array([[cx + half, S + 4], [cx - half, S + 4]])
        alpha = _poly_mask(np.vstack([upper, lower]), rng.uniform(0, 1.0))
        light = rng.random() < 0.55
        colour = np.array(rng.uniform(170, 250, 3) if light else rng.uniform(10, 120, 3), np.float32)
        if rng.random() < 0.3:
            colour = rng.uniform(20, 240, 3).astype(np.float32)  # any colour
        tex = _texture(rng, colour, pool)
    elif kind in ("hand_mouth", "hand_eye"):
        if kind == "hand_mouth":
            centre = (R_MOUTH + L_MOUTH) / 2 + np.array([rng.normal(0, 4), rng.uniform(-6, 6)])
        else:
            centre = (R_EYE if rng.random() < 0.5 else L_EYE) + rng.normal(0, 2.5, 2)
            if rng.random() < 0.15:
                centre = (R_EYE + L_EYE) / 2 + rng.normal(0, 2, 2)
        alpha, tex = _hand(face, centre, rng)
    elif kind == "phone":
        target = [R_EYE, L_EYE, (R_MOUTH + L_MOUTH) / 2, NOSE][int(rng.integers(0, 4))]
        w, h = rng.uniform(26, 40), rng.uniform(44, 70)
        ang = rng.uniform(-30, 30)
        box = cv2.boxPoints(((float(target[0] + jitter[0]), float(target[1] + jitter[1])), (w, h), ang))
        alpha = _poly_mask(box, 0.5)
        tex = _texture(rng, rng.uniform(5, 200, 3).astype(np.float32), pool)
    else:  # sunglasses (covering) or clear glasses (a negative: the eyes stay visible)
        alpha, tex = _glasses(rng, jitter, pool, clear=kind == "glasses")
    if kind not in ("sunglasses", "glasses"):
        alpha = np.clip(alpha, 0, 1) * rng.uniform(0.92, 1.0)
    a = np.clip(alpha, 0, 1)[..., None]
    out = face.astype(np.float32) * (1 - a) + tex * a
    cov = alpha > 0.5
    labels = np.array([cov[m].mean() > 0.45 for m in EYE_MASKS] + [cov[NOSE_MOUTH].mean() > 0.45], np.float32)
    if kind == "glasses":
        labels[:] = 0
    return np.clip(out, 0, 255).astype(np.uint8), labels


# ---------------------------------------------------------------------------------------- training


def camera(face: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Camera and landmark variation: a small shift, turn and zoom of the canonical frame, light,
    colour cast, blur or a low resolution, noise, JPEG, and sometimes black and white."""
    ang, sc = rng.normal(0, 4), 1 + rng.normal(0, 0.05)
    m = cv2.getRotationMatrix2D((S / 2, occ.EYE_Y), ang, sc)
    m[:, 2] += rng.normal(0, 1.8, 2)
    x = cv2.warpAffine(face, m, (S, S), borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
    x = x * rng.uniform(0.6, 1.3) + rng.uniform(-25, 25)
    x *= rng.uniform(0.88, 1.12, 3).astype(np.float32)
    x = 255.0 * (np.clip(x, 0, 255) / 255.0) ** rng.uniform(0.7, 1.4)
    if rng.random() < 0.3:
        x = cv2.GaussianBlur(x, (0, 0), rng.uniform(0.4, 1.6))
    if rng.random() < 0.25:
        k = int(rng.integers(24, 64))
        x = cv2.resize(cv2.resize(x, (k, k), interpolation=cv2.INTER_AREA), (S, S))
    x = np.clip(x + rng.normal(0, rng.uniform(0, 6), x.shape), 0, 255).astype(np.uint8)
    if rng.random() < 0.4:
        x = cv2.imdecode(cv2.imencode(".jpg", x, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(35, 95))])[1], 1)
    if rng.random() < 0.12:  # black-and-white photos: glasses frames must not read as dark lenses there
        x = cv2.cvtColor(cv2.cvtColor(x, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    return x


def flip(face: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mirror image: the subject's right and left eye swap (the canonical face is symmetric)."""
    return face[:, ::-1].copy(), labels[[1, 0, 2]]


def build_net():
    import torch
    from torch import nn

    def block(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(i, o, 3, 2, 1, bias=False),
            nn.BatchNorm2d(o),
            nn.ReLU(inplace=True),
            nn.Conv2d(o, o, 3, 1, 1, bias=False),
            nn.BatchNorm2d(o),
            nn.ReLU(inplace=True),
        )

    class OcclusionNet(nn.Module):
        """96 x 96 canonical face (RGB 0..1) -> 3 logits: right eye, left eye, nose and mouth covered.
        Where each part sits is fixed by the canonical warp, so the head keeps the spatial layout."""

        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(block(3, 16), block(16, 32), block(32, 48), block(48, 64))  # 6 x 6
            self.drop = nn.Dropout(0.3)
            self.head = nn.Linear(64 * 6 * 6, len(OUTPUTS))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.drop(torch.flatten(self.features(x), 1)))

    return OcclusionNet()


to_input = occ.to_input  # the service's own input conversion


def batches(z: dict[str, np.ndarray], train_ix: np.ndarray, rng: np.random.Generator, steps: int, bs: int):
    """Endless training batches: a third real covered faces, the rest uncovered faces of which half get
    a synthetic occluder."""
    covered = train_ix[z["covered"][train_ix]]
    clean = train_ix[~z["covered"][train_ix]]
    pool = z["face"][clean]
    for _ in range(steps):
        xs, ys = [], []
        for _ in range(bs):
            if covered.size and rng.random() < 0.2:
                f, y = z["face"][covered[rng.integers(0, covered.size)]], np.array([0, 0, 1], np.float32)
            else:
                f, y = z["face"][clean[rng.integers(0, clean.size)]], np.zeros(3, np.float32)
                if rng.random() < 0.55:
                    f, y = occlude(f, rng, pool)
            if rng.random() < 0.5:
                f, y = flip(f, y)
            xs.append(camera(f, rng))
            ys.append(y)
        yield to_input(np.stack(xs)), np.stack(ys)


def train(z: dict[str, np.ndarray], train_ix: np.ndarray, epochs: int, seed: int = SEED):
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = build_net()
    steps, bs = 60, 64
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * steps)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    t0 = time.time()
    for ep in range(epochs):
        net.train()
        run = 0.0
        for x, y in batches(z, train_ix, rng, steps, bs):
            opt.zero_grad()
            loss = loss_fn(net(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            opt.step()
            sched.step()
            run += float(loss)
        print(f"  epoch {ep + 1}/{epochs} loss {run / steps:.3f} ({time.time() - t0:.0f} s)", flush=True)
    net.eval()
    return net


def predict(net, faces_bgr: np.ndarray) -> np.ndarray:
    """(N, 3) covered probabilities."""
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(faces_bgr), 256):
            out.append(torch.sigmoid(net(torch.from_numpy(to_input(faces_bgr[i : i + 256])))).numpy())
    return np.concatenate(out) if out else np.zeros((0, 3))


# ------------------------------------------------------------------------------------------- choose

MAX_REFUSED = (
    0.01  # the threshold: at most this share of uncovered faces refused, collections weighing the same
)


def threshold_for(score: np.ndarray, covered: np.ndarray, coll: np.ndarray, sel: np.ndarray) -> float:
    """The lowest threshold that refuses at most MAX_REFUSED of the uncovered faces of ``sel``, each
    collection weighing the same."""
    from train.face_collections import balanced

    live = sel & ~covered
    w = balanced(coll, live)[live]
    s = score[live]
    order = np.argsort(-s)
    cum = np.cumsum(w[order]) / w.sum()
    k = int(np.searchsorted(cum, MAX_REFUSED, side="right"))
    return float(s[order][min(k, len(s) - 1)]) + 1e-6


def report(z: dict[str, np.ndarray], score: np.ndarray, scored: np.ndarray) -> list[str]:
    """Per collection never trained on: uncovered faces refused and covered faces caught, each at a
    threshold chosen on the other such collections (leave one collection out)."""
    coll, covered = z["collection"], z["covered"]
    lines = ["| collection | role | uncovered | refused | covered | caught | threshold |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    refused_all, caught_all = np.zeros(len(coll), bool), np.zeros(len(coll), bool)
    per = []
    for c in sorted(set(coll[scored])):
        m = scored & (coll == c)
        thr = threshold_for(score, covered, coll, scored & (coll != c))
        flag = score >= thr
        refused_all[m & ~covered] = flag[m & ~covered]
        caught_all[m & covered] = flag[m & covered]
        nu, nc = int((m & ~covered).sum()), int((m & covered).sum())
        r = float(flag[m & ~covered].mean()) if nu else float("nan")
        k = float(flag[m & covered].mean()) if nc else float("nan")
        per.append((r, k))
        lines.append(f"| {c} | {z['role'][m][0]} | {nu} | {_p(r)} | {nc} | {_p(k)} | {thr:.3f} |")
    rs = [r for r, _ in per if np.isfinite(r)]
    ks = [k for _, k in per if np.isfinite(k)]
    u, cv = scored & ~covered, scored & covered
    refused = f"mean {_p(float(np.mean(rs)))}, worst {_p(float(np.max(rs)))}"
    caught = f"mean {_p(float(np.mean(ks)))}, worst {_p(float(np.min(ks)))}"
    lines += [
        "",
        f"Uncovered faces refused: {refused}, pooled {_p(float(refused_all[u].mean()))} of {int(u.sum())}. "
        f"Covered faces caught: {caught}, pooled {_p(float(caught_all[cv].mean()))} of {int(cv.sum())}.",
    ]
    return lines


def _p(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{100 * v:.1f} %"


def main() -> None:
    from common.repo import data_root

    from train.face_collections import index_rows, shared_rows

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    fp = sub.add_parser("faces")
    fp.add_argument("--index", type=Path, action="append", default=[])
    fp.add_argument("--data", type=Path, default=None)
    tp = sub.add_parser("train")
    tp.add_argument("--epochs", type=int, default=30)
    tp.add_argument("--leave-out", default=None, help="also hold out this training collection")
    tp.add_argument("--write", action="store_true")
    for p in (fp, tp):
        p.add_argument("--cache", type=Path, default=CACHE)
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.cmd == "faces":
        rows = list(shared_rows(data_root(args.data), cache / "frames"))
        for ix in args.index:
            rows.extend(index_rows(ix))
        faces(rows, cache / FACES)
        return
    with np.load(cache / FACES) as f:
        z = {k: f[k] for k in f.files}
    relabel(z)
    coll = z["collection"]
    in_train = np.isin(coll, TRAIN_COLLECTIONS) & (z["role"] == "train")
    if args.leave_out:
        in_train &= coll != args.leave_out
    net = train(z, np.flatnonzero(in_train), args.epochs)
    prob = predict(net, z["face"])
    score = prob.max(1)
    print("\n".join(report(z, score, ~in_train)))
    np.savez(cache / f"occlusion_scores{'_' + args.leave_out if args.leave_out else ''}.npz", prob=prob,
             in_train=in_train)  # fmt: skip
    if args.write:
        write_model(net, threshold_for(score, z["covered"], coll, ~in_train), sorted(set(coll[in_train])))


MODEL_OUT = REPO / "src" / "verilive" / "face" / "occlusion_model.onnx"


def write_model(net, threshold: float, trained_on: list[str]) -> None:
    """The ONNX model with its threshold and a check output in the metadata."""
    import onnx
    import torch

    x = torch.from_numpy(to_input(np.full((1, S, S, 3), 128, np.uint8)))
    torch.onnx.export(
        net,
        x,
        str(MODEL_OUT),
        input_names=["face"],
        output_names=["covered_logits"],
        dynamic_axes={"face": {0: "n"}, "covered_logits": {0: "n"}},
        opset_version=17,
        dynamo=False,
    )
    model = onnx.load(str(MODEL_OUT))
    with torch.no_grad():
        check = net(x).numpy()[0].tolist()
    meta = {
        "outputs": list(OUTPUTS),
        "threshold": round(threshold, 4),
        "trained_on": trained_on,
        "check_input": "all 128",
        "check_logits": check,
        "made_by": "python -m train.face_occlusion train --write",
    }
    model.metadata_props.add(key="verilive_occlusion", value=json.dumps(meta))
    onnx.save(model, str(MODEL_OUT))
    print(f"wrote {MODEL_OUT} ({MODEL_OUT.stat().st_size / 1024:.0f} KiB), threshold {threshold:.3f}")


if __name__ == "__main__":
    main()

"""Face PAD leaving one collection out (issue 47): every collection in turn is never trained on, never
used to choose, and then scored, as the service judges it (validation refusals counted).

    python -m train.face_pad_loco extract --index /tmp/vl-faces/index.csv --index /tmp/vl-occ/index.csv \\
        --out /tmp/vl-faces.npz                    # every image once through the engine (minutes)
    python -m train.face_pad_loco report --scores /tmp/vl-faces.npz [--write] [--no-docs]

A *collection* is one repository's photos, or one folder of ``../shared/data/face`` (the live videos of
``video_motion`` are one collection each, three frames per video). Rows come from the index files that
``train.face_pad_sources build`` and ``train.face_occlusion_sources`` write (``collection, label,
attack_type, camera, role, path``) and from :func:`shared_rows`. Labels: ``live``, ``attack`` and
``occluded`` (a real face covered by a mask, hand, phone or dark glasses: the validation must refuse it;
it is neither live nor attack for the PAD figures).

``extract`` runs each image through the shipped engine twice: once as the service validates it (the
refusal code), once with every validation limit open, so that each detected face also gets its branch
log-odds (MiniFASNet V2 and V1SE, the face-only branch), the backbone's features and texture statistics,
its pose, border margin and canonical face (for the occlusion model). Validation rules and the PAD can
then be chosen offline.

``report`` fits the trained parts (the backbone head on train-role collections only; the fusion and the
calibrations on every collection but the one left out) once per collection left out, and scores that
collection. With ``--write`` the shipped head, fusion and calibrations are fitted on every collection and
the REGULAR / HARDENED / SOFT offsets put at their BPCERs of the out-of-collection live scores.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from pathlib import Path

import numpy as np
from common.repo import data_root

from train.face_collections import FIELDS, balanced, index_rows, shared_rows
from verilive.config import Settings
from verilive.face import backbone as bbm
from verilive.face.engine import FaceEngine, Validation, face_extent
from verilive.face.occlusion import CANON, canonical_face
from verilive.face.pipelines import Domain
from verilive.models.sessions import ModelRegistry

PAD_BRANCHES = ("minifasnet_v2", "minifasnet_v1se", "facepad")
# Every limit open: a face is judged wherever the detector finds one (issue 47 measures the limits).
OPEN = Validation(
    min_face_px=1.0,
    min_face_relative=0.0,
    min_interpupillary_px=1.0,
    secondary_face_relative=10.0,
    cropped_fraction=10.0,
    border_margin=-10.0,
    max_yaw=360.0,
    max_pitch=360.0,
    max_roll=360.0,
    occlusion_threshold=10.0,
    min_image_side=0,
)


def extract(rows: list[dict[str, str]], out: Path) -> None:
    """Every image through the engine: the service's refusal code, then the open engine's branch scores,
    backbone features (float and int8 builds), pose, border margin and canonical face of the largest face."""
    settings = Settings()
    engine = FaceEngine.from_registry(ModelRegistry(settings), settings)
    opened = copy.copy(engine)  # the same sessions, every limit open
    opened.validation = OPEN
    n = len(rows)
    codes, found = np.full(n, "", dtype=object), np.zeros(n, bool)
    scores = np.full((n, len(PAD_BRANCHES)), np.nan)
    feats = np.zeros((n, 1280 + 464), np.float16)
    geo = np.full((n, 8), np.nan)  # yaw, pitch, roll, margin, out fraction, face px, relative size, ipd px
    faces = np.zeros((n, CANON, CANON, 3), np.uint8)  # canonical faces: the occlusion model scores them
    feats8 = np.zeros((n, 1280 + 464), np.float16)  # the int8 backbone build's features, same crops
    int8 = bbm.Backbone.from_registry(ModelRegistry(settings), bbm.INT8_MODEL_ID)
    assert engine.backbone is not None
    for i, r in enumerate(rows):
        try:
            data = Path(r["path"]).read_bytes()
        except OSError:
            codes[i] = "MISSING"
            continue
        a = engine.assess(data, score=False)
        codes[i] = a.rejection.code.value if a.rejection else "OK"
        image, checked = opened._prepare(data, Domain.GENERAL)
        if image is None or not hasattr(checked, "crops"):
            continue
        found[i] = True
        br = engine.branch_scores([checked], PAD_BRANCHES)  # type: ignore[list-item]
        scores[i] = [float(br[b][0]) for b in PAD_BRANCHES]
        f, t = engine.backbone.backbone.describe(checked.crops["backbone"][None], 1)  # type: ignore[union-attr]
        feats[i] = np.concatenate([f[0], t[0]]).astype(np.float16)
        f, t = int8.describe(checked.crops["backbone"][None], 1)
        feats8[i] = np.concatenate([f[0], t[0]]).astype(np.float16)
        face = checked.face  # type: ignore[union-attr]
        img = image.bgr
        if checked.quarter_turns:  # type: ignore[union-attr]
            img = np.rot90(img, -int(checked.quarter_turns)).copy()  # type: ignore[union-attr]
        h, w = img.shape[:2]
        x1, y1, x2, y2 = face_extent(face)
        fw, fh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
        margin = min(x1 / fw, (w - x2) / fw, y1 / fh, (h - y2) / fh)
        out_frac = max((max(0.0, -x1) + max(0.0, x2 - w)) / fw, (max(0.0, -y1) + max(0.0, y2 - h)) / fh)
        scale = image.reduction
        geo[i] = [face.yaw, face.pitch, face.roll, margin, out_frac, face.height * scale, face.height / h,
                  face.interpupillary_distance * scale]  # fmt: skip
        faces[i] = canonical_face(img, face.landmarks)
        if (i + 1) % 100 == 0:
            print(f"{i + 1}/{n}", flush=True)
    cols = {k: np.array([r[k] for r in rows]) for k in FIELDS}
    np.savez_compressed(out, codes=codes.astype(str), found=found, scores=scores, feats=feats, geo=geo,
                        faces=faces, feats8=feats8, branches=np.array(PAD_BRANCHES), **cols)  # fmt: skip
    print(f"wrote {out}: {n} images, {found.sum()} with a face")


# ---------------------------------------------------------------------------------------------- report

TARGET_BPCER = {"SOFT": 0.005, "REGULAR": 0.02, "HARDENED": 0.08}
HEAD_C = 0.01  # the backbone head's L2 strength (train.face_pad_backbone's CHOSEN)
INNER_FOLDS = 4
PIPES = {
    "ensemble": "v2 + v1se + facepad + backbone, minifasnet mean guard",
    "fast": "v2 + facepad, v2 guard",
}


@dataclasses.dataclass
class Scores:
    """The extracted arrays, with the service's current validation verdict as ``ok``."""

    z: dict[str, np.ndarray]

    def __getitem__(self, k: str) -> np.ndarray:
        return self.z[k]

    @property
    def n(self) -> int:
        return len(self.z["label"])


def load_scores(path: Path) -> Scores:
    with np.load(path) as f:
        return Scores({k: f[k] for k in f.files})


def branch_dict(sc: Scores, backbone: np.ndarray) -> dict[str, np.ndarray]:
    s = {str(b): sc["scores"][:, k] for k, b in enumerate(sc["branches"])}
    s["backbone"] = backbone
    p = (sigmoid(s["minifasnet_v2"]) + sigmoid(s["minifasnet_v1se"])) / 2.0
    s["minifasnet_mean"] = np.log(np.clip(p, 1e-7, 1 - 1e-7) / np.clip(1 - p, 1e-7, 1))
    return {k: np.nan_to_num(v, nan=0.0) for k, v in s.items()}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


# The PAD thresholds: each collection counts as at most this many photos (feni has 444 live photos, a
# third of the collections fewer than 5; with equal weights one photo would fix the 2 % point).
THRESHOLD_CAP = 30


def head_scores(x: np.ndarray, y: np.ndarray, fit_on: np.ndarray, score_on: np.ndarray) -> np.ndarray:
    from train.face_pad_backbone import fit_head, score

    out = np.full(len(y), np.nan)
    if len(np.unique(y[fit_on])) < 2:  # no attack (or no live) photo left to learn from: no opinion
        out[score_on] = 0.0
        return out
    head = fit_head(x[fit_on], y[fit_on], HEAD_C)
    out[score_on] = score(head, x[score_on])
    return out


def backbone_oof(
    x: np.ndarray, y: np.ndarray, coll: np.ndarray, train: np.ndarray, use: np.ndarray
) -> np.ndarray:
    """Backbone head scores of every ``use`` row by heads that never trained on its collection: the train
    collections in INNER_FOLDS groups (largest first, round robin), each scored by a head on the others;
    the rest by a head on every train row."""
    out = np.full(len(y), np.nan)
    colls = sorted(set(coll[train & use]), key=lambda c: -int(np.sum(coll == c)))
    groups = {c: k % INNER_FOLDS for k, c in enumerate(colls)}
    g = np.array([groups.get(c, -1) for c in coll])
    for k in range(INNER_FOLDS):
        fit_on, score_on = train & use & (g != k), use & (g == k)
        if score_on.any():
            out[score_on] = head_scores(x, y, fit_on, score_on)[score_on]
    rest = use & (g < 0)
    if rest.any():
        out[rest] = head_scores(x, y, train & use, rest)[rest]
    return out


def fit_pipeline(s: dict[str, np.ndarray], name: str, y: np.ndarray, sel: np.ndarray, coll: np.ndarray):
    """The candidate's fusion on ``sel``, and its thresholds at TARGET_BPCER of those live rows, each
    collection weighing the same."""
    from train.face_pad_fusion import bpcer_threshold, fit

    f = fit(s, name, sel, y)
    live = sel & (y > 0.5)
    w = balanced(coll, live, THRESHOLD_CAP)
    thr = {k: bpcer_threshold(f.score(s)[live], v, w[live]) for k, v in TARGET_BPCER.items()}
    return f, thr


def loco(sc: Scores, ok: np.ndarray) -> dict[str, np.ndarray]:
    """Out-of-collection fused scores of each pipeline and the REGULAR / HARDENED thresholds set without
    that collection: for every collection h, the head trains on train-role rows of the others, the
    fusion and thresholds on every other collection's validated rows (head scores out of fold)."""
    label, coll, role = sc["label"], sc["collection"], sc["role"]
    pad = np.isin(label, ("live", "attack")) & sc["found"]
    y = (label == "live").astype(np.float64)
    x = sc["feats"].astype(np.float32)
    train = pad & (role == "train")
    out = {f"{p}_{k}": np.full(sc.n, np.nan) for p in PIPES for k in ("score", "regular", "hardened", "soft")}
    for h in sorted(set(coll[pad])):
        use = pad & (coll != h)
        bb = backbone_oof(x, y, coll, train & (coll != h), use)
        held = pad & (coll == h)
        bb[held] = head_scores(x, y, train & (coll != h), held)[held]
        s = branch_dict(sc, bb)
        for p, name in PIPES.items():
            f, thr = fit_pipeline(s, name, y, use & ok, coll)
            out[f"{p}_score"][held] = f.score(s)[held]
            for k in TARGET_BPCER:
                out[f"{p}_{k.lower()}"][held] = thr[k]
        print(f"  left out {h}: {held.sum()} images", flush=True)
    return out


EARLY = ("FAILED_TO_READ_IMAGE", "FACE_NOT_FOUND", "TOO_MANY_FACES", "FACE_TOO_SMALL", "MISSING")


def revalidate(sc: Scores, v: Validation, occluded: np.ndarray) -> np.ndarray:
    """The refusal code of each image under other border and pose limits, from the stored geometry, and
    the occlusion verdict ``occluded`` per image (the checks before them, and the image-size check after,
    keep their extracted codes)."""
    codes = sc["codes"].astype(object).copy()
    geo = sc["geo"]
    for i in range(sc.n):
        if codes[i] in EARLY or not sc["found"][i]:
            continue
        yaw, pitch, roll, margin, out_frac = geo[i, :5]
        if out_frac > v.cropped_fraction:
            codes[i] = "FACE_CROPPED"
        elif margin < v.border_margin:
            codes[i] = "FACE_CLOSE_TO_BORDER"
        elif abs(yaw) > v.max_yaw or abs(pitch) > v.max_pitch or abs(roll) > v.max_roll:
            codes[i] = "FACE_ANGLE_TOO_LARGE"
        elif occluded[i]:
            codes[i] = "FACE_IS_OCCLUDED"
        elif codes[i] != "IMAGE_TOO_SMALL":
            codes[i] = "OK"
    return codes.astype(str)


# Candidate validation limits (issue 47): the shipped ones first. Each is scored by refusals per live
# collection and by how much of the real-occlusion set is still refused.
CANDIDATES = {
    "before (margin 0.15, yaw 30, pitch 25)": {"border_margin": 0.15, "max_yaw": 30.0, "max_pitch": 25.0},
    "margin 0.05": {"border_margin": 0.05, "max_yaw": 30.0, "max_pitch": 25.0},
    "margin 0": {"border_margin": 0.0, "max_yaw": 30.0, "max_pitch": 25.0},
    "margin 0, yaw 35": {"border_margin": 0.0, "max_yaw": 35.0, "max_pitch": 25.0},
    "margin 0, yaw 35, pitch 30": {"border_margin": 0.0, "max_yaw": 35.0, "max_pitch": 30.0},
}

CHOSEN = "margin 0, yaw 35"


def is_covered(sc: Scores) -> tuple[np.ndarray, np.ndarray]:
    """Faces covered (the occluded label, a masked collection, or listed covered by a visual check) and
    faces whose state the visual check left doubtful (left out of the validation figures)."""
    from train.face_occlusion import COVERED_COLLECTIONS, covered_live, live_key

    covered, doubtful, uncovered = covered_live()
    keys = [live_key(c, p) for c, p in zip(sc["collection"], sc["path"], strict=True)]
    listed = np.array([k in covered for k in keys])
    flagged = (sc["label"] == "occluded") | np.isin(sc["collection"], COVERED_COLLECTIONS) | listed
    return flagged & ~np.array([k in uncovered for k in keys]), np.array([k in doubtful for k in keys])


def occlusion_loco(sc: Scores, model: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """Occlusion scores of every face (the packaged model or ``model``) and the verdict of each face at a
    threshold chosen without its collection (train.face_occlusion's rule); ``in_sample`` rows are those
    of the model's training collections, whose verdict uses the shipped threshold."""
    from train.face_occlusion import threshold_for
    from verilive.face.occlusion import OcclusionModel

    m = OcclusionModel.load(model)
    score = np.zeros(sc.n)
    found = np.flatnonzero(sc["found"])
    for k in range(0, len(found), 256):
        ix = found[k : k + 256]
        score[ix] = m.region_scores(sc["faces"][ix]).max(1)
    coll, (covered, _) = sc["collection"], is_covered(sc)
    trained = np.isin(coll, m.meta["trained_on"]) & (sc["role"] == "train")
    choose = sc["found"] & ~trained & np.isin(sc["label"], ("live", "occluded"))
    flag = score >= 0.5
    for c in sorted(set(coll[choose])):
        m_c = coll == c
        flag[m_c] = score[m_c] >= threshold_for(score, covered, coll, choose & ~m_c)
    return flag, trained


def validation_tables(sc: Scores, model: Path | None) -> list[str]:
    """Refusals per live collection (each collection's occlusion verdict chosen without it) under each
    candidate of CANDIDATES, and the share of the real-occlusion set still refused."""
    flag, trained = occlusion_loco(sc, model)
    label, coll = sc["label"], sc["collection"]
    covered, doubtful = is_covered(sc)
    live = (label == "live") & ~covered & ~doubtful
    codes = {
        name: revalidate(sc, dataclasses.replace(Validation(), **kw), flag) for name, kw in CANDIDATES.items()
    }
    names = list(CANDIDATES)
    lines = ["| live collection | photos | service before (cue rule) | " + " | ".join(names) + " |",
             "|---|---:|---:|" + "---:|" * len(names)]  # fmt: skip
    worst = dict.fromkeys(names, 0.0)
    for c in sorted(set(coll[live])):
        m = live & (coll == c)
        before = float(np.mean(sc["codes"][m] != "OK"))
        cells = []
        for n in names:
            r = float(np.mean(codes[n][m] != "OK"))
            worst[n] = max(worst[n], r)
            cells.append(pct(r))
        tag = " (occlusion in-sample)" if trained[m].any() else ""
        lines.append(f"| {c}{tag} | {m.sum()} | {pct(before)} | " + " | ".join(cells) + " |")
    lines.append("| **worst** | | | " + " | ".join(pct(worst[n]) for n in names) + " |")
    lines.append("| **pooled** | " + f"{live.sum()} | {pct(float(np.mean(sc['codes'][live] != 'OK')))} | "
                 + " | ".join(pct(float(np.mean(codes[n][live] != "OK"))) for n in names) + " |")  # fmt: skip
    cov = covered & sc["found"]
    lines += ["", "Real covered faces (a face was found) refused by validation, and by FACE_IS_OCCLUDED:", ""]
    for n, c in [*codes.items(), ("service before (cue rule)", sc["codes"])]:
        refused = pct(float(np.mean(c[cov] != "OK")))
        as_covered = pct(float(np.mean(c[cov] == "FACE_IS_OCCLUDED")))
        lines.append(f"- {n}: {refused} refused, {as_covered} as covered, of {cov.sum()}")
    groups = {
        "covered": ("FACE_IS_OCCLUDED",),
        "pose": ("FACE_ANGLE_TOO_LARGE",),
        "face past the edge": ("FACE_CLOSE_TO_BORDER", "FACE_CROPPED"),
        "several faces": ("TOO_MANY_FACES",),
        "no face / too small": (
            "FACE_NOT_FOUND",
            "FACE_TOO_SMALL",
            "IMAGE_TOO_SMALL",
            "FAILED_TO_READ_IMAGE",
        ),
    }
    c = codes[CHOSEN]
    header = "| live collection | photos | " + " | ".join(groups) + " |"
    lines += [
        "",
        f"Refusals of uncovered live faces by cause, {CHOSEN}:",
        "",
        header,
        "|---|---:|" + "---:|" * len(groups),
    ]
    for coll_name in sorted(set(coll[live])):
        m = live & (coll == coll_name)
        cells = [pct(float(np.mean(np.isin(c[m], g)))) for g in groups.values()]
        lines.append(f"| {coll_name} | {m.sum()} | " + " | ".join(cells) + " |")
    cells = [pct(float(np.mean(np.isin(c[live], g)))) for g in groups.values()]
    lines.append(f"| **pooled** | {live.sum()} | " + " | ".join(cells) + " |")
    from collections import Counter

    for n in (names[0], names[-1]):
        cnt = Counter(codes[n][live & (codes[n] != "OK")])
        lines.append(
            f"\nRefusal codes of live faces, {n}: " + ", ".join(f"{k} {v}" for k, v in cnt.most_common())
        )
    return lines


def shipped(sc: Scores, fusion: Path | None = None) -> dict[str, np.ndarray]:
    """Each pipeline's score with the shipped head, fusion and REGULAR / HARDENED / SOFT offsets (the
    build before issue 47), in the layout of :func:`loco` (a threshold of minus the offset)."""
    from verilive.face.backbone import BackboneHead
    from verilive.face.fusion import load_fusion
    from verilive.face.pipelines import Calibration

    feats = sc["feats"].astype(np.float32)
    bb = BackboneHead.load().live_log_odds(feats[:, :1280], feats[:, 1280:])
    s = branch_dict(sc, np.where(sc["found"], bb, 0.0))
    out = {}
    for p, f in load_fusion(fusion).items():
        if p not in PIPES:
            continue
        out[f"{p}_score"] = f.fuse(s)
        for k in TARGET_BPCER:
            out[f"{p}_{k.lower()}"] = np.full(sc.n, -f.offsets[Calibration(k)])
    return out


def write_models(sc: Scores, ok: np.ndarray) -> None:
    """The shipped backbone head (on every train-role collection) and fusion.json (every collection's
    validated photos, the head's scores out of collection), thresholds at TARGET_BPCER of the validated,
    uncovered live photos, each collection weighing the same."""
    import json
    from dataclasses import replace

    from train.face_pad_backbone import fit_head
    from train.face_pad_fusion import FUSION_OUT, bpcer_threshold, fit
    from verilive.face import backbone as bb_module

    label, coll, role = sc["label"], sc["collection"], sc["role"]
    pad = np.isin(label, ("live", "attack")) & sc["found"]
    y = (label == "live").astype(np.float64)
    x = sc["feats"].astype(np.float32)
    train = pad & (role == "train")
    covered, doubtful = is_covered(sc)
    live = pad & ok & (y > 0.5) & ~covered & ~doubtful
    w_live = balanced(coll, live, THRESHOLD_CAP)
    oof = backbone_oof(x, y, coll, train, pad)
    s = branch_dict(sc, oof)
    w, b, mu, sd = fit_head(x[train], y[train], HEAD_C)
    with np.load(bb_module.HEAD_FILE) as old:
        scale, texture = float(old["scale"]), bool(old["texture"])
    head_thr = [bpcer_threshold(oof[live], t, w_live[live]) for t in TARGET_BPCER.values()]
    np.savez(
        bb_module.HEAD_FILE,
        weights=(w / sd).astype(np.float32),
        bias=np.float64(b - np.sum(w * mu / sd)),
        thresholds=np.asarray(head_thr, np.float64),  # SOFT, REGULAR, HARDENED
        scale=np.float64(scale),
        texture=np.bool_(texture),
    )
    print(f"wrote {bb_module.HEAD_FILE}: head on {int(train.sum())} train-role photos")
    pipelines = {}
    for pipe, name in PIPES.items():
        f = fit(s, name, pad & ok, y)
        z = f.score(s)
        thr = {k: bpcer_threshold(z[live], t, w_live[live]) for k, t in TARGET_BPCER.items()}
        shift = -thr["REGULAR"]  # score >= 0 is live at REGULAR
        f = replace(f, bias=f.bias + shift, guard_bias=f.guard_bias + shift)
        pipelines[pipe] = {
            "candidate": name,
            **f.to_json(),
            "offsets": {k: round(thr["REGULAR"] - t, 4) for k, t in thr.items()},
            "target_bpcer": TARGET_BPCER,
        }
    doc = {
        "trained_by": "python -m train.face_pad_loco report --scores SCORES --write (issue 47)",
        "pipelines": pipelines,
    }
    FUSION_OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {FUSION_OUT}")


def recalibrated(sc: Scores, ok: np.ndarray, base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The shipped fusion's scores with each collection's REGULAR / HARDENED / SOFT thresholds set at
    TARGET_BPCER of the validated, uncovered live photos of the *other* collections (capped weights)."""
    from train.face_pad_fusion import bpcer_threshold

    covered, doubtful = is_covered(sc)
    coll = sc["collection"]
    live = (sc["label"] == "live") & ~covered & ~doubtful & ok
    out = {}
    for p in PIPES:
        s = base[f"{p}_score"]
        out[f"{p}_score"] = s
        for k, t in TARGET_BPCER.items():
            thr = np.full(sc.n, np.nan)
            for h in np.unique(coll):
                sel = live & (coll != h)
                w = balanced(coll, sel, THRESHOLD_CAP)
                thr[coll == h] = bpcer_threshold(s[sel], t, w[sel])
            out[f"{p}_{k.lower()}"] = thr
    return out


def write_calibration(sc: Scores, ok: np.ndarray, base: dict[str, np.ndarray], source: Path | None) -> None:
    """fusion.json with the weights of ``source`` (the fusion that scored ``base``; default the packaged
    one) and the thresholds at TARGET_BPCER of every collection's
    validated, uncovered live photos (capped weights); the score shifted so that REGULAR's is 0."""
    import json

    from train.face_pad_fusion import FUSION_OUT, bpcer_threshold

    covered, doubtful = is_covered(sc)
    live = (sc["label"] == "live") & ~covered & ~doubtful & ok
    w = balanced(sc["collection"], live, THRESHOLD_CAP)
    doc = json.loads((source or FUSION_OUT).read_text())
    for p in PIPES:
        s = base[f"{p}_score"]
        thr = {k: bpcer_threshold(s[live], t, w[live]) for k, t in TARGET_BPCER.items()}
        d = doc["pipelines"][p]
        d["bias"] = round(d["bias"] - thr["REGULAR"], 6)
        if d.get("guard"):
            d["guard"]["bias"] = round(d["guard"]["bias"] - thr["REGULAR"], 6)
        d["offsets"] = {k: round(thr["REGULAR"] - t, 4) for k, t in thr.items()}
        d["target_bpcer"] = TARGET_BPCER
    doc["trained_by"] += " && python -m train.face_pad_loco report --scores SCORES --write-calibration"
    FUSION_OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {FUSION_OUT}")


def pct(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{100 * v:.1f} %"


def tables(sc: Scores, ok: np.ndarray, lo: dict[str, np.ndarray], pipe: str = "ensemble") -> list[str]:
    """Markdown: BPCER per live collection (validation refusals counted) and APCER per attack type at
    REGULAR, each collection scored by the models and thresholds that never saw it."""
    label, coll, at = sc["label"], sc["collection"], sc["attack_type"]
    live_dec = ok & (lo[f"{pipe}_score"] >= lo[f"{pipe}_regular"])
    lines = [f"Pipeline `{pipe}`, REGULAR.\n",
             "| live collection | role | photos | refused by validation | judged attack | BPCER |",
             "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    bp = []
    covered, doubtful = is_covered(sc)
    eligible = (label == "live") & ~covered & ~doubtful  # a covered live face is refused by design
    for c in sorted(set(coll[eligible])):
        m = (coll == c) & eligible
        refused = float(np.mean(~ok[m]))
        judged = float(np.mean(~live_dec[m & ok])) if (m & ok).any() else float("nan")
        b = float(np.mean(~live_dec[m]))
        bp.append(b)
        lines.append(f"| {c} | {sc['role'][m][0]} | {m.sum()} | {pct(refused)} | {pct(judged)} | {pct(b)} |")
    live = eligible
    mean, worst, pooled = (
        pct(float(np.mean(bp))),
        pct(float(np.max(bp))),
        pct(float(np.mean(~live_dec[live]))),
    )
    summary = (
        f"BPCER over live collections: mean {mean}, worst {worst}, pooled {pooled} ({live.sum()} photos)."
    )
    lines += ["", summary,
              "",
              "| attack type | collections | photos | refused by validation | APCER (of those judged) |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    ap = []
    for t in sorted(set(at[label == "attack"])):
        m = (label == "attack") & (at == t)
        a = float(np.mean(live_dec[m & ok])) if (m & ok).any() else float("nan")
        ap.append(a)
        lines.append(f"| {t} | {len(set(coll[m]))} | {m.sum()} | {pct(float(np.mean(~ok[m])))} | {pct(a)} |")
    att = label == "attack"
    fin = [a for a in ap if np.isfinite(a)]
    mean, worst, pooled = (
        pct(float(np.mean(fin))),
        pct(float(np.max(fin))),
        pct(float(np.mean(live_dec[att & ok]))),
    )
    judged = int((att & ok).sum())
    lines += ["", f"APCER over attack types: mean {mean}, worst {worst}, pooled {pooled} of {judged} "
              "judged.", ""]  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("--index", type=Path, action="append", default=[])
    ex.add_argument("--no-shared", action="store_true")
    ex.add_argument("--data", type=Path, default=None)
    ex.add_argument("--frames", type=Path, default=Path("/tmp/vl-face-frames"))
    ex.add_argument("--out", type=Path, required=True)
    rp = sub.add_parser("report")
    rp.add_argument("--scores", type=Path, required=True)
    rp.add_argument("--validation", choices=list(CANDIDATES), default=CHOSEN)
    rp.add_argument("--write", action="store_true", help="write the refitted head and fusion.json")
    rp.add_argument(
        "--before",
        type=Path,
        default=None,
        help="the fusion.json of the build before (git show 9b1f060:src/verilive/face/fusion.json)",
    )
    rp.add_argument(
        "--write-calibration", action="store_true", help="write fusion.json's thresholds (weights kept)"
    )
    rp.add_argument("--int8", action="store_true", help="the backbone branch on the int8 build's features")
    vp = sub.add_parser("validation")
    vp.add_argument("--scores", type=Path, required=True)
    vp.add_argument("--model", type=Path, default=None, help="occlusion ONNX (default: the packaged one)")
    args = ap.parse_args()
    if args.cmd == "validation":
        print("\n".join(validation_tables(load_scores(args.scores), args.model)))
        return
    if args.cmd == "report":
        sc = load_scores(args.scores)
        if args.int8:  # the int8 backbone build's features: its head is trained (and written) on them
            sc.z["feats"] = sc.z["feats8"]
        flag, _ = occlusion_loco(sc, None)
        ok = revalidate(sc, dataclasses.replace(Validation(), **CANDIDATES[args.validation]), flag) == "OK"
        print(f"Validation: {args.validation}; {int(ok.sum())} of {sc.n} images judged.\n")
        print("## As shipped before issue 47 (head, fusion and offsets unchanged)\n")
        base = shipped(sc, args.before)
        for pipe in PIPES:
            print("\n".join(tables(sc, ok, base, pipe)))
        print("## Shipped head and fusion, thresholds set without the collection scored (issue 47)\n")
        recal = recalibrated(sc, ok, base)
        for pipe in PIPES:
            print("\n".join(tables(sc, ok, recal, pipe)))
        np.savez(args.scores.with_suffix(".recal8.npz" if args.int8 else ".recal.npz"), ok=ok, **recal)
        if args.write_calibration:
            write_calibration(sc, ok, base, args.before)
            return
        print("## Head, fusion and thresholds refitted without the collection scored (tried)\n")
        lo = loco(sc, ok)
        for pipe in PIPES:
            print("\n".join(tables(sc, ok, lo, pipe)))
        np.savez(args.scores.with_suffix(".loco8.npz" if args.int8 else ".loco.npz"), ok=ok, **lo)
        if args.write:
            write_models(sc, ok)
        return
    if args.cmd == "extract":
        rows = [] if args.no_shared else list(shared_rows(data_root(args.data), args.frames))
        for ix in args.index:
            rows.extend(index_rows(ix))
        print(f"{len(rows)} images in {len({r['collection'] for r in rows})} collections", flush=True)
        extract(rows, args.out)


if __name__ == "__main__":
    main()

"""Face PAD training and evaluation data: real prints and replays, real live photos, simulated masks.

    python -m train.face_pad_data            # builds the cache (about 5 min on 2 cores)

Writes ``$VERILIVE_FACEPAD_CACHE`` (default /tmp/verilive-facepad): ``items.json`` (one row per image:
path, label, attack family, split group, fold, face box and landmarks) and ``crops.npz`` (the crops of
every branch for every item). Nothing from ../shared is written into the repository.

* Real images: ``face/pad_feni_sfas`` (413 prints, 77 replays and recaptures, 529 live). Its subjects are
  not labelled and repeat a lot, so images are grouped by **session** (runs of file numbers, camera
  timestamps within minutes, one group per named enrolment photo, one per paper-type series), and
  groups whose face crops are near-identical are merged (the same printed photo in two sessions).
  Groups are dealt into ``FOLDS`` folds; everything made from an image stays in its fold.
* Live photographs of people outside pad_feni_sfas (``real_faces_misc``, ``pad_silentface`` T*) and the
  pad_silentface attacks (F*) are evaluation only, fold ``-1``.
* Simulated attacks (common.face_attack_sim): paper masks worn over a real head, cut-outs held up, printed
  faces on mannequins. Each is made from two live photos of one fold (a source face and a target head
  from different groups), so a fold's simulated attacks share no photograph with another fold. Their
  print looks (chroma, ink black, paper white, softness) are drawn from the real prints of the same fold.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np
from common.face_attack_sim import (
    PaperLook,
    cutout_attack,
    mannequin_attack,
    paper_mask_attack,
    print_attack,
    replay_attack,
)
from common.repo import data_root

from verilive.config import Settings
from verilive.face import facepad
from verilive.face.detector import FaceDetector
from verilive.face.engine import face_xywh
from verilive.face.minifasnet import SCALES, V1SE, V2
from verilive.face.minifasnet import crop as mini_crop
from verilive.models.sessions import ModelRegistry

CACHE = Path(os.environ.get("VERILIVE_FACEPAD_CACHE", "/tmp/verilive-facepad"))
FOLDS = 4
SEED = 20261124
# Families of attack, real and simulated; "live" is the bona fide class.
REAL_FAMILIES = ("print", "replay")
SIM_FAMILIES = ("mask", "cutout", "mannequin", "print_sim", "replay_sim")
# Simulated attacks per fold and family: about as many masks as the fold's real prints. Simulated
# prints and screen replays (the older simulator) add to the few real replays; for leave one family
# out they leave with their real family.
SIM_PER_FOLD = {"mask": 110, "cutout": 70, "mannequin": 40, "print_sim": 30, "replay_sim": 60}
# Near-identical face crops (grey 24x24, correlation) join one group.
SAME_PHOTO_CORR = 0.93


@dataclass
class Item:
    path: str  # relative to the data root, or to the cache for simulated images
    label: str  # "live" or "attack"
    family: str  # "live", "print", "replay", "mask", "cutout", "mannequin"
    group: str
    fold: int
    box: list[float] | None = None
    landmarks: list[list[float]] | None = None
    detail: str = ""


# ------------------------------------------------------------------ inventory and groups


def _session_key(folder: str, stem: str) -> tuple[str, float | None]:
    """(series, time-like number) of a file name: files of one series close in number are one session."""
    if m := re.fullmatch(r"(\d{10})", stem):
        return f"{folder}/unix", float(m[1])
    if m := re.match(r"(?:IMG)?(\d{8})_?(\d{6})", stem):
        day, t = m[1], m[2]
        return f"{folder}/{day}", int(t[:2]) * 3600 + int(t[2:4]) * 60 + float(t[4:6])
    if m := re.fullmatch(r"(\d{6})", stem):
        return f"{folder}/hhmmss", int(stem[:2]) * 3600 + int(stem[2:4]) * 60 + float(stem[4:])
    if m := re.fullmatch(r"(\d{1,5})\.?", stem):
        return f"{folder}/num", float(m[1]) * 60  # frame numbers: 10 apart ~ 10 minutes
    if m := re.match(r"([A-Za-z0-9]+(?:_[A-Za-z]+)*)_img_\d+", stem):
        return f"{folder}/{m[1]}", None  # one paper-type series
    return f"{folder}/{stem}", None  # a named enrolment photo: one person


SESSION_GAP_S = 120.0


def session_groups(names: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Group id of each (folder, file stem): series split where the time-like number jumps."""
    by_series: dict[str, list[tuple[float, tuple[str, str]]]] = defaultdict(list)
    out: dict[tuple[str, str], str] = {}
    for folder, stem in names:
        series, t = _session_key(folder, stem)
        if t is None:
            out[(folder, stem)] = series
        else:
            by_series[series].append((t, (folder, stem)))
    for series, rows in by_series.items():
        rows.sort()
        k, last = 0, None
        for t, key in rows:
            if last is not None and t - last > SESSION_GAP_S:
                k += 1
            out[key] = f"{series}#{k}"
            last = t
    return out


def feni_items(root: Path) -> list[Item]:
    base = root / "face" / "pad_feni_sfas"
    rows = [line.split(",") for line in (base / "labels.csv").read_text().splitlines()[1:]]
    items = []
    for r in rows:
        file, label, attack = r[0], r[1], r[2]
        family = "live" if label == "live" else ("print" if attack.startswith("print") else "replay")
        items.append(
            Item(f"face/pad_feni_sfas/{file}", "live" if label == "live" else "attack", family, "", 0)
        )
    keys = [(Path(i.path).parent.name, Path(i.path).stem) for i in items]
    groups = session_groups(keys)
    for it, k in zip(items, keys, strict=True):
        it.group = groups[k]
    return items


def outside_items(root: Path) -> list[Item]:
    """Evaluation-only images (fold -1): live people outside pad_feni_sfas and the pad_silentface attacks."""
    out = []
    for p in sorted((root / "face" / "pad_silentface").glob("image_*.jpg")):
        live = p.stem.startswith("image_T")
        out.append(
            Item(
                str(p.relative_to(root)),
                "live" if live else "attack",
                "live" if live else "print",
                p.stem,
                -1,
            )
        )
    misc = root / "face" / "real_faces_misc" / "face_recognition"
    for p in sorted(misc.glob("*.jpg")):
        if "partial" not in p.stem:
            out.append(Item(str(p.relative_to(root)), "live", "live", p.stem, -1))
    return out


def _thumb(img: np.ndarray, box: list[float]) -> np.ndarray:
    c = facepad.crop(img, box)
    g = cv2.resize(cv2.cvtColor(c, cv2.COLOR_BGR2GRAY), (24, 24), interpolation=cv2.INTER_AREA).astype(
        np.float64
    )
    g -= g.mean()
    return g.ravel() / max(np.linalg.norm(g), 1e-9)


def merge_same_photo(items: list[Item], thumbs: dict[int, np.ndarray]) -> None:
    """Union groups whose face crops are near-identical (the same printed photo shown twice)."""
    parent: dict[str, str] = {it.group: it.group for it in items}

    def find(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    idx = sorted(thumbs)
    mat = np.stack([thumbs[i] for i in idx])
    corr = mat @ mat.T
    for a, b in zip(*np.nonzero(np.triu(corr, 1) > SAME_PHOTO_CORR), strict=True):
        ga, gb = find(items[idx[a]].group), find(items[idx[b]].group)
        if ga != gb:
            parent[gb] = ga
    for it in items:
        it.group = find(it.group)


def _spread(counts: np.ndarray, k: int, v: np.ndarray) -> float:
    c = counts.copy()
    c[k] += v
    return float((c / np.maximum(c.sum(0), 1)).var(axis=0).sum())


def deal_folds(items: list[Item], folds: int, seed: int) -> None:
    """Groups into folds: largest first, each to the fold with the fewest images of its family."""
    rng = np.random.default_rng(seed)
    groups: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        groups[it.group].append(it)
    order = sorted(groups, key=lambda g: (-len(groups[g]), rng.random()))
    counts = np.zeros((folds, 3))
    fam_ix = {"live": 0, "print": 1, "replay": 2}
    for g in order:
        v = np.zeros(3)
        for it in groups[g]:
            v[fam_ix[it.family]] += 1
        # The fold whose per-family counts, after taking this group, are most even with the others.
        f = int(np.argmin([_spread(counts, k, v) for k in range(folds)]))
        counts[f] += v
        for it in groups[g]:
            it.fold = f


# ------------------------------------------------------------------ print looks


def paper_looks(crops: np.ndarray, families: list[str]) -> list[PaperLook]:
    """One :class:`PaperLook` per real print crop, relative to the live crops given beside them."""
    grey = crops.astype(np.float32).mean(axis=3)
    chroma = np.abs(crops.astype(np.float32) - grey[..., None]).mean(axis=(1, 2, 3))
    sharp = np.array([cv2.Laplacian(g, cv2.CV_32F).std() for g in grey])
    live = np.array([f == "live" for f in families])
    prints = np.array([f == "print" for f in families])
    c0, s0 = float(np.median(chroma[live])), float(np.median(sharp[live]))
    looks = []
    for i in np.flatnonzero(prints):
        lo, hi = np.percentile(grey[i], [1, 99])
        looks.append(
            PaperLook(float(chroma[i] / c0), float(lo), float(max(hi, lo + 20)), float(sharp[i] / s0))
        )
    return looks


# ------------------------------------------------------------------ build


def all_crops(img: np.ndarray, box: list[float]) -> dict[str, np.ndarray]:
    xywh = face_xywh_from_box(box)
    return {
        "facepad": facepad.crop(img, box),
        V2: mini_crop(img, xywh, SCALES[V2]),
        V1SE: mini_crop(img, xywh, SCALES[V1SE]),
    }


def face_xywh_from_box(box: list[float]) -> tuple[int, int, int, int]:
    from verilive.face.detector import Face

    return face_xywh(Face(tuple(box), 1.0, np.zeros((5, 2), np.float32), 0.0, 0.0, 0.0))  # type: ignore[arg-type]


def build(root: Path, cache: Path, seed: int = SEED) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "sim").mkdir(exist_ok=True)
    settings = Settings()
    detector = FaceDetector.from_registry(ModelRegistry(settings))
    items = feni_items(root) + outside_items(root)
    images: dict[int, np.ndarray] = {}
    kept: list[Item] = []
    for it in items:
        img = cv2.imread(str(root / it.path), cv2.IMREAD_COLOR)
        faces = detector.detect(img) if img is not None else []
        if not faces:
            continue
        f = faces[0]
        it.box = [float(v) for v in f.box]
        it.landmarks = np.asarray(f.landmarks, np.float64).tolist()
        images[len(kept)] = img
        kept.append(it)
    feni = [i for i, it in enumerate(kept) if it.fold >= 0]
    merge_same_photo(kept, {i: _thumb(images[i], kept[i].box) for i in feni})  # type: ignore[arg-type]
    deal_folds([kept[i] for i in feni], FOLDS, seed)
    crops: dict[str, list[np.ndarray]] = defaultdict(list)
    for i, it in enumerate(kept):
        for k, c in all_crops(images[i], it.box).items():  # type: ignore[arg-type]
            crops[k].append(c)
    fp = np.stack(crops["facepad"])
    rng = np.random.default_rng(seed)
    sims: list[Item] = []
    for fold in range(FOLDS):
        ix = [i for i in feni if kept[i].fold == fold]
        # Print looks are four numbers per real print; a fold with few prints borrows all of them.
        looks = paper_looks(fp[feni], [kept[i].family for i in feni])
        live = [i for i in ix if kept[i].family == "live"]
        for family, n in SIM_PER_FOLD.items():
            for k in range(n):
                a = int(rng.choice(live))
                # Another session's head when the fold has one; else another photo of this session.
                others = [i for i in live if kept[i].group != kept[a].group] or [i for i in live if i != a]
                b = int(rng.choice(others))
                look = looks[int(rng.integers(len(looks)))]
                src, src_lm = images[a], np.asarray(kept[a].landmarks)
                if family == "mask":
                    out, detail = paper_mask_attack(
                        images[b], np.asarray(kept[b].landmarks), src, src_lm, rng, look
                    )
                elif family == "cutout":
                    over_face = rng.random() < 0.5
                    bg = images[b]
                    out, detail = cutout_attack(
                        bg, np.asarray(kept[b].landmarks) if over_face else None, src, src_lm, rng, look
                    )
                elif family == "mannequin":
                    out, detail = mannequin_attack(src, src_lm, rng, look)
                elif family == "print_sim":
                    out, detail = print_attack(src, rng, str(rng.choice(["halftone", "diffusion"])))
                else:
                    out, detail = replay_attack(src, rng, framed=bool(rng.random() < 0.5))
                name = f"sim/{family}_{fold}_{k:03d}.jpg"
                cv2.imwrite(str(cache / name), out, [cv2.IMWRITE_JPEG_QUALITY, 95])
                faces = detector.detect(out)
                if not faces:
                    continue
                f = faces[0]
                it = Item(name, "attack", family, f"sim:{kept[a].group}", fold, [float(v) for v in f.box])
                it.landmarks = np.asarray(f.landmarks, np.float64).tolist()
                it.detail = detail
                for key, c in all_crops(out, it.box).items():  # type: ignore[arg-type]
                    crops[key].append(c)
                sims.append(it)
    kept += sims
    np.savez_compressed(cache / "crops.npz", **{k: np.stack(v) for k, v in crops.items()})
    (cache / "items.json").write_text(json.dumps([asdict(it) for it in kept], indent=0))
    summary: dict[tuple[int, str], int] = defaultdict(int)
    for it in kept:
        summary[(it.fold, it.family)] += 1
    for key in sorted(summary):
        print(f"fold {key[0]:>2} {key[1]:<10} {summary[key]}")
    print(f"groups: {len({it.group for it in kept if it.fold >= 0 and not it.group.startswith('sim:')})}")


def load_items(cache: Path = CACHE) -> list[Item]:
    return [Item(**d) for d in json.loads((cache / "items.json").read_text())]


def load(cache: Path = CACHE) -> tuple[list[Item], dict[str, np.ndarray]]:
    items = load_items(cache)
    with np.load(cache / "crops.npz") as z:
        crops = {k: z[k] for k in z.files}
    return items, crops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--cache", default=str(CACHE))
    args = ap.parse_args()
    build(data_root(args.data), Path(args.cache))


if __name__ == "__main__":
    main()

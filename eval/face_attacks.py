"""Face liveness attack evaluation: APCER / BPCER per pipeline and calibration, EER, validation.

    python -m eval.face_attacks                 # prints everything, writes docs/face_attacks.png
                                                # and the results block of docs/face-eval.md
    python -m eval.face_attacks --no-docs       # prints only
    python -m eval.face_attacks --save-dir DIR  # also writes every evaluated image to DIR

Data (``../shared/data/face``, or $VERILIVE_SHARED_DIR/data/face):

* **real pad set**: pad_silentface image_T*.jpg (bona fide) and image_F*.jpg (real attacks);
* **bona fide originals**: image_T*, every single-face photo of real_faces_misc (32bit.png is
  obama2.jpg as RGBA and is skipped as a duplicate), and the faces cut from the group photo t1.jpg
  that pass validation at their native resolution;
* **bona fide augmented**: ``--augment`` camera-like variants of each original
  (:func:`common.face_attack_sim.camera_augment`);
* **simulated attacks**: from each original that passes validation, ``--per-source`` print attacks
  of each method (halftone, error diffusion) and replays of each kind (framed, close-up)
  (:mod:`common.face_attack_sim`). All randomness is seeded (``--seed``).

Every image runs through :class:`verilive.face.engine.FaceEngine` for each pipeline. APCER = attacks
judged live / attacks that passed validation; BPCER = bona fide judged spoof / bona fide that passed
validation; an image is live when ``sigmoid(score + offset(calibration)) >= 0.5``, exactly as the
service decides. Validation rejections are counted per error code beside the rates.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from common import metrics
from common.face_attack_sim import camera_augment, print_attack, replay_attack
from common.repo import REPO, data_root, replace_section

from verilive.config import Settings
from verilive.face.engine import ErrorCode, FaceEngine, face_extent
from verilive.face.fusion import load_fusion
from verilive.face.pipelines import PIPELINES, Calibration
from verilive.models.sessions import ModelRegistry

DOCS_MD = REPO / "docs" / "face-eval.md"
DOCS_PNG = REPO / "docs" / "face_attacks.png"
SECTION = "face-attacks"
CALIBRATIONS = (Calibration.SOFT, Calibration.REGULAR, Calibration.HARDENED)

BONA_ORIGINAL, BONA_AUGMENTED = "bona fide original", "bona fide augmented"
REAL_BONA, REAL_ATTACK = "real pad bona fide (T)", "real pad attacks (F)"
SIM_FAMILIES = ("print halftone", "print diffusion", "replay framed", "replay close-up")
# Groups for the rates tables, in display order, with how each group's members are chosen.
BONA_GROUPS = (REAL_BONA, BONA_ORIGINAL, BONA_AUGMENTED)


@dataclass
class Sample:
    name: str
    group: str  # one of BONA_GROUPS, REAL_ATTACK or SIM_FAMILIES
    bona_fide: bool
    data: bytes
    detail: str = ""
    # Filled in by scoring: pipeline -> raw score (None when validation rejected it).
    scores: dict[str, float | None] = field(default_factory=dict)
    error_code: str | None = None


def png(img: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", img)
    if not ok:
        raise ValueError("PNG encoding failed")
    return buf.tobytes()


def read(path: Path) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(path)
    return img


# ------------------------------------------------------------------ building the suite


def group_faces(engine: FaceEngine, group: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each face of the group photo cut out with room around it (2.6 x the face extent wide,
    2.2 x high, at native resolution) and kept only if it passes validation on its own."""
    h, w = group.shape[:2]
    out = []
    for i, face in enumerate(engine.detector.detect(group)):
        x1, y1, x2, y2 = face_extent(face)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        half_w, half_h = 1.3 * (x2 - x1), 1.1 * (y2 - y1)
        a, b = int(max(0, cx - half_w)), int(min(w, cx + half_w))
        c, d = int(max(0, cy - half_h)), int(min(h, cy + half_h))
        crop = group[c:d, a:b].copy()
        if engine.check(png(crop)).ok:
            out.append((f"t1_face{i}", crop))
    return out


def build_suite(
    engine: FaceEngine, face_dir: Path, per_source: int, augment: int, seed: int
) -> tuple[list[Sample], list[str]]:
    """All samples, and notes on what was left out and why."""
    notes: list[str] = []
    samples: list[Sample] = []
    pad = face_dir / "pad_silentface"
    misc = face_dir / "real_faces_misc"
    originals: list[tuple[str, np.ndarray, bytes]] = []
    for f in sorted(pad.glob("image_T*.jpg")):
        originals.append((f.name, read(f), f.read_bytes()))
        samples.append(Sample(f.name, REAL_BONA, True, f.read_bytes()))
    for f in sorted(pad.glob("image_F*.jpg")):
        samples.append(Sample(f.name, REAL_ATTACK, False, f.read_bytes()))
    for f in sorted(p for p in misc.rglob("*") if p.suffix.lower() in (".jpg", ".png")):
        if f.name == "32bit.png":
            notes.append("32bit.png skipped: it is obama2.jpg as an RGBA PNG (same photo)")
            continue
        if f.name == "t1.jpg":
            continue  # the group photo: its faces are cut out below
        originals.append((f.name, read(f), f.read_bytes()))
    group = read(misc / "insightface" / "t1.jpg")
    faces = group_faces(engine, group)
    notes.append(
        f"t1.jpg: {len(faces)} of {len(engine.detector.detect(group))} faces pass validation when cut out "
        f"({', '.join(n for n, _ in faces)})"
    )
    originals += [(n, img, png(img)) for n, img in faces]
    for name, _, data in originals:
        samples.append(Sample(name, BONA_ORIGINAL, True, data))

    usable = []
    for name, img, data in originals:
        r = engine.check(data)
        if r.ok:
            usable.append((name, img))
        else:
            notes.append(
                f"{name}: rejected as bona fide ({r.error_code}); no attacks or augmentations made from it"
            )
    rng = np.random.default_rng(seed)
    for name, img in usable:
        for k in range(augment):
            aug, desc = camera_augment(img, rng)
            samples.append(Sample(f"{name}~aug{k}", BONA_AUGMENTED, True, png(aug), desc))
        for k in range(per_source):
            for method, family in (("halftone", SIM_FAMILIES[0]), ("diffusion", SIM_FAMILIES[1])):
                att, desc = print_attack(img, rng, method)
                samples.append(Sample(f"{name}~{method}{k}", family, False, png(att), desc))
            for framed, family in ((True, SIM_FAMILIES[2]), (False, SIM_FAMILIES[3])):
                att, desc = replay_attack(img, rng, framed)
                tag = "framed" if framed else "closeup"
                samples.append(Sample(f"{name}~{tag}{k}", family, False, png(att), desc))
    return samples, notes


def score_all(engine: FaceEngine, samples: list[Sample], chunk: int = 16) -> None:
    """Raw score of every sample under every pipeline (REGULAR; calibrations are applied after)."""
    for pipeline in PIPELINES:
        for i in range(0, len(samples), chunk):
            part = samples[i : i + chunk]
            for s, r in zip(part, engine.check_images([s.data for s in part], pipeline), strict=True):
                s.scores[pipeline] = r.score
                # Validation does not depend on the pipeline; keep the first and check the others agree.
                if pipeline == PIPELINES[0]:
                    s.error_code = r.error_code
                elif s.error_code != r.error_code:
                    raise AssertionError(f"{s.name}: validation differs between pipelines")


def offset(pipeline: str, calibration: Calibration) -> float:
    return load_fusion()[pipeline].offsets[calibration]


def is_live(score: float, pipeline: str, calibration: Calibration) -> bool:
    return metrics.sigmoid(score + offset(pipeline, calibration)) >= 0.5


# ------------------------------------------------------------------ tables


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} = {100 * k / n:.1f} %" if n else "–"


def rates_table(
    samples: list[Sample], pipeline: str, groups: Iterable[tuple[str, Callable[[Sample], bool]]]
) -> str:
    head = "| group | images | rejected by validation | judged | " + " | ".join(
        f"{c.value} (offset {offset(pipeline, c):+.2f})" for c in CALIBRATIONS
    )
    lines = [head + " |", "|" + "---|" * (4 + len(CALIBRATIONS))]
    for label, pick in groups:
        members = [s for s in samples if pick(s)]
        if not members:
            continue
        judged = [s for s in members if s.scores[pipeline] is not None]
        bona = members[0].bona_fide
        cells = []
        for c in CALIBRATIONS:
            live = sum(is_live(s.scores[pipeline], pipeline, c) for s in judged)  # type: ignore[arg-type]
            errors = len(judged) - live if bona else live
            cells.append(_pct(errors, len(judged)))
        kind = "BPCER" if bona else "APCER"
        lines.append(
            f"| {label} ({kind}) | {len(members)} | {len(members) - len(judged)} | {len(judged)} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def rejection_table(samples: list[Sample], groups: list[str]) -> str:
    codes = [c.value for c in ErrorCode if any(s.error_code == c.value for s in samples)]
    lines = ["| group | images | passed | " + " | ".join(codes) + " |", "|" + "---|" * (3 + len(codes))]
    for g in groups:
        members = [s for s in samples if s.group == g]
        count = Counter(s.error_code for s in members)
        lines.append(
            f"| {g} | {len(members)} | {count[None]} | " + " | ".join(str(count[c]) for c in codes) + " |"
        )
    return "\n".join(lines)


def eer_line(
    samples: list[Sample], pipeline: str, attack: Callable[[Sample], bool], bona: Callable[[Sample], bool]
) -> str:
    pos = [s.scores[pipeline] for s in samples if bona(s) and s.scores[pipeline] is not None]
    neg = [s.scores[pipeline] for s in samples if attack(s) and s.scores[pipeline] is not None]
    if not pos or not neg:
        return "–"
    scores = np.array(pos + neg, dtype=np.float64)
    labels = np.array([True] * len(pos) + [False] * len(neg))
    e, thr = metrics.eer(scores, labels)
    return f"{100 * e:.1f} % (score {thr:+.2f}; {len(pos)} bona fide / {len(neg)} attacks)"


# ------------------------------------------------------------------ validation table


def validation_cases(engine: FaceEngine, face_dir: Path) -> list[tuple[str, str, str | None]]:
    """(how the image was made, expected code, code the engine gave) for each validation code."""
    misc = face_dir / "real_faces_misc"
    portrait = read(misc / "face_recognition" / "obama.jpg")
    h, w = portrait.shape[:2]
    face = engine.detector.detect(portrait)[0]
    ex = face_extent(face)
    lm = face.landmarks
    grey = (200, 200, 200)

    def code(img: np.ndarray) -> str | None:
        return engine.check(png(img)).error_code

    cases: list[tuple[str, str, str | None]] = []
    cases.append(("clean portrait obama.jpg", "none", code(portrait)))
    cases.append(
        ("plain grey 640x480", ErrorCode.FACE_NOT_FOUND, code(np.full((480, 640, 3), 200, np.uint8)))
    )
    cases.append(
        ("group photo t1.jpg", ErrorCode.TOO_MANY_FACES, code(read(misc / "insightface" / "t1.jpg")))
    )
    cases.append(
        ("portrait twice side by side", ErrorCode.TOO_MANY_FACES, code(np.hstack([portrait, portrait])))
    )
    small = np.full((h, w, 3), 200, np.uint8)
    shrunk = cv2.resize(portrait, None, fx=0.15, fy=0.15, interpolation=cv2.INTER_AREA)
    small[500 : 500 + shrunk.shape[0], 400 : 400 + shrunk.shape[1]] = shrunk
    cases.append(
        ("portrait shrunk to 15 % on a canvas of the original size", ErrorCode.FACE_TOO_SMALL, code(small))
    )
    cases.append(("portrait with the left 500 px cut off", ErrorCode.FACE_CROPPED, code(portrait[:, 500:])))
    partial = (misc / "face_recognition" / "obama_partial_face.jpg").read_bytes()
    cases.append(
        ("obama_partial_face.jpg (real half face)", ErrorCode.FACE_CROPPED, engine.check(partial).error_code)
    )
    cases.append(
        (
            "portrait cut 10 px left of the face",
            ErrorCode.FACE_CLOSE_TO_BORDER,
            code(portrait[:, int(ex[0]) - 10 :]),
        )
    )
    big = cv2.copyMakeBorder(portrait, 300, 300, 300, 300, cv2.BORDER_CONSTANT, value=grey)
    bh, bw = big.shape[:2]
    rot = cv2.warpAffine(big, cv2.getRotationMatrix2D((bw / 2, bh / 2), 50, 1.0), (bw, bh), borderValue=grey)
    cases.append(("portrait rotated 50 degrees", ErrorCode.FACE_ANGLE_TOO_LARGE, code(rot)))
    occ = portrait.copy()
    d = float(np.hypot(*(lm[1] - lm[0])))
    for eye in lm[:2]:
        cv2.ellipse(
            occ, (int(eye[0]), int(eye[1])), (int(0.42 * d), int(0.3 * d)), 0, 0, 360, (20, 20, 20), -1
        )
    cases.append(("dark glasses drawn over the eyes", ErrorCode.FACE_IS_OCCLUDED, code(occ)))
    thumb = cv2.resize(portrait, None, fx=0.2, fy=0.2, interpolation=cv2.INTER_AREA)
    cases.append(("portrait shrunk to 182x227", ErrorCode.IMAGE_TOO_SMALL, code(thumb)))
    data = (misc / "face_recognition" / "obama.jpg").read_bytes()
    truncated = engine.check(data[: len(data) // 2]).error_code
    cases.append(("obama.jpg truncated to half its bytes", ErrorCode.FAILED_TO_READ_IMAGE, truncated))
    return [(what, str(exp), got) for what, exp, got in cases]


def validation_table(engine: FaceEngine, face_dir: Path) -> tuple[str, int]:
    group = read(face_dir / "real_faces_misc" / "insightface" / "t1.jpg")
    n = len(engine.detector.detect(group))
    lines = [
        f"Faces detected on the group photo t1.jpg: **{n}** (6 people in it).",
        "",
        "| image made to trigger it | expected | engine | |",
        "|---|---|---|---|",
    ]
    bad = 0
    for what, exp, got in validation_cases(engine, face_dir):
        got_s = got or "none"
        ok = got_s == exp
        bad += not ok
        lines.append(f"| {what} | {exp} | {got_s} | {'ok' if ok else '**differs**'} |")
    return "\n".join(lines), bad + (n != 6)


# ------------------------------------------------------------------ plot


def plot(samples: list[Sample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(PIPELINES), 1, figsize=(9, 3.6 * len(PIPELINES)), sharex=True)
    bins = np.linspace(-16, 16, 65)
    families = [
        (
            "bona fide (original + augmented)",
            lambda s: s.group in (BONA_ORIGINAL, BONA_AUGMENTED),
            "tab:green",
        ),
        ("simulated print", lambda s: s.group.startswith("print"), "tab:orange"),
        ("simulated replay", lambda s: s.group.startswith("replay"), "tab:purple"),
    ]
    for ax, pipeline in zip(np.atleast_1d(axes), PIPELINES, strict=True):
        for label, pick, colour in families:
            v = [s.scores[pipeline] for s in samples if pick(s) and s.scores[pipeline] is not None]
            ax.hist(
                np.clip(v, -15.9, 15.9), bins=bins, alpha=0.45, color=colour, label=f"{label} (n={len(v)})"
            )
        for s in samples:
            sc = s.scores[pipeline]
            if s.group in (REAL_BONA, REAL_ATTACK) and sc is not None:
                colour = "darkgreen" if s.bona_fide else "red"
                ax.axvline(float(np.clip(sc, -15.9, 15.9)), color=colour, lw=1.5, ymax=0.25)
                ax.text(
                    float(np.clip(sc, -15.9, 15.9)),
                    ax.get_ylim()[1] * 0.27,
                    s.name[6:8],
                    color=colour,
                    ha="center",
                    fontsize=8,
                )
        for c, style in zip(CALIBRATIONS, (":", "-", "--"), strict=True):
            ax.axvline(-offset(pipeline, c), color="black", ls=style, lw=1, label=f"{c.value} threshold")
        ax.set_title(
            f"pipeline {pipeline}: raw score (log-odds); short lines = real pad set (T bona fide, F attack)"
        )
        ax.set_ylabel("images")
        ax.legend(fontsize=7, loc="upper left")
    np.atleast_1d(axes)[-1].set_xlabel(
        "raw score; live when score + offset >= 0 (clipped to ±16 for display)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ main


def report(samples: list[Sample], notes: list[str], validation: str, args: argparse.Namespace) -> str:
    out = [
        f"Command: `python -m eval.face_attacks --per-source {args.per_source} --augment {args.augment} "
        f"--seed {args.seed}`",
        "",
        "Suite: "
        + ", ".join(
            f"{g} {sum(s.group == g for s in samples)}" for g in (*BONA_GROUPS, REAL_ATTACK, *SIM_FAMILIES)
        )
        + ".",
        "",
        *[f"- {n}" for n in notes],
        "",
        "### Validation rejections per group (the same for both pipelines)",
        "",
        rejection_table(samples, [*BONA_GROUPS, REAL_ATTACK, *SIM_FAMILIES]),
    ]
    real_groups = [
        (REAL_BONA, lambda s: s.group == REAL_BONA),
        (REAL_ATTACK, lambda s: s.group == REAL_ATTACK),
    ]
    sim_groups = [
        (BONA_ORIGINAL, lambda s: s.group == BONA_ORIGINAL),
        (BONA_AUGMENTED, lambda s: s.group == BONA_AUGMENTED),
        ("all bona fide", lambda s: s.group in (BONA_ORIGINAL, BONA_AUGMENTED)),
        *[(f, lambda s, f=f: s.group == f) for f in SIM_FAMILIES],
        ("all simulated print", lambda s: s.group.startswith("print")),
        ("all simulated replay", lambda s: s.group.startswith("replay")),
        ("all simulated attacks", lambda s: s.group in SIM_FAMILIES),
    ]
    bona_all = lambda s: s.group in (BONA_ORIGINAL, BONA_AUGMENTED)  # noqa: E731
    for pipeline in PIPELINES:
        out += [
            "",
            f"### Pipeline `{pipeline}`",
            "",
            "Real pad set (pad_silentface, 4 images):",
            "",
            rates_table(samples, pipeline, real_groups),
            "",
            "Raw scores of the real pad set: "
            + ", ".join(
                f"{s.name} {s.scores[pipeline]:+.2f}"
                if s.scores[pipeline] is not None
                else f"{s.name} {s.error_code}"
                for s in samples
                if s.group in (REAL_BONA, REAL_ATTACK)
            )
            + ".",
            "",
            "Simulated suite (bona fide: originals and their camera augmentations):",
            "",
            rates_table(samples, pipeline, sim_groups),
            "",
            "EER on raw scores, all bona fide (original + augmented) against:",
            "",
            "| attacks | EER (threshold) |",
            "|---|---|",
            f"| all simulated | {eer_line(samples, pipeline, lambda s: s.group in SIM_FAMILIES, bona_all)} |",
            *[
                f"| {f} | {eer_line(samples, pipeline, lambda s, f=f: s.group == f, bona_all)} |"
                for f in SIM_FAMILIES
            ],
        ]
    out += ["", "### Validation codes", "", validation]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--data", help="shared data folder (default: $VERILIVE_SHARED_DIR/data)")
    p.add_argument("--per-source", type=int, default=3, help="attacks of each kind per bona fide original")
    p.add_argument("--augment", type=int, default=4, help="camera augmentations per bona fide original")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--no-docs", action="store_true", help="write neither docs/face-eval.md nor the plot")
    p.add_argument("--save-dir", help="write every evaluated image here (PNG/JPEG) for inspection")
    args = p.parse_args(argv)

    face_dir = data_root(args.data) / "face"
    settings = Settings()
    engine = FaceEngine.from_registry(ModelRegistry(settings), settings)
    t0 = time.perf_counter()
    samples, notes = build_suite(engine, face_dir, args.per_source, args.augment, args.seed)
    t1 = time.perf_counter()
    score_all(engine, samples)
    t2 = time.perf_counter()
    validation, mismatches = validation_table(engine, face_dir)
    text = report(samples, notes, validation, args)
    print(text)
    print(f"\nbuilt {len(samples)} images in {t1 - t0:.1f} s, scored them in {t2 - t1:.1f} s")
    if args.save_dir:
        d = Path(args.save_dir)
        d.mkdir(parents=True, exist_ok=True)
        with (d / "index.tsv").open("w") as f:
            for i, s in enumerate(samples):
                name = f"{i:03d}_{s.name.replace('/', '_').replace('~', '_')}.img"
                (d / name).write_bytes(s.data)
                sc = "\t".join(str(s.scores[pl]) for pl in PIPELINES)
                f.write(f"{name}\t{s.group}\t{s.error_code}\t{sc}\t{s.detail}\n")
    if not args.no_docs:
        replace_section(DOCS_MD, SECTION, text, title="Results")
        plot(samples, DOCS_PNG)
        print(f"wrote {DOCS_MD.relative_to(REPO)} and {DOCS_PNG.relative_to(REPO)}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())

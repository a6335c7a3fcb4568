"""The 3D check from motion on real live clips, real screen replays and simulated flat attacks.

    python -m eval.motion3d                 # prints the tables, writes docs/motion3d.png and the
                                            # results section of docs/motion3d.md
    python -m eval.motion3d --photos 20 --no-docs   # quicker, prints only

Live and replay: every window of ``--window`` frames (at ``--fps`` frames per second, so 10 frames are
2 s) of each clip of shared/data/face/video_motion, one start per sampled frame. The clips are tracked
once at that frame rate and the windows cut from the track (the service tracks each burst from its own
first frame; the meshes differ only in the first frame's crop).

Simulated attacks (made here, labelled so): real prints of pad_feni_sfas, and live photos of it given a
print look, moved as flat sheets, cut-outs, folded (a crease down the nose) and bent (a cylinder) masks
along hand-held and head-worn trajectories (common/flat_motion_sim.py). Nothing here is trained, and the
thresholds were chosen on the live clips and the first 10 photos' bursts; every photo after those is
held aside from that choice.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from common.face_attack_sim import DEFAULT_LOOK, render_print
from common.flat_motion_sim import flat_burst
from common.repo import REPO, data_root, replace_section
from common.video import read_video, sample

from verilive.face.burst import BurstChecker
from verilive.face.detector import FaceDetector
from verilive.face.mesh import FaceMesh
from verilive.face.motion3d import Motion3D, Thresholds, Verdict, judge, series_counts_against
from verilive.models.sessions import ModelRegistry

DOCS_MD = REPO / "docs" / "motion3d.md"
DOCS_PNG = REPO / "docs" / "motion3d.png"
SECTION = "motion3d-results"
# (shape, motion) of the simulated bursts made from each photo.
SIM_KINDS = (
    ("flat", "hand_tilt"),
    ("flat", "hand_mixed"),
    ("flat", "head_turn"),
    ("cutout", "hand_tilt"),
    ("cutout", "head_turn"),
    ("folded", "head_turn"),
    ("folded", "hand_tilt"),
    ("bent", "head_turn"),
    ("bent", "hand_tilt"),
    ("flat", "approach"),
)
TUNE_PHOTOS = 10  # the first photos' bursts were looked at while choosing the thresholds


def read_clip(path: Path, fps: float) -> list[np.ndarray]:
    frames, src_fps = read_video(path, default_fps=25.0)
    return sample(frames, src_fps, fps)


def clip_windows(checker: BurstChecker, frames: list[np.ndarray], window: int, th: Thresholds) -> list[dict]:
    meshes = checker.meshes(frames)
    h, w = frames[0].shape[:2]
    out = []
    for s in range(0, len(frames) - window + 1):
        ms = meshes[s : s + window]
        if any(m is None for m in ms):
            out.append({"start": s, "verdict": "no_face"})
            continue
        r = judge(np.stack([m.points for m in ms]), w, h, th)
        out.append({"start": s, "verdict": r.verdict.value, "residual": r.residual, "turn": r.face_turn,
                    "ratio": r.rigid_ratio, "result": r})  # fmt: skip
    return out


# How a face series is decided in each VERILIVE_FACE_MOTION3D mode (face/engine.py): True caps the score
# at FLAT_SCORE. "use, before issue 43" is the rule of the releases before it: only a flat verdict.
SERIES_RULES: tuple[tuple[str, Callable[[Motion3D | None], bool]], ...] = (
    ("off", lambda r: series_counts_against(r, "off")),
    ("use, before issue 43 (flat only)", lambda r: r is not None and r.verdict is Verdict.FLAT),
    ("**use** (default: flat, or turned but not rigid)", lambda r: series_counts_against(r, "use")),
    ("require (only 3D keeps its score)", lambda r: series_counts_against(r, "require")),
)


def mode_table(
    live: list[Motion3D | None],
    live_turned: list[Motion3D | None],
    replay: list[Motion3D | None],
    sims: dict[str, list[Motion3D | None]],
) -> list[str]:
    """Per mode: live series kept (not capped), and simulated attacks and replays rejected (capped)."""
    shapes = list(sims)
    lines = [
        "| series mode | live windows kept | live windows with a turn kept | "
        + " | ".join(f"simulated {s} rejected" for s in shapes)
        + " | replay windows rejected |",
        "|---|" + "---:|" * (3 + len(shapes)),
    ]

    def frac(rs: list[Motion3D | None], rule: Callable[[Motion3D | None], bool], hit: bool) -> str:
        n = sum(rule(r) == hit for r in rs)
        return f"{n / max(len(rs), 1):.1%} ({n}/{len(rs)})"

    for name, rule in SERIES_RULES:
        cells = [name, frac(live, rule, False), frac(live_turned, rule, False)]
        cells += [frac(sims[s], rule, True) for s in shapes]
        cells.append(frac(replay, rule, True))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def photos(
    root: Path, n: int, rng: np.random.Generator, det: FaceDetector
) -> list[tuple[str, np.ndarray, tuple]]:
    with open(root / "face" / "pad_feni_sfas" / "labels.csv") as fh:
        rows = list(csv.DictReader(fh))
    prints = [r for r in rows if r["attack_type"].startswith("print")]
    lives = [r for r in rows if r["label"] == "live"]
    picked = []
    for group, kind in ((prints, "print"), (lives, "live photo, print look")):
        order = rng.permutation(len(group))
        got = 0
        for i in order:
            img = cv2.imread(str(root / "face" / "pad_feni_sfas" / group[i]["file"]))
            if img is None:
                continue
            faces = det.detect(img)
            if not faces or faces[0].width < 80:
                continue
            if kind != "print":
                img = render_print(img, rng, DEFAULT_LOOK).astype(np.uint8)
            picked.append((kind, img, faces[0].box))
            got += 1
            if got >= n // 2:
                break
    # Interleave so that the first TUNE_PHOTOS hold both kinds.
    half = len(picked) // 2
    return [p for pair in zip(picked[:half], picked[half:], strict=False) for p in pair]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fps", type=float, default=5.0)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--photos", type=int, default=60)
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--dump", type=Path, help="write every window's and burst's statistics here (JSON)")
    args = ap.parse_args()
    th = Thresholds()
    reg = ModelRegistry()
    det = FaceDetector.from_registry(reg)
    checker = BurstChecker(det, FaceMesh.from_registry(reg), th)
    root = data_root()
    vm = root / "face" / "video_motion"
    with open(vm / "labels.csv") as fh:
        labels = list(csv.DictReader(fh))
    live_rows, replay_rows = [], []
    per_clip = {}
    for row in labels:
        frames = read_clip(vm / row["file"], args.fps)
        res = clip_windows(checker, frames, args.window, th)
        per_clip[row["file"]] = res
        c = Counter(r["verdict"] for r in res)
        (live_rows if row["label"] == "live" else replay_rows).extend(res)
        print(
            f"{row['label']:6s} {row['file']:36s} windows {len(res):3d}  "
            + "  ".join(f"{k} {v}" for k, v in sorted(c.items()))
        )

    def share(rows: list[dict], verdict: str, among: set[str] | None = None) -> tuple[int, int]:
        pool = [r for r in rows if among is None or r["verdict"] in among]
        return sum(r["verdict"] == verdict for r in pool), len(pool)

    # "Enough motion": the mesh read a turn of at least min_turn. Among those windows, a verdict other
    # than 3D (flat, or turned but not rigid) counts against the check.
    turned = [r for r in live_rows if r.get("turn", 0.0) >= th.min_turn]
    l3 = sum(r["verdict"] == "3d" for r in turned)
    ln = len(turned)
    lf = sum(r["verdict"] == "flat" for r in turned)
    lnr = sum(r["verdict"] == "cannot_judge" for r in turned)
    lall = sum(r["verdict"] != "no_face" for r in live_rows)
    lc = lall - ln
    print(f"\nLIVE turned: {ln}; 3D {l3}/{ln} = {l3 / max(ln, 1):.1%}; flat {lf}; not rigid {lnr}")
    print(f"LIVE windows without enough turn: {lc}/{lall} = {lc / max(lall, 1):.1%}")
    judged = {"3d", "flat"}
    r3, rn = share(replay_rows, "3d", judged)
    rf, _ = share(replay_rows, "flat", judged)
    print(f"REPLAY windows judged {rn}: 3D {r3}, flat {rf} (a flat verdict can only lower a score)")

    rng = np.random.default_rng(args.seed)
    pics = photos(root, args.photos, rng, det)
    sim: dict[tuple[str, str], Counter] = defaultdict(Counter)
    sim_held: dict[tuple[str, str], Counter] = defaultdict(Counter)
    # Held-aside bursts by shape ("flat and cut-out" pools the flat sheets), for the mode table.
    sim_results: dict[str, list[Motion3D | None]] = defaultdict(list)
    dump_sims = []
    points = []
    t0 = time.perf_counter()
    for pi, (_kind, img, box) in enumerate(pics):
        for shape, motion in SIM_KINDS:
            b = flat_burst(img, box, rng, shape=shape, motion=motion, frames=args.window)
            r = checker.check(b.frames)
            v = r.verdict.value if r.result is not None else "no_face"
            sim[(shape, motion)][v] += 1
            if pi >= TUNE_PHOTOS:
                sim_held[(shape, motion)][v] += 1
                sim_results[shape].append(r.result)
                if shape in ("flat", "cutout"):
                    sim_results["flat and cut-out"].append(r.result)
            dump_sims.append({"photo": pi, "shape": shape, "motion": motion, "verdict": v} | _stats(r.result))
            if r.result is not None:
                points.append((shape, motion, r.result.residual, r.result.face_turn))
    print(
        f"\nsimulated bursts: {len(pics)} photos x {len(SIM_KINDS)} kinds in {time.perf_counter() - t0:.0f} s"
    )
    lines = [
        "| simulated attack (held-aside photos) | bursts | judged flat | cannot judge | judged 3D "
        "(passes where a turn is asked) | no face |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def pct(c: Counter, k: str) -> str:
        return f"{c[k] / max(sum(c.values()), 1):.1%}"

    for key in SIM_KINDS:
        c = sim_held[key]
        name = f"{key[0]}, {key[1].replace('_', ' ')}"
        row = [
            name,
            str(sum(c.values())),
            pct(c, "flat"),
            pct(c, "cannot_judge"),
            pct(c, "3d"),
            str(c["no_face"]),
        ]
        lines.append("| " + " | ".join(row) + " |")
    print("\n".join(lines))
    modes = mode_table(
        [r.get("result") for r in live_rows],
        [r.get("result") for r in turned],
        [r.get("result") for r in replay_rows],
        {k: sim_results[k] for k in ("flat", "cutout", "flat and cut-out", "folded", "bent")},
    )
    print("\n" + "\n".join(modes))
    if args.dump:
        clips = {f: [{k: v for k, v in r.items() if k != "result"} for r in rs] for f, rs in per_clip.items()}
        args.dump.write_text(json.dumps({"clips": clips, "sims": dump_sims}, indent=1))
    live_lines = [
        "| clip | windows | judged 3D | judged flat | cannot judge | no face |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in labels:
        c = Counter(r["verdict"] for r in per_clip[row["file"]])
        n = sum(c.values())
        cells = [f"{row['label']}: {row['file']} ({row['motion']})", n, c["3d"], c["flat"]]
        cells += [c["cannot_judge"], c["no_face"]]
        live_lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    if args.no_docs:
        return
    try:
        import matplotlib
    except ImportError:  # the eval extra: pip install -e '.[eval]'
        print(f"matplotlib is not installed: {DOCS_PNG.name} is left as it is")
        plot = False
    else:
        matplotlib.use("Agg")
        plot = True

    if plot:
        _plot(live_rows, replay_rows, points, th, args.window, args.fps)
    body = [
        f"Made by `python -m eval.motion3d` ({args.window}-frame windows at {args.fps:g} fps; "
        f"{len(pics)} photos, "
        f"seed {args.seed}; thresholds: turn {th.min_turn} deg, residual {th.max_flat_residual}, "
        f"rigid ratio {th.max_rigid_ratio}, focal {th.focal} x long side).",
        "",
        f"- **Live windows that turned (mesh turn >= {th.min_turn:g} deg) judged 3D: {l3}/{ln} = "
        f"{l3 / max(ln, 1):.1%}** (judged flat: {lf}; turned but not rigid: {lnr}). "
        f"Windows without enough turn (cannot judge): {lc}/{lall} = {lc / max(lall, 1):.1%}.",
        f"- Real screen replays (2 clips): {rn} judged windows, {r3} judged 3D, {rf} flat. "
        "A flat verdict can only lower a score, so the check never makes a replay pass more often.",
        "",
        "Face series (`/check_liveness` with several images) in each `VERILIVE_FACE_MOTION3D` mode: a "
        "series counted against liveness gets at most FLAT_SCORE (-10). Live windows: every window of "
        f"the live clips ({len(live_rows)}, those without the face in every frame included: `require` "
        "caps them, the other modes do not); *with a turn*: mesh turn >= "
        f"{th.min_turn:g} deg ({len(turned)}). Simulated attacks: the held-aside photos' bursts of each "
        "shape, all motions; a burst without the face counts as rejected only under `require`.",
        "",
        "\n".join(modes),
        "",
        "\n".join(lines),
        "",
        "Per clip (real):",
        "",
        "\n".join(live_lines),
        "",
        "![3D check](motion3d.png)",
    ]
    replace_section(DOCS_MD, SECTION, "\n".join(body))


def _plot(
    live_rows: list[dict],
    replay_rows: list[dict],
    points: list[tuple],
    th: Thresholds,
    window: int,
    fps: float,
) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    lr = [(r["residual"], r["turn"]) for r in live_rows if "residual" in r]
    if lr:
        a = np.array(lr)
        ax.scatter(a[:, 1], a[:, 0], s=8, c="tab:green", label="live windows (real clips)", alpha=0.6)
    rr = [(r["residual"], r["turn"]) for r in replay_rows if "residual" in r]
    if rr:
        a = np.array(rr)
        ax.scatter(
            a[:, 1], a[:, 0], s=8, c="tab:orange", marker="x", label="screen replays (real)", alpha=0.6
        )
    for shape, colour in (
        ("flat", "tab:red"),
        ("cutout", "tab:purple"),
        ("folded", "tab:brown"),
        ("bent", "tab:blue"),
    ):
        a = np.array([(p[3], p[2]) for p in points if p[0] == shape])
        if a.size:
            ax.scatter(a[:, 0], a[:, 1], s=8, c=colour, marker="^", label=f"simulated {shape}", alpha=0.5)
    ax.axhline(th.max_flat_residual, color="k", lw=0.8, ls="--")
    ax.axvline(th.min_turn, color="grey", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("head turn read by the mesh, degrees (robust max over the burst)")
    ax.set_ylabel("homography residual / eye-corner distance")
    ax.set_title(f"3D check, {window}-frame bursts at {fps:g} fps")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(DOCS_PNG, dpi=110)


def _stats(r: Motion3D | None) -> dict[str, float | str | None]:
    if r is None:
        return {}
    return {"residual": r.residual, "turn": r.face_turn, "ratio": r.rigid_ratio, "reason": r.reason}


if __name__ == "__main__":
    main()

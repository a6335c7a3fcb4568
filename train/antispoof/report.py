"""Report: result tables (data, in-domain, unseen domain), the model card's result block, the DET plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from common.metrics import eer_between, error_curve, softmax
from common.repo import replace_section

from train.antispoof.fusion import bona_log_odds
from train.antispoof.split import Data
from verilive.voice.antispoof import CLASSES

# The card's result block: the section ``common.repo.replace_section`` keeps between its markers.
CARD_SECTION = "antispoof-results"


def pct(x: float) -> str:
    return "–" if np.isnan(x) else f"{100 * x:.2f} %"


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, s: str = "") -> None:
        print(s, flush=True)
        self.lines.append(s)


def data_table(d: Data, out: Report) -> None:
    out("| class | generator | train | val | test | unseen-domain | minutes | speakers/voices | licence |")
    out("|---|---|---|---|---|---|---|---|---|")
    for cls in CLASSES:
        for g in sorted(set(d.gen[d.lab == cls])):
            idx = np.flatnonzero((d.lab == cls) & (d.gen == g))
            mins = sum(d.clips[i].duration_s for i in idx) / 60
            n = {p: int(np.sum(d.part[idx] == p)) for p in ("train", "val", "test", "ood")}
            spk = len({d.clips[i].speaker for i in idx})
            lic = ", ".join(sorted({d.clips[i].licence for i in idx}))
            out(
                f"| {cls} | {g} | {n['train']} | {n['val']} | {n['test']} | {n['ood']} | {mins:.1f} | {spk} "
                f"| {lic} |"
            )
    out()


def in_domain_tables(d: Data, te: np.ndarray, logits: np.ndarray, out: Report) -> None:
    score = bona_log_odds(logits)
    lab, gen = d.lab[te], d.gen[te]
    spoof = lab != "bonafide"
    bona = score[~spoof]
    out("| attack set | test clips | EER |")
    out("|---|---|---|")
    out(f"| all spoofs pooled | {spoof.sum()} | {pct(eer_between(bona, score[spoof]))} |")
    for cls in CLASSES[1:]:
        m = lab == cls
        out(f"| class {cls} | {m.sum()} | {pct(eer_between(bona, score[m]))} |")
    for cls in CLASSES[1:]:
        for g in sorted(set(gen[lab == cls])):
            m = gen == g
            out(f"| {cls} / {g} | {m.sum()} | {pct(eer_between(bona, score[m]))} |")
    n_spk = len({d.clips[i].speaker for i in te[~spoof]})
    out(f"\n(held-out bona fide: {len(bona)} clips of {n_spk} speakers)\n")
    p = softmax(logits)
    pred = np.array(CLASSES)[p.argmax(axis=1)]
    out(
        f"4-way accuracy {np.mean(pred == lab):.3f}; at P(bona fide) >= 0.5: bona fide rejected "
        f"{np.mean(p[~spoof, 0] < 0.5):.3f}, spoofs accepted {np.mean(p[spoof, 0] >= 0.5):.3f}\n"
    )
    out("| true \\ predicted | " + " | ".join(CLASSES) + " |")
    out("|---|" + "---|" * len(CLASSES))
    for cls in CLASSES:
        row = [int(np.sum((lab == cls) & (pred == c2))) for c2 in CLASSES]
        out(f"| {cls} | " + " | ".join(map(str, row)) + " |")
    out()


def ood_table(
    d: Data, ood: np.ndarray, logits_ood: np.ndarray, te: np.ndarray, logits_te: np.ndarray, out: Report
) -> None:
    p = softmax(logits_ood)
    s_ood, s_te = bona_log_odds(logits_ood), bona_log_odds(logits_te)
    spoof_te = s_te[d.lab[te] != "bonafide"]
    pred = np.array(CLASSES)[p.argmax(axis=1)]
    out(
        "| set | clips | rejected at P(bona fide) < 0.5 | most often taken for | EER vs all held-out spoofs |"
    )
    out("|---|---|---|---|---|")
    for g in sorted(set(d.gen[ood])):
        m = d.gen[ood] == g
        vals, counts = np.unique(pred[m & (pred != "bonafide")], return_counts=True)
        top = vals[counts.argmax()] if counts.size else "–"
        e = eer_between(s_ood[m], spoof_te)
        out(f"| {g} | {m.sum()} | {np.mean(p[m, 0] < 0.5):.3f} | {top} | {pct(e)} |")
    out()


def write_card_tables(text: str, path: Path) -> None:
    """Replace the result block of the model card at ``path`` (its headings demoted one level)."""
    body = text.replace("\n## ", "\n### ").replace("## ", "### ", 1) if text.startswith("## ") else text
    replace_section(path, CARD_SECTION, f"\n{body.strip()}\n")
    print(f"wrote the result tables into {path}")


def parse_logo_rows(text: str) -> list[tuple[str, str, float, float]]:
    """(class, generator, EER left out, EER in-domain) rows of the leave-one-generator-out table."""
    rows = []
    if "## Leave-one-generator-out" not in text:
        return rows
    for line in text.split("## Leave-one-generator-out", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 10 and cells[0] in CLASSES and cells[2] != "–":

            def num(c: str) -> float:
                return float(c.rstrip(" %")) / 100 if c != "–" else float("nan")

            rows.append((cells[0], cells[1], num(cells[3]), num(cells[-1])))
    return rows


def plot_det(
    d: Data, te: np.ndarray, logits: np.ndarray, logo_rows: list[tuple[str, str, float, float]], path: Path
) -> None:
    """Left: DET curves of the shipped model on held-out speakers. Right: leave-one-generator-out EERs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import norm

    score = bona_log_odds(logits)
    lab = d.lab[te]
    bona = score[lab == "bonafide"]
    ticks = [0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8]
    lim = norm.ppf([0.0005, 0.9])
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [1, 1.1]})
    ax.set_title("DET, shipped model, held-out speakers (in-domain)")
    ax.set_xlabel("spoofs accepted (FAR)")
    ax.set_ylabel("bona fide rejected (FRR)")
    ax.set_xticks(norm.ppf(ticks), [f"{100 * t:g}%" for t in ticks])
    ax.set_yticks(norm.ppf(ticks), [f"{100 * t:g}%" for t in ticks])
    ax.set_xlim(*lim)
    ax.set_ylim(*lim)
    ax.grid(True, alpha=0.3)
    ax.plot(lim, lim, "k:", lw=0.8)

    def curve(b: np.ndarray, s: np.ndarray, name: str, **kw: Any) -> None:
        c = error_curve(np.concatenate([b, s]), np.r_[np.ones(len(b), bool), np.zeros(len(s), bool)])
        far, frr = c.p_fa, c.p_miss
        far, frr = np.clip(far, 1e-4, 1 - 1e-4), np.clip(frr, 1e-4, 1 - 1e-4)
        ax.plot(norm.ppf(far), norm.ppf(frr), label=f"{name} (EER {100 * eer_between(b, s):.1f}%)", **kw)

    curve(bona, score[lab != "bonafide"], "all spoofs", lw=2.5, color="k")
    for cls in CLASSES[1:]:
        curve(bona, score[lab == cls], cls)
    ax.legend(fontsize=8, loc="upper right")
    bx.set_title("EER per spoof generator: left out of training vs seen in training")
    if logo_rows:
        names = [f"{c} / {g}" for c, g, _, _ in logo_rows]
        y = np.arange(len(names))
        bx.barh(
            y - 0.2, [100 * e for *_, e, _ in logo_rows], 0.4, label="generator left out", color="tab:red"
        )
        bx.barh(
            y + 0.2,
            [100 * e for *_, e in logo_rows],
            0.4,
            label="in-domain (same schedule)",
            color="tab:gray",
        )
        bx.set_yticks(y, names, fontsize=8)
        bx.invert_yaxis()
        bx.axvline(10, color="k", ls="--", lw=0.8, label="target 10 %")
        bx.set_xlabel("EER (%) vs held-out bona fide")
        bx.legend(fontsize=8, loc="center right")
        bx.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")

"""Voice anti-spoofing: the shipped model, end to end, on the held-out split (docs/antispoof.md).

    python -m train.antispoof_data          # once: builds the labelled clips (~20 min)
    python -m eval.antispoof [--cache DIR] [--no-docs]

Every held-out clip (speakers and TTS voices the model never trained on; the split of
``train.antispoof.split.split_of``, recorded in the model's metadata) and every unseen-domain bona fide
clip (Debian speech packages) goes through ``AntiSpoof.evaluate`` as the service runs it: the
engine's Silero VAD for the suitability checks, then spectrogram, utterance cues, CAM++ front
statistics and the network. Printed: the EER of ``score`` (P(bona fide)) pooled, per attack class,
per generator and per channel (clean wideband, added noise, telephone band), the error rates at
P(bona fide) = 0.5, a 95 % interval for the pooled EERs (bootstrap over speakers and voices), the
unseen-domain rejection, the bona fide rejection per source, the EER without the far-field part of
the data (the test set before it) and of that part alone, the error rates at other accept
thresholds, and how many clips were judged unsuitable (left out of the EERs). Then every clip of
the generators no model is trained on (``train.antispoof_data.EVAL_ONLY``: the LPC vocoder), from
all speakers, against the held-out bona fide: the shipped model on a generator it never saw. Writes
docs/antispoof_eval_det.png (DET per class, with the never-seen generator, and per channel) unless
``--no-docs``.
train/antispoof/ measures the same split on cached features while it trains; this script checks
the exported model through the runtime.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from common.metrics import bootstrap_eer, det_curve, eer, rates_at

DOCS = Path(__file__).resolve().parents[1] / "docs"
OUT_PNG = DOCS / "antispoof_eval_det.png"
CHANNELS = ("clean wideband", "added noise", "telephone band", "codec copy", "real source as published")
SHORT = (1.0, 2.0)  # seconds: the short-clip band, cut from the trimmed held-out clips


def channel_group(channel: str) -> str:
    """The finishing of a clip (train/antispoof_data/finishing.py) in five groups."""
    from train.antispoof_data import CODECS

    if channel.split("+")[-1] in CODECS:
        return "codec copy"
    if channel == "as-published":
        return "real source as published"
    if channel.startswith("tel"):
        return "telephone band"
    if channel.startswith("noise"):
        return "added noise"
    return "clean wideband"


def main() -> None:
    import soundfile as sf
    from train.antispoof.split import split_of
    from train.antispoof_data import DEFAULT_CACHE, EVAL_ONLY, for_training, read_manifest

    from verilive.audio import Audio
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.antispoof import CLASSES, AntiSpoof
    from verilive.voice.engine import VoiceEngine

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()

    if not (args.cache / "manifest.csv").exists():
        raise SystemExit(f"no clips in {args.cache}: run python -m train.antispoof_data first")
    registry = ModelRegistry()
    anti = AntiSpoof.from_engine(VoiceEngine.from_registry(registry), registry)
    clips = read_manifest(args.cache)
    split = split_of(for_training(clips))
    held = set(anti.meta.get("test_speakers", []))
    recorded = {c.speaker for c in for_training(clips) if split[c.speaker] == "test"}
    if held and held != recorded:
        differ = len(held ^ recorded)
        print(f"note: the model's held-out list and this cache's split differ by {differ} speakers")
    # parts: test / ood as split; "eval-only" for every clip of a generator never trained on
    part_of = {c.id: "eval-only" if c.generator in EVAL_ONLY else split[c.speaker] for c in clips}
    chosen = [c for c in clips if part_of[c.id] in ("test", "ood", "eval-only")]
    rows: list[tuple[str, str, str, str, float | None, np.ndarray | None, str, str]] = []
    unsuitable: dict[tuple[str, str, str], int] = {}
    for i, c in enumerate(chosen):
        x, sr = sf.read(args.cache / c.path, dtype="float32", always_2d=True)
        r = anti.evaluate(Audio(x, int(sr)))
        probs = None if r.score is None else np.array([r.score, r.replay, r.tts, r.vc], float)
        part, group = part_of[c.id], channel_group(c.channel)
        rows.append((part, c.label, c.generator, group, r.score, probs, c.speaker, c.id))
        if r.unsuitable:
            why = r.unsuitable.split(":")[0].rstrip(".")
            key = (part_of[c.id], c.label, why)
            unsuitable[key] = unsuitable.get(key, 0) + 1
        if (i + 1) % 200 == 0:
            print(f"  {i + 1}/{len(chosen)} clips", flush=True)

    judged = [r for r in rows if r[4] is not None]
    print(f"\n{len(rows)} clips, {len(rows) - len(judged)} judged unsuitable (left out below)")
    for (part, label, why), n in sorted(unsuitable.items()):
        print(f"  {part} {label}: {n} x {why}")
    test = [r for r in judged if r[0] == "test"]
    p = np.array([r[4] for r in test], float)
    lab = np.array([r[1] for r in test])
    gen = np.array([r[2] for r in test])
    grp = np.array([r[3] for r in test])
    who = np.array([r[6] for r in test])
    # the far-field part of the data: distant-microphone bona fide and Griffin-Lim of it
    far = (gen == "far-field") | np.array([r[7].startswith("gl-room-") for r in test], bool)
    s = np.log(np.clip(p, 1e-12, 1)) - np.log(np.clip(1 - p, 1e-12, 1))  # log-odds of bona fide
    bona = lab == "bonafide"

    def pair_eer(mask_spoof: np.ndarray, mask_bona: np.ndarray = bona) -> float:
        y = np.concatenate([np.ones(mask_bona.sum(), bool), np.zeros(mask_spoof.sum(), bool)])
        return eer(np.concatenate([s[mask_bona], s[mask_spoof]]), y)[0]

    def interval(m: np.ndarray) -> str:
        # clips of one speaker or voice are not independent trials: redraw whole speakers
        lo, hi = bootstrap_eer(s[m], bona[m], who[m])
        return f"95 % interval {lo:.2%}-{hi:.2%}"

    print(f"\nIn-domain (held-out speakers/voices): {bona.sum()} bona fide, {(~bona).sum()} spoof clips")
    print(f"  all spoofs pooled        EER {pair_eer(~bona):6.2%}  {interval(np.ones_like(bona))}")
    for cls in CLASSES[1:]:
        print(f"  class {cls:<18} EER {pair_eer(lab == cls):6.2%}  ({np.sum(lab == cls)} clips)")
    for g in sorted(set(gen[~bona])):
        acc = int(np.sum(p[gen == g] >= 0.5))
        print(f"    {g:<22} EER {pair_eer(gen == g):6.2%}  ({np.sum(gen == g)} clips, {acc} accepted at 0.5)")
    for name in CHANNELS:
        m = grp == name
        print(
            f"  {name:<24} EER {pair_eer(~bona & m, bona & m):6.2%}  "
            f"({np.sum(bona & m)} bona fide, {np.sum(~bona & m)} spoof)  {interval(m)}"
        )
    print(
        f"  without the far-field part  EER {pair_eer(~bona & ~far, bona & ~far):6.2%}  "
        f"({np.sum(bona & ~far)} bona fide, {np.sum(~bona & ~far)} spoof)  {interval(~far)}"
    )
    print(
        f"  far-field bona fide vs Griffin-Lim of it  EER {pair_eer(~bona & far, bona & far):6.2%}  "
        f"({np.sum(bona & far)} bona fide, {np.sum(~bona & far)} spoof)"
    )
    print("  bona fide rejected at P < 0.5, by source:")
    for g in sorted(set(gen[bona])):
        m = bona & (gen == g)
        print(f"    {g:<22} {np.mean(p[m] < 0.5):.3f}  ({m.sum()} clips)")
    print(
        "  at other accept thresholds (bona fide rejected: close-talk / far-field; "
        "spoofs accepted: all / Griffin-Lim):"
    )
    gl = gen == "griffin-lim"
    for t in (0.5, 0.8, 0.9, 0.95):
        print(
            f"    P >= {t:<4}  {np.mean(p[bona & ~far] < t):.3f} / {np.mean(p[bona & far] < t):.3f}"
            f"   {np.mean(p[~bona] >= t):.3f} / {np.mean(p[gl] >= t):.3f}"
        )
    y = bona.astype(bool)
    miss, fa = rates_at(p, y, 0.5)
    print(f"  at P(bona fide) >= 0.5: bona fide rejected {miss:.3f}, spoofs accepted {fa:.3f}")
    pred = np.array([CLASSES[int(np.argmax(r[5]))] for r in test])
    print(f"  4-way accuracy {np.mean(pred == lab):.3f}")

    never = [r for r in judged if r[0] == "eval-only"]
    us = np.array([r[4] for r in never], float)
    lus = np.log(np.clip(us, 1e-12, 1)) - np.log(np.clip(1 - us, 1e-12, 1))  # log-odds, as ``s``
    ug = np.array([r[2] for r in never])
    on_test = np.array([split.get(r[6]) == "test" for r in never], bool)
    if never:
        print("\nGenerators never trained on (EVAL_ONLY), against the held-out bona fide:")
        for g in sorted(set(ug)):
            mg = ug == g
            sel = (
                ("every clip", "close-talk bona fide", mg, bona & ~far),
                ("every clip", "all bona fide", mg, bona),
                ("test speakers' clips", "close-talk bona fide", mg & on_test, bona & ~far),
            )
            for which, name, ms, mb in sel:
                y = np.concatenate([np.ones(mb.sum(), bool), np.zeros(ms.sum(), bool)])
                e = eer(np.concatenate([s[mb], lus[ms]]), y)[0]
                print(f"  {g:<14} {which:<20} ({ms.sum():3d}) vs {name:<21} EER {e:6.2%}")
            acc = "  ".join(f"{np.mean(us[mg] >= t):.3f} at {t}" for t in (0.5, 0.8, 0.9))
            # the attack class of the rejected clips; ties go to the first class in CLASSES
            rej = [CLASSES[int(np.argmax(r[5][1:])) + 1] for r in never if r[2] == g and r[4] < 0.5]
            most = CLASSES[1 + int(np.argmax([rej.count(c) for c in CLASSES[1:]]))] if rej else "-"
            print(f"  {g:<14} accepted: {acc}  ({mg.sum()} clips; rejected ones taken for {most})")

    short_clips(anti, args.cache, [c for c in chosen if part_of[c.id] == "test"])

    ood = [r for r in judged if r[0] == "ood"]
    print("\nUnseen-domain bona fide (never trained on):")
    for g in sorted({r[2] for r in ood}):
        q = np.array([r[4] for r in ood if r[2] == g], float)
        print(f"  {g:<22} rejected at P < 0.5: {np.mean(q < 0.5):.3f}  ({q.size} clips)")

    if not args.no_docs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
        ticks = np.array([0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8])

        def draw(ax, sel: list[tuple[str, np.ndarray, np.ndarray]], title: str) -> None:
            for k, (name, sb, ss) in enumerate(sel):  # bona fide and spoof log-odds
                sc = np.concatenate([sb, ss])
                yy = np.concatenate([np.ones(sb.size, bool), np.zeros(ss.size, bool)])
                d = det_curve(sc, yy)
                ax.plot(d.x, d.y, c="k" if k == 0 else f"C{k - 1}", lw=2 if k == 0 else 1.2,
                        label=f"{name} (EER {eer(sc, yy)[0]:.1%})")  # fmt: skip
            from common.metrics import probit

            ax.set_xticks(probit(ticks), [f"{t:g}" for t in 100 * ticks])
            ax.set_yticks(probit(ticks), [f"{t:g}" for t in 100 * ticks])
            lim = probit(np.array([0.0005, 0.95]))
            ax.set(xlabel="spoofs accepted (%)", ylabel="bona fide rejected (%)", title=title)
            ax.set(xlim=lim, ylim=lim)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="upper right")

        # a never-trained generator: all its clips, against the bona fide of the earlier test set
        unseen = [(f"{g}, never trained on*", s[bona & ~far], lus[ug == g]) for g in sorted(set(ug))]
        draw(axes[0], [("all spoofs", s[bona], s[~bona])] + [(c, s[bona], s[lab == c]) for c in CLASSES[1:]]
             + unseen, "By attack class (held-out speakers; *all speakers)")  # fmt: skip
        draw(
            axes[1],
            [("all channels", s[bona], s[~bona])]
            + [(n, s[bona & (grp == n)], s[~bona & (grp == n)]) for n in CHANNELS],
            "By channel (bona fide and spoof of that channel)",
        )
        fig.suptitle("verilive anti-spoofing, shipped model through AntiSpoof.evaluate (eval/antispoof.py)")
        fig.tight_layout()
        fig.savefig(OUT_PNG, dpi=100)
        print(f"\nwrote {OUT_PNG}")


def short_clips(anti: Any, cache: Path, clips: list[Any]) -> None:
    """1.0-2.0 s crops of the held-out clips (one each, seeded, from the trimmed clip) through
    ``AntiSpoof.evaluate``: how many are declined, and the EER of the judged ones."""
    import soundfile as sf
    from train.antispoof_data import rng_for, trim

    from verilive.audio import Audio

    scores, labels, declined = [], [], {"bonafide": [0, 0], "spoof": [0, 0]}
    for c in clips:
        x, _ = sf.read(cache / c.path, dtype="float32")
        x = trim(x)
        rng = rng_for(f"short/{c.id}")
        n = int(rng.uniform(*SHORT) * 16000)
        if x.size < int(SHORT[0] * 16000):
            continue
        start = int(rng.integers(0, max(1, x.size - n + 1)))
        r = anti.evaluate(Audio(x[start : start + n, None], 16000))
        kind = "bonafide" if c.label == "bonafide" else "spoof"
        declined[kind][1] += 1
        if r.score is None:
            declined[kind][0] += 1
            continue
        scores.append(r.score)
        labels.append(kind == "bonafide")
    p, y = np.array(scores, float), np.array(labels, bool)
    s = np.log(np.clip(p, 1e-12, 1)) - np.log(np.clip(1 - p, 1e-12, 1))
    print(f"\nShort clips ({SHORT[0]:g}-{SHORT[1]:g} s crops of the held-out clips, end to end; in-domain):")
    for kind, (k, n) in declined.items():
        print(f"  {kind:<9} declined {k}/{n} ({k / max(n, 1):.1%})")
    print(f"  EER of the judged crops {eer(s, y)[0]:6.2%}  ({y.sum()} bona fide, {(~y).sum()} spoof)")


if __name__ == "__main__":
    main()

"""Voice anti-spoofing: a frozen Whisper tiny.en probe under leave one source out and leave one new
generator family out (issue 29; docs/antispoof.md, "What we tried").

    python -m train.antispoof_data                  # the cache, with the issue-29 families
    python -m eval.antispoof_whisper_probe [--cache DIR] [--no-docs] [--encoder whisper_base_encoder]

Features: the encoder's residual stream at each of its 5 depths (after the convolutions and after each
block), mean and standard deviation over time, of the first 8 s of the trimmed clip (3,840 values),
unpadded; cached in ``<cache>/<encoder>_stats.npz``. ``--encoder``: a model id of the store
(``whisper_tiny_en_encoder``, the default, or ``whisper_base_encoder``) or an encoder ONNX file.
Classifier: standardisation and a class-balanced logistic regression (C = 0.01), bona fide against
every spoof class.

* Leave one source out (the protocol of ``train.antispoof``): for each of ``LOSO_SOURCES``, fitted on
  every clip whose origin is another source (codec copies included; ``EVAL_ONLY`` generators never),
  scoring the source's clips as published; EER against its own bona fide when it has at least
  ``MIN_OWN_BONA`` clips, else against the pooled out-of-fold bona fide.
* Leave one family out over ``NEW_FAMILIES`` (the families made for issue 29): fitted on every clip
  except that family's (and their codec copies) and except the test-split speakers; the family's
  clips scored against the test-split bona fide, which no fold trained on.

Prints both tables and writes docs/antispoof_whisper_probe.png (EER per source and per family)
unless ``--no-docs``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import soundfile as sf

DOCS = Path(__file__).resolve().parents[1] / "docs"
MAX_SECONDS = 8.0
C = 0.01


def clip_features(encoder: object, path: Path) -> np.ndarray:
    from train.antispoof_data import SR, trim

    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    x = trim(x)[: int(MAX_SECONDS * SR)]
    if x.size < SR // 2:
        x = np.pad(x, (0, SR // 2 - x.size))
    layers = encoder.layers(x)  # type: ignore[attr-defined]
    return np.concatenate([layers.mean(axis=1), layers.std(axis=1)]).reshape(-1).astype(np.float32)


def features(cache: Path, clips: list, model: str) -> np.ndarray:  # type: ignore[type-arg]
    """Layer statistics of every clip by ``model`` (a store model id or an encoder ONNX file),
    cached under its name."""
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.whisper import BASE_MODEL_ID, TINY_EN_MODEL_ID, WhisperEncoder

    by_id = model in (TINY_EN_MODEL_ID, BASE_MODEL_ID)
    store = cache / f"{model if by_id else Path(model).stem}_stats.npz"
    have: dict[str, np.ndarray] = {}
    if store.exists():
        z = np.load(store)
        have = dict(zip(z["ids"].tolist(), z["x"], strict=True))
    todo = [c for c in clips if c.id not in have]
    if todo:
        if by_id:
            enc = WhisperEncoder.from_registry(ModelRegistry(ids=[model]), model)
        else:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = 2
            enc = WhisperEncoder(ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]))
        t0 = time.perf_counter()
        for i, c in enumerate(todo):
            have[c.id] = clip_features(enc, cache / c.path)
            if i % 500 == 0:
                print(f"  features {i}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)
        ids = sorted(have)
        np.savez(store, ids=np.array(ids), x=np.stack([have[i] for i in ids]))
    return np.stack([have[c.id] for c in clips])


def fit_score(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=C, class_weight="balanced", max_iter=2000))
    model.fit(x[train], y[train])
    return model.decision_function(x[test])  # log-odds of bona fide


def main() -> None:
    from common.metrics import eer_between
    from train.antispoof.loso import LOSO_SOURCES, MIN_OWN_BONA, origin_of
    from train.antispoof.split import split_of
    from train.antispoof_data import DEFAULT_CACHE, EVAL_ONLY, NEW_FAMILIES, read_manifest

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--encoder", default="whisper_tiny_en_encoder", help="store model id or ONNX file")
    args = ap.parse_args()
    clips = [c for c in read_manifest(args.cache) if c.generator not in EVAL_ONLY]
    x = features(args.cache, clips, args.encoder)
    y = np.array([c.label == "bonafide" for c in clips])
    origin = np.array([origin_of(c) for c in clips])
    codec = np.array([c.id.startswith("codec-") for c in clips])
    gen = np.array([c.generator for c in clips])
    published = ~codec & ~np.isin(gen, NEW_FAMILIES)

    print(f"Leave one source out (frozen {args.encoder} probe):")
    score = np.full(len(clips), np.nan)
    for src in LOSO_SOURCES:
        own = np.flatnonzero((origin == src) & published)
        score[own] = fit_score(x, y, origin != src, own)
    pooled = score[y & ~np.isnan(score)]
    loso = {}
    for src in LOSO_SOURCES:
        sel = (origin == src) & published
        bona, spoof = score[sel & y], score[sel & ~y]
        if len(spoof) == 0:
            continue
        against = bona if len(bona) >= MIN_OWN_BONA else pooled
        loso[src] = eer_between(against, spoof)
        print(f"  {src:28s} bona {len(against):4d} spoof {len(spoof):4d}  EER {loso[src]:.1%}")
    vals = list(loso.values())
    eight = [v for k, v in loso.items() if k.startswith("spoof_")]
    print(f"  mean over the {len(eight)} spoof_* folders {np.mean(eight):.1%} (the card's headline), worst "
          f"{max(eight):.1%}; over all {len(vals)} folds {np.mean(vals):.1%}")  # fmt: skip

    print("Leave one new family out:")
    split = split_of(clips)
    test_spk = np.array([split.get(c.speaker) == "test" for c in clips])
    bona_test = np.flatnonzero(y & test_spk & ~codec)
    lofo = {}
    for fam in NEW_FAMILIES:
        held = np.flatnonzero((gen == fam) & ~codec)
        if len(held) == 0:
            continue
        train = (gen != fam) & ~test_spk
        s = fit_score(x, y, train, np.concatenate([bona_test, held]))
        lofo[fam] = eer_between(s[: len(bona_test)], s[len(bona_test) :])
        print(f"  {fam:12s} spoof {len(held):4d} vs {len(bona_test)} test bona fide  EER {lofo[fam]:.1%}")
    if lofo:
        print(f"  mean {np.mean(list(lofo.values())):.1%}")
    if args.no_docs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [len(loso), max(1, len(lofo))]}
    )
    for ax, table, title in (
        (axes[0], loso, "leave one source out"),
        (axes[1], lofo, "leave one family out"),
    ):
        ax.bar(range(len(table)), [100 * v for v in table.values()], color="tab:blue")
        ax.set_xticks(range(len(table)), [k.replace("spoof_", "") for k in table], rotation=45, ha="right")
        ax.axhline(15, color="k", ls="--", lw=0.8)
        ax.set_ylabel("EER, %")
        ax.set_title(title)
    name = "tiny.en" if args.encoder == "whisper_tiny_en_encoder" else Path(args.encoder).stem
    fig.suptitle(f"Frozen Whisper {name} probe (logistic regression on layer statistics); dashed: 15 %")
    fig.tight_layout()
    out = DOCS / f"antispoof_whisper_probe{'' if name == 'tiny.en' else '_' + name}.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

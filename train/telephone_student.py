"""Adapt CAM++ to telephone audio by distillation (issue 30; docs/telephone.md).

    python -m train.antispoof_data            # once: the speech pool (cache /tmp/verilive-antispoof)
    python -m train.telephone_student          # features (cached), fine-tune, write the parameters

**Idea.** The shipped CAM++ (the *teacher*) embeds wideband speech well. A copy of it (the *student*)
is fine-tuned so that its embedding of a telephone copy of a crop lands where the teacher puts the
wideband crop itself: loss ``1 - cos(student(telephone copy), teacher(wideband))``. It needs no
speaker labels, only the same recording through different channels, and the student stays in the
teacher's embedding space, so a student (telephone) view compares directly with a teacher
(wideband) view, and two student views with each other.

**Data.** Speech of the anti-spoofing pool (train/antispoof_data/) whose licence allows
redistributing derived work (``train_ok``; KLettres, GPL, is out) from sources that are *not* in
the speaker-verification dev trials: AMI, LJ Speech, the real halves of the
spoof corpora (Tortoise references, LibriSpeech test-clean, LibriTTS, AISHELL, VCC), and the
synthetic voices (espeak-ng, festival, flite, piper, Kokoro, the published TTS and VC clips) as
extra timbres. Everything derived from LibriSpeech train-clean-100, Common Voice, speechocean762 and
the SpeechBrain samples is left out, so eval/telephone.py's trials are all unseen corpora and
speakers. Only clips without a channel effect (clean, floor, as published).

Per clip, up to ``CROPS`` random crops of ``CROP_S`` seconds; per crop the student inputs are the
telephone-band view of the wideband crop (what a wideband template's telephone view is) and
``LINES_PER_CROP`` copies through random telephone lines (common/telephone.py: G.711 µ/A-law,
GSM 06.10, AMR-NB 4.75-12.2, Opus 6-12 kbit/s, 0-3 % packet loss, noise 10-30 dB or none), each
brought back exactly as the engine brings 8 kHz audio (``telephone_band``). Seeded throughout.

**What is trained.** The FCM front (2-D ResNet), the first TDNN layer and every BatchNorm (affine
parameters and running statistics); the rest stays frozen. Those tensors (about 0.37 M values)
are written to ``src/verilive/voice/campplus_tel.npz``; the model store builds ``campplus_tel``
from the upstream checkpoint with them (``verilive.models.convert.campplus:convert_telephone``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import time
import zlib
from pathlib import Path

import numpy as np
from common.repo import REPO
from common.telephone import AMR_KBPS, Line, available, telephone

CACHE = Path("/tmp/verilive-antispoof")
OUT = REPO / "src" / "verilive" / "voice" / "campplus_tel.npz"
CROP_S = 2.0
CROPS = 2
LINES_PER_CROP = 2
SEED = 20261127
#: Sources of the speaker-verification dev trials (eval/trials.py, eval/telephone.py) and all that is
#: made from them: never used here.
EVAL_SOURCES = (
    "librispeech_251spk_gender",
    "age_cv_es_mx",
    "cv_es_mx",
    "speechocean762",
    "speechbrain_samples",
)
CLEAN_CHANNELS = ("clean", "floor", "as-published")


def pool(cache: Path = CACHE) -> list[tuple[str, Path]]:
    """(clip id, path) of the training speech, sorted by id."""
    out = []
    with open(cache / "manifest.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            text = f"{r['source']} {r['path']} {r['generator']}".lower()
            # train_ok: the licence lets derived work be redistributed (the data README's rule)
            if r["train_ok"] != "1" or r["channel"] not in CLEAN_CHANNELS or r["label"] == "replay":
                continue
            if any(s in text for s in EVAL_SOURCES) or "asterisk" in text:
                continue
            out.append((r["id"], cache / r["path"]))
    return sorted(out)


def random_line(rng: np.random.Generator) -> Line:
    codecs = [c for c in ("g711u", "g711a", "gsm", "amr-nb", "opus") if available(c)]
    codec = str(rng.choice(codecs))
    kbps = None
    if codec == "amr-nb":
        kbps = float(rng.choice(AMR_KBPS))
    elif codec == "opus":
        kbps = float(rng.choice([6.0, 8.0, 10.0, 12.0]))
    loss = float(rng.choice([0.0, 0.0, 0.01, 0.03])) if codec in ("amr-nb", "opus", "g711u") else 0.0
    snr = None if rng.random() < 0.4 else float(rng.uniform(10, 30))
    return Line(codec, kbps, loss=loss, snr_db=snr)


def build_features(cache: Path, limit: int | None = None) -> dict[str, np.ndarray]:
    """Student inputs (N, V, T, 80) float16, teacher embeddings (N, 192) and crop ids."""
    import soundfile as sf

    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.campplus import CamPlusPlus
    from verilive.voice.channel import telephone_band

    cam = CamPlusPlus.from_registry(ModelRegistry(Settings()))
    n = int(CROP_S * 16000)
    feats, teach, ids = [], [], []
    clips = pool(cache)[:limit]
    t0 = time.time()
    for k, (cid, path) in enumerate(clips):
        x, sr = sf.read(path, dtype="float32", always_2d=True)
        x = x.mean(axis=1)
        if sr != 16000 or x.size < n:
            continue
        rng = np.random.default_rng(zlib.crc32(f"{SEED}/{cid}".encode()))
        for c in range(CROPS if x.size >= 2 * n else 1):
            s = int(rng.integers(0, x.size - n + 1))
            crop = x[s : s + n]
            if np.sqrt(np.mean(crop**2)) < 1e-3:
                continue
            views = [telephone_band(crop, 16000)]
            for j in range(LINES_PER_CROP):
                line = random_line(rng)
                y = telephone(crop, 16000, line, seed=zlib.crc32(f"{cid}/{c}/{j}".encode()))
                views.append(telephone_band(y, 8000))
            fs = [cam.features(np.pad(v[:n], (0, max(0, n - v.size)))) for v in views]
            feats.append(np.stack(fs).astype(np.float16))
            teach.append(cam.embed_features(cam.features(crop)))
            ids.append(f"{cid}/{c}")
        if (k + 1) % 500 == 0:
            print(
                f"  features {k + 1}/{len(clips)} clips, {len(ids)} crops, {time.time() - t0:.0f} s",
                flush=True,
            )
    return {"feats": np.stack(feats), "teacher": np.stack(teach).astype(np.float32), "ids": np.array(ids)}


def trainable(name: str) -> bool:
    """The tensors the student may change (and that are written out)."""
    return (
        name.startswith("head.") or name.startswith("xvector.tdnn.") or "batchnorm" in name or ".bn" in name
    )


def adapted_state(model) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in model.named_parameters() if trainable(k)}


def fine_tune(data: dict[str, np.ndarray], checkpoint: Path, minutes: float, batch: int, lr: float,
              holdout: float = 0.1) -> tuple[object, dict[str, float]]:  # fmt: skip
    import torch

    from verilive.models.convert.campplus import load_model

    torch.manual_seed(SEED)
    model = load_model(checkpoint)
    for name, p in model.named_parameters():
        p.requires_grad_(trainable(name))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    # hold out whole source clips (by crop id prefix hash) to watch the distillation loss
    ids = data["ids"]
    clip = np.array([i.rsplit("/", 1)[0] for i in ids])
    h = np.array([int(hashlib.sha256(c.encode()).hexdigest()[:8], 16) / 2**32 for c in clip])
    tr, va = np.flatnonzero(h >= holdout), np.flatnonzero(h < holdout)
    feats = torch.from_numpy(data["feats"].astype(np.float32))
    teacher = torch.nn.functional.normalize(torch.from_numpy(data["teacher"]), dim=1)
    n_views = feats.shape[1]

    def val_loss() -> float:
        model.eval()
        with torch.no_grad():
            losses = []
            for v in range(n_views):
                for s in range(0, va.size, 64):
                    idx = va[s : s + 64]
                    out = torch.nn.functional.normalize(model(feats[idx, v]), dim=1)
                    losses.append((1 - (out * teacher[idx]).sum(1)).numpy())
        return float(np.concatenate(losses).mean())

    start = val_loss()
    print(f"held-out loss before: {start:.4f} ({va.size} crops held out, {tr.size} trained)", flush=True)
    rng = np.random.default_rng(SEED)
    t0, step, total_steps = time.time(), 0, None
    # BatchNorm stays in eval mode: its running statistics are the teacher's, and batches of two-second
    # crops gave worse held-out losses when they moved (tried: train mode)
    model.eval()
    sched_lr = lr
    while True:
        elapsed = (time.time() - t0) / 60
        if elapsed >= minutes:
            break
        # cosine decay over the time budget
        sched_lr = lr * 0.5 * (1 + np.cos(np.pi * min(1.0, elapsed / minutes)))
        for g in opt.param_groups:
            g["lr"] = sched_lr
        idx = rng.choice(tr, size=batch, replace=False)
        v = rng.integers(0, n_views, size=batch)
        x = feats[idx, v]
        out = torch.nn.functional.normalize(model(x), dim=1)
        loss = (1 - (out * teacher[idx]).sum(1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"  step {step} loss {loss.item():.4f} lr {sched_lr:.2e} {elapsed:.1f} min", flush=True)
    total_steps = step
    end = val_loss()
    print(f"held-out loss after {total_steps} steps: {end:.4f}", flush=True)
    model.eval()
    return model, {"val_before": start, "val_after": end, "steps": float(total_steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--features", type=Path, default=Path("/tmp/verilive-telstudent/features.npz"))
    ap.add_argument(
        "--checkpoint", type=Path, default=None, help="CAM++ checkpoint (default: from the store)"
    )
    ap.add_argument("--minutes", type=float, default=35.0, help="training time budget (CPU)")
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--lr", type=float, default=1.5e-4)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.features.exists():
        data = dict(np.load(args.features))
        keep = np.isin([i.rsplit("/", 1)[0] for i in data["ids"]], [c for c, _ in pool(args.cache)])
        data = {k: v[keep] for k, v in data.items()}  # a cache made before a change of the pool
    else:
        data = build_features(args.cache, args.limit)
        args.features.parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.features, **data)
    print(f"{data['feats'].shape[0]} crops x {data['feats'].shape[1]} views", flush=True)
    checkpoint = args.checkpoint or checkpoint_path()
    model, info = fine_tune(data, checkpoint, args.minutes, args.batch, args.lr)
    state = adapted_state(model)
    np.savez(args.out, **state)
    print(f"wrote {args.out}: {len(state)} tensors, {sum(v.size for v in state.values())} values; {info}")


def checkpoint_path() -> Path:
    """The upstream CAM++ checkpoint, fetched the store's way (mirror first, sha256-checked)."""
    import tempfile

    from verilive.models.pull import fetch_source
    from verilive.models.store import ModelStore

    store = ModelStore.from_settings()
    spec = store.spec("campplus")
    work = Path(tempfile.mkdtemp(prefix="verilive-campplus-"))
    return fetch_source(spec, work, mirror=store.mirror).path


if __name__ == "__main__":
    main()

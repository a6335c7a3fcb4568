"""Adapt segmentation-3.0 to telephone lines by distillation (issue 48; docs/model-segmentation.md).

    python -m train.segmentation_student build     # chunks, their line copies, teacher posteriors
    python -m train.segmentation_student train     # fine-tune, write src/verilive/voice/segmentation_tel.npz

**Idea** (as ``train.telephone_student`` did for CAM++). The shipped segmentation-3.0 (the *teacher*)
hears wideband speech well and misses telephone speech. A copy (the *student*) sees the same 10 s
chunk after a simulated telephone line (common/telephone.py: G.711, GSM, AMR-NB at every rate, Opus
6-12 kbit/s, packet loss, noise, random band edges and levels), brought back to 16 kHz exactly as the
diarizer brings 8 kHz uploads, and learns the teacher's frame posteriors on the wideband chunk
(KL divergence over the 7 powerset classes, the smallest over the 6 orders of the local speakers,
since local speakers are numbered freely). No speaker labels are needed.

**Data.** Conversations of 1-3 speakers mixed by ``train.conversations`` from the *student* part of
the real read speech in ``../shared/data/voice`` (LibriSpeech speakers of the student split, LJ Speech,
LibriTTS and LibriSpeech test-clean prompts). The call evaluation's voices and the AMI meetings are
never used. Seeded throughout.

**What is trained.** The SincNet front (its two learned convolutions and the instance-norm affine
parameters; the sinc cut-offs stay) and the first BiLSTM layer; the upper LSTM layers and the
classifier stay the teacher's, so the student answers in the teacher's terms. Those tensors are
written to ``src/verilive/voice/segmentation_tel.npz``; the model store builds
``pyannote_segmentation_tel`` from the upstream checkpoint with them
(``verilive.models.convert.pyannote_segmentation:convert_telephone``).
"""

from __future__ import annotations

import argparse
import itertools
import time
import zlib
from pathlib import Path

import numpy as np
from common.repo import REPO, data_root
from common.telephone import AMR_KBPS, Line, available, telephone

from train.conversations import SR, conversation, pick_voices, speech_pools

WORK = Path("/tmp/verilive-segstudent")
OUT = REPO / "src" / "verilive" / "voice" / "segmentation_tel.npz"
CHUNK = 160000
SEED = 20261128


def random_line(rng: np.random.Generator) -> Line:
    """A line of the kinds eval/telephone_diarization.py scores, and more (every AMR and Opus rate)."""
    codecs = [c for c in ("pcm", "g711u", "g711a", "gsm", "amr-nb", "opus") if available(c)]
    codec = str(rng.choice(codecs))
    kbps = None
    if codec == "amr-nb":
        kbps = float(rng.choice(AMR_KBPS))
    elif codec == "opus":
        kbps = float(rng.choice([6.0, 8.0, 10.0, 12.0]))
    loss = float(rng.choice([0.0, 0.0, 0.01, 0.03])) if codec in ("amr-nb", "opus", "g711u") else 0.0
    snr = None if rng.random() < 0.4 else float(rng.uniform(10, 30))
    return Line(codec, kbps, loss=loss, snr_db=snr)


def line_copy(x: np.ndarray, rng: np.random.Generator, seed: int) -> np.ndarray:
    """``x`` (16 kHz) through a random line, back at 16 kHz as the diarizer resamples 8 kHz input."""
    from verilive.audio.resample import resample

    y = telephone(x, SR, random_line(rng), seed=seed)
    y = y * float(10 ** (rng.uniform(-10, 6) / 20))  # phones and recorders differ in level
    z = resample(np.clip(y, -1, 1).astype(np.float32), 8000, SR)
    return np.pad(z, (0, max(0, x.size - z.size)))[: x.size]


def build(n_chunks: int, out: Path) -> None:
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.segmentation import Segmenter

    pools = speech_pools(data_root(None), "student")
    print({s: len(p) for s, p in pools.items()}, "speakers per source", flush=True)
    seg = Segmenter.from_registry(ModelRegistry(Settings()))
    wide = np.zeros((n_chunks, CHUNK), np.int16)
    tel = np.zeros((n_chunks, CHUNK), np.int16)
    t0 = time.time()
    for i in range(n_chunks):
        rng = np.random.default_rng(zlib.crc32(f"{SEED}/{i}".encode()))
        k = int(rng.choice([1, 2, 2, 3, 3]))
        wave, _ = conversation(pick_voices(pools, rng, k), rng, 10.0, overlap_p=0.25)
        wave = np.pad(wave, (0, max(0, CHUNK - wave.size)))[:CHUNK]
        # wideband level as recorded: the teacher's input is gain-robust except near silence
        wave = wave * float(10 ** (rng.uniform(-12, 6) / 20))
        wave = np.clip(wave, -1, 1)
        wide[i] = np.round(wave * 32767).astype(np.int16)
        tel[i] = np.round(np.clip(line_copy(wave, rng, i), -1, 1) * 32767).astype(np.int16)
        if (i + 1) % 200 == 0:
            print(f"  {i + 1}/{n_chunks} chunks, {time.time() - t0:.0f} s", flush=True)
    teacher = np.zeros((n_chunks, 589, 7), np.float16)
    for b in range(0, n_chunks, 8):
        teacher[b : b + 8] = seg.log_probs(wide[b : b + 8].astype(np.float32) / 32768)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, wide=wide, tel=tel, teacher=teacher)
    print(f"wrote {out}: {n_chunks} chunks in {time.time() - t0:.0f} s", flush=True)


def trainable(name: str) -> bool:
    """The tensors the student may change (and that are written out)."""
    if name.startswith("sincnet.conv1d.0."):
        return False  # the sinc cut-offs: baked into plain filters once, kept
    return name.startswith("sincnet.") or (name.startswith("lstm.") and name.endswith(("_l0", "_l0_reverse")))


def class_perms() -> np.ndarray:
    """(6, 7): for each order of the 3 local speakers, the powerset class each class becomes."""
    from verilive.voice.segmentation import POWERSET

    sets = [frozenset(np.flatnonzero(r)) for r in POWERSET]
    out = []
    for p in itertools.permutations(range(3)):
        out.append([sets.index(frozenset(p[j] for j in s)) for s in sets])
    return np.array(out)


def pit_kl(student_lp, teacher_lp, perms):  # torch tensors (B, T, 7) log-probs; perms (6, 7)
    """Mean over frames of KL(teacher || student), the smallest over the local speakers' orders."""
    import torch

    pt = teacher_lp.exp()
    kls = []
    for p in perms:
        s = student_lp[..., torch.as_tensor(p)]
        kls.append((pt * (teacher_lp - s)).sum(-1).mean(-1))
    return torch.stack(kls, 0).min(0).values.mean()


def fine_tune(
    data: dict[str, np.ndarray], checkpoint: Path, minutes: float, batch: int, lr: float, holdout: int
) -> tuple[object, dict[str, float]]:
    import torch

    from verilive.models.convert.pyannote_segmentation import load_model

    torch.manual_seed(SEED)
    model = load_model(checkpoint)
    for name, p in model.named_parameters():
        p.requires_grad_(trainable(name))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    perms = class_perms()
    n = data["tel"].shape[0]
    va, tr = np.arange(n - holdout, n), np.arange(n - holdout)

    def batch_of(idx: np.ndarray, key: str):
        return torch.from_numpy(data[key][idx].astype(np.float32) / 32768)[:, None, :]

    teacher = torch.from_numpy(data["teacher"].astype(np.float32))

    def val_loss() -> tuple[float, float]:
        """Held-out KL, and the share of teacher speech frames the student calls silence."""
        model.eval()
        losses, missed, speech = [], 0.0, 0.0
        with torch.no_grad():
            for s in range(0, va.size, 8):
                idx = va[s : s + 8]
                out = model(batch_of(idx, "tel"))
                losses.append(float(pit_kl(out, teacher[idx], perms)) * idx.size)
                t_sp = teacher[idx][..., 0].exp() < 0.5
                s_sp = out[..., 0].exp() < 0.5
                missed += float((t_sp & ~s_sp).sum())
                speech += float(t_sp.sum())
        return sum(losses) / va.size, missed / max(speech, 1.0)

    before = val_loss()
    print(f"held-out before: KL {before[0]:.4f}, missed {before[1]:.1%} ({va.size} chunks)", flush=True)
    rng = np.random.default_rng(SEED)
    t0, step = time.time(), 0
    model.train()
    model.lstm.dropout = 0.0  # the frozen upper layers keep the teacher's function
    while (elapsed := (time.time() - t0) / 60) < minutes:
        for g in opt.param_groups:
            g["lr"] = lr * 0.5 * (1 + np.cos(np.pi * min(1.0, elapsed / minutes)))
        idx = np.sort(rng.choice(tr, size=batch, replace=False))
        loss = pit_kl(model(batch_of(idx, "tel")), teacher[idx], perms)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"  step {step} KL {loss.item():.4f} {elapsed:.1f} min", flush=True)
    after = val_loss()
    print(f"held-out after {step} steps: KL {after[0]:.4f}, missed {after[1]:.1%}", flush=True)
    model.eval()
    info = {
        "kl_before": before[0],
        "missed_before": before[1],
        "kl_after": after[0],
        "missed_after": after[1],
    }
    return model, {**info, "steps": float(step)}


def checkpoint_path() -> Path:
    """The upstream segmentation-3.0 checkpoint, fetched the store's way (mirror first, sha256-checked)."""
    import tempfile

    from verilive.models.pull import fetch_source
    from verilive.models.store import ModelStore

    store = ModelStore.from_settings()
    work = Path(tempfile.mkdtemp(prefix="verilive-segmentation-"))
    return fetch_source(store.spec("pyannote_segmentation"), work, mirror=store.mirror).path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "train"])
    ap.add_argument("--data", type=Path, default=WORK / "chunks.npz")
    ap.add_argument("--chunks", type=int, default=3000)
    ap.add_argument("--minutes", type=float, default=35.0, help="training time budget (CPU)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--holdout", type=int, default=160, help="last chunks kept out of training")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.step == "build":
        build(args.chunks, args.data)
        return
    import torch

    torch.set_num_threads(args.threads)
    data = dict(np.load(args.data))
    model, info = fine_tune(data, checkpoint_path(), args.minutes, args.batch, args.lr, args.holdout)
    state = {k: v.detach().cpu().numpy() for k, v in model.named_parameters() if trainable(k)}
    np.savez(args.out, **state)
    print(f"wrote {args.out}: {len(state)} tensors, {sum(v.size for v in state.values())} values; {info}")


if __name__ == "__main__":
    main()

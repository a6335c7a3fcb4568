"""Train the overlapped-speech detector used by the diarizer (docs/model-overlap.md), in ONNX.

    .venv/bin/python -m train.overlap                # simulate, train, report (synthetic validation)
    .venv/bin/python -m train.overlap --write        # also write src/verilive/voice/overlap_model.onnx
    options: --data DIR (../shared/data), --chunks N (training chunks), --epochs N, --cache DIR

No recording with overlap labels may be trained on here (the AMI excerpts are the evaluation set),
so the training data is simulated conversation made from LibriSpeech read speech
(``voice/librispeech_251spk_gender``, CC BY 4.0, one utterance from each of 251 speakers):

1. **Sources.** Every utterance, with its speech activity at 20 ms from Silero VAD (the runtime
   VAD). Speakers are split 80/20 into training and validation by a fixed hash.
2. **Conversations** of 8 s (``simulate``): one to three speakers take turns cut from their
   utterances. A turn starts before the previous one ends with probability ``P_OVERLAP`` (0.2 to 1.5 s
   of both), and short back-channels of another speaker are dropped into turns. Each speaker has
   their own level (0 to -12 dB) and, in most chunks, their own room impulse response from a
   pyroomacoustics shoe-box pool, or the room's faint copy as in a headset mix (crosstalk into the
   other microphones, one voice: not overlap); noise (white, pink or brown) at 5 to 40 dB SNR and
   short noise bursts. A frame is overlapped when at least two sources are active in it; the network
   also has a speech output, trained alongside.
3. **Network** (``Net``): the runtime front end (80 Kaldi log-mel bins, 10 ms hop, mean-normalised
   over the chunk), a strided convolution to 20 ms, then dilated residual convolutions (receptive
   field about 2.5 s); two logits per frame, speech and overlap, binary cross-entropy.
4. **Threshold.** The overlap threshold written into the model's metadata is the one that flags the
   most overlapped frames minus single-speaker frames on the simulated validation chunks (what a
   correct second speaker does to the DER); the AMI excerpts are never used for training or for it.

Seeded: a rerun gives the same data and, up to multi-threaded floating point, the same model.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from verilive.voice.overlap import CHUNK_S, FRAME_S, MODEL_FILE, SR, chunk_features

REPO = Path(__file__).resolve().parents[1]
OUT_MODEL = REPO / "src" / "verilive" / "voice" / MODEL_FILE
LIBRI = "voice/librispeech_251spk_gender"
SEED = 20261122
P_OVERLAP = 0.45  # chance that a turn starts before the previous one ends
CHUNK = round(CHUNK_S * SR)
N_FRAMES = round(CHUNK_S / FRAME_S)
HOP = round(FRAME_S * SR)


@dataclass
class Source:
    speaker: str
    wave: np.ndarray  # float32, 16 kHz, peak-normalised
    active: np.ndarray  # bool per 20 ms frame


def load_sources(data: Path) -> list[Source]:
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.engine import VoiceEngine

    vad = VoiceEngine.from_registry(ModelRegistry()).vad
    out = []
    root = data / LIBRI
    for path in sorted(root.glob("*.flac")):
        x, sr = sf.read(str(path), dtype="float32")
        assert sr == SR, path
        probs, hop = vad.probabilities(x, sr)
        n = x.size // HOP
        t = (np.arange(n) + 0.5) * FRAME_S
        idx = np.minimum((t / hop).astype(int), probs.size - 1)
        active = probs[idx] > 0.5
        x = x / max(
            1e-4, float(np.sqrt(np.mean(x[: n * HOP].reshape(n, HOP)[active] ** 2)) if active.any() else 1.0)
        )
        out.append(Source(path.name.split("-")[0], (x * 0.1).astype(np.float32), active))
    return out


def split_of(speaker: str) -> str:
    return "val" if zlib.crc32(speaker.encode()) % 5 == 0 else "train"


def rir_pool(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Room impulse responses of random shoe-box rooms (pyroomacoustics image sources)."""
    import pyroomacoustics as pra

    out = []
    while len(out) < n:
        dims = rng.uniform([3, 3, 2.4], [10, 8, 3.5])
        rt60 = rng.uniform(0.15, 0.7)
        try:
            absorption, max_order = pra.inverse_sabine(rt60, dims)
        except ValueError:
            continue
        room = pra.ShoeBox(dims, fs=SR, materials=pra.Material(absorption), max_order=min(max_order, 12))
        src = rng.uniform([0.5, 0.5, 1.0], dims - [0.5, 0.5, 1.0])
        mic = rng.uniform([0.5, 0.5, 0.7], dims - [0.5, 0.5, 1.2])
        room.add_source(src)
        room.add_microphone(mic)
        room.compute_rir()
        h = np.asarray(room.rir[0][0], np.float32)[: int(0.8 * SR)]
        out.append(h / max(1e-6, float(np.abs(h).max())))
    return out


def _noise(rng: np.random.Generator, n: int) -> np.ndarray:
    white = rng.standard_normal(n).astype(np.float32)
    kind = rng.integers(3)
    if kind == 0:
        return white
    spec = np.fft.rfft(white)
    f = np.maximum(np.arange(spec.size), 1)
    spec = spec / (np.sqrt(f) if kind == 1 else f)
    y = np.fft.irfft(spec, n).astype(np.float32)
    return y / max(1e-9, float(y.std()))


def simulate(
    rng: np.random.Generator, sources: list[Source], by_speaker: dict[str, list[int]], rirs: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """One 8 s chunk: (samples,), and (frames, 2) targets (speech, overlap) at 20 ms."""
    speakers = list(by_speaker)
    k = int(rng.choice([1, 2, 3], p=[0.2, 0.6, 0.2]))
    chosen = [speakers[i] for i in rng.choice(len(speakers), k, replace=False)]
    tracks = np.zeros((k, CHUNK), np.float32)
    act = np.zeros((k, N_FRAMES), bool)

    def place(who: int, start_f: int, length_f: int) -> int:
        s = sources[by_speaker[chosen[who]][rng.integers(len(by_speaker[chosen[who]]))]]
        length_f = min(length_f, s.active.size)
        off = int(rng.integers(0, s.active.size - length_f + 1))
        a, b = max(0, start_f), min(N_FRAMES, start_f + length_f)
        if b <= a:
            return start_f + length_f
        seg = s.wave[(off + a - start_f) * HOP : (off + b - start_f) * HOP]
        tracks[who, a * HOP : a * HOP + seg.size] += seg
        act[who, a:b] |= s.active[off + a - start_f : off + b - start_f]
        return start_f + length_f

    f = int(rng.integers(-50, 25))
    who = 0
    while f < N_FRAMES:
        end = place(who, f, int(rng.uniform(0.8, 4.0) / FRAME_S))
        if k > 1:
            who = int((who + rng.integers(1, k)) % k)
        if k > 1 and rng.random() < P_OVERLAP:
            f = end - int(rng.uniform(0.2, 1.5) / FRAME_S)
        else:
            f = end + int(rng.uniform(0.0, 1.0) / FRAME_S)
    if k > 1:
        for _ in range(int(rng.integers(0, 3))):  # back-channels
            place(int(rng.integers(k)), int(rng.integers(0, N_FRAMES)), int(rng.uniform(0.3, 1.2) / FRAME_S))

    # Rooms: "dry" (close microphones), "room" (every speaker through their own far-field response)
    # or "headset" (AMI's headset mix: each voice close to its own microphone, plus a faint
    # reverberant copy picked up by the others' microphones; one voice, so not overlap).
    mode = rng.choice(["dry", "room", "headset"], p=[0.2, 0.4, 0.4])
    mix = np.zeros(CHUNK, np.float32)
    for i in range(k):
        y = tracks[i] * np.float32(10 ** (-rng.uniform(0, 12) / 20))
        if mode != "dry":
            h = rirs[rng.integers(len(rirs))]
            wet = np.fft.irfft(np.fft.rfft(y, CHUNK + h.size) * np.fft.rfft(h, CHUNK + h.size))[:CHUNK]
            if mode == "room":
                d = int(np.argmax(np.abs(h)))  # keep the labels aligned with the direct path
                y = np.concatenate([wet[d:], np.zeros(d)]).astype(np.float32)
            else:
                gain = 10 ** (-rng.uniform(10, 25) / 20) * float(np.std(y)) / max(1e-9, float(np.std(wet)))
                y = (y + gain * wet).astype(np.float32)
        mix += y
    level = float(np.sqrt(np.mean(mix**2))) or 1e-3
    if rng.random() < 0.85:
        mix += _noise(rng, CHUNK) * np.float32(level * 10 ** (-rng.uniform(5, 40) / 20))
    if rng.random() < 0.4:
        for _ in range(int(rng.integers(1, 5))):  # knocks, paper, breath: short coloured bursts
            n = int(rng.uniform(0.02, 0.3) * SR)
            a = int(rng.integers(0, CHUNK - n))
            burst = _noise(rng, n) * np.hanning(n).astype(np.float32)
            mix[a : a + n] += burst * np.float32(level * 10 ** (-rng.uniform(-5, 20) / 20))
    peak = float(np.abs(mix).max()) or 1.0
    mix *= np.float32(10 ** (rng.uniform(-30, -3) / 20) / peak)
    count = act.sum(axis=0)
    return mix, np.stack([count >= 1, count >= 2], axis=1)


def featurise(mix: np.ndarray) -> np.ndarray:
    return chunk_features(mix).astype(np.float16)


def make_set(
    rng: np.random.Generator,
    sources: list[Source],
    split: str,
    n: int,
    rirs: list[np.ndarray],
    workers: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` simulated chunks of the speakers of ``split``; ``workers`` processes, each with its own
    stream drawn from ``rng`` (the result depends on the seed and the number of workers)."""
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        seeds = rng.integers(0, 2**32, workers)
        sizes = [n // workers + (w < n % workers) for w in range(workers)]
        with ProcessPoolExecutor(workers) as pool:
            parts = list(
                pool.map(
                    _make_part,
                    [(int(sd), sources, split, m, rirs) for sd, m in zip(seeds, sizes, strict=True)],
                )
            )
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    by: dict[str, list[int]] = {}
    for i, s in enumerate(sources):
        if split_of(s.speaker) == split:
            by.setdefault(s.speaker, []).append(i)
    x = np.empty((n, 2 * N_FRAMES, 80), np.float16)
    y = np.empty((n, N_FRAMES, 2), bool)
    for j in range(n):
        mix, lab = simulate(rng, sources, by, rirs)
        x[j], y[j] = featurise(mix), lab
    return x, y


def _make_part(args: tuple) -> tuple[np.ndarray, np.ndarray]:
    seed, sources, split, n, rirs = args
    return make_set(np.random.default_rng(seed), sources, split, n, rirs, workers=1)


# ------------------------------------------------------------------------------ network


def build_net(channels: int = 128, dilations: tuple[int, ...] = (1, 2, 4, 8, 16, 1, 2, 4, 8, 16)):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c: int, d: int) -> None:
            super().__init__()
            self.conv = nn.Conv1d(c, c, 3, padding=d, dilation=d)
            self.norm = nn.BatchNorm1d(c)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.relu(self.norm(self.conv(x)))

    class Net(nn.Module):
        """(B, T10, 80) fbank -> (B, T20, 2) logits (speech, overlap); T20 = T10 // 2."""

        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Sequential(
                nn.Conv1d(80, channels, 4, stride=2, padding=1), nn.BatchNorm1d(channels), nn.ReLU()
            )
            self.blocks = nn.Sequential(*[Block(channels, d) for d in dilations])
            self.out = nn.Conv1d(channels, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.blocks(self.inp(x.transpose(1, 2)))).transpose(1, 2)

    return Net()


def _align(logits_t: int, frames: int) -> int:
    return min(logits_t, frames)


def train(x: np.ndarray, y: np.ndarray, xv: np.ndarray, yv: np.ndarray, epochs: int, seed: int):
    import torch

    torch.manual_seed(seed)
    net = build_net()
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
    steps = epochs * (len(x) // 32)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    rng = np.random.default_rng(seed)
    crop = 200  # 4 s of output frames per training example
    weight = torch.tensor([1.0, 2.0])
    for ep in range(epochs):
        net.train()
        t0, tot = time.time(), 0.0
        order = rng.permutation(len(x))
        for b in range(len(x) // 32):
            idx = order[b * 32 : (b + 1) * 32]
            s = int(rng.integers(0, N_FRAMES - crop + 1))
            xb = torch.from_numpy(x[idx, 2 * s : 2 * (s + crop)].astype(np.float32))
            yb = torch.from_numpy(y[idx, s : s + crop].astype(np.float32))
            # SpecAugment-style masks: one band of mel bins and one stretch of time.
            f0 = int(rng.integers(0, 70))
            xb[:, :, f0 : f0 + int(rng.integers(0, 10))] = 0
            out = net(xb)
            n = _align(out.shape[1], yb.shape[1])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                out[:, :n], yb[:, :n], weight=weight.expand_as(yb[:, :n])
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach())
        pv = predict(net, xv)
        print(
            f"epoch {ep + 1}: loss {tot / max(1, len(x) // 32):.4f}, val {report(pv, yv)} "
            f"({time.time() - t0:.0f} s)"
        )
    return net


def predict(net, x: np.ndarray) -> np.ndarray:
    import torch

    net.eval()
    out = []
    with torch.no_grad():
        for b in range(0, len(x), 64):
            out.append(torch.sigmoid(net(torch.from_numpy(x[b : b + 64].astype(np.float32)))).numpy())
    p = np.concatenate(out)
    return p[:, :N_FRAMES]


def best_threshold(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Overlap threshold that maximises (overlapped frames found - single-speaker frames flagged) over
    speech frames, and the F1 there. That difference is what a second speaker changes in the DER
    when it is the right speaker: a missed frame less for a hit, a false alarm more for a false one."""
    sp = y[..., 0]
    po, yo = p[..., 1][sp], y[..., 1][sp]
    best, best_gain = (0.5, 0.0), -np.inf
    for t in np.arange(0.2, 0.91, 0.05):
        hit = po >= t
        tp = int(np.sum(hit & yo))
        gain = tp - int(np.sum(hit & ~yo))
        if gain > best_gain:
            best_gain, best = gain, (round(float(t), 2), 2 * tp / max(1, int(hit.sum() + yo.sum())))
    return best


def report(p: np.ndarray, y: np.ndarray, t: float = 0.5) -> str:
    sp = y[..., 0]
    hit, yo = (p[..., 1] >= t)[sp], y[..., 1][sp]
    tp = np.sum(hit & yo)
    prec, rec = tp / max(1, hit.sum()), tp / max(1, yo.sum())
    acc_sp = np.mean((p[..., 0] >= 0.5) == y[..., 0])
    return f"overlap P {prec:.3f} R {rec:.3f} (t {t}), speech acc {acc_sp:.3f}"


def export(net, path: Path, meta: dict) -> None:
    import onnx
    import torch

    net.eval()
    dummy = torch.zeros(1, 799, 80)
    tmp = path.with_suffix(".tmp.onnx")
    torch.onnx.export(
        net,
        (dummy,),
        str(tmp),
        input_names=["fbank"],
        output_names=["logits"],
        dynamic_axes={"fbank": {0: "batch", 1: "frames"}, "logits": {0: "batch", 1: "frames20"}},
        opset_version=17,
        dynamo=False,
    )
    model = onnx.load(str(tmp))
    tmp.unlink()
    entry = model.metadata_props.add()
    entry.key, entry.value = "verilive_overlap", json.dumps(meta)
    onnx.save(model, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/verilive-overlap"))
    ap.add_argument("--chunks", type=int, default=12000)
    ap.add_argument("--epochs", type=int, default=16)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()

    args.cache.mkdir(parents=True, exist_ok=True)
    cached = args.cache / f"sim2_{args.chunks}.npz"
    if cached.exists():
        z = np.load(cached)
        x, y, xv, yv = z["x"], z["y"], z["xv"], z["yv"]
    else:
        t0 = time.time()
        rng = np.random.default_rng(SEED)
        sources = load_sources(args.data)
        rirs = rir_pool(rng, 300)
        x, y = make_set(rng, sources, "train", args.chunks, rirs)
        xv, yv = make_set(rng, sources, "val", max(200, args.chunks // 12), rirs)
        np.savez(cached, x=x, y=y, xv=xv, yv=yv)
        print(f"simulated {len(x)} + {len(xv)} chunks in {time.time() - t0:.0f} s")
    print(
        f"overlap in speech frames: train {y[..., 1].sum() / y[..., 0].sum():.3f}, "
        f"val {yv[..., 1].sum() / yv[..., 0].sum():.3f}"
    )
    net = train(x, y, xv, yv, args.epochs, SEED)
    pv = predict(net, xv)
    t, f1 = best_threshold(pv, yv)
    print(f"validation: threshold {t} (most hits minus false alarms), F1 {f1:.3f}; {report(pv, yv, t)}")
    if args.write:
        meta = {
            "threshold": t,
            "frame_s": FRAME_S,
            "chunk_s": CHUNK_S,
            "val_f1": round(f1, 4),
            "train_chunks": len(x),
            "epochs": args.epochs,
            "seed": SEED,
        }
        export(net, OUT_MODEL, meta)
        print(f"wrote {OUT_MODEL} ({OUT_MODEL.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

"""Branch outputs of the shipped anti-spoofing model on the public-repository sources (issue 46), for
refitting its fusion and calibration leaving one source out, and for the learning curve.

    python -m train.antispoof_sources build --mirrors /work/.mirror --out /tmp/vl-sources
    python -m train.antispoof_refit shared --out /tmp/vl-shared      # held-out bona fide of shared/
    for s in sources shared; do
      python -m train.antispoof_refit extract --sources /tmp/vl-$s --out /tmp/vl-$s.npz
      python -m train.antispoof_refit extract --sources /tmp/vl-$s --out /tmp/vl-$s-aug.npz --augmented
    done

Every clip goes through what ``AntiSpoof.evaluate`` runs (suitability checks, the same features and
8 s windows), with the ONNX graph asked for more than its logits: the four branch log-odds that its
fusion weighs (``/Mul*`` inputs), the CAM++ front statistics the ``fcm_linear`` branch reads and the
Whisper statistics. Each clip is scored as published ("wideband") and through telephone lines of
``common/telephone.py`` at 8 kHz: every line for bona fide clips, two lines drawn per clip (seeded) for
spoofs (an attacker may call in too). With ``--augmented``, instead, every bona fide clip and every
train-role spoof goes through issue 29's channels that genuine speech crosses too (``AUGMENTS``: an
image-source room at 0.7-3 m, codec2, MP3; a spoof through one of them). Each row keeps whether the
service would judge it as telephone audio. A clip judged unsuitable gets NaN rows. The branch outputs
are the same with the shipped model before or after ``train.antispoof_calibration --write`` (it only
adds outputs), so ``--model`` may name either. About 25 min for the 1,369 public clips on 2 cores.

The fitting and the curve are in ``train/antispoof_calibration.py``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPOOF_LINES = 2  # lines drawn per spoof clip; bona fide clips go through all of them
CHANNELS = ("wideband", "g711u", "gsm", "amr", "opus", "bad")


@dataclass(frozen=True)
class BranchGraph:
    """Names in the shipped ONNX graph: the branch log-odds the fusion weighs (in branch order),
    their scalar weights, the bona fide calibration and the front statistics tensor."""

    odds: tuple[str, ...]
    weights: tuple[str, ...]
    bona_weight: str
    bona_bias: str
    fcm_stats: str


def branch_graph(model) -> BranchGraph:  # type: ignore[no-untyped-def]
    """Find the fusion in an exported graph (train/antispoof/export.py ``Fused``): ``weights[k] *
    odds_k`` are Mul nodes with a scalar constant input; ``bona`` is the Gemm named ``/bona/Gemm``."""
    from onnx import numpy_helper

    scalars = {i.name for i in model.graph.initializer if numpy_helper.to_array(i).ndim == 0}
    odds, weights = [], []
    for n in model.graph.node:
        if n.op_type == "Mul" and n.name.startswith("/Mul") and n.input[0] in scalars:
            weights.append(n.input[0])
            odds.append(n.input[1])
    (bona,) = [n for n in model.graph.node if n.name == "/bona/Gemm"]
    (stats,) = [n for n in model.graph.node if n.name == "/fcm_linear/Gemm"]
    if len(odds) != 4:
        raise ValueError(f"expected the fusion of four branches, found {len(odds)}")
    return BranchGraph(tuple(odds), tuple(weights), bona.input[1], bona.input[2], stats.input[0])


def branch_session(path: Path):  # type: ignore[no-untyped-def]
    """An onnxruntime session of the model at ``path`` with the branch tensors as extra outputs."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    g = branch_graph(model)
    for name in (*g.odds, g.fcm_stats):
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    opts = ort.SessionOptions()
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]), g


_STATE: dict = {}


def _init(model_path: str) -> None:
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.antispoof import AntiSpoof
    from verilive.voice.engine import VoiceEngine

    registry = ModelRegistry()
    anti = AntiSpoof.from_engine(VoiceEngine.from_registry(registry), registry)
    _STATE["anti"] = anti
    _STATE["sess"], _STATE["graph"] = branch_session(Path(model_path))


def branches(wave: np.ndarray, sample_rate: int) -> np.ndarray | None:
    """One row: fused bona fide logit, 4 branch log-odds, 1280 front statistics, Whisper statistics;
    None when ``AntiSpoof.evaluate`` would call the clip unsuitable."""
    from verilive.audio import resample
    from verilive.voice.antispoof import MIN_FRAMES, SR, WINDOW_FRAMES, as_pcm16, features
    from verilive.voice.utterance_cues import utterance_features

    anti, sess = _STATE["anti"], _STATE["sess"]
    wave = wave[: int(anti.frontend.max_seconds * sample_rate)]
    if anti.unsuitable(wave, sample_rate) is not None:
        return None
    x = as_pcm16(resample(wave, sample_rate, SR)[: int(anti.frontend.max_seconds * SR)])
    feats = features(x, anti.frontend)
    if feats.shape[2] < MIN_FRAMES:
        return None
    wh = anti.whisper_features(x)
    inputs = {
        "cues": np.asarray(utterance_features(x), np.float32).reshape(1, -1),
        "fcm": np.asarray(anti.fcm_frames(x), np.float32)[None],
        "whisper": np.asarray(wh, np.float32).reshape(1, -1),
    }
    frames = feats.shape[2]
    parts = -(-frames // WINDOW_FRAMES)
    bounds = np.linspace(0, frames, parts + 1).round().astype(int)
    acc: list[np.ndarray] = []
    for a, b in itertools.pairwise(bounds):
        out = sess.run(None, {**inputs, "features": feats[None, :, :, a:b]})
        acc.append(np.concatenate([np.ravel(o[0]) if o.ndim > 1 else np.ravel(o) for o in out]))
    row = np.mean(acc, axis=0)  # every output is linear in the windows' net logits, as AntiSpoof.logits
    # row: logits (4), odds (4 x 1 each), fcm stats (1280)
    return np.concatenate([row[:1], row[4:8], row[8:], np.asarray(wh, np.float64)])


AUGMENTS = ("room", "codec2", "mp3")  # channels genuine speech crosses too (issue 29's augmentation)
N_ROOMS = 64


def augment(wave16k: np.ndarray, name: str, rng: np.random.Generator) -> np.ndarray:
    """``wave16k`` heard from across an image-source room (issue 29's far-field rooms), through
    codec2 or an MP3 round trip, back at 16 kHz."""
    from train.antispoof_data.channels import codec_chain
    from train.antispoof_data.replay import FAR_FIELD, room_rirs

    if name == "room":
        if "rirs" not in _STATE:
            _STATE["rirs"] = room_rirs("far-field-46", N_ROOMS, FAR_FIELD)
        h = _STATE["rirs"][int(rng.integers(N_ROOMS))]
        y = np.convolve(wave16k, h)[: wave16k.size]
        return (y * np.abs(wave16k).max() / (np.abs(y).max() + 1e-12)).astype(np.float32)
    return codec_chain(wave16k, name, rng)


Row = tuple[int, str, np.ndarray | None, bool]  # clip, channel, branch outputs, judged as telephone


def _clip_rows(job: tuple[int, str, str, bool]) -> list[Row]:
    from common.telephone import LINES, telephone

    from verilive.audio import resample
    from verilive.audio.decode import decode_file
    from verilive.voice.channel import resolve_channel
    from verilive.voice.schemas import ChannelType

    def tel(y: np.ndarray, rate: int) -> bool:
        return resolve_channel(None, rate, y) is ChannelType.TEL

    i, path, label, augmented = job
    audio = decode_file(Path(path).read_bytes())
    wave, sr = audio.mono(), audio.sample_rate
    rng = np.random.default_rng(1000 + i)
    if augmented:  # the augmented channels only: bona fide through each, a spoof through one
        x16 = resample(wave, sr, 16000)
        names = list(AUGMENTS) if label == "bonafide" else [AUGMENTS[int(rng.integers(len(AUGMENTS)))]]
        out: list[Row] = []
        for name in names:
            y = augment(x16, name, rng)
            out.append((i, name, branches(y, 16000), tel(y, 16000)))
        return out
    out = [(i, "wideband", branches(wave, sr), tel(wave, sr))]
    names = list(LINES)
    if label != "bonafide":
        names = [names[k] for k in sorted(rng.choice(len(names), SPOOF_LINES, replace=False))]
    for name in names:
        y = telephone(wave, sr, LINES[name], seed=i)
        out.append((i, name, branches(y, 8000), True))
    return out


def extract(root: Path, out: Path, jobs: int, model: Path, augmented: bool = False) -> None:
    """Score every clip of ``root`` (with ``augmented``: every bona fide clip and the train-role
    spoofs, through :data:`AUGMENTS` only) and save the rows to ``out``."""
    rows = list(csv.DictReader((root / "index.csv").open()))
    work = [
        (i, str(root / r["path"]), r["label"], augmented)
        for i, r in enumerate(rows)
        if not augmented or r["label"] == "bonafide" or r["role"] == "train"
    ]
    got: list[Row] = []

    def results() -> Iterator[list[Row]]:
        if jobs <= 1:
            _init(str(model))
            yield from map(_clip_rows, work)
            return
        with ProcessPoolExecutor(jobs, initializer=_init, initargs=(str(model),)) as pool:
            yield from pool.map(_clip_rows, work, chunksize=4)

    for k, res in enumerate(results()):
        got.extend(res)
        if k % 50 == 0:
            print(f"{k + 1} of {len(work)} clips", flush=True)
    width = next(len(r) for _, _, r, _ in got if r is not None)
    x = np.stack([r if r is not None else np.full(width, np.nan) for _, _, r, _ in got]).astype(np.float32)
    idx = np.array([i for i, _, _, _ in got])
    np.savez_compressed(
        out,
        x=x,
        clip=idx,
        channel=np.array([c for _, c, _, _ in got]),
        tel=np.array([t for _, _, _, t in got]),
        source=np.array([rows[i]["source"] for i in idx]),
        label=np.array([rows[i]["label"] for i in idx]),
        generator=np.array([rows[i]["generator"] for i in idx]),
        role=np.array([rows[i]["role"] for i in idx]),
        language=np.array([rows[i]["language"] for i in idx]),
    )
    print(f"wrote {len(got)} rows ({int(np.isnan(x[:, 0]).sum())} unsuitable) to {out}")


SHARED_PIECE_S = 6.0  # AMI excerpts are cut into pieces this long
CALIBRATION_LIBRI_SPEAKERS = 20  # the first held-out LibriSpeech speakers (sorted); tests use the others


def shared_heldout(out: Path, max_per_set: int = 40) -> None:
    """Bona fide clips of the shipped model's held-out speakers (its metadata's ``test_speakers``) in
    ``shared/data/voice``, as a sources folder like ``train.antispoof_sources build`` writes: read
    LibriSpeech, AMI meeting excerpts (cut into 6 s pieces) and Common Voice Spanish. Their domains
    were trained on (other speakers), so they bound the thresholds but are no unseen source."""
    import json

    import onnx
    import soundfile as sf
    from common.repo import shared_root

    from verilive.audio import resample
    from verilive.voice.antispoof import MODEL_FILE

    model = onnx.load(str(Path(__file__).parents[1] / "src/verilive/voice" / MODEL_FILE))
    (meta,) = [json.loads(p.value) for p in model.metadata_props if p.key == "verilive_antispoof"]
    speakers = sorted(meta["test_speakers"])
    voice = shared_root() / "data" / "voice"
    clips: list[tuple[str, str, Path, float, float]] = []  # source, language, file, start, stop
    libri = [s.removeprefix("libri-") for s in speakers if s.startswith("libri-")]
    for spk in libri[:CALIBRATION_LIBRI_SPEAKERS]:
        for p in sorted((voice / "librispeech_251spk_gender").glob(f"{spk}-*.flac"))[:2]:
            clips.append(("shared-librispeech-heldout", "en", p, 0.0, 30.0))
    for s in (s for s in speakers if s.startswith("ami-")):
        p = voice / "ami_diarization_dev" / "debug_protocol" / f"{s.removeprefix('ami-')}.flac"
        dur = sf.info(p).duration
        for k in range(int(dur // SHARED_PIECE_S)):
            clips.append(("shared-ami-heldout", "en", p, k * SHARED_PIECE_S, (k + 1) * SHARED_PIECE_S))
    cv = [s.removeprefix("cves-") for s in speakers if s.startswith("cves-")][:max_per_set]
    for stem in cv:
        p = voice / "age_cv_es_mx" / f"{stem}.mp3"
        if p.exists():
            clips.append(("shared-cv-es-heldout", "es", p, 0.0, 30.0))
    out.mkdir(parents=True, exist_ok=True)
    with (out / "index.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["source", "label", "generator", "language", "role", "path", "sample_rate_in", "duration_s"]
        )
        for i, (source, lang, p, a, b) in enumerate(clips):
            x, sr = sf.read(p, dtype="float32", always_2d=True)
            x = x.mean(axis=1)[int(a * sr) : int(b * sr)]
            rel = Path(source) / f"{i:03d}-{p.stem}.wav"
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            sf.write(out / rel, resample(x, sr, 16000), 16000, subtype="PCM_16")
            w.writerow(
                [source, "bonafide", "genuine-heldout", lang, "choose-only", rel, sr, f"{x.size / sr:.3f}"]
            )
    print(f"wrote {len(clips)} held-out bona fide clips to {out}")


def main() -> None:
    from verilive.voice.antispoof import MODEL_FILE

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="score every clip and line, keeping the branch outputs")
    e.add_argument("--sources", type=Path, required=True)
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--jobs", type=int, default=2, help="processes (each uses every core; 2 is faster)")
    e.add_argument("--augmented", action="store_true", help="the augmented channels (room, codec2, MP3) only")
    e.add_argument(
        "--model", type=Path, default=Path(__file__).parents[1] / "src/verilive/voice" / MODEL_FILE
    )
    h = sub.add_parser(
        "shared", help="the shipped model's held-out bona fide of shared/, as a sources folder"
    )
    h.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "shared":
        shared_heldout(args.out)
    else:
        extract(args.sources, args.out, args.jobs, args.model, args.augmented)


if __name__ == "__main__":
    main()

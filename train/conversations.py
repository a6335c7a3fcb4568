"""Conversations mixed from single-speaker speech: the training chunks of the telephone segmentation
student and the two-party calls of eval/calls_diarization.py (issue 48; docs/diarization.md).

    pools = speech_pools(data_root())                       # {source: {speaker: [clip paths]}}
    wave, ref = conversation([clips_a, clips_b], rng, 60.0)  # 16 kHz mono, [(speaker, start_s, end_s)]

Sources are the real read-speech folders of ``../shared/data/voice`` (their README.txt give licence and
origin). Each is split by speaker into the part the segmentation student may train on and the part only
the call evaluation sees (``role``): the evaluation's calls never reuse a voice the student heard.

How a conversation is built (all drawn from ``rng``):
- every clip is brought to the same active speech level, then each speaker gets a gain of -6..+6 dB
  (a near and a far talker);
- turns alternate between speakers (with three, the next is any other); a turn is a stretch of 0.8-7 s
  of one of that speaker's clips, cut where the clip is quiet;
- between turns a gap (exponential, mean 0.5 s, at most 2.5 s) or, with probability ``overlap_p``, an
  overlap of 0.1-1.0 s (the next speaker starting early, never longer than half a turn);
- with probability ``backchannel_p`` a turn gets a short (0.3-0.9 s) interjection of another speaker
  in its middle ("yes", "mm"), as calls have.

The reference is each placed piece's own speech activity (:func:`speech_mask`: energy within 35 dB of
the clip's loud frames, gaps under 0.3 s bridged, islands under 0.1 s dropped), so pauses inside a turn
are not counted as speech. It is a reference *made here* from clean read speech, not a human one.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 16000
HOP = 160  # 10 ms activity frames

# folder, column with the speaker, which files are bona fide speech (None: all), roles by speaker
#: (source name, folder under data/voice, speaker column, fraction of speakers the student may train on)
SOURCES: dict[str, tuple[str, str, float]] = {
    "librispeech": ("librispeech_251spk_gender", "speaker_id", 0.6),
    "ljspeech": ("ljspeech_bonafide", "speaker", 1.0),
    "libritts_prompts": ("spoof_vstts", "", 1.0),
    "librispeech_test": ("spoof_mobilespeech", "", 1.0),
    "speechocean762": ("age_speechocean762", "speaker", 0.0),
    "cv_es_mx": ("age_cv_es_mx", "speaker", 0.0),
    "tortoise_voices": ("spoof_tortoise", "speaker_if_known", 0.0),
}
#: The call sources: leave-one-source-out runs over these (eval/calls_diarization.py).
CALL_SOURCES = ("librispeech", "speechocean762", "cv_es_mx", "tortoise_voices")


@dataclass(frozen=True)
class Clip:
    source: str
    speaker: str
    path: Path


def _role(source: str, speaker: str, train_fraction: float) -> str:
    h = int(hashlib.sha256(f"{source}/{speaker}".encode()).hexdigest()[:8], 16) / 2**32
    return "student" if h < train_fraction else "calls"


def speech_pools(root: Path, role: str) -> dict[str, dict[str, list[Clip]]]:
    """{source: {speaker: clips}} of bona fide speech for ``role`` ("student" or "calls").

    Files without a speaker label (the LibriTTS prompts, LibriSpeech test-clean GT of the spoof
    folders) count each as its own speaker.
    """
    if role not in ("student", "calls"):
        raise ValueError(f"role is 'student' or 'calls', got {role!r}")
    out: dict[str, dict[str, list[Clip]]] = {}
    for source, (folder, col, frac) in SOURCES.items():
        base = root / "voice" / folder
        if not (base / "labels.csv").exists():
            continue
        pool: dict[str, list[Clip]] = {}
        with open(base / "labels.csv", newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("label", "bonafide") not in ("bonafide", ""):
                    continue
                path = base / r["file"]
                if not path.exists():
                    path = path.with_suffix(".flac")
                if not path.exists():
                    continue
                spk = (r.get(col) or "").strip() if col else ""
                spk = spk or Path(r["file"]).stem
                if _role(source, spk, frac) != role:
                    continue
                pool.setdefault(spk, []).append(Clip(source, spk, path))
        if pool:
            out[source] = pool
    return out


@cache
def _read(path: Path) -> np.ndarray:
    x, sr = sf.read(str(path), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if sr != SR:
        import soxr

        x = soxr.resample(x, sr, SR).astype(np.float32)
    return x


def load(clip: Clip) -> np.ndarray:
    """The clip at 16 kHz, its active level at -26 dBov (0.5 = full-scale sine)."""
    x = _read(clip.path)
    m = speech_mask(x)
    if not m.any():
        return x.copy()
    frames = x[: m.size * HOP].reshape(-1, HOP)
    level = float(np.mean(frames[m[: frames.shape[0]]] ** 2))
    return (x * np.sqrt(0.5 * 10 ** (-26 / 10) / max(level, 1e-12))).astype(np.float32)


def speech_mask(x: np.ndarray, floor_db: float = 35.0) -> np.ndarray:
    """(len(x) // 160,) bool: 10 ms frames with speech energy (see the module docstring)."""
    n = x.size // HOP
    if n == 0:
        return np.zeros(0, bool)
    e = 10 * np.log10(np.mean(x[: n * HOP].reshape(n, HOP).astype(np.float64) ** 2, axis=1) + 1e-12)
    loud = np.percentile(e, 95)
    m = e > max(loud - floor_db, -75.0)
    m = _close(m, 30)
    return _open(m, 10)


def _runs(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = np.diff(np.concatenate([[0], m.astype(np.int8), [0]]))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def _close(m: np.ndarray, gap: int) -> np.ndarray:
    """Gaps of fewer than ``gap`` frames between speech become speech."""
    out = m.copy()
    s, e = _runs(~m)
    for a, b in zip(s, e, strict=True):
        if a > 0 and b < m.size and b - a < gap:
            out[a:b] = True
    return out


def _open(m: np.ndarray, size: int) -> np.ndarray:
    out = m.copy()
    s, e = _runs(m)
    for a, b in zip(s, e, strict=True):
        if b - a < size:
            out[a:b] = False
    return out


def _turn(x: np.ndarray, rng: np.random.Generator, lo: float, hi: float) -> np.ndarray:
    """A stretch of ``x`` of lo..hi s that starts and ends at quiet frames (whole clip if shorter)."""
    m = speech_mask(x)
    want = int(rng.uniform(lo, hi) * SR)
    if x.size <= want or m.size < 3:
        return _trim(x)
    quiet = np.flatnonzero(~m) * HOP
    start = int(rng.integers(0, x.size - want + 1))
    if quiet.size:
        # snap both ends to the nearest quiet frame, so no word is cut in half
        start = int(quiet[np.argmin(np.abs(quiet - start))])
        end_want = start + want
        end = int(quiet[np.argmin(np.abs(quiet - end_want))]) if quiet.max() > start else x.size
        if end - start < int(lo * SR) // 2:
            end = min(x.size, start + want)
    else:
        end = start + want
    return _trim(x[start:end])


def _trim(x: np.ndarray) -> np.ndarray:
    """Without the silence before the first and after the last speech frame."""
    m = speech_mask(x)
    if not m.any():
        return x
    on = np.flatnonzero(m)
    return x[on[0] * HOP : (on[-1] + 1) * HOP]


def conversation(
    voices: Sequence[Sequence[Clip]],
    rng: np.random.Generator,
    duration_s: float,
    overlap_p: float = 0.15,
    backchannel_p: float = 0.1,
    lead_s: float | None = None,
) -> tuple[np.ndarray, list[tuple[int, float, float]]]:
    """A conversation of ``len(voices)`` speakers, about ``duration_s`` long: wave and reference turns.

    ``lead_s``: silence before the first turn (drawn 0-1 s when None).
    """
    k = len(voices)
    if k < 1:
        raise ValueError("a conversation needs at least one voice")
    audio = [[load(c) for c in v] for v in voices]
    gains = 10 ** (rng.uniform(-6, 6, size=k) / 20)
    n = int(duration_s * SR)
    pieces: list[tuple[int, int, np.ndarray]] = []  # speaker, start sample, samples
    t = int((rng.uniform(0, 1.0) if lead_s is None else lead_s) * SR)
    spk = int(rng.integers(0, k))
    prev_len = 0
    while t < n:
        x = _turn(audio[spk][int(rng.integers(0, len(audio[spk])))], rng, 0.8, 7.0) * gains[spk]
        pieces.append((spk, t, x))
        if k > 1 and rng.random() < backchannel_p and x.size > 2 * SR:
            other = int((spk + 1 + rng.integers(0, k - 1)) % k)
            b = _turn(audio[other][int(rng.integers(0, len(audio[other])))], rng, 0.3, 0.9)
            b = b[: int(0.9 * SR)] * gains[other]
            pieces.append((other, t + int(rng.uniform(0.3, 0.6) * x.size), b))
        prev_len = x.size
        if k > 1 and rng.random() < overlap_p:
            step = x.size - min(int(rng.uniform(0.1, 1.0) * SR), prev_len // 2)
        else:
            step = x.size + int(min(rng.exponential(0.5), 2.5) * SR)
        t += max(step, 1)
        if k > 1:
            spk = int((spk + 1 + rng.integers(0, k - 1)) % k) if k > 2 else 1 - spk
    end = min(n, max(s + p.size for _, s, p in pieces))
    wave = np.zeros(end, np.float32)
    ref: list[tuple[int, float, float]] = []
    for who, s, p in pieces:
        p = p[: max(0, end - s)]
        if p.size == 0:
            continue
        wave[s : s + p.size] += p
        m = speech_mask(p)
        a, b = _runs(m)
        ref += [(who, (s + i * HOP) / SR, (s + j * HOP) / SR) for i, j in zip(a, b, strict=True)]
    peak = float(np.max(np.abs(wave))) if wave.size else 0.0
    if peak > 0.99:
        wave *= 0.99 / peak
    return wave, sorted(ref, key=lambda r: r[1])


def pick_voices(
    pools: dict[str, dict[str, list[Clip]]], rng: np.random.Generator, k: int, source: str | None = None
) -> list[list[Clip]]:
    """``k`` distinct speakers' clips: from ``source``, or each from any source (weighted by size)."""
    names = [source] if source else sorted(pools)
    cands = [(s, spk) for s in names for spk in sorted(pools[s])]
    if len(cands) < k:
        raise ValueError(f"only {len(cands)} speakers to pick {k} from")
    idx = rng.choice(len(cands), size=k, replace=False)
    return [pools[cands[i][0]][cands[i][1]] for i in idx]

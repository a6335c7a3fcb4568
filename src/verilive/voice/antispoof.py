"""Voice anti-spoofing: is this speech a live human (bona fide) or a replay, TTS or voice conversion?

Runtime is numpy + onnxruntime. The model is a light CNN in the style of the ASVspoof 2019 LCNN
baseline (max-feature-map convolutions over a log-power spectrogram and a group-delay map) with a
second, small branch on utterance-level excitation and phase cues; it is trained by
``train/antispoof/`` on data built by ``train/antispoof_data/`` and exported to ONNX with its
input normalisation and its calibration folded in (docs/antispoof.md):

1. front end (numpy, here): 16 kHz, 25 ms Hann windows every 10 ms, 512-point FFT, bins 1-256
   (31 Hz to 8 kHz); two channels: log power in dB relative to the loudest frame (so the recording
   level carries no information) and the squashed group delay (phase structure); leading and
   trailing stretches quieter than ``trim_db`` below the loudest frame are dropped;
2. utterance cues (:mod:`verilive.voice.utterance_cues`): 32 statistics of voicing, relative
   harmonic phase (RPS), instantaneous-frequency consistency, band flatness and modulation, which
   show the resynthesis (vocoders, Griffin-Lim) that keeps the magnitude spectrum intact;
3. CAM++ front output (:meth:`verilive.voice.campplus.CamPlusPlus.fcm_frames`): the speaker
   model's frozen 2-D convolutional front module (320 values per 10 ms frame) on the first
   ``FCM_SECONDS`` of the trimmed signal; a second, small network on it catches vocoder and TTS
   traces that the spectrogram network misses;
4. Whisper layer statistics (:meth:`verilive.voice.whisper.WhisperEncoder.layers`, the model the
   metadata names): the mean and spread over time of the frozen encoder's residual stream at every
   depth, on the same stretch as the CAM++ front output;
5. the model has four branches: a network on the (1, 2, 256, frames) features and the (1, 32)
   cues, a second network on the (1, 320, frames) front output, a linear regression on that
   output's mean and spread over time, and a linear regression on the Whisper statistics. Each
   branch is calibrated alone; a weighted sum of their log-odds of bona fide (weights learned on
   leave-one-source-out scores), mapped by one affine calibration, gives the bona fide logit, and
   their summed log-probabilities, recalibrated, split the rest between the attack classes. A softmax of the
   four logits (bona fide, replay, TTS, VC) gives ``score`` = P(bona fide) and ``scoreReplay``,
   ``scoreTts``, ``scoreVc`` = P(each attack class), which sum to 1;
6. a model may also output a bona fide logit per channel (``channel_logits``; the metadata's
   ``channel_logits`` names the columns, "wideband" and "telephone", told apart as templates do,
   ``voice/channel.py``): a linear head on the four branch log-odds, the CAM++ front statistics and
   the Whisper statistics, trained on public sources the branches never saw, with the channel's
   threshold, chosen leaving one source out, folded into its bias (issue 46,
   train/antispoof_calibration.py). It then replaces the fused bona fide logit.

Input that cannot be judged (no audio, clipped, no speech, less than ``MIN_SPEECH_S`` of speech)
gets only ``unsuitableInputMessage``, every score null.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from verilive.audio import Audio, resample
from verilive.models.sessions import cpu_session
from verilive.models.store import packaged_path
from verilive.numeric import softmax
from verilive.voice.channel import resolve_channel
from verilive.voice.schemas import ChannelType
from verilive.voice.utterance_cues import FEATURE_NAMES, utterance_features

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.campplus import CamPlusPlus
    from verilive.voice.engine import VoiceEngine
    from verilive.voice.vad import SileroVad
    from verilive.voice.whisper import WhisperEncoder

__all__ = [
    "CLASSES",
    "MIN_SPEECH_S",
    "AntiSpoof",
    "FrontEnd",
    "as_pcm16",
    "clipped_fraction",
    "fcm_input",
    "features",
    "log_spectrogram",
    "whisper_input",
    "whisper_stats",
]

SR = 16000
CLASSES = ("bonafide", "replay", "tts", "vc")
MODEL_FILE = "antispoof_model.onnx"
PACKAGED_ID = "antispoof"  # its id in the manifest's packaged section (the store resolves it)
# Speech that the VAD finds, at least. Silero loses onsets and pauses at the edges of a short clip:
# of 1.0 s cut from running speech it finds 0.65 s or more in 90 % of the cuts and 0.5 s in 99 %
# (docs/antispoof.md, "Short clips"), so a threshold of 1.0 s declined a fifth of 1.2 s clips.
# Below 0.5 s of detected speech the clip is declined: too little to judge.
MIN_SPEECH_S = 0.5
# Clipping: a clipped recording holds many samples at full scale or, when it was turned down after
# clipping, on a flat plateau at its peak. Natural speech has a handful of samples within 0.1 % of
# its peak; clipped speech has hundreds or thousands.
CLIP_FULL_SCALE = 0.999  # |x| at or above this is "at full scale"
CLIP_PLATEAU = 0.999  # |x| at or above this fraction of the peak is "on the plateau"...
CLIP_MIN_PEAK = 0.25  # ... looked for only when the peak is above -12 dBFS
CLIP_MAX_FRACTION = 0.002  # more than 0.2 % of the samples clipped: unsuitable
CLIP_MIN_SAMPLES = 20
# Without a VAD, 20 ms frames above this level count as speech (a crude energy rule).
ENERGY_SPEECH_DBFS = -50.0
MIN_FRAMES = 50  # 0.5 s of spectrogram after trimming
FEATURE_CHUNK = 200  # spectrogram frames computed at a time (500: 8 MiB more per concurrent 30 s call)
# The spectrogram network sees at most this many frames at once (8 s, the length it was trained and
# measured on); a longer clip is judged in equal windows and their logits averaged, so that memory
# does not grow with the clip (two 30 s clips at once took the service to 733 MiB; issue 46).
WINDOW_FRAMES = 800
FCM_SECONDS = 8.0  # the CAM++ front statistics look at this much of the trimmed signal


@dataclass(frozen=True)
class FrontEnd:
    """Spectrogram settings; stored in the model's metadata so training and runtime agree."""

    win: int = 400  # 25 ms
    hop: int = 160  # 10 ms
    n_fft: int = 512
    bins: int = 256  # FFT bins 1..256
    floor_db: float = 90.0  # power floor, relative to the loudest frame
    trim_db: float = 50.0  # leading/trailing frames this far below the loudest are dropped
    max_seconds: float = 30.0  # longer input: the first max_seconds are judged
    gd_scale: float = 40.0  # group delay (samples) squashed as tanh(gd / gd_scale)


@lru_cache(maxsize=4)
def _hann(n: int) -> np.ndarray:
    return np.hanning(n + 2)[1:-1]


def features(wave16k: np.ndarray, fe: FrontEnd = FrontEnd()) -> np.ndarray:
    """(2, bins, frames) float32 network input: log power and compressed group delay.

    Channel 0 is the log-power spectrogram in dB relative to the loudest frame (so the recording
    level carries no information). Channel 1 is the group delay of each bin, -d(phase)/d(omega),
    computed as Re(X conj(Y)) / |X|^2 with Y the spectrum of the time-weighted frame, regularised
    where the bin is weak and squashed with tanh: it carries the phase structure that vocoders and
    phase reconstruction (Griffin-Lim) do not reproduce, which a magnitude spectrogram cannot show.
    Leading and trailing frames quieter than ``trim_db`` below the loudest are dropped. ``wave16k``
    is mono float at 16 kHz; input shorter than one window or without signal gives (2, bins, 0).
    """
    empty = np.zeros((2, fe.bins, 0), np.float32)
    x = np.asarray(wave16k, dtype=np.float64)[: int(fe.max_seconds * SR)]
    if x.size < fe.win:
        return empty
    x = x - x.mean()
    n = 1 + (x.size - fe.win) // fe.hop
    window = _hann(fe.win)

    def spectra(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        # Frames [start, stop) only: a 30 s clip at once held ~80 MiB of temporaries (issue 46).
        frames = x[np.arange(fe.win)[None, :] + fe.hop * np.arange(start, stop)[:, None]] * window
        return frames, np.fft.rfft(frames, fe.n_fft)[:, 1 : fe.bins + 1]

    frame_power = np.empty(n)
    for a in range(0, n, FEATURE_CHUNK):
        _, spec = spectra(a, min(n, a + FEATURE_CHUNK))
        frame_power[a : a + spec.shape[0]] = (spec.real**2 + spec.imag**2).sum(axis=1)
    loudest = float(frame_power.max())
    if not loudest > 0.0:
        return empty
    loud = np.flatnonzero(frame_power > loudest * 10 ** (-fe.trim_db / 10))
    first, last = int(loud[0]), int(loud[-1]) + 1
    out = np.empty((2, fe.bins, last - first), np.float32)
    ramp = np.arange(fe.win) - (fe.win - 1) / 2
    ref = loudest / fe.bins  # mean bin power of the loudest frame
    for a in range(first, last, FEATURE_CHUNK):
        frames, spec = spectra(a, min(last, a + FEATURE_CHUNK))
        power = spec.real**2 + spec.imag**2
        tspec = np.fft.rfft(frames * ramp, fe.n_fft)[:, 1 : fe.bins + 1]
        reg = 1e-3 * power.mean(axis=1, keepdims=True) + 1e-12 * loudest
        gd = np.tanh((spec.real * tspec.real + spec.imag * tspec.imag) / (power + reg) / fe.gd_scale)
        db = 10 * np.log10(power / ref + 10 ** (-fe.floor_db / 10))
        out[0, :, a - first : a - first + len(frames)] = db.T
        out[1, :, a - first : a - first + len(frames)] = gd.T
    return out


def fcm_input(wave16k: np.ndarray, fe: FrontEnd = FrontEnd(), seconds: float = FCM_SECONDS) -> np.ndarray:
    """The stretch of ``wave16k`` that the CAM++ front statistics describe: leading and trailing
    25 ms frames (10 ms hop) quieter than ``fe.trim_db`` below the loudest dropped, as in
    :func:`features`, then the first ``seconds``. Leading silence would otherwise weigh on the
    statistics as much as speech does."""
    x = np.asarray(wave16k, dtype=np.float32)[: int(fe.max_seconds * SR)]
    if x.size < fe.win:
        return x
    n = 1 + (x.size - fe.win) // fe.hop
    idx = np.arange(fe.win)[None, :] + fe.hop * np.arange(n)[:, None]
    energy = np.square(x.astype(np.float64) - x.mean())[idx].sum(axis=1)
    loudest = float(energy.max())
    if not loudest > 0.0:
        return x[: int(seconds * SR)]
    loud = np.flatnonzero(energy > loudest * 10 ** (-fe.trim_db / 10))
    start, stop = loud[0] * fe.hop, loud[-1] * fe.hop + fe.win
    return x[start:stop][: int(seconds * SR)]


def whisper_input(wave16k: np.ndarray, fe: FrontEnd = FrontEnd(), seconds: float = FCM_SECONDS) -> np.ndarray:
    """What the Whisper encoder hears: the :func:`fcm_input` stretch, zero-padded to at least 0.5 s
    (the encoder's front end needs a few frames; a judged clip has 0.5 s of spectrogram anyway)."""
    x = fcm_input(wave16k, fe, seconds)
    return np.pad(x, (0, SR // 2 - x.size)) if x.size < SR // 2 else x


def whisper_stats(layers: np.ndarray) -> np.ndarray:
    """(depths * dims * 2,) float32: per depth, the mean and the standard deviation over time of
    one clip's [depths, steps, dims] Whisper residual stream (depth-major, means first)."""
    # one depth at a time in float64: the whole stream in float64 was 11 MiB per concurrent 8 s call
    out = []
    for depth in np.asarray(layers):
        x = depth.astype(np.float64)
        out.append(np.concatenate([x.mean(axis=0), x.std(axis=0)]))
    return np.concatenate(out).astype(np.float32)


def log_spectrogram(wave16k: np.ndarray, fe: FrontEnd = FrontEnd()) -> np.ndarray:
    """Channel 0 of :func:`features`: (bins, frames) log power in dB relative to the loudest frame."""
    return features(wave16k, fe)[0]


def clipped_fraction(wave: np.ndarray) -> float:
    """Fraction of samples at full scale, or on a flat plateau at the peak (clipped, then rescaled)."""
    a = np.abs(np.asarray(wave, dtype=np.float32))
    if a.size == 0:
        return 0.0
    peak = float(a.max())
    full = int(np.count_nonzero(a >= CLIP_FULL_SCALE))
    plateau = int(np.count_nonzero(a >= CLIP_PLATEAU * peak)) if peak >= CLIP_MIN_PEAK else 0
    count = max(full, plateau)
    return count / a.size if count >= CLIP_MIN_SAMPLES else 0.0


def as_pcm16(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to 16-bit steps (float32). The training clips are 16 kHz PCM16 files, so a band
    the signal leaves empty still holds 16-bit rounding noise (about -77 dB below the speech in the
    4-8 kHz band of a telephone clip); 8 kHz input resampled to 16 kHz in floating point has none
    there, and the model took that silence for a vocoder's (P(bona fide) 0.98 -> 0.50 on the same
    telephone clip). Rounding every input the same way makes the format of the upload irrelevant."""
    return (np.round(np.clip(np.asarray(x, np.float64), -1.0, 1.0) * 32767.0) / 32767.0).astype(np.float32)


@dataclass(frozen=True)
class SpoofScores:
    """The judgement of one input: P(bona fide) (``score``) and the three attack-class
    probabilities, summing to 1; or, when it cannot be judged, all None and ``unsuitable`` saying why."""

    score: float | None = None  # P(bona fide)
    replay: float | None = None
    tts: float | None = None
    vc: float | None = None
    unsuitable: str | None = None


class AntiSpoof:
    """Anti-spoofing engine. Thread-safe: no per-call state on ``self``.

    ``registry`` (the app's model store, composed in ``voice/deps.py``) gives the CAM++ model and the
    Whisper encoder the metadata names, when ``embedder`` and ``whisper`` are not given; without
    ``vad`` the speech-length check uses an energy rule."""

    def __init__(
        self,
        params_path: str | Path | None = None,
        *,
        registry: ModelRegistry,
        vad: SileroVad | None = None,
        intra_op_threads: int = 0,
        embedder: CamPlusPlus | None = None,
        whisper: WhisperEncoder | None = None,
    ) -> None:
        source = Path(params_path) if params_path is not None else packaged_path(PACKAGED_ID)
        data = source.read_bytes()
        # 0 threads: one per core. No arena: input lengths run from 0.5 to 30 s, and the arena would keep
        # the largest run's activations for good (docs/antispoof.md, Speed and memory).
        self.session = cpu_session(data, intra_op_threads, mem_arena=False)
        meta = self.session.get_modelmeta().custom_metadata_map
        self.meta: dict[str, Any] = json.loads(meta.get("verilive_antispoof", "{}"))
        self.frontend = FrontEnd(**self.meta.get("frontend", {}))
        classes = tuple(self.meta.get("classes", CLASSES))
        if classes != CLASSES:
            raise ValueError(f"unexpected anti-spoofing classes {classes}")
        if tuple(self.meta.get("cues", ())) != FEATURE_NAMES:
            raise ValueError("the anti-spoofing model was trained on other utterance cues")
        if self.meta.get("fcm") != "frames":
            raise ValueError("the anti-spoofing model was made for another CAM++ front input")
        self.fcm_seconds = float(self.meta.get("fcm_seconds", FCM_SECONDS))
        inputs = [i.name for i in self.session.get_inputs()]
        # The Whisper encoder that the model's fourth branch was trained on (None: a model without it).
        self.whisper_id: str | None = self.meta.get("whisper")
        if (self.whisper_id is None) != ("whisper" not in inputs):
            raise ValueError("the anti-spoofing model's Whisper input and metadata disagree")
        # The bona fide logit per channel, chosen leaving one public source out
        # (train/antispoof_calibration.py); without it the graph's own fusion is the answer.
        self.channels: tuple[str, ...] = tuple(self.meta.get("channel_logits", ()))
        if self.channels and "channel_logits" not in [o.name for o in self.session.get_outputs()]:
            raise ValueError("the anti-spoofing model's metadata names channel logits its graph lacks")
        self.vad = vad
        self._embedder = embedder
        self._whisper = whisper
        self.registry = registry

    @classmethod
    def from_engine(
        cls, engine: VoiceEngine, registry: ModelRegistry, intra_op_threads: int = 0
    ) -> AntiSpoof:
        """Share the voice engine's VAD (Silero, for the speech-length check) and CAM++ model; the
        Whisper encoder comes from ``registry`` (the app's model store)."""
        return cls(
            registry=registry, vad=engine.vad, intra_op_threads=intra_op_threads, embedder=engine.embedder
        )

    @property
    def embedder(self) -> CamPlusPlus:
        """The CAM++ model for the front statistics; without one given, ``campplus`` from the registry."""
        if self._embedder is None:
            from verilive.voice.campplus import CamPlusPlus

            self._embedder = CamPlusPlus.from_registry(self.registry)
        return self._embedder

    @property
    def whisper(self) -> WhisperEncoder:
        """The Whisper encoder the metadata names, from the registry unless one was given."""
        if self._whisper is None:
            from verilive.voice.whisper import WhisperEncoder

            assert self.whisper_id is not None
            self._whisper = WhisperEncoder.from_registry(self.registry, self.whisper_id)
        return self._whisper

    def whisper_features(self, wave16k: np.ndarray) -> np.ndarray | None:
        """:func:`whisper_stats` of the stretch the CAM++ front output sees (see :func:`fcm_input`),
        or None for a model without the Whisper branch."""
        if self.whisper_id is None:
            return None
        return whisper_stats(self.whisper.layers(whisper_input(wave16k, self.frontend, self.fcm_seconds)))

    def fcm_frames(self, wave16k: np.ndarray) -> np.ndarray:
        """(320, frames) CAM++ front output of a 16 kHz mono signal (see :func:`fcm_input`)."""
        emb = self.embedder
        return emb.fcm_frames(emb.features(fcm_input(wave16k, self.frontend, self.fcm_seconds)))

    def speech_seconds(self, wave: np.ndarray, sample_rate: int) -> float:
        if self.vad is not None:
            return sum(e - s for s, e in self.vad.segments(wave, sample_rate)) / sample_rate
        hop = max(1, int(0.02 * sample_rate))
        n = wave.size // hop
        if n == 0:
            return 0.0
        frames = wave[: n * hop].reshape(n, hop).astype(np.float64)
        level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
        return float(np.count_nonzero(level > ENERGY_SPEECH_DBFS)) * hop / sample_rate

    def unsuitable(
        self, wave: np.ndarray, sample_rate: int, speech_seconds: float | None = None
    ) -> str | None:
        """Why ``wave`` cannot be judged, or None. ``speech_seconds``: the caller's VAD result, if any."""
        if wave.size == 0 or not np.all(np.isfinite(wave)):
            return "No audio: the input is empty or holds invalid samples."
        frac = clipped_fraction(wave)
        if frac > CLIP_MAX_FRACTION:
            return (
                f"Clipped audio: {100 * frac:.2f} % of the samples are at full scale "
                f"(at most {100 * CLIP_MAX_FRACTION:.1f} % allowed); record at a lower level."
            )
        speech = self.speech_seconds(wave, sample_rate) if speech_seconds is None else speech_seconds
        if speech <= 0.0:
            return "No speech detected."
        if speech < MIN_SPEECH_S:
            return (
                f"Too little speech: {1000 * speech:.0f} ms found, at least "
                f"{1000 * MIN_SPEECH_S:.0f} ms are needed."
            )
        return None

    def logits(
        self,
        feats: np.ndarray,
        cues: np.ndarray,
        fcm: np.ndarray,
        whisper: np.ndarray | None = None,
        channel: str | None = None,
    ) -> np.ndarray:
        """Calibrated logits (4,) of one (2, bins, frames) :func:`features` array, its (32,)
        utterance cues (NaN where not measurable), its (320, frames) CAM++ front output and, for a
        model with the Whisper branch, its :meth:`whisper_features`. ``channel`` ("wideband" or
        "telephone"): the bona fide logit is the graph's ``channel_logits`` output for it, when the
        model has one; None keeps the graph's own fusion."""
        inputs = {
            "features": feats[None],
            "cues": np.asarray(cues, np.float32).reshape(1, -1),
            "fcm": np.asarray(fcm, np.float32)[None],
        }
        if self.whisper_id is not None:
            if whisper is None:
                raise ValueError("this anti-spoofing model needs the Whisper statistics")
            inputs["whisper"] = np.asarray(whisper, np.float32).reshape(1, -1)
        frames = feats.shape[2]
        parts = -(-frames // WINDOW_FRAMES)
        bounds = np.linspace(0, frames, parts + 1).round().astype(int)
        col = self.channels.index(channel) if channel in self.channels else None
        names = ["logits"] if col is None else ["logits", "channel_logits"]
        out, bona = np.zeros(4), 0.0
        for a, b in itertools.pairwise(bounds):
            # Both outputs are linear in the branch logits, and only this branch sees the windows.
            got = self.session.run(names, {**inputs, "features": feats[None, :, :, a:b]})
            out += np.asarray(got[0][0], dtype=np.float64) / parts
            if col is not None:
                bona += float(got[1][0, col]) / parts
        if col is not None:
            out[0] = bona
        return out

    def class_probabilities(self, wave: np.ndarray, sample_rate: int) -> np.ndarray | None:
        """P(bona fide, replay, TTS, VC) of a mono signal, without the suitability checks. The
        channel (telephone or wideband) is told as templates tell it (``voice/channel.py``)."""
        tel = resolve_channel(None, sample_rate, wave) is ChannelType.TEL
        x = as_pcm16(resample(wave, sample_rate, SR)[: int(self.frontend.max_seconds * SR)])
        feats = features(x, self.frontend)
        if feats.shape[2] < MIN_FRAMES:
            return None
        return softmax(
            self.logits(
                feats,
                utterance_features(x),
                self.fcm_frames(x),
                self.whisper_features(x),
                "telephone" if tel else "wideband",
            )
        )

    def evaluate(self, audio: Audio, speech_seconds: float | None = None) -> SpoofScores:
        """Judge ``audio``. ``speech_seconds``: speech length already measured by the caller's VAD
        over the whole input (saves a second VAD pass); None measures it here.

        Only the first ``frontend.max_seconds`` are judged, so the checks (clipping, speech) look
        at that stretch alone: speech after it cannot make silence before it judgeable. The
        caller's measure is used only when the input is no longer than that stretch."""
        wave = audio.mono()
        judged = int(self.frontend.max_seconds * audio.sample_rate)
        if wave.size > judged:
            wave, speech_seconds = wave[:judged], None
        reason = self.unsuitable(wave, audio.sample_rate, speech_seconds)
        if reason is None:
            p = self.class_probabilities(wave, audio.sample_rate)
            if p is None:
                reason = "Too little signal above the noise floor to judge."
            else:
                return SpoofScores(float(p[0]), float(p[1]), float(p[2]), float(p[3]))
        return SpoofScores(unsuitable=reason)

"""A telephone line, simulated: what eval/ and train/ send through when they need call audio.

    y8k = telephone(wave, sample_rate, Line(codec="amr-nb", kbps=7.4, loss=0.02, snr_db=15), seed=3)

In the order of a real call: noise at the talker's side (optional), the level of a phone
(-26 dBov active speech), the line's band (a high-pass near 300 Hz and a low-pass near 3.4 kHz,
edges drawn from the seed), sampling at 8 kHz, the codec, and lost 20 ms packets concealed the way
the codec's decoder does it. Output: float32 at 8 kHz, as long as the input.

Codecs (docs/telephone.md): G.711 µ-law and A-law and GSM 06.10 through libsndfile (soundfile),
AMR-NB at its eight rates through libopencore-amrnb, Opus narrowband at any bitrate through libopus
(both with ctypes; Debian packages libopencore-amrnb0 and libopus0, installed by
scripts/install-test-deps.sh). Every step is deterministic for a given seed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
from dataclasses import dataclass
from functools import cache

import numpy as np
import soundfile as sf
import soxr
from scipy import signal

RATE = 8000
FRAME = 160  # 20 ms at 8 kHz: one packet
CODECS = ("pcm", "g711u", "g711a", "gsm", "amr-nb", "opus")
AMR_DELAY = 40  # samples: AMR-NB's 5 ms lookahead (measured by cross-correlation, every mode)
AMR_KBPS = (4.75, 5.15, 5.9, 6.7, 7.4, 7.95, 10.2, 12.2)  # the eight AMR-NB modes, MR475..MR122
ACTIVE_LEVEL_DBOV = -26.0  # ITU-T P.56 active speech level usual on a phone line


@dataclass(frozen=True)
class Line:
    """One telephone channel. ``kbps``: the AMR-NB mode or the Opus bitrate (kbit/s); ``loss``:
    fraction of 20 ms packets lost (bursts of mean length ``burst``); ``snr_db``: noise at the
    talker's side, None for none; ``band``: False keeps 0-4 kHz (a line without its filters)."""

    codec: str = "g711u"
    kbps: float | None = None
    loss: float = 0.0
    burst: float = 1.5
    snr_db: float | None = None
    band: bool = True

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"unknown codec {self.codec!r}; one of {', '.join(CODECS)}")
        if self.codec == "amr-nb" and self.kbps is not None and self.kbps not in AMR_KBPS:
            raise ValueError(f"AMR-NB rates are {AMR_KBPS} kbit/s")
        if not 0.0 <= self.loss < 1.0 or self.burst < 1.0:
            raise ValueError("loss is a fraction below 1 and burst a mean length of at least 1")

    @property
    def name(self) -> str:
        rate = f"-{self.kbps:g}k" if self.kbps is not None else ""
        loss = f", {self.loss:.0%} loss" if self.loss else ""
        noise = f", noise {self.snr_db:g} dB" if self.snr_db is not None else ""
        return f"{self.codec}{rate}{loss}{noise}"


#: The lines the telephone targets are measured through (issues 31, 46, 48): G.711, GSM 06.10, AMR-NB
#: and Opus at 8 kbit/s, and a bad line.
LINES = {
    "g711u": Line("g711u"),
    "gsm": Line("gsm"),
    "amr-nb-7.4": Line("amr-nb", 7.4),
    "opus-8": Line("opus", 8.0),
    "bad-line": Line("amr-nb", 4.75, loss=0.03, snr_db=15.0),
}


def telephone(wave: np.ndarray, sample_rate: int, line: Line = Line(), seed: int = 0) -> np.ndarray:
    """``wave`` (mono float, any rate) as heard at the other end of ``line``: float32 at 8 kHz."""
    rng = np.random.default_rng(seed)
    x = np.asarray(wave, dtype=np.float64).reshape(-1)
    if sample_rate != RATE:
        x = soxr.resample(x, sample_rate, RATE, quality="HQ")
    n = x.size
    if n == 0:
        return np.zeros(0, np.float32)
    if line.snr_db is not None:
        x = x + noise_at(x, line.snr_db, rng)
    x = at_level(x, ACTIVE_LEVEL_DBOV)
    if line.band:
        x = band_limit(x, float(rng.uniform(250.0, 350.0)), float(rng.uniform(3300.0, 3500.0)))
    lost = lost_packets(-(-n // FRAME), line.loss, line.burst, rng)
    y = CODEC_FUNCS[line.codec](np.clip(x, -1.0, 1.0), line.kbps, lost)
    return fit_length(y, n).astype(np.float32)


def active_level(x: np.ndarray) -> float:
    """Mean power of the 20 ms frames within 40 dB of the loudest (a simple active speech level)."""
    frames = x[: x.size // FRAME * FRAME].reshape(-1, FRAME) if x.size >= FRAME else x.reshape(1, -1)
    power = np.mean(frames**2, axis=1)
    if power.max() <= 0:
        return 0.0
    return float(np.mean(power[power >= power.max() * 1e-4]))


def at_level(x: np.ndarray, dbov: float) -> np.ndarray:
    """Scaled so that the active level is ``dbov`` (0 dBov: a full-scale sine's power, 0.5)."""
    p = active_level(x)
    return x if p <= 0 else x * np.sqrt(0.5 * 10 ** (dbov / 10) / p)


def noise_at(x: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """Pink noise (1/f power, what rooms and cars mostly give) at ``snr_db`` below the active level."""
    white = rng.standard_normal(x.size)
    spec = np.fft.rfft(white)
    f = np.fft.rfftfreq(x.size, 1.0 / RATE)
    spec /= np.sqrt(np.maximum(f, 20.0))
    pink = np.fft.irfft(spec, n=x.size)
    return pink * np.sqrt(active_level(x) / 10 ** (snr_db / 10) / np.mean(pink**2))


def band_limit(x: np.ndarray, low_hz: float, high_hz: float) -> np.ndarray:
    """The line's filters: causal 4th-order Butterworth high-pass and 8th-order low-pass."""
    hp = signal.butter(4, low_hz, "highpass", fs=RATE, output="sos")
    lp = signal.butter(8, high_hz, "lowpass", fs=RATE, output="sos")
    return signal.sosfilt(lp, signal.sosfilt(hp, x))


def lost_packets(frames: int, loss: float, burst: float, rng: np.random.Generator) -> np.ndarray:
    """Which packets are lost: a two-state (Gilbert) chain with mean loss ``loss`` and mean burst
    length ``burst``, so that losses come in runs as on a congested network."""
    lost = np.zeros(frames, bool)
    if loss <= 0:
        return lost
    p_end = 1.0 / burst  # leave the lost state
    p_start = loss * p_end / (1.0 - loss)  # stationary probability of the lost state = loss
    state = rng.uniform() < loss
    u = rng.uniform(size=frames)
    for i in range(frames):
        lost[i] = state
        state = u[i] >= p_end if state else u[i] < p_start
    return lost


def fit_length(y: np.ndarray, n: int) -> np.ndarray:
    return y[:n] if y.size >= n else np.pad(y, (0, n - y.size))


def to_pcm16(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, -1.0, 1.0 - 1 / 32768) * 32768).astype(np.int16)


def conceal(y: np.ndarray, lost: np.ndarray) -> np.ndarray:
    """Packet loss concealment for the codecs without their own (G.711, GSM through libsndfile):
    the last good packet repeated, halved at each further loss, silence after three."""
    y = y.copy()
    last = np.zeros(FRAME)
    run = 0
    for i in range(lost.size):
        seg = slice(i * FRAME, min((i + 1) * FRAME, y.size))
        if lost[i]:
            run += 1
            y[seg] = (last * 0.5 ** (run - 1) if run <= 3 else np.zeros(FRAME))[: seg.stop - seg.start]
        else:
            run = 0
            got = y[seg]
            last = np.pad(got, (0, FRAME - got.size))
    return y


def _libsndfile(x: np.ndarray, fmt: str, subtype: str) -> np.ndarray:
    buf = io.BytesIO()
    sf.write(buf, x, RATE, format=fmt, subtype=subtype)
    buf.seek(0)
    y, _ = sf.read(buf, dtype="float64")
    return fit_length(y, x.size)


def _pcm(x: np.ndarray, kbps: float | None, lost: np.ndarray) -> np.ndarray:
    return conceal(to_pcm16(x) / 32768.0, lost)


def _g711u(x: np.ndarray, kbps: float | None, lost: np.ndarray) -> np.ndarray:
    return conceal(_libsndfile(x, "WAV", "ULAW"), lost)


def _g711a(x: np.ndarray, kbps: float | None, lost: np.ndarray) -> np.ndarray:
    return conceal(_libsndfile(x, "WAV", "ALAW"), lost)


def _gsm(x: np.ndarray, kbps: float | None, lost: np.ndarray) -> np.ndarray:
    return conceal(_libsndfile(x, "WAV", "GSM610"), lost)


def _load_library(name: str, fallback: str, missing: str) -> ctypes.CDLL:
    """The C library ``name`` (``fallback``: the file tried when the linker cache does not list it);
    RuntimeError ``missing`` when it is not installed."""
    path = ctypes.util.find_library(name) or fallback
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        raise RuntimeError(missing) from exc


@cache
def _amr_lib() -> ctypes.CDLL:
    missing = "AMR-NB needs libopencore-amrnb (Debian libopencore-amrnb0)"
    lib = _load_library("opencore-amrnb", "libopencore-amrnb.so.0", missing)
    lib.Encoder_Interface_init.restype = ctypes.c_void_p
    lib.Encoder_Interface_init.argtypes = [ctypes.c_int]
    lib.Encoder_Interface_Encode.restype = ctypes.c_int
    lib.Encoder_Interface_Encode.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
    ]  # fmt: skip
    lib.Encoder_Interface_exit.argtypes = [ctypes.c_void_p]
    lib.Decoder_Interface_init.restype = ctypes.c_void_p
    lib.Decoder_Interface_Decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.Decoder_Interface_exit.argtypes = [ctypes.c_void_p]
    return lib


def amr_frames(x: np.ndarray, kbps: float = 12.2) -> list[bytes]:
    """AMR-NB packets (storage format: a mode byte, then the bits) of 20 ms frames of ``x``."""
    lib = _amr_lib()
    mode = AMR_KBPS.index(kbps)
    pcm = to_pcm16(np.pad(x, (0, -x.size % FRAME)))
    enc = lib.Encoder_Interface_init(0)  # no DTX: every frame coded, as on a busy line
    out = ctypes.create_string_buffer(64)
    try:
        frames = []
        for i in range(pcm.size // FRAME):
            chunk = np.ascontiguousarray(pcm[i * FRAME : (i + 1) * FRAME])
            k = lib.Encoder_Interface_Encode(enc, mode, chunk.ctypes.data, out, 0)
            frames.append(out.raw[:k])
        return frames
    finally:
        lib.Encoder_Interface_exit(enc)


def _amr(x: np.ndarray, kbps: float | None, lost: np.ndarray) -> np.ndarray:
    lib = _amr_lib()
    # one more frame flushes the encoder's 5 ms lookahead, removed from the front below
    frames = amr_frames(np.pad(x, (0, FRAME)), 12.2 if kbps is None else kbps)
    dec = lib.Decoder_Interface_init()
    pcm = np.zeros(FRAME, np.int16)
    y = np.zeros(len(frames) * FRAME)
    try:
        for i, f in enumerate(frames):
            # a lost packet: the decoder is told the frame is bad and conceals it itself
            lib.Decoder_Interface_Decode(dec, f, pcm.ctypes.data, int(i < lost.size and lost[i]))
            y[i * FRAME : (i + 1) * FRAME] = pcm / 32768.0
    finally:
        lib.Decoder_Interface_exit(dec)
    return y[AMR_DELAY:]


OPUS_APPLICATION_VOIP = 2048
OPUS_SET_BITRATE = 4002
OPUS_SET_BANDWIDTH = 4008
OPUS_BANDWIDTH_NARROWBAND = 1101
OPUS_GET_LOOKAHEAD = 4027


@cache
def _opus_lib() -> ctypes.CDLL:
    lib = _load_library("opus", "libopus.so.0", "Opus needs libopus (Debian libopus0)")
    lib.opus_encoder_create.restype = ctypes.c_void_p
    lib.opus_encoder_create.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.opus_decoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.opus_encode.restype = ctypes.c_int
    lib.opus_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.opus_decode.restype = ctypes.c_int
    lib.opus_decode.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
    ]  # fmt: skip
    lib.opus_encoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
    return lib


def _opus(x: np.ndarray, kbps: float | None, lost: np.ndarray) -> np.ndarray:
    lib = _opus_lib()
    err = ctypes.c_int()
    enc = lib.opus_encoder_create(RATE, 1, OPUS_APPLICATION_VOIP, ctypes.byref(err))
    if not enc or err.value != 0:
        raise RuntimeError(f"opus_encoder_create failed ({err.value})")
    dec = lib.opus_decoder_create(RATE, 1, ctypes.byref(err))
    try:
        # opus_encoder_ctl is variadic: ctypes needs every argument typed, the pointer above all
        handle = ctypes.c_void_p(enc)
        bitrate = ctypes.c_int(int(1000 * (kbps or 12.0)))
        lib.opus_encoder_ctl(handle, ctypes.c_int(OPUS_SET_BITRATE), bitrate)
        narrow = ctypes.c_int(OPUS_BANDWIDTH_NARROWBAND)
        lib.opus_encoder_ctl(handle, ctypes.c_int(OPUS_SET_BANDWIDTH), narrow)
        delay = ctypes.c_int()
        lib.opus_encoder_ctl(handle, ctypes.c_int(OPUS_GET_LOOKAHEAD), ctypes.byref(delay))
        pcm = to_pcm16(np.pad(x, (0, -x.size % FRAME + FRAME)))  # one more frame flushes the lookahead
        packet = ctypes.create_string_buffer(1500)
        out = np.zeros(FRAME, np.int16)
        y = np.zeros(pcm.size)
        for i in range(pcm.size // FRAME):
            chunk = np.ascontiguousarray(pcm[i * FRAME : (i + 1) * FRAME])
            k = lib.opus_encode(enc, chunk.ctypes.data, FRAME, packet, len(packet))
            if k < 0:
                raise RuntimeError(f"opus_encode failed ({k})")
            gone = i < lost.size and lost[i]
            # a lost packet: no data, the decoder's own concealment fills the frame
            lib.opus_decode(dec, None if gone else packet, 0 if gone else k, out.ctypes.data, FRAME, 0)
            y[i * FRAME : (i + 1) * FRAME] = out / 32768.0
        return y[delay.value :]
    finally:
        lib.opus_encoder_destroy(enc)
        lib.opus_decoder_destroy(dec)


CODEC_FUNCS = {"pcm": _pcm, "g711u": _g711u, "g711a": _g711a, "gsm": _gsm, "amr-nb": _amr, "opus": _opus}


def available(codec: str) -> bool:
    """Whether this machine has the library ``codec`` needs."""
    try:
        if codec == "amr-nb":
            _amr_lib()
        elif codec == "opus":
            _opus_lib()
        return codec in CODECS
    except RuntimeError:
        return False

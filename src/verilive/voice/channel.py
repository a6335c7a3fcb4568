"""Channel processing before the embedding model (docs/voice.md#channel-type).

MIC keeps the full band. TEL makes any input look like a telephone channel (300–3400 Hz,
8 kHz sampling) so that templates from microphones and from phone lines live in the same
conditions. MIXED embeds both versions and averages them.
"""

from __future__ import annotations

import numpy as np

from verilive.audio import resample
from verilive.voice.schemas import ChannelType

MODEL_RATE = 16000
TEL_RATE = 8000
TEL_HIGHPASS_HZ = 300.0
TEL_RAMP_HZ = 100.0  # raised-cosine edge of the high-pass, avoids ringing

CHANNEL_FLAG = {ChannelType.MIC: 1, ChannelType.TEL: 2, ChannelType.MIXED: 3}


# Telephone audio resampled to a wideband rate keeps nothing above 4 kHz (-115 dB and below of
# the 0.3-3.4 kHz band, measured through G.711 and AMR-NB); real wideband speech keeps fricatives
# there (median -16 dB, lowest -57 dB over 180 LibriSpeech, speechocean762 and Common Voice
# clips; docs/telephone.md).
BAND_LIMITED_DB = -80.0
FRAME_BLOCK = 64


def resolve_channel(
    channel: ChannelType | None, sample_rate: int, wave: np.ndarray | None = None
) -> ChannelType:
    """No channel given: narrowband audio is telephone audio, and so is wideband-rate audio with
    nothing above 4 kHz (``wave``: a phone call uploaded at 16 kHz); the rest is a microphone."""
    if channel is not None:
        return channel
    if sample_rate <= TEL_RATE:
        return ChannelType.TEL
    if wave is not None and high_band_db(wave, sample_rate) < BAND_LIMITED_DB:
        return ChannelType.TEL
    return ChannelType.MIC


def high_band_db(wave: np.ndarray, sample_rate: int) -> float:
    """Power in 4.2-7.6 kHz relative to 0.3-3.4 kHz, in dB (-inf for silence)."""
    x = np.asarray(wave, np.float64)
    n = 1024
    if x.size < n or sample_rate < 16000:  # under one frame (512-1023 samples raised before)
        return 0.0
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[:: n // 2]
    window = np.hanning(n)
    # FRAME_BLOCK frames at a time: a 30 s clip at once held about 25 MiB per concurrent call
    spec = np.zeros(n // 2 + 1)
    for a in range(0, len(frames), FRAME_BLOCK):
        spec += np.sum(np.abs(np.fft.rfft(frames[a : a + FRAME_BLOCK] * window, axis=1)) ** 2, axis=0)
    spec /= len(frames)
    f = np.fft.rfftfreq(n, 1.0 / sample_rate)
    low = spec[(f >= 300) & (f <= 3400)].sum()
    high = spec[(f >= 4200) & (f <= 7600)].sum()
    if low <= 0:
        return 0.0
    return float(10 * np.log10(high / low)) if high > 0 else float("-inf")


def highpass(wave: np.ndarray, sample_rate: int, cutoff: float, ramp: float) -> np.ndarray:
    if wave.size == 0:
        return wave
    spec = np.fft.rfft(wave.astype(np.float64))
    freqs = np.fft.rfftfreq(wave.size, 1.0 / sample_rate)
    gain = np.clip((freqs - (cutoff - ramp)) / ramp, 0.0, 1.0)
    gain = 0.5 - 0.5 * np.cos(np.pi * gain)
    return np.fft.irfft(spec * gain, n=wave.size).astype(np.float32)


def telephone_band(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """Low-pass by resampling through 8 kHz, high-pass at 300 Hz; returned at the model rate."""
    narrow = resample(wave, sample_rate, TEL_RATE) if sample_rate != TEL_RATE else wave
    narrow = highpass(narrow, TEL_RATE, TEL_HIGHPASS_HZ, TEL_RAMP_HZ)
    return resample(narrow, TEL_RATE, MODEL_RATE)


def model_inputs(wave: np.ndarray, sample_rate: int, channel: ChannelType) -> list[np.ndarray]:
    """The 16 kHz signal(s) to embed for a channel type."""
    if channel is ChannelType.TEL:
        return [telephone_band(wave, sample_rate)]
    wide = resample(wave, sample_rate, MODEL_RATE) if sample_rate != MODEL_RATE else wave
    if channel is ChannelType.MIC:
        return [wide]
    return [wide, telephone_band(wave, sample_rate)]

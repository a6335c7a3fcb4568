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


def resolve_channel(channel: ChannelType | None, sample_rate: int) -> ChannelType:
    """No channel given: narrowband audio is telephone audio, wideband is a microphone."""
    if channel is not None:
        return channel
    return ChannelType.TEL if sample_rate <= TEL_RATE else ChannelType.MIC


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

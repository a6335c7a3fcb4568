"""Signal-to-noise ratio in the voice band (docs/voice.md#snr).

SNR = 10·log10((P_speech − P_noise) / P_noise), where P is the mean power per short frame in
300–3400 Hz, speech frames are those inside VAD speech segments and noise frames those well
outside them. Speech frames contain noise too, hence the subtraction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

VOICE_BAND_HZ = (300.0, 3400.0)
FRAME_MS = 32.0
HOP_MS = 16.0
EDGE_GUARD_MS = 100.0  # frames this close to speech are neither speech nor noise
MIN_NOISE_FRAMES = 10  # fewer non-speech frames than this: fall back to minimum statistics
NOISE_PERCENTILE = 10.0
NO_SPEECH_SNR_DB = 0.0  # no speech: no evidence of a signal above the noise
SNR_RANGE_DB = (-30.0, 100.0)


def band_power(wave: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int, int]:
    """Power per frame in the voice band; returns (powers, frame length, hop) in samples."""
    frame = max(16, round(sample_rate * FRAME_MS / 1000))
    hop = max(8, round(sample_rate * HOP_MS / 1000))
    if wave.size < frame:
        wave = np.pad(wave, (0, frame - wave.size))
    n_frames = 1 + (wave.size - frame) // hop
    nfft = 1 << (frame - 1).bit_length()
    freqs = np.fft.rfftfreq(nfft, 1.0 / sample_rate)
    band = (freqs >= VOICE_BAND_HZ[0]) & (freqs <= min(VOICE_BAND_HZ[1], sample_rate / 2))
    window = np.hanning(frame).astype(np.float32)
    out = np.empty(n_frames, np.float64)
    step = 4096  # frames per block: bounded memory on hour-long audio
    for start in range(0, n_frames, step):
        idx = np.arange(start, min(n_frames, start + step))[:, None] * hop + np.arange(frame)[None, :]
        spec = np.fft.rfft(wave[idx] * window, n=nfft, axis=1)
        out[start : start + len(idx)] = (np.abs(spec[:, band]) ** 2).sum(axis=1)
    return out, frame, hop


def frame_labels(
    n_frames: int, frame: int, hop: int, segments: Sequence[tuple[int, int]], guard: int
) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks (speech, noise) per frame from sample-domain speech segments."""
    centres = np.arange(n_frames) * hop + frame // 2
    speech = np.zeros(n_frames, bool)
    near = np.zeros(n_frames, bool)
    for start, end in segments:
        speech |= (centres >= start) & (centres < end)
        near |= (centres >= start - guard) & (centres < end + guard)
    return speech, ~near


def snr_db(wave: np.ndarray, sample_rate: int, segments: Sequence[tuple[int, int]]) -> float:
    if not segments or wave.size == 0:
        return NO_SPEECH_SNR_DB
    power, frame, hop = band_power(wave.astype(np.float32), sample_rate)
    speech, noise = frame_labels(power.size, frame, hop, segments, int(sample_rate * EDGE_GUARD_MS / 1000))
    if not speech.any():
        return NO_SPEECH_SNR_DB
    p_speech = float(power[speech].mean())
    if noise.sum() >= MIN_NOISE_FRAMES:
        # Trim the loudest tenth: clicks and breaths the VAD left out are not the noise floor.
        noise_frames = np.sort(power[noise])
        p_noise = float(noise_frames[: max(1, int(len(noise_frames) * 0.9))].mean())
    else:
        # Continuous speech: the quietest frames (pauses between words) estimate the noise.
        p_noise = float(np.percentile(power, NOISE_PERCENTILE))
    if p_noise <= 0.0:
        return SNR_RANGE_DB[1] if p_speech > 0 else NO_SPEECH_SNR_DB
    ratio = max(p_speech - p_noise, p_noise * 10 ** (SNR_RANGE_DB[0] / 10)) / p_noise
    return float(np.clip(10.0 * np.log10(ratio), *SNR_RANGE_DB))

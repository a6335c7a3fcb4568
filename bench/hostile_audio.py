"""CPU per byte received of the audio file decoder, for ordinary and hostile files (issue 44).

    python -m bench.hostile_audio [--repeats 3] [--unbounded]

In process, one thread: ``audio.decode_file`` (the path of every voice file endpoint) on, for each
container and codec that libsndfile writes here:
- ordinary speech: 10 s of LibriSpeech (16 kHz; 8 kHz for GSM 6.10), as that codec writes it;
- the worst inputs found for that decoder: digital silence (the most compression), 192 kHz with
  8 channels (most samples per byte), a WAV whose header claims 4 GB, Opus at its lowest bitrate,
  and Ogg Opus made of packets of empty frames (2 bytes per 120 ms, decoded by packet loss
  concealment: the fewest bytes per decoded second Opus allows).
Prints CPU milliseconds, bytes, decoded seconds per kB, CPU per byte (ms/MB), and that as a
multiple of an ordinary 16 kHz PCM16 WAV of speech (x WAV) and of ordinary speech in the same
codec (x kind); the issue's bound is 5x. ``--unbounded`` lifts the per-byte rules of
``verilive.audio.decode`` to show what the worst inputs cost without them.
"""

from __future__ import annotations

import argparse
import io
import struct
import time
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from bench._common import SHARED
from verilive.audio import decode as dec
from verilive.audio.resample import resample
from verilive.errors import AudioDecodeError, PayloadTooLarge

LIBRI = SHARED / "data" / "voice" / "librispeech_251spk_gender"
SPEECH_FILES = ("103-1240-0000.flac", "1034-121119-0000.flac")
SILENCE_192K_8CH = np.zeros((192000 * 3, 8), np.float32)


def speech(seconds: float = 10.0) -> np.ndarray:
    """Real read speech at 16 kHz, mono float32."""
    x = np.concatenate([sf.read(LIBRI / name, dtype="float32")[0] for name in SPEECH_FILES])
    return x[: int(16000 * seconds)]


def encode(x: np.ndarray, rate: int, fmt: str, subtype: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype, **kw)
    return buf.getvalue()


def most_samples_per_byte(fmt: str, subtype: str) -> tuple[str, bytes]:
    """Silence with the most channels and the highest rate the encoder takes (192 kHz 8 ch if it can)."""
    for rate, channels in ((192000, 8), (192000, 2), (48000, 2), (48000, 1), (16000, 1)):
        try:
            data = encode(np.zeros((rate * 3, channels), np.float32), rate, fmt, subtype)
        except sf.LibsndfileError:
            continue
        return f"silence {rate // 1000} kHz {channels} ch", data
    raise RuntimeError(f"libsndfile writes no {fmt} {subtype} here")


# --- hand-made inputs ---


def _ogg_crc_table() -> list[int]:
    table = []
    for i in range(256):
        r = i << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7) if r & 0x80000000 else r << 1
            r &= 0xFFFFFFFF
        table.append(r)
    return table


_OGG_CRC = _ogg_crc_table()


def ogg_page(packets: list[bytes], granule: int, seq: int, flags: int = 0) -> bytes:
    lacing = b"".join(b"\xff" * (len(p) // 255) + bytes([len(p) % 255]) for p in packets)
    head = b"OggS" + bytes([0, flags]) + struct.pack("<qIII", granule, 1, seq, 0) + bytes([len(lacing)])
    page = bytearray(head + lacing + b"".join(packets))
    crc = 0
    for byte in page:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _OGG_CRC[((crc >> 24) & 0xFF) ^ byte]
    page[22:26] = struct.pack("<I", crc)
    return bytes(page)


def opus_empty_frames(seconds: float, channels: int = 1, rate: int = 48000) -> bytes:
    """Ogg Opus whose packets hold six empty 20 ms SILK frames each (code 3): 2 bytes per 120 ms."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, channels, 0, rate, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"test" + struct.pack("<I", 0)
    pages = [ogg_page([head], 0, 0, flags=2), ogg_page([tags], 0, 1)]
    packet = bytes([(1 << 3) | (4 if channels == 2 else 0) | 3, 6])
    left, granule, seq = int(seconds / 0.12), 0, 2
    while left > 0:
        k = min(255, left)
        left -= k
        granule += k * 5760
        pages.append(ogg_page([packet] * k, granule, seq, flags=4 if left == 0 else 0))
        seq += 1
    return b"".join(pages)


def wav_claiming_4gb(wav: bytes) -> bytes:
    """A PCM WAV whose RIFF and data sizes say 4 GB while the body holds the real samples."""
    out = bytearray(wav)
    out[4:8] = struct.pack("<I", 0xFFFFFFF0)
    pos = out.find(b"data")
    out[pos + 4 : pos + 8] = struct.pack("<I", 0xFFFFFF00)
    return bytes(out)


# --- the cases ---


def cases() -> list[tuple[str, str, bytes]]:
    """(kind, input, bytes); the first input of each kind is its ordinary speech."""
    x = speech()
    x8 = resample(x, 16000, 8000)
    x48 = resample(x, 16000, 48000)
    silence16 = np.zeros(16000 * 60, np.float32)
    out: list[tuple[str, str, bytes]] = []
    pcm16 = encode(x, 16000, "WAV", "PCM_16")
    out += [
        ("WAV PCM_16", "speech 16 kHz", pcm16),
        ("WAV PCM_16", *most_samples_per_byte("WAV", "PCM_16")),
        ("WAV PCM_16", "header claims 4 GB", wav_claiming_4gb(pcm16)),
    ]
    for sub in (
        "PCM_U8",
        "PCM_24",
        "FLOAT",
        "ULAW",
        "ALAW",
        "IMA_ADPCM",
        "MS_ADPCM",
        "G721_32",
        "NMS_ADPCM_16",
    ):
        out += [
            (f"WAV {sub}", "speech 16 kHz", encode(x, 16000, "WAV", sub)),
            (f"WAV {sub}", *most_samples_per_byte("WAV", sub)),
        ]
    out += [
        ("WAV GSM610", "speech 8 kHz", encode(x8, 8000, "WAV", "GSM610")),
        ("WAV GSM610", "silence 8 kHz", encode(np.zeros(8000 * 60, np.float32), 8000, "WAV", "GSM610")),
        ("FLAC", "speech 16 kHz", encode(x, 16000, "FLAC", "PCM_16")),
        ("FLAC", "speech 16 kHz, 8 bit", encode(x, 16000, "FLAC", "PCM_S8")),
        ("FLAC", "silence 16 kHz", encode(silence16, 16000, "FLAC", "PCM_16")),
        ("FLAC", "silence 192 kHz 8 ch", encode(SILENCE_192K_8CH, 192000, "FLAC", "PCM_16")),
        ("OGG VORBIS", "speech 16 kHz", encode(x, 16000, "OGG", "VORBIS")),
        (
            "OGG VORBIS",
            "speech 16 kHz, lowest quality",
            encode(x, 16000, "OGG", "VORBIS", compression_level=1.0),
        ),
        ("OGG VORBIS", "silence 48 kHz", encode(np.zeros(48000 * 20, np.float32), 48000, "OGG", "VORBIS")),
        ("OGG VORBIS", "silence 192 kHz 8 ch", encode(SILENCE_192K_8CH, 192000, "OGG", "VORBIS")),
        ("OGG OPUS", "speech 16 kHz", encode(x, 16000, "OGG", "OPUS")),
        ("OGG OPUS", "speech 48 kHz, 6 kbit/s", encode(x48, 48000, "OGG", "OPUS", compression_level=1.0)),
        ("OGG OPUS", "silence 48 kHz", encode(np.zeros(48000 * 20, np.float32), 48000, "OGG", "OPUS")),
        ("OGG OPUS", "empty frames, 48 kHz", opus_empty_frames(60)),
        ("OGG OPUS", "empty frames, 48 kHz stereo", opus_empty_frames(60, channels=2)),
    ]
    for kind, fmt, sub in (
        ("AIFF PCM_16", "AIFF", "PCM_16"),
        ("AU G723_24", "AU", "G723_24"),
        ("CAF ALAC_16", "CAF", "ALAC_16"),
        ("W64 PCM_16", "W64", "PCM_16"),
        ("RF64 PCM_16", "RF64", "PCM_16"),
        ("NIST PCM_16", "NIST", "PCM_16"),
    ):
        out += [
            (kind, "speech 16 kHz", encode(x, 16000, fmt, sub)),
            (kind, *most_samples_per_byte(fmt, sub)),
        ]
    return out


@dataclass(frozen=True)
class Row:
    kind: str
    name: str
    n_bytes: int
    cpu_ms: float
    ms_per_mb: float
    x_wav: float  # CPU per byte / that of an ordinary 16 kHz PCM16 WAV of speech
    x_kind: float  # CPU per byte / that of ordinary speech in the same codec
    seconds_per_kb: float  # decoded seconds per kB received (0 when refused)
    outcome: str


def cpu_ms(data: bytes, repeats: int) -> tuple[float, float, str]:
    """Median process CPU time of one decode, decoded seconds, and what happened."""
    times, seconds, outcome = [], 0.0, ""
    for _ in range(repeats):
        t0 = time.process_time()
        try:
            audio = dec.decode_file(data)
            seconds = audio.duration_s
            outcome = f"decoded {audio.duration_s:.1f} s x {audio.channels} ch at {audio.sample_rate} Hz"
        except (AudioDecodeError, PayloadTooLarge) as exc:
            outcome = f"refused {exc.status}: {exc.message}"
        times.append(1000.0 * (time.process_time() - t0))
    return float(np.median(times)), seconds, outcome


def unbounded() -> None:
    """Lift the per-byte rules (to measure what they prevent)."""
    dec._MIN_BYTES_PER_SECOND = dec._MIN_BYTES_PER_SECOND_VORBIS = 1e-9
    dec._MAX_SAMPLES_PER_BYTE = dec._MAX_SAMPLES_PER_BYTE_LOSSLESS = 10**12


def rows(repeats: int = 3) -> list[Row]:
    out: list[Row] = []
    base: float | None = None
    ordinary: dict[str, float] = {}
    for kind, name, data in cases():
        ms, seconds, outcome = cpu_ms(data, repeats)
        per_mb = ms / (len(data) / 1e6)
        base = per_mb if base is None else base  # the first case: 16 kHz PCM16 WAV of speech
        ordinary.setdefault(kind, per_mb)
        out.append(
            Row(
                kind,
                name,
                len(data),
                ms,
                per_mb,
                per_mb / base,
                per_mb / ordinary[kind],
                seconds / (len(data) / 1e3),
                outcome,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--unbounded", action="store_true", help="lift the per-byte rules of audio.decode")
    args = ap.parse_args()
    if args.unbounded:
        unbounded()
    print(
        f"{'codec':14s} {'input':30s} {'bytes':>9s} {'CPU ms':>7s} {'ms/MB':>9s} "
        f"{'x WAV':>7s} {'x kind':>6s} {'s/kB':>7s}  outcome"
    )
    for r in rows(args.repeats):
        print(
            f"{r.kind:14s} {r.name:30s} {r.n_bytes:9d} {r.cpu_ms:7.1f} {r.ms_per_mb:9.1f} "
            f"{r.x_wav:7.1f} {r.x_kind:6.1f} {r.seconds_per_kb:7.3f}  {r.outcome[:70]}"
        )


if __name__ == "__main__":
    main()

"""Turn request bodies into audio arrays.

Two inputs exist in the voice API: raw PCM16 little-endian mono bodies with a ``sample_rate``
query parameter (samples endpoints), and uploaded files (file endpoints). Files are decoded by
libsndfile (through soundfile); the container is detected from the data itself, and the part's
content type only matters when it is ``audio/ogg``, which requires an Ogg stream.

Every failure is raised as an exception from :mod:`verilive.errors` with a plain-words message;
no soundfile or numpy exception escapes. See docs/audio.md for the rules.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from verilive.audio.resample import resample
from verilive.errors import AudioDecodeError, InvalidParameter, PayloadTooLarge

MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 192000

# Containers accepted in file uploads, by libsndfile's major-format name. WAV (and its
# WAVEX/RF64/W64 relatives) is what the API promises and OGG is what ``audio/ogg`` asks for;
# the lossless or plain-PCM containers after them are accepted because libsndfile
# auto-detects them and refusing them would help nobody. Other libsndfile formats (MP3 and
# old niche formats such as VOC, PAF, SVX, IRCAM) are refused to keep the parser surface small.
ACCEPTED_CONTAINERS: frozenset[str] = frozenset(
    {"WAV", "WAVEX", "RF64", "W64", "OGG", "FLAC", "AIFF", "AU", "CAF", "NIST"}
)

# Subtypes libsndfile decodes to integers. For these, ``sf.read(dtype='int16')`` is libsndfile's
# exact integer conversion. For every other subtype (FLOAT, DOUBLE, VORBIS, OPUS, ...) the int16
# conversion of libsndfile is unusable: float WAVs are not scaled at all (0.5 reads as 0) and
# the Ogg decoders scale without clipping, so codec overshoot above full scale wraps around to
# the opposite sign. Those are decoded as float and converted with :func:`to_pcm16` instead.
_INTEGER_CODED_SUBTYPES: frozenset[str] = frozenset(
    {
        "PCM_S8",
        "PCM_U8",
        "PCM_16",
        "PCM_24",
        "PCM_32",
        "ULAW",
        "ALAW",
        "IMA_ADPCM",
        "MS_ADPCM",
        "GSM610",
        "VOX_ADPCM",
        "G721_32",
        "G723_24",
        "G723_40",
        "NMS_ADPCM_16",
        "NMS_ADPCM_24",
        "NMS_ADPCM_32",
        "DWVW_12",
        "DWVW_16",
        "DWVW_24",
        "DWVW_N",
        "DPCM_8",
        "DPCM_16",
        "ALAC_16",
        "ALAC_20",
        "ALAC_24",
        "ALAC_32",
    }
)

# Read files in blocks of about this many samples (all channels together) so memory follows
# the audio actually decoded, not a header's frame count (which can be corrupt or an estimate).
_BLOCK_SAMPLES = 1 << 21

# Decoded audio per byte received (issue 44). Lossless and lossy codecs turn a few bytes into
# much audio when the signal is digital silence or crafted (a FLAC constant subframe, an Opus
# packet of empty frames); the engines then spend CPU per decoded second. Both rules are
# checked from the header before decoding and on the frames actually decoded, block by block,
# and no block reads past the allowed count, so a refused file never costs more than its
# allowance. Constants measured by ``python -m bench.hostile_audio`` (docs/audio.md):
# - _MIN_BYTES_PER_SECOND: the poorest real speech codec is Opus at 6 kbit/s (750 B/s); its
#   DTX silences cost about 130 B/s in Ogg, so a call that is 88 % DTX silence still averages
#   200 B/s. GSM 6.10 writes 1,625 B/s, Vorbis at its lowest setting about 3,300 B/s. Refused:
#   FLAC of digital silence (about 46 B/s), Opus packets of empty frames (about 27 B/s).
#   Vorbis has no DTX and no low-bitrate speech mode: its lowest setting writes about 3,500 B/s
#   of 16 kHz speech and 280 B/s of silence, so 600 B/s (_MIN_BYTES_PER_SECOND_VORBIS) still
#   admits a file that is 90 % digital silence and refuses pure silence.
# - _MAX_SAMPLES_PER_BYTE (frames x channels): fixed-rate codecs never exceed 5 (GSM 6.10 4.9,
#   NMS ADPCM 3.8, u-law 1, PCM16 0.5). FLAC/ALAC of speech give about 1 (16 bit) to 4 (8 bit);
#   16 admits a lossless file that is down to about 6 % speech and 94 % digital silence and bounds
#   lossless decoding at about 16 x 12 ns per byte. Lossy codecs: 6 kbit/s Opus in stereo at
#   48 kHz at the 200 B/s floor gives 480; 512 refuses 192 kHz 8-channel silence (about 1,000).
# - _FREE_SECONDS / _FREE_SAMPLES: decoded regardless of size, so a short clip with a large
#   header or a moment of silence is never refused; at most a few ms of CPU.
_MIN_BYTES_PER_SECOND = 200.0
_MIN_BYTES_PER_SECOND_VORBIS = 600.0
_MAX_SAMPLES_PER_BYTE_LOSSLESS = 16
_MAX_SAMPLES_PER_BYTE = 512
_FREE_SECONDS = 0.5
_FREE_SAMPLES = 16384
_LOSSLESS_CONTAINERS: frozenset[str] = frozenset({"FLAC"})

_SAMPLE_RATE_RULE = f"a whole number of Hz between {MIN_SAMPLE_RATE} and {MAX_SAMPLE_RATE}"


@dataclass(frozen=True)
class Audio:
    """Decoded audio: float32 samples shaped (frames, channels), nominally in [-1, 1)."""

    samples: np.ndarray
    sample_rate: int

    def __post_init__(self) -> None:
        # Programming errors, not client input: plain Python exceptions.
        if not isinstance(self.samples, np.ndarray) or self.samples.dtype != np.float32:
            raise TypeError("Audio.samples must be a float32 numpy array")
        if self.samples.ndim != 2 or self.samples.shape[1] < 1:
            raise ValueError(f"Audio.samples must be shaped (frames, channels), got {self.samples.shape}")
        if (
            isinstance(self.sample_rate, bool)
            or not isinstance(self.sample_rate, int)
            or self.sample_rate <= 0
        ):
            raise ValueError(f"Audio.sample_rate must be a positive int, got {self.sample_rate!r}")

    @property
    def channels(self) -> int:
        return int(self.samples.shape[1])

    @property
    def frames(self) -> int:
        return int(self.samples.shape[0])

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate

    def mono(self) -> np.ndarray:
        """Mono float32 1-D signal: the plain mean of all channels (equal weights, no pan law).

        Equal weights keep the level of a signal recorded identically on every channel, which
        is the usual case for a voice recorded on a stereo device.
        """
        if self.channels == 1:
            return np.ascontiguousarray(self.samples[:, 0])
        return self.samples.mean(axis=1, dtype=np.float64).astype(np.float32)

    def mono_at(self, rate: int) -> np.ndarray:
        """:meth:`mono`, resampled with soxr to ``rate`` Hz (unchanged if already at ``rate``)."""
        return resample(self.mono(), self.sample_rate, rate)


def to_pcm16(x: np.ndarray) -> np.ndarray:
    """Convert float samples (full scale = 1.0) to int16 of the same shape.

    Scales by 32768 (the inverse of how PCM16 is read, so PCM16 -> float -> PCM16 is exact),
    rounds to nearest (ties to even), clips to [-32768, 32767], and maps NaN and +/-inf to 0.
    """
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"to_pcm16 expects float samples, got dtype {a.dtype}")
    # Clip before scaling so huge values cannot overflow; non-finite values carry no amplitude.
    y = np.where(np.isfinite(a), a, 0.0)
    y = np.clip(y, -1.0, 1.0) * 32768.0
    y = np.minimum(np.rint(y), 32767.0)
    return y.astype(np.int16)


def decode_pcm16(data: bytes, sample_rate: int, *, max_seconds: float | None = None) -> Audio:
    """Decode a raw PCM16 little-endian mono body (the samples endpoints' input).

    ``max_seconds=None`` means the configured ``max_audio_seconds`` setting.
    """
    rate = _check_sample_rate(sample_rate)
    limit = _resolve_limit(max_seconds)
    n_bytes = len(data)
    if n_bytes == 0:
        raise AudioDecodeError("the PCM16 audio body is empty")
    if n_bytes % 2:
        raise AudioDecodeError(
            f"the PCM16 audio body has an odd number of bytes ({n_bytes}); each sample takes "
            "2 bytes, so the last sample is truncated"
        )
    _reject_container(data, rate)
    _check_duration(n_bytes // 2, rate, limit)
    ints = np.frombuffer(data, dtype="<i2")
    samples = (ints.astype(np.float32) / np.float32(32768.0)).reshape(-1, 1)
    return Audio(samples=samples, sample_rate=rate)


def _reject_container(data: bytes, rate: int) -> None:
    """A file sent where raw samples belong would be read as noise at a made-up rate (a 16 kHz WAV
    declared as 8 kHz: a voice an octave down). Its header makes it recognisable, so say so."""
    head = bytes(data[:44])
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        declared = ""
        if len(head) >= 28 and head[12:16] == b"fmt ":
            header_rate = int.from_bytes(head[24:28], "little")
            declared = f" (its header says {header_rate} Hz; sample_rate says {rate} Hz)"
        raise AudioDecodeError(
            f"the body is a WAV file{declared}, not raw PCM16 samples: send its samples, or the file "
            "to the _file endpoint"
        )
    if head[:4] in (b"fLaC", b"OggS") or head[:3] == b"ID3":
        raise AudioDecodeError(
            "the body is an audio file, not raw PCM16 samples: send it to the _file endpoint"
        )


def decode_file(data: bytes, content_type: str | None = None, *, max_seconds: float | None = None) -> Audio:
    """Decode an uploaded audio file to float32 (frames, channels) in [-1, 1].

    Non-finite samples (NaN, +/-inf in float files) become 0 and values outside [-1, 1] (float
    files, codec overshoot) are clipped. ``max_seconds=None`` means the configured
    ``max_audio_seconds`` setting.
    """
    samples, rate = _read_file(data, content_type, max_seconds, want_int16=False)
    return Audio(samples=samples, sample_rate=rate)


def decode_file_pcm16(
    data: bytes, content_type: str | None = None, *, max_seconds: float | None = None
) -> tuple[np.ndarray, int]:
    """Decode an uploaded audio file to int16 (frames, channels) and its sample rate.

    Integer-coded files (PCM, A-law, u-law, ADPCM, GSM, FLAC, ...) give exactly
    ``sf.read(dtype='int16')``; wider PCM is truncated to its top 16 bits as libsndfile does.
    Float-coded files (FLOAT/DOUBLE WAV, Opus, Vorbis) give :func:`to_pcm16` of the float
    samples, because libsndfile's own int16 conversion of those is broken (see
    ``_INTEGER_CODED_SUBTYPES``).
    """
    return _read_file(data, content_type, max_seconds, want_int16=True)


# --- internals ---


def _check_sample_rate(sample_rate: object) -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer):
        raise InvalidParameter(f"sample_rate must be {_SAMPLE_RATE_RULE}, got {sample_rate!r}")
    rate = int(sample_rate)
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise InvalidParameter(f"sample_rate must be {_SAMPLE_RATE_RULE}, got {rate}")
    return rate


def _resolve_limit(max_seconds: float | None) -> float:
    if max_seconds is None:
        # Imported here so the audio layer has no import-time dependency on settings.
        from verilive.config import get_settings

        return float(get_settings().max_audio_seconds)
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int | float) or not max_seconds > 0:
        raise InvalidParameter(f"max_seconds must be a positive number of seconds, got {max_seconds!r}")
    return float(max_seconds)


def _check_duration(
    frames: int, rate: int, limit: float, channels: int = 1, budget: int | None = None
) -> None:
    seconds = frames / rate
    if seconds > limit:
        raise PayloadTooLarge(
            f"the audio is {seconds:.2f} s long, longer than the {limit:g} s limit",
            code="AUDIO_TOO_LONG",
        )
    # Memory, not time: a tiny compressed file can decode to gigabytes of samples.
    budget = _sample_budget() if budget is None else budget
    if frames * channels > budget:
        raise PayloadTooLarge(
            f"the audio decodes to {frames * channels} samples ({seconds:.0f} s x {channels} channel(s) at "
            f"{rate} Hz), more than the {budget} samples allowed per request",
            code="AUDIO_TOO_LONG",
        )


def _sample_budget() -> int:
    from verilive.config import get_settings

    return int(get_settings().max_audio_samples)


def _media_type(content_type: str | None) -> str:
    """``'AUDIO/OGG; codecs=opus'`` -> ``'audio/ogg'``; ``None``/blank -> ``''``."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def _describe_magic(data: bytes) -> str:
    head = bytes(data[:12])
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        return "it is a WAV file"
    if head[:4] == b"fLaC":
        return "it is a FLAC file"
    if head[:4] == b"FORM":
        return "it is an AIFF file"
    return "it does not start with the Ogg signature 'OggS'"


class _SeekSafeBytesIO(io.BytesIO):
    """BytesIO whose seek before the start fails quietly, as lseek(2) does, instead of raising.

    libsndfile can ask for a negative position when a header is corrupt; BytesIO raises
    ValueError inside soundfile's cffi callback, which only prints "Exception ignored" noise to
    stderr. Leaving the position unchanged lets libsndfile report the bad file itself.
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self._size = len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self.tell() + offset
        else:
            target = self._size + offset
        if target < 0:
            return self.tell()
        return super().seek(offset, whence)


def _libsndfile_reason(exc: BaseException) -> str:
    # LibsndfileError's str() embeds the BytesIO repr; error_string is the plain reason.
    reason = getattr(exc, "error_string", None) or str(exc) or type(exc).__name__
    return reason.strip().rstrip(".")


def _read_file(
    data: bytes, content_type: str | None, max_seconds: float | None, *, want_int16: bool
) -> tuple[np.ndarray, int]:
    limit = _resolve_limit(max_seconds)
    if len(data) == 0:
        raise AudioDecodeError("the audio file is empty")
    want_ogg = _media_type(content_type) == "audio/ogg"
    if want_ogg and bytes(data[:4]) != b"OggS":
        # Checked here, not by libsndfile: soundfile cannot force a container when reading.
        raise AudioDecodeError(
            f"the file was sent as audio/ogg but is not an Ogg stream: {_describe_magic(data)}"
        )
    what = "Ogg" if want_ogg else "audio"
    try:
        with sf.SoundFile(_SeekSafeBytesIO(data)) as f:
            container, subtype = f.format, f.subtype
            rate, channels, header_frames = int(f.samplerate), int(f.channels), int(f.frames)
            if want_ogg and container != "OGG":
                raise AudioDecodeError(f"the file was sent as audio/ogg but it is a {container} file")
            if container not in ACCEPTED_CONTAINERS:
                raise AudioDecodeError(
                    f"{container} files are not accepted; send a WAV file "
                    f"(accepted containers: {', '.join(sorted(ACCEPTED_CONTAINERS))})"
                )
            if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
                raise AudioDecodeError(
                    f"the file's sample rate is {rate} Hz; accepted rates are "
                    f"{MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz"
                )
            if channels < 1:
                raise AudioDecodeError(f"the file declares {channels} audio channels")
            if header_frames <= 0:
                raise AudioDecodeError("the audio file contains no samples (0 frames)")
            # Cheap checks from the header before any sample is decoded.
            _check_duration(header_frames, rate, limit, channels)
            max_frames = _max_frames_for_bytes(len(data), container, subtype, rate, channels)
            _check_density(header_frames, max_frames, len(data), rate, channels, subtype)
            int_path = want_int16 and subtype in _INTEGER_CODED_SUBTYPES
            dtype = "int16" if int_path else "float32"
            samples = _read_blocks(f, dtype, rate, limit, max_frames, len(data), subtype)
    except (AudioDecodeError, PayloadTooLarge):
        raise
    except MemoryError:
        raise
    except Exception as exc:  # libsndfile/soundfile report bad data with several exception types
        raise AudioDecodeError(
            f"could not decode the {what} file: it is damaged, truncated or not a supported "
            f"format (libsndfile says: {_libsndfile_reason(exc)}). Send a WAV file, or an Ogg "
            "Opus file with content type audio/ogg"
        ) from exc

    if samples.shape[0] == 0:
        raise AudioDecodeError("the audio file contains no decodable samples (0 frames)")
    if samples.dtype == np.float32:
        _sanitize_float(samples)
        if want_int16:
            samples = to_pcm16(samples)
    return samples, rate


def _max_frames_for_bytes(n_bytes: int, container: str, subtype: str, rate: int, channels: int) -> int:
    """Most frames a file of ``n_bytes`` may decode to (see ``_MIN_BYTES_PER_SECOND``)."""
    lossless = container in _LOSSLESS_CONTAINERS or subtype.startswith("ALAC")
    per_byte = _MAX_SAMPLES_PER_BYTE_LOSSLESS if lossless else _MAX_SAMPLES_PER_BYTE
    by_seconds = int((_FREE_SECONDS + n_bytes / _min_bytes_per_second(subtype)) * rate)
    by_samples = (_FREE_SAMPLES + n_bytes * per_byte) // channels
    return max(1, min(by_seconds, by_samples))


def _min_bytes_per_second(subtype: str) -> float:
    return _MIN_BYTES_PER_SECOND_VORBIS if subtype == "VORBIS" else _MIN_BYTES_PER_SECOND


def _check_density(
    frames: int, max_frames: int, n_bytes: int, rate: int, channels: int, subtype: str
) -> None:
    if frames > max_frames:
        raise AudioDecodeError(
            f"the {n_bytes}-byte file decodes to more than {max_frames / rate:.1f} s of audio "
            f"({max_frames} frames x {channels} channel(s) at {rate} Hz): more audio per byte than "
            f"speech in any codec (the rule: at least {_min_bytes_per_second(subtype):g} bytes per "
            f"second, and at most {_MAX_SAMPLES_PER_BYTE_LOSSLESS} samples per byte for FLAC and "
            f"ALAC, {_MAX_SAMPLES_PER_BYTE} for other codecs). A file that is almost all digital "
            "silence is refused: trim the silence, or send PCM WAV"
        )


def _read_blocks(
    f: sf.SoundFile, dtype: str, rate: int, limit: float, max_frames: int, n_bytes: int, subtype: str
) -> np.ndarray:
    block_frames = max(1, _BLOCK_SAMPLES // f.channels)
    blocks: list[np.ndarray] = []
    total = 0
    budget = _sample_budget()
    while True:
        # Never decode past the allowance by more than one frame: the bound holds while decoding.
        want = min(block_frames, max_frames + 1 - total)
        block = f.read(want, dtype=dtype, always_2d=True)
        if block.shape[0] == 0:
            break
        blocks.append(block)
        total += block.shape[0]
        _check_duration(total, rate, limit, f.channels, budget)  # header was checked; a backstop
        _check_density(total, max_frames, n_bytes, rate, f.channels, subtype)
        if block.shape[0] < want:
            break
    if not blocks:
        return np.zeros((0, f.channels), dtype=dtype)
    out = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0)
    return np.ascontiguousarray(out)


def _sanitize_float(x: np.ndarray) -> None:
    """In place: NaN/inf -> 0, then clip to [-1, 1] (float WAVs and lossy codecs can exceed it)."""
    if not np.isfinite(x).all():
        np.nan_to_num(x, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    np.clip(x, -1.0, 1.0, out=x)


__all__ = [
    "ACCEPTED_CONTAINERS",
    "MAX_SAMPLE_RATE",
    "MIN_SAMPLE_RATE",
    "Audio",
    "decode_file",
    "decode_file_pcm16",
    "decode_pcm16",
    "to_pcm16",
]

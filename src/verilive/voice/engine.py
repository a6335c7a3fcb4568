"""The voice engine: speech summary, SNR, quality, templates, matching, identification.

Pure Python/numpy over the model wrappers; usable without the server:

    from verilive.voice import VoiceEngine
    engine = VoiceEngine.from_registry(ModelRegistry())
    t = engine.create_template(decode_file(open("a.wav", "rb").read()))
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from verilive.audio import Audio
from verilive.base64text import DecodedBase64
from verilive.errors import InvalidInput, InvalidParameter
from verilive.models.sessions import ModelRegistry
from verilive.models.store import packaged_path
from verilive.numeric import sigmoid
from verilive.voice import snr as snr_mod
from verilive.voice.campplus import CamPlusPlus
from verilive.voice.channel import CHANNEL_FLAG, model_inputs, resolve_channel, telephone_band
from verilive.voice.channel_map import TelephoneMap
from verilive.voice.diarization import Diarizer
from verilive.voice.identification import IdentificationList
from verilive.voice.quality import QualityMetrics
from verilive.voice.schemas import ChannelType
from verilive.voice.segmentation import TELEPHONE_MODEL_ID as TELEPHONE_SEGMENTATION_ID
from verilive.voice.segmentation import Segmenter
from verilive.voice.templates import PAIRS, VoiceTemplate, merge, pair_views
from verilive.voice.vad import SileroVad, VadConfig, segments_from_probabilities

INIT_DATA_ID = "verilive-campplus-v1"
TELEPHONE_MODEL_ID = "campplus_tel"  # CAM++ adapted to telephone audio: the telephone views
CONFIGURATIONS = ("default",)
EMBED_RELU = False  # 3D-Speaker's original output; see docs/verification.md for the measurement
# Templates drop long non-speech stretches but keep word edges and short pauses: splicing
# tightly cut speech cost accuracy (EER 0.37 % vs 0.12 % on the dev trials, docs/verification.md).
TEMPLATE_VAD = VadConfig(speech_pad_ms=200.0, min_silence_ms=300.0)
# Multiple-speaker detector: windows of speech embedded separately (docs/voice.md).
MS_WINDOW_S = 2.0
MS_HOP_S = 1.0


class NoSpeech(InvalidInput):
    code = "NO_SPEECH"


@dataclass(frozen=True)
class MatchCalibration:
    """p(same speaker) = sigmoid(a * score + b), with (a, b) per channel pair of
    ``templates.PAIRS`` (docs/telephone.md); ``a``, ``b`` are MIC-MIC's, and a pair without its own
    parameters uses them."""

    a: float
    b: float
    pairs: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def packaged(cls) -> MatchCalibration:
        data = json.loads(packaged_path("match_calibration").read_text())
        pairs = {k: (float(v["a"]), float(v["b"])) for k, v in data.get("pairs", {}).items()}
        return cls(float(data["a"]), float(data["b"]), pairs)

    def coefficients(self, pair: str = "MIC-MIC") -> tuple[float, float]:
        return self.pairs.get(pair, (self.a, self.b))

    def probability(self, score: float, pair: str = "MIC-MIC") -> float:
        a, b = self.coefficients(pair)
        return sigmoid(a * score + b)

    def threshold_for(self, probability: float, pair: str = "MIC-MIC") -> float:
        """The score at which the calibrated probability equals `probability`."""
        a, b = self.coefficients(pair)
        logit = math.log(probability / (1.0 - probability))
        return (logit - b) / a

    def common_scale(self, scores: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """Scores of several channel pairs (indexes into ``PAIRS``) moved onto the MIC-MIC scale,
        the score MIC-MIC would need for the same probability: one threshold serves them all."""
        out = np.asarray(scores, np.float64).copy()
        for i, pair in enumerate(PAIRS[1:], start=1):
            a, b = self.coefficients(pair)
            m = pairs == i
            out[m] = (a * out[m] + b - self.b) / self.a
        return out.astype(np.float32)


@dataclass(frozen=True)
class SpeechEvents:
    """The audio cut into alternating speech and background stretches that cover all of it."""

    sample_rate: int
    events: list[tuple[bool, int, int]]  # (is speech, start, end), [start, end) in input samples
    total_ms: float
    speech_ms: float


@dataclass(frozen=True)
class SpeechAnalysis:
    """One VAD pass over an audio, with its two segmentations."""

    wave: np.ndarray  # mono float32 at the input rate
    sample_rate: int
    segments: list[tuple[int, int]]  # speech [start, end) in samples: summary, SNR, quality
    template_segments: list[tuple[int, int]]  # wider, for embeddings (TEMPLATE_VAD)

    @cached_property
    def speech_samples(self) -> int:
        return sum(e - s for s, e in self.segments)

    @property
    def total_ms(self) -> float:
        return 1000.0 * self.wave.size / self.sample_rate

    @property
    def speech_ms(self) -> float:
        return 1000.0 * self.speech_samples / self.sample_rate

    def speech_only(self) -> np.ndarray:
        """The template segments joined: what the speaker embedding sees."""
        if not self.template_segments:
            return np.zeros(0, np.float32)
        return np.concatenate([self.wave[s:e] for s, e in self.template_segments])


def check_configuration(configuration: str | None) -> str:
    if configuration in (None, ""):
        return "default"
    if configuration not in CONFIGURATIONS:
        raise InvalidParameter(
            f"Unknown configuration '{configuration}'; available: {', '.join(CONFIGURATIONS)}"
        )
    return configuration


class VoiceEngine:
    def __init__(
        self,
        vad: SileroVad,
        embedder: CamPlusPlus,
        calibration: MatchCalibration,
        diarizer: Diarizer | None = None,
        tel_map: TelephoneMap | None = None,
        tel_embedder: CamPlusPlus | None = None,
    ) -> None:
        """``diarizer``: needed by diarization and the multiple-speaker score; None leaves them out.
        ``tel_map``: the telephone channel map matching applies to telephone views (None: none).
        ``tel_embedder``: the model of the telephone views (CAM++ adapted to telephone audio,
        ``campplus_tel``); None: ``embedder`` makes them too."""
        self.vad = vad
        self.embedder = embedder
        self.tel_embedder = tel_embedder or embedder
        self.calibration = calibration
        self.tel_map = tel_map
        self._diarizer = diarizer
        # The multiple-speaker score asks whether someone else speaks at all: one speaker per instant,
        # as when its constants were measured (docs/voice.md).
        self._turn_diarizer = diarizer.replace(overlap_threshold=1.0) if diarizer is not None else None

    @classmethod
    def from_registry(cls, registry: ModelRegistry) -> VoiceEngine:
        embedder = CamPlusPlus.from_registry(registry)
        telephone_embedder = CamPlusPlus.from_registry(registry, TELEPHONE_MODEL_ID)
        return cls(
            SileroVad.from_registry(registry),
            embedder,
            MatchCalibration.packaged(),
            Diarizer(
                Segmenter.from_registry(registry),
                embedder,
                telephone_segmenter=Segmenter.from_registry(registry, TELEPHONE_SEGMENTATION_ID),
                telephone_embedder=telephone_embedder,
            ),
            TelephoneMap.packaged(),
            telephone_embedder,
        )

    @property
    def diarizer(self) -> Diarizer:
        if self._diarizer is None:
            raise RuntimeError("this VoiceEngine was built without a diarizer; use from_registry")
        return self._diarizer

    @property
    def init_data_id(self) -> str:
        return INIT_DATA_ID

    # ------------------------------------------------------------------ speech

    def analyse(self, audio: Audio) -> SpeechAnalysis:
        wave, sr = audio.mono(), audio.sample_rate
        probs, _ = self.vad.probabilities(wave, sr)
        return SpeechAnalysis(
            wave,
            sr,
            segments_from_probabilities(probs, wave.size, sr, self.vad.config),
            segments_from_probabilities(probs, wave.size, sr, TEMPLATE_VAD),
        )

    def speech_summary(self, audio: Audio) -> SpeechEvents:
        return summary_of(self.analyse(audio))

    def snr(self, audio: Audio) -> float:
        a = self.analyse(audio)
        return snr_mod.snr_db(a.wave, a.sample_rate, a.segments)

    # ------------------------------------------------------------------ quality

    def quality(self, a: SpeechAnalysis) -> QualityMetrics:
        return QualityMetrics(
            snr_db=snr_mod.snr_db(a.wave, a.sample_rate, a.segments),
            speech_ms=a.speech_ms,
            speech_relative=a.speech_ms / a.total_ms if a.total_ms > 0 else 0.0,
            multiple_speakers=self.multiple_speakers_score(a),
        )

    def window_similarity(self, a: SpeechAnalysis) -> float | None:
        """10th percentile of the pairwise cosine similarities of speaker embeddings of 2 s
        windows (hop 1 s) of the speech; None when there is under 3 s of speech."""
        wide = model_inputs(a.speech_only(), a.sample_rate, ChannelType.MIC)[0]
        win, hop = int(MS_WINDOW_S * 16000), int(MS_HOP_S * 16000)
        if wide.size < win + hop:
            return None
        starts = range(0, wide.size - win + 1, hop)
        embs = np.stack([self.embedder.embed(wide[s : s + win], relu=EMBED_RELU) for s in starts])
        units = embs / np.linalg.norm(embs, axis=1, keepdims=True)
        sims = (units @ units.T)[np.triu_indices(len(units), k=1)]
        return float(np.percentile(sims, 10))

    def window_score(self, a: SpeechAnalysis) -> float:
        """0 = every window sounds like one speaker, 1 = some windows are as far apart as two
        different speakers typically are (constants from eval/multispeaker.py). Too little
        speech to tell: 0."""
        q = self.window_similarity(a)
        if q is None:
            return 0.0
        return float(np.clip((MS_SAME_SIM - q) / (MS_SAME_SIM - MS_DIFF_SIM), 0.0, 1.0))

    def second_speaker_seconds(self, a: SpeechAnalysis) -> float:
        """Speech of everyone but the main speaker, per the diarizer (speaker count estimated)."""
        if self._turn_diarizer is None:
            raise RuntimeError("this VoiceEngine was built without a diarizer; use from_registry")
        turns = self._turn_diarizer.diarize(a.wave, a.sample_rate)
        totals = sorted((sum(e - s for s, e in v) for v in turns.values()), reverse=True)
        return sum(totals[1:]) / a.sample_rate

    def multiple_speakers_score(self, a: SpeechAnalysis) -> float:
        """The window score, raised when the diarizer finds other speakers: at least 0.5 (the
        recommended maximum) once they speak MS_DIAR_MIN_S, rising to 1 at MS_DIAR_FULL_S
        (docs/voice.md#multiple-speakers)."""
        score = self.window_score(a)
        if score >= 1.0:
            return score
        other = self.second_speaker_seconds(a)
        if other >= MS_DIAR_MIN_S:
            score = max(
                score, 0.5 + 0.5 * min(1.0, (other - MS_DIAR_MIN_S) / (MS_DIAR_FULL_S - MS_DIAR_MIN_S))
            )
        return float(score)

    # ------------------------------------------------------------------ templates

    def create_template(
        self,
        audio: Audio,
        channel: ChannelType | None = None,
        configuration: str | None = None,
        analysis: SpeechAnalysis | None = None,
        telephone_view: bool = True,
        adapted_telephone: bool = True,
    ) -> VoiceTemplate:
        """A version-2 template: telephone audio (``TEL``, or no channel and narrowband input)
        gives its telephone-band view only; wideband audio (``MIC``, ``MIXED``) its wideband view
        and, unless ``telephone_view`` is False, the view of its telephone-band version.
        ``adapted_telephone=False``: telephone views from the plain CAM++ (what the gender model was
        fitted on), not from ``tel_embedder``; such templates are for the attribute models only."""
        check_configuration(configuration)
        a = analysis or self.analyse(audio)
        if a.speech_samples == 0:
            raise NoSpeech("No speech was found in the audio; a voice template needs speech")
        speech = a.speech_only()
        ch = resolve_channel(channel, a.sample_rate, speech)
        tel_embedder = self.tel_embedder if adapted_telephone else self.embedder
        if ch is ChannelType.TEL:
            tel_only = self._unit_embedding(telephone_band(speech, a.sample_rate), tel_embedder)
            return VoiceTemplate(INIT_DATA_ID, tel_only, 1, a.speech_ms, CHANNEL_FLAG[ch])
        wide = model_inputs(speech, a.sample_rate, ChannelType.MIC)[0]
        if not telephone_view:
            return VoiceTemplate(INIT_DATA_ID, self._unit_embedding(wide), 1, a.speech_ms, CHANNEL_FLAG[ch])
        # wideband audio: its own view, and the view of its telephone-band version that matching
        # uses against telephone templates (docs/telephone.md)
        if tel_embedder is self.embedder:  # one model: one batch of two
            tel = telephone_band(speech, a.sample_rate)[: wide.size]
            tel = np.pad(tel, (0, wide.size - tel.size))  # same length: the batch is two plain runs
            e = self.embedder.embed_batch([self.embedder.features(w) for w in (wide, tel)], batch_size=2)
            e /= np.linalg.norm(e, axis=1, keepdims=True)
            return VoiceTemplate(INIT_DATA_ID, e[0], 1, a.speech_ms, CHANNEL_FLAG[ch], telephone=e[1])
        tel_view = self._unit_embedding(telephone_band(speech, a.sample_rate), tel_embedder)
        return VoiceTemplate(INIT_DATA_ID, self._unit_embedding(wide), 1, a.speech_ms, CHANNEL_FLAG[ch],
                             telephone=tel_view)  # fmt: skip

    def _unit_embedding(self, wave16k: np.ndarray, embedder: CamPlusPlus | None = None) -> np.ndarray:
        e = (embedder or self.embedder).embed(wave16k, relu=EMBED_RELU)
        return (e / np.linalg.norm(e)).astype(np.float32)

    def merge(self, texts: list[str], configuration: str | None = None) -> str:
        check_configuration(configuration)
        templates = [VoiceTemplate.decode(t, f"voice template #{i}") for i, t in enumerate(texts)]
        return merge(templates).encode()

    def match(self, text1: str, text2: str, configuration: str | None = None) -> tuple[float, float]:
        check_configuration(configuration)
        t1, t2 = VoiceTemplate.decode(text1, "template1"), VoiceTemplate.decode(text2, "template2")
        return self.compare(t1, t2)

    def compare(self, t1: VoiceTemplate, t2: VoiceTemplate) -> tuple[float, float]:
        """Score and calibrated same-speaker probability, in the views and calibration of the
        templates' channel pair (docs/telephone.md)."""
        pair, u1, u2 = pair_views(t1, t2, self.tel_map)
        score = float(np.clip(np.dot(u1, u2), -1.0, 1.0))
        return score, self.calibration.probability(score, pair)

    # ------------------------------------------------------------------ identification

    def create_list(self, texts: list[str]) -> str:
        templates = [VoiceTemplate.decode(t, f"voice template #{i}") for i, t in enumerate(texts)]
        return IdentificationList.from_templates(templates, INIT_DATA_ID, self.tel_map).encode()

    def enrich_list(self, list_text: str | DecodedBase64, texts: list[str]) -> str:
        ident = IdentificationList.decode(list_text)
        templates = [VoiceTemplate.decode(t, f"voice template #{i}") for i, t in enumerate(texts)]
        return ident.extend(templates, self.tel_map).encode()

    def identify(
        self, template_text: str, list_text: str | DecodedBase64, acceptance_level: float | None
    ) -> tuple[np.ndarray, float]:
        threshold = self.identification_threshold(acceptance_level)
        probe = VoiceTemplate.decode(template_text, "voice_template")
        ident = IdentificationList.decode(list_text)
        scores, pairs = ident.pair_scores(probe, self.tel_map)
        return self.calibration.common_scale(scores, pairs), threshold

    def identification_threshold(self, acceptance_level: float | None) -> float:
        """acceptance_level is the calibrated same-speaker probability a match must reach."""
        level = DEFAULT_ACCEPTANCE_LEVEL if acceptance_level is None else acceptance_level
        if not (math.isfinite(level) and 0.0 < level < 1.0):
            raise InvalidParameter("acceptance_level must be a probability strictly between 0 and 1")
        return self.calibration.threshold_for(level)


DEFAULT_ACCEPTANCE_LEVEL = 0.5
# Window similarity constants of the multiple-speaker score, measured by
# eval/multispeaker.py: medians of q over 213 one- and 213 two-speaker LibriSpeech recordings.
MS_SAME_SIM = 0.625
MS_DIFF_SIM = 0.030
# Diarization refinement (eval/multispeaker.py): other speakers' speech, in seconds, at which the
# score reaches 0.5 and 1.
MS_DIAR_MIN_S = 1.5
MS_DIAR_FULL_S = 4.0


def summary_of(a: SpeechAnalysis) -> SpeechEvents:
    """Speech and background stretches covering the whole audio, in order."""
    events: list[tuple[bool, int, int]] = []
    cursor = 0
    for s, e in a.segments:
        if s > cursor:
            events.append((False, cursor, s))
        events.append((True, s, e))
        cursor = e
    if cursor < a.wave.size:
        events.append((False, cursor, a.wave.size))
    return SpeechEvents(a.sample_rate, events, a.total_ms, a.speech_ms)

"""The voice service's work behind the routes that need more than one engine call (no HTTP).

:class:`VoiceService` holds the voice engines built in ``verilive.voice.deps`` and answers the
requests that combine them: checked template creation (analysis, anti-spoofing, template, quality),
the quality check and diarization. It returns the engines' own results; ``voice/api.py`` maps them
to the interface's names. Routes that need one engine call make it on the engine itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from verilive.audio import Audio
from verilive.voice.antispoof import AntiSpoof, SpoofScores
from verilive.voice.engine import VoiceEngine
from verilive.voice.quality import QualityMetrics, QualityThresholds, decide
from verilive.voice.schemas import ChannelType, QualityShortDescription
from verilive.voice.templates import VoiceTemplate

__all__ = ["CheckedTemplate", "QualityCheck", "VoiceService"]


@dataclass(frozen=True)
class QualityCheck:
    """The measured quality and the verdict under ``thresholds``."""

    metrics: QualityMetrics
    verdict: QualityShortDescription
    thresholds: QualityThresholds


@dataclass(frozen=True)
class CheckedTemplate:
    """A template with every check beside it: the caller decides (docs/voice.md#checked-template-creation)."""

    template: VoiceTemplate
    spoof: SpoofScores
    quality: QualityCheck


class VoiceService:
    """Thread-safe when its engines are (they are). ``antispoof`` is called on first need, so the
    requests that do not judge spoofing never build (or wait for) the anti-spoofing model."""

    def __init__(self, engine: VoiceEngine, antispoof: Callable[[], AntiSpoof]) -> None:
        self.engine = engine
        self.antispoof = antispoof

    def checked_template(
        self,
        audio: Audio,
        thresholds: QualityThresholds,
        channel: ChannelType | None,
        configuration: str | None,
    ) -> CheckedTemplate:
        """All metrics are reported and the template is returned even when a check fails."""
        a = self.engine.analyse(audio)
        spoof = self.antispoof().evaluate(audio, speech_seconds=a.speech_ms / 1000.0)
        template = self.engine.create_template(audio, channel, configuration, analysis=a)
        m = self.engine.quality(a)
        return CheckedTemplate(template, spoof, QualityCheck(m, decide(m, thresholds), thresholds))

    def quality_check(self, audio: Audio, thresholds: QualityThresholds) -> QualityCheck:
        m = self.engine.quality(self.engine.analyse(audio))
        return QualityCheck(m, decide(m, thresholds), thresholds)

    def diarize(self, audio: Audio, num_speakers: int | None) -> dict[str, list[tuple[int, int]]]:
        """Speaker -> [start, end) sample intervals at the input's sample rate."""
        return self.engine.diarizer.diarize(audio.mono(), audio.sample_rate, num_speakers)

"""Quality metrics, the check rules, and recommended thresholds (docs/voice.md#quality)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from verilive.errors import InvalidParameter
from verilive.voice.schemas import QualityShortDescription, Scenario


@dataclass(frozen=True)
class QualityMetrics:
    snr_db: float
    speech_ms: float
    speech_relative: float
    multiple_speakers: float


@dataclass(frozen=True)
class QualityThresholds:
    minimum_snr_db: float | None = None
    minimum_speech_length_ms: float | None = None
    minimum_speech_relative_length: float | None = None
    maximum_multiple_speakers_detector_score: float | None = None

    def validated(self) -> QualityThresholds:
        for name, value in self.__dict__.items():
            if value is not None and not math.isfinite(value):
                raise InvalidParameter(f"Threshold '{name}' must be a finite number, got {value}")
        rel = self.minimum_speech_relative_length
        if rel is not None and not 0.0 <= rel <= 1.0:
            raise InvalidParameter("Threshold 'minimum_speech_relative_length' must be within 0..1")
        return self


def decide(m: QualityMetrics, t: QualityThresholds) -> QualityShortDescription:
    """First failing check wins, most fundamental first: without enough speech nothing else
    is measurable; then how much of the recording is speech; then noise; then other voices."""
    if t.minimum_speech_length_ms is not None and m.speech_ms < t.minimum_speech_length_ms:
        return QualityShortDescription.TOO_SMALL_SPEECH_TOTAL_LENGTH
    if t.minimum_speech_relative_length is not None and m.speech_relative < t.minimum_speech_relative_length:
        return QualityShortDescription.TOO_SMALL_SPEECH_RELATIVE_LENGTH
    if t.minimum_snr_db is not None and m.snr_db < t.minimum_snr_db:
        return QualityShortDescription.TOO_NOISY
    if (
        t.maximum_multiple_speakers_detector_score is not None
        and m.multiple_speakers > t.maximum_multiple_speakers_detector_score
    ):
        return QualityShortDescription.MULTIPLE_SPEAKERS_DETECTED
    return QualityShortDescription.OK


# Justified in docs/voice.md#recommended-thresholds (EER against speech length, SNR sanity).
RECOMMENDED: dict[Scenario, QualityThresholds] = {
    Scenario.VERIFY_TI_ENROLLMENT: QualityThresholds(15.0, 10000.0, 0.3, 0.5),
    Scenario.VERIFY_TI_VERIFICATION: QualityThresholds(10.0, 3000.0, 0.2, 0.5),
    Scenario.VERIFY_TD_ENROLLMENT: QualityThresholds(15.0, 2000.0, 0.3, 0.5),
    Scenario.VERIFY_TD_VERIFICATION: QualityThresholds(10.0, 1500.0, 0.2, 0.5),
    Scenario.LIVENESS: QualityThresholds(10.0, 2000.0, 0.2, 0.5),
}

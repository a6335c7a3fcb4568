"""Request and response models of the voice analysis service, named and spelt as in
voice-analysis.md (1.12.5). The field names live here and nowhere else."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from verilive.server.types import Float, Int32, Int64


class ChannelType(StrEnum):
    MIC = "MIC"
    TEL = "TEL"
    MIXED = "MIXED"


class QualityShortDescription(StrEnum):
    TOO_NOISY = "TOO_NOISY"
    TOO_SMALL_SPEECH_TOTAL_LENGTH = "TOO_SMALL_SPEECH_TOTAL_LENGTH"
    OK = "OK"
    TOO_SMALL_SPEECH_RELATIVE_LENGTH = "TOO_SMALL_SPEECH_RELATIVE_LENGTH"
    MULTIPLE_SPEAKERS_DETECTED = "MULTIPLE_SPEAKERS_DETECTED"


class Scenario(StrEnum):
    VERIFY_TI_ENROLLMENT = "VERIFY_TI_ENROLLMENT"
    VERIFY_TI_VERIFICATION = "VERIFY_TI_VERIFICATION"
    VERIFY_TD_ENROLLMENT = "VERIFY_TD_ENROLLMENT"
    VERIFY_TD_VERIFICATION = "VERIFY_TD_VERIFICATION"
    LIVENESS = "LIVENESS"


class Gender(StrEnum):
    MALE = "MALE"
    FEMALE = "FEMALE"


class PhoneCallParticipant(StrEnum):
    OPERATOR = "OPERATOR"
    CUSTOMER = "CUSTOMER"
    OTHER = "OTHER"
    UNDEFINED = "UNDEFINED"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- templates, matching, identification ---


class TemplateMatchRequest(_Strict):
    template1: str = Field(description="Voice template (opaque string).")
    template2: str = Field(description="Voice template (opaque string).")


class VerifyResult(_Strict):
    probability: Float
    score: Float


class IdentificationResultModel(_Strict):
    scores: list[Float] = Field(description="One similarity score per template of the list.")
    threshold: Float = Field(description="Similarity score threshold.")


class IdentifyRequest(_Strict):
    voice_template: str = Field(description="Template of the speaker to identify.")
    identification_list: str = Field(description="Identification list to search in.")


class EnrichListRequest(_Strict):
    voice_templates: list[str] = Field(description="Templates to add to the list.")
    identification_list: str = Field(description="Identification list to enrich.")


class CreateListRequest(_Strict):
    voice_templates: list[str] = Field(description="Templates to build the list from.")


# --- quality and template creation ---


class QualityCheckEngineResult(_Strict):
    snrDb: Float
    speechLengthMs: Float
    speechRelativeLength: Float
    multipleSpeakersDetectorScore: Float
    qualityCheckShortDescription: QualityShortDescription


class QualityCheckResultResponse(_Strict):
    thresholdValues: dict[str, Float]
    obtainedValues: dict[str, Float]
    qualityShortDescription: QualityShortDescription


class AntispoofResult(_Strict):
    score: Float | None = None
    scoreReplay: Float | None = None
    scoreTts: Float | None = None
    scoreVc: Float | None = None
    unsuitableInputMessage: str | None = None


class TemplateCreationWithChecksResult(_Strict):
    antispoofResult: AntispoofResult | None = None
    qualityCheckResult: QualityCheckResultResponse
    qualityCheckEngineResult: QualityCheckEngineResult
    voiceTemplate: str | None = None


class QualityCheckMetricsThresholds(_Strict):
    minimumSnrDb: Float
    minimumSpeechLengthMs: Float
    minimumSpeechRelativeLength: Float
    maximumMultipleSpeakersDetectorScore: Float


# --- speech, segmentation and audio ---


class AudioInterval(_Strict):
    startSample: Int64
    endSample: Int64
    startTime: Int64 = Field(description="Start time in milliseconds.")
    endTime: Int64 = Field(description="End time in milliseconds.")
    sampleRate: Int64


class SpeechEvent(_Strict):
    isVoice: bool
    audioInterval: AudioInterval


class SpeechInfo(_Strict):
    totalLengthMs: Float
    speechLengthMs: Float
    backgroundLengthMs: Float


class SpeechSummary(_Strict):
    speechInfo: SpeechInfo
    speechEvents: list[SpeechEvent]


class AudioInfo(_Strict):
    samplesNum: Int64 = Field(description="Samples per channel.")
    sampleRate: Int32
    channelsNum: Int32


class Pcm16SamplesResult(_Strict):
    audioInfo: AudioInfo
    pcm16Samples: str = Field(description="Base64 of little-endian PCM16 samples, channels interleaved.")


# --- attributes, build ---


class Attributes(_Strict):
    genderScore: Float | None = None
    gender: Gender | None = None
    age: Int32 | None = None
    phoneCallParticipant: PhoneCallParticipant | None = None


class BuildInfo(_Strict):
    version: str
    components: str
    gitInfo: str
    licenseInfo: str
    licenseExpirationDate: str

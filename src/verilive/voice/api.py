"""HTTP routes of the voice analysis service (voice-analysis.md 1.12.5).

Thin: parse and validate, call engines, shape the answer. Engines that arrive in later
releases answer 501 with the standard error body.
"""

from __future__ import annotations

import base64
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Body, Depends, File, Query, Request, UploadFile

import verilive
from verilive.audio import MIN_SAMPLE_RATE, Audio, decode_file, decode_file_pcm16, decode_pcm16
from verilive.errors import NotImplementedYet
from verilive.server.buildinfo import PROJECT_LICENSE, components_string, git_commit
from verilive.server.context import ServiceContext, get_context
from verilive.server.types import Int32
from verilive.server.uploads import OCTET_STREAM_BODY, read_part, read_raw_body, require_multipart
from verilive.voice.schemas import (
    AntispoofResult,
    Attributes,
    AudioInfo,
    AudioInterval,
    BuildInfo,
    ChannelType,
    CreateListRequest,
    EnrichListRequest,
    IdentificationResultModel,
    IdentifyRequest,
    Pcm16SamplesResult,
    QualityCheckEngineResult,
    QualityCheckMetricsThresholds,
    Scenario,
    SpeechSummary,
    TemplateCreationWithChecksResult,
    TemplateMatchRequest,
    VerifyResult,
)

Ctx = Annotated[ServiceContext, Depends(get_context)]
Multipart = [Depends(require_multipart)]

SampleRate = Annotated[
    int,
    Query(
        description="Sample rate of the PCM16 body in Hz.",
        ge=1,
        le=2**31 - 1,
        json_schema_extra={"format": "int32"},
    ),
]
Configuration = Annotated[
    str | None, Query(description="Named processing configuration (see docs/voice.md).")
]
ChannelQ = Annotated[ChannelType | None, Query(description="MIC, TEL or MIXED.")]
OptFloat = Annotated[float | None, Query(json_schema_extra={"format": "float"})]
ReqFloat = Annotated[float, Query(json_schema_extra={"format": "float"})]
WavFile = Annotated[UploadFile, File(description="WAV file; Ogg Opus when the part's type is audio/ogg.")]
NumSpeakers = Annotated[
    int | None,
    Query(ge=1, le=64, description="Number of speakers, when known.", json_schema_extra={"format": "int32"}),
]


def _not_yet(what: str) -> NotImplementedYet:
    return NotImplementedYet(f"{what} is not available in this build of verilive")


async def samples_audio(request: Request, ctx: ServiceContext, sample_rate: int) -> Audio:
    body = await read_raw_body(request, "PCM16 body")
    return decode_pcm16(body, sample_rate, max_seconds=ctx.settings.max_audio_seconds)


async def file_audio(upload: UploadFile, part: str, ctx: ServiceContext) -> Audio:
    data = await read_part(upload, part)
    return decode_file(data, upload.content_type, max_seconds=ctx.settings.max_audio_seconds)


router = APIRouter()

# ---------------------------------------------------------------- core


@router.post(
    "/core/read_as_pcm16_samples",
    response_model=Pcm16SamplesResult,
    tags=["core"],
    dependencies=Multipart,
    summary="Decode an audio file to PCM16 samples",
)
async def read_as_pcm16_samples(ctx: Ctx, wav_file: WavFile) -> Pcm16SamplesResult:
    data = await read_part(wav_file, "wav_file")
    pcm, rate = decode_file_pcm16(data, wav_file.content_type, max_seconds=ctx.settings.max_audio_seconds)
    frames, channels = pcm.shape
    raw = np.ascontiguousarray(pcm, dtype="<i2").tobytes()  # interleaved, little-endian
    return Pcm16SamplesResult(
        audioInfo=AudioInfo(samplesNum=frames, sampleRate=rate, channelsNum=channels),
        pcm16Samples=base64.b64encode(raw).decode("ascii"),
    )


@router.get(
    "/core/get_expiration_date",
    response_model=str,
    tags=["core"],
    responses={200: {"content": {"application/json": {"schema": {"type": "string", "format": "date"}}}}},
    summary="Licence expiration date, YYYY-MM-DD",
)
async def get_expiration_date(ctx: Ctx) -> str:
    return ctx.license_expiration_date.isoformat()


@router.get("/core/get_build_info", response_model=BuildInfo, tags=["core"])
async def get_build_info(ctx: Ctx) -> BuildInfo:
    models = ctx.models.status()
    model_text = ", ".join(
        f"{mid} {st.get('version', '?')} ({st.get('licence', '?')})" for mid, st in sorted(models.items())
    )
    return BuildInfo(
        version=verilive.__version__,
        components=components_string() + (f"; models: {model_text}" if model_text else ""),
        gitInfo=git_commit(ctx.settings.git_commit),
        licenseInfo=f"verilive is licensed under {PROJECT_LICENSE}. Models: {model_text or 'none loaded'}.",
        licenseExpirationDate=ctx.license_expiration_date.isoformat(),
    )


# ---------------------------------------------------------------- template factory and matcher


@router.post("/voice_template_matcher/match_voice_templates", response_model=VerifyResult, tags=["matching"])
async def match_voice_templates(
    ctx: Ctx, request: TemplateMatchRequest, configuration: Configuration = None
) -> VerifyResult:
    raise _not_yet("Template matching")


@router.post("/voice_template_factory/merge_voice_templates", response_model=str, tags=["templates"])
async def merge_voice_templates(
    ctx: Ctx,
    templates: Annotated[list[str], Body(description="Voice templates to merge.")],
    configuration: Configuration = None,
) -> str:
    raise _not_yet("Template merging")


@router.post(
    "/voice_template_factory/get_voice_template_init_data_id", response_model=str, tags=["templates"]
)
async def get_voice_template_init_data_id(
    ctx: Ctx, template: Annotated[str, Body(description="A voice template.")]
) -> str:
    raise _not_yet("Template inspection")


@router.post(
    "/voice_template_factory/create_voice_template_from_samples",
    response_model=str,
    tags=["templates"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def create_voice_template_from_samples(
    ctx: Ctx,
    request: Request,
    sample_rate: SampleRate,
    channel_type: ChannelQ = None,
    configuration: Configuration = None,
) -> str:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Voice template creation")


@router.post(
    "/voice_template_factory/create_voice_template_from_file",
    response_model=str,
    tags=["templates"],
    dependencies=Multipart,
)
async def create_voice_template_from_file(
    ctx: Ctx,
    wav_file: WavFile,
    channel_type: Annotated[ChannelType, Query(description="MIC, TEL or MIXED.")] = ChannelType.TEL,
    configuration: Configuration = None,
) -> str:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("Voice template creation")


@router.post(
    "/voice_template_factory/create_voice_template_checked_from_samples",
    response_model=TemplateCreationWithChecksResult,
    tags=["templates"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def create_voice_template_checked_from_samples(
    ctx: Ctx,
    request: Request,
    sample_rate: SampleRate,
    minimum_snr_db: OptFloat = None,
    minimum_speech_length_ms: OptFloat = None,
    minimum_speech_relative_length: OptFloat = None,
    maximumMultipleSpeakersDetectorScore: OptFloat = None,
    channel_type: ChannelQ = None,
    configuration: Configuration = None,
) -> TemplateCreationWithChecksResult:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Checked voice template creation")


@router.post(
    "/voice_template_factory/create_voice_template_checked_from_file",
    response_model=TemplateCreationWithChecksResult,
    tags=["templates"],
    dependencies=Multipart,
)
async def create_voice_template_checked_from_file(
    ctx: Ctx,
    wav_file: WavFile,
    minimum_snr_db: OptFloat = None,
    minimum_speech_length_ms: OptFloat = None,
    minimum_speech_relative_length: OptFloat = None,
    maximumMultipleSpeakersDetectorScore: OptFloat = None,
    channel_type: ChannelQ = None,
    configuration: Configuration = None,
) -> TemplateCreationWithChecksResult:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("Checked voice template creation")


@router.get(
    "/voice_template_factory/get_minimum_audio_sample_rate",
    response_model=Int32,
    tags=["templates"],
    summary="Lowest input sample rate accepted, in Hz",
)
async def get_minimum_audio_sample_rate(ctx: Ctx, configuration: Configuration = None) -> int:
    return MIN_SAMPLE_RATE


@router.get("/voice_template_factory/get_init_data_id", response_model=str, tags=["templates"])
async def get_init_data_id(ctx: Ctx, configuration: Configuration = None) -> str:
    raise _not_yet("Template factory init data")


# ---------------------------------------------------------------- identification


@router.post("/identification_engine/create_identification_list", response_model=str, tags=["identification"])
async def create_identification_list(ctx: Ctx, request: CreateListRequest) -> str:
    raise _not_yet("Identification")


@router.post("/identification_engine/enrich_identification_list", response_model=str, tags=["identification"])
async def enrich_identification_list(ctx: Ctx, request: EnrichListRequest) -> str:
    raise _not_yet("Identification")


@router.post(
    "/identification_engine/identify", response_model=IdentificationResultModel, tags=["identification"]
)
async def identify(
    ctx: Ctx,
    request: IdentifyRequest,
    acceptance_level: OptFloat = None,
) -> IdentificationResultModel:
    raise _not_yet("Identification")


@router.post(
    "/identification_result/get_indexes_of_matched_templates",
    response_model=list[Int32],
    tags=["identification"],
)
async def get_indexes_of_matched_templates(ctx: Ctx, result: IdentificationResultModel) -> list[int]:
    raise _not_yet("Identification")


# ---------------------------------------------------------------- audio analysis


@router.post(
    "/speech_summary_engine/get_speech_summary_from_samples",
    response_model=SpeechSummary,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def get_speech_summary_from_samples(
    ctx: Ctx, request: Request, sample_rate: SampleRate
) -> SpeechSummary:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Speech summary")


@router.post(
    "/speech_summary_engine/get_speech_summary_from_file",
    response_model=SpeechSummary,
    tags=["analysis"],
    dependencies=Multipart,
)
async def get_speech_summary_from_file(ctx: Ctx, wav_file: WavFile) -> SpeechSummary:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("Speech summary")


@router.post(
    "/snr_computer/compute_with_samples",
    response_model=float,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def compute_snr_with_samples(ctx: Ctx, request: Request, sample_rate: SampleRate) -> float:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("SNR")


@router.post(
    "/snr_computer/compute_with_file", response_model=float, tags=["analysis"], dependencies=Multipart
)
async def compute_snr_with_file(ctx: Ctx, wav_file: WavFile) -> float:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("SNR")


@router.post(
    "/quality_check/check_quality_from_samples",
    response_model=QualityCheckEngineResult,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def check_quality_from_samples(
    ctx: Ctx,
    request: Request,
    sample_rate: SampleRate,
    minimum_snr_db: ReqFloat,
    minimum_speech_length_ms: ReqFloat,
    minimum_speech_relative_length: OptFloat = None,
    maximum_multiple_speakers_detector_score: OptFloat = None,
) -> QualityCheckEngineResult:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Quality check")


@router.post(
    "/quality_check/check_quality_from_file",
    response_model=QualityCheckEngineResult,
    tags=["analysis"],
    dependencies=Multipart,
)
async def check_quality_from_file(
    ctx: Ctx,
    audio_file: Annotated[UploadFile, File(description="WAV file; Ogg Opus when typed audio/ogg.")],
    minimum_snr_db: ReqFloat,
    minimum_speech_length_ms: ReqFloat,
    minimum_speech_relative_length: OptFloat = None,
    maximum_multiple_speakers_detector_score: OptFloat = None,
) -> QualityCheckEngineResult:
    await file_audio(audio_file, "audio_file", ctx)
    raise _not_yet("Quality check")


@router.get(
    "/quality_check/get_recommended_thresholds",
    response_model=QualityCheckMetricsThresholds,
    tags=["analysis"],
)
async def get_recommended_thresholds(ctx: Ctx, scenario: Scenario) -> QualityCheckMetricsThresholds:
    raise _not_yet("Recommended thresholds")


@router.post(
    "/diarization_engine/get_segmentation_from_samples",
    response_model=dict[str, list[AudioInterval]],
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def get_segmentation_from_samples(
    ctx: Ctx, request: Request, sample_rate: SampleRate, num_speakers: NumSpeakers = None
) -> dict[str, list[AudioInterval]]:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Diarization")


@router.post(
    "/diarization_engine/get_segmentation_from_file",
    response_model=dict[str, list[AudioInterval]],
    tags=["analysis"],
    dependencies=Multipart,
)
async def get_segmentation_from_file(
    ctx: Ctx, wav_file: WavFile, num_speakers: NumSpeakers = None
) -> dict[str, list[AudioInterval]]:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("Diarization")


@router.post(
    "/attributes_estimator/estimate_with_samples",
    response_model=Attributes,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def estimate_attributes_with_samples(ctx: Ctx, request: Request, sample_rate: SampleRate) -> Attributes:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Speaker attributes")


@router.post(
    "/attributes_estimator/estimate_with_file",
    response_model=Attributes,
    tags=["analysis"],
    dependencies=Multipart,
)
async def estimate_attributes_with_file(ctx: Ctx, wav_file: WavFile) -> Attributes:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("Speaker attributes")


@router.post(
    "/antispoof_engine/is_spoof_samples",
    response_model=AntispoofResult,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def is_spoof_samples(ctx: Ctx, request: Request, sample_rate: SampleRate) -> AntispoofResult:
    await samples_audio(request, ctx, sample_rate)
    raise _not_yet("Voice anti-spoofing")


@router.post(
    "/antispoof_engine/is_spoof_file",
    response_model=AntispoofResult,
    tags=["analysis"],
    dependencies=Multipart,
)
async def is_spoof_file(ctx: Ctx, wav_file: WavFile) -> AntispoofResult:
    await file_audio(wav_file, "wav_file", ctx)
    raise _not_yet("Voice anti-spoofing")

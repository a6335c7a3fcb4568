"""HTTP routes of the voice analysis service (voice-analysis.md 1.12.5).

Thin: parse and validate, call one method of an engine or of
:class:`verilive.voice.service.VoiceService` (both built in ``verilive.voice.deps``), shape the
answer. The engine results are mapped to the interface's names here, by name, and nowhere else.
"""

from __future__ import annotations

import base64
from typing import Annotated

import numpy as np
import orjson
from fastapi import APIRouter, Body, Depends, File, Query, Request, UploadFile
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

import verilive
from verilive.audio import (
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    Audio,
    decode_file,
    decode_file_pcm16,
    decode_pcm16,
)
from verilive.server.buildinfo import PROJECT_LICENSE, components_string, git_commit
from verilive.server.context import ServiceContext, get_context
from verilive.server.types import Int32
from verilive.server.uploads import (
    OCTET_STREAM_BODY,
    json_body_schema,
    json_model,
    read_part,
    read_raw_body,
    require_multipart,
)
from verilive.voice.antispoof import SpoofScores
from verilive.voice.attributes import SpeakerAttributes
from verilive.voice.deps import antispoof_engine, attributes_estimator, voice_engine, voice_service
from verilive.voice.diarization import DiarizationConfig
from verilive.voice.engine import INIT_DATA_ID, SpeechEvents, check_configuration
from verilive.voice.identification import matched_indexes
from verilive.voice.quality import RECOMMENDED, QualityMetrics, QualityThresholds
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
    QualityCheckResultResponse,
    Scenario,
    SpeechEvent,
    SpeechInfo,
    SpeechSummary,
    TemplateCreationWithChecksResult,
    TemplateMatchRequest,
    VerifyResult,
)
from verilive.voice.service import CheckedTemplate, QualityCheck
from verilive.voice.templates import VoiceTemplate

Ctx = Annotated[ServiceContext, Depends(get_context)]
Multipart = [Depends(require_multipart)]

SampleRate = Annotated[
    int,
    Query(
        description="Sample rate of the PCM16 body in Hz.",
        ge=MIN_SAMPLE_RATE,  # the published range is the one the decoder accepts
        le=MAX_SAMPLE_RATE,
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
    Query(
        ge=1,
        le=DiarizationConfig().max_speakers,
        description="Number of speakers, when known.",
        json_schema_extra={"format": "int32"},
    ),
]


async def run(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    # Model inference is CPU-bound: keep it off the event loop.
    return await run_in_threadpool(fn, *args, **kwargs)


# ---------------------------------------------------------------- engine results -> wire schemas


def audio_interval(start: int, end: int, sample_rate: int) -> AudioInterval:
    """[start, end) in samples; times in milliseconds."""
    return AudioInterval(
        startSample=start,
        endSample=end,
        startTime=round(start * 1000 / sample_rate),
        endTime=round(end * 1000 / sample_rate),
        sampleRate=sample_rate,
    )


def speech_summary(ev: SpeechEvents) -> SpeechSummary:
    return SpeechSummary(
        speechInfo=SpeechInfo(
            totalLengthMs=ev.total_ms,
            speechLengthMs=ev.speech_ms,
            backgroundLengthMs=ev.total_ms - ev.speech_ms,
        ),
        speechEvents=[
            SpeechEvent(isVoice=voice, audioInterval=audio_interval(s, e, ev.sample_rate))
            for voice, s, e in ev.events
        ],
    )


def antispoof_result(r: SpoofScores) -> AntispoofResult:
    return AntispoofResult(
        score=r.score,
        scoreReplay=r.replay,
        scoreTts=r.tts,
        scoreVc=r.vc,
        unsuitableInputMessage=r.unsuitable,
    )


def attributes_result(a: SpeakerAttributes) -> Attributes:
    return Attributes(
        genderScore=a.gender_score, gender=a.gender, age=a.age, phoneCallParticipant=a.participant
    )


def threshold_values(t: QualityThresholds) -> dict[str, float]:
    """The thresholds applied, under the spec's QualityCheckMetricsThresholds names."""
    values = {
        "minimumSnrDb": t.minimum_snr_db,
        "minimumSpeechLengthMs": t.minimum_speech_length_ms,
        "minimumSpeechRelativeLength": t.minimum_speech_relative_length,
        "maximumMultipleSpeakersDetectorScore": t.maximum_multiple_speakers_detector_score,
    }
    return {wire: v for wire, v in values.items() if v is not None}


def obtained_values(m: QualityMetrics) -> dict[str, float]:
    """The measured values, under the names of QualityCheckEngineResult's first four fields."""
    return {
        "snrDb": m.snr_db,
        "speechLengthMs": m.speech_ms,
        "speechRelativeLength": m.speech_relative,
        "multipleSpeakersDetectorScore": m.multiple_speakers,
    }


def engine_result(q: QualityCheck) -> QualityCheckEngineResult:
    return QualityCheckEngineResult(**obtained_values(q.metrics), qualityCheckShortDescription=q.verdict)


def checked_result(c: CheckedTemplate) -> TemplateCreationWithChecksResult:
    return TemplateCreationWithChecksResult(
        antispoofResult=antispoof_result(c.spoof),
        qualityCheckResult=QualityCheckResultResponse(
            thresholdValues=threshold_values(c.quality.thresholds),
            obtainedValues=obtained_values(c.quality.metrics),
            qualityShortDescription=c.quality.verdict,
        ),
        qualityCheckEngineResult=engine_result(c.quality),
        voiceTemplate=c.template.encode(),
    )


def intervals(turns: dict[str, list[tuple[int, int]]], sample_rate: int) -> dict[str, list[AudioInterval]]:
    return {k: [audio_interval(s, e, sample_rate) for s, e in v] for k, v in turns.items()}


def checked_thresholds(
    minimum_snr_db: OptFloat = None,
    minimum_speech_length_ms: OptFloat = None,
    minimum_speech_relative_length: OptFloat = None,
    maximumMultipleSpeakersDetectorScore: OptFloat = None,
) -> QualityThresholds:
    return QualityThresholds(
        minimum_snr_db,
        minimum_speech_length_ms,
        minimum_speech_relative_length,
        maximumMultipleSpeakersDetectorScore,
    ).validated()


def quality_check_thresholds(
    minimum_snr_db: ReqFloat,
    minimum_speech_length_ms: ReqFloat,
    minimum_speech_relative_length: OptFloat = None,
    maximum_multiple_speakers_detector_score: OptFloat = None,
) -> QualityThresholds:
    return QualityThresholds(
        minimum_snr_db,
        minimum_speech_length_ms,
        minimum_speech_relative_length,
        maximum_multiple_speakers_detector_score,
    ).validated()


CheckedThresholds = Annotated[QualityThresholds, Depends(checked_thresholds)]
QualityCheckThresholds = Annotated[QualityThresholds, Depends(quality_check_thresholds)]


async def samples_audio(request: Request, ctx: ServiceContext, sample_rate: int) -> Audio:
    body = await read_raw_body(request, "PCM16 body")
    # Decoding and resampling hours of audio takes seconds: off the event loop.
    return await run(decode_pcm16, body, sample_rate, max_seconds=ctx.settings.max_audio_seconds)


async def file_audio(upload: UploadFile, part: str, ctx: ServiceContext) -> Audio:
    data = await read_part(upload, part)
    return await run(decode_file, data, upload.content_type, max_seconds=ctx.settings.max_audio_seconds)


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
    pcm, rate = await run(
        decode_file_pcm16, data, wav_file.content_type, max_seconds=ctx.settings.max_audio_seconds
    )
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
    score, probability = voice_engine(ctx).match(request.template1, request.template2, configuration)
    return VerifyResult(score=score, probability=probability)


@router.post("/voice_template_factory/merge_voice_templates", response_model=str, tags=["templates"])
async def merge_voice_templates(
    ctx: Ctx,
    templates: Annotated[list[str], Body(description="Voice templates to merge.")],
    configuration: Configuration = None,
) -> str:
    return voice_engine(ctx).merge(templates, configuration)


@router.post(
    "/voice_template_factory/get_voice_template_init_data_id", response_model=str, tags=["templates"]
)
async def get_voice_template_init_data_id(
    ctx: Ctx, template: Annotated[str, Body(description="A voice template.")]
) -> str:
    return VoiceTemplate.decode(template).init_data_id


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
    check_configuration(configuration)
    audio = await samples_audio(request, ctx, sample_rate)
    template = await run(voice_engine(ctx).create_template, audio, channel_type, configuration)
    return template.encode()


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
    check_configuration(configuration)
    audio = await file_audio(wav_file, "wav_file", ctx)
    template = await run(voice_engine(ctx).create_template, audio, channel_type, configuration)
    return template.encode()


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
    t: CheckedThresholds,
    channel_type: ChannelQ = None,
    configuration: Configuration = None,
) -> TemplateCreationWithChecksResult:
    audio = await samples_audio(request, ctx, sample_rate)
    checked = await run(voice_service(ctx).checked_template, audio, t, channel_type, configuration)
    return checked_result(checked)


@router.post(
    "/voice_template_factory/create_voice_template_checked_from_file",
    response_model=TemplateCreationWithChecksResult,
    tags=["templates"],
    dependencies=Multipart,
)
async def create_voice_template_checked_from_file(
    ctx: Ctx,
    wav_file: WavFile,
    t: CheckedThresholds,
    channel_type: ChannelQ = None,
    configuration: Configuration = None,
) -> TemplateCreationWithChecksResult:
    audio = await file_audio(wav_file, "wav_file", ctx)
    checked = await run(voice_service(ctx).checked_template, audio, t, channel_type, configuration)
    return checked_result(checked)


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
    check_configuration(configuration)
    return INIT_DATA_ID


# ---------------------------------------------------------------- identification


# The routes that take a whole identification list, or the templates of one, read their JSON with
# pydantic's reader (server/uploads.json_model): five times faster than FastAPI's json.loads on a
# 52 MB list.
@router.post(
    "/identification_engine/create_identification_list",
    response_model=str,
    tags=["identification"],
    openapi_extra=json_body_schema(CreateListRequest),
)
async def create_identification_list(ctx: Ctx, request: Request) -> str:
    body = await json_model(request, CreateListRequest)
    return await run(voice_engine(ctx).create_list, body.voice_templates)


@router.post(
    "/identification_engine/enrich_identification_list",
    response_model=str,
    tags=["identification"],
    openapi_extra=json_body_schema(EnrichListRequest),
)
async def enrich_identification_list(ctx: Ctx, request: Request) -> str:
    body = await json_model(request, EnrichListRequest, base64_fields=("identification_list",))
    return await run(voice_engine(ctx).enrich_list, body.identification_list, body.voice_templates)


@router.post(
    "/identification_engine/identify",
    response_model=IdentificationResultModel,
    tags=["identification"],
    openapi_extra=json_body_schema(IdentifyRequest),
)
async def identify(
    ctx: Ctx,
    request: Request,
    acceptance_level: OptFloat = None,
) -> Response:
    body = await json_model(request, IdentifyRequest, base64_fields=("identification_list",))
    scores, threshold = await run(
        voice_engine(ctx).identify, body.voice_template, body.identification_list, acceptance_level
    )
    # 100,000 scores: orjson writes the numpy array directly, ~50x faster than validating a list.
    body = orjson.dumps({"scores": scores, "threshold": threshold}, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, media_type="application/json")


@router.post(
    "/identification_result/get_indexes_of_matched_templates",
    response_model=list[Int32],
    tags=["identification"],
)
async def get_indexes_of_matched_templates(ctx: Ctx, result: IdentificationResultModel) -> list[int]:
    return matched_indexes(result.scores, result.threshold)


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
    audio = await samples_audio(request, ctx, sample_rate)
    return speech_summary(await run(voice_engine(ctx).speech_summary, audio))


@router.post(
    "/speech_summary_engine/get_speech_summary_from_file",
    response_model=SpeechSummary,
    tags=["analysis"],
    dependencies=Multipart,
)
async def get_speech_summary_from_file(ctx: Ctx, wav_file: WavFile) -> SpeechSummary:
    audio = await file_audio(wav_file, "wav_file", ctx)
    return speech_summary(await run(voice_engine(ctx).speech_summary, audio))


@router.post(
    "/snr_computer/compute_with_samples",
    response_model=float,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def compute_snr_with_samples(ctx: Ctx, request: Request, sample_rate: SampleRate) -> float:
    audio = await samples_audio(request, ctx, sample_rate)
    return await run(voice_engine(ctx).snr, audio)


@router.post(
    "/snr_computer/compute_with_file", response_model=float, tags=["analysis"], dependencies=Multipart
)
async def compute_snr_with_file(ctx: Ctx, wav_file: WavFile) -> float:
    audio = await file_audio(wav_file, "wav_file", ctx)
    return await run(voice_engine(ctx).snr, audio)


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
    t: QualityCheckThresholds,
) -> QualityCheckEngineResult:
    audio = await samples_audio(request, ctx, sample_rate)
    return engine_result(await run(voice_service(ctx).quality_check, audio, t))


@router.post(
    "/quality_check/check_quality_from_file",
    response_model=QualityCheckEngineResult,
    tags=["analysis"],
    dependencies=Multipart,
)
async def check_quality_from_file(
    ctx: Ctx,
    audio_file: Annotated[UploadFile, File(description="WAV file; Ogg Opus when typed audio/ogg.")],
    t: QualityCheckThresholds,
) -> QualityCheckEngineResult:
    audio = await file_audio(audio_file, "audio_file", ctx)
    return engine_result(await run(voice_service(ctx).quality_check, audio, t))


@router.get(
    "/quality_check/get_recommended_thresholds",
    response_model=QualityCheckMetricsThresholds,
    tags=["analysis"],
)
async def get_recommended_thresholds(ctx: Ctx, scenario: Scenario) -> QualityCheckMetricsThresholds:
    return QualityCheckMetricsThresholds(**threshold_values(RECOMMENDED[scenario]))


@router.post(
    "/diarization_engine/get_segmentation_from_samples",
    response_model=dict[str, list[AudioInterval]],
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def get_segmentation_from_samples(
    ctx: Ctx, request: Request, sample_rate: SampleRate, num_speakers: NumSpeakers = None
) -> dict[str, list[AudioInterval]]:
    audio = await samples_audio(request, ctx, sample_rate)
    return intervals(await run(voice_service(ctx).diarize, audio, num_speakers), audio.sample_rate)


@router.post(
    "/diarization_engine/get_segmentation_from_file",
    response_model=dict[str, list[AudioInterval]],
    tags=["analysis"],
    dependencies=Multipart,
)
async def get_segmentation_from_file(
    ctx: Ctx, wav_file: WavFile, num_speakers: NumSpeakers = None
) -> dict[str, list[AudioInterval]]:
    audio = await file_audio(wav_file, "wav_file", ctx)
    return intervals(await run(voice_service(ctx).diarize, audio, num_speakers), audio.sample_rate)


@router.post(
    "/attributes_estimator/estimate_with_samples",
    response_model=Attributes,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def estimate_attributes_with_samples(ctx: Ctx, request: Request, sample_rate: SampleRate) -> Attributes:
    audio = await samples_audio(request, ctx, sample_rate)
    return attributes_result(await run(attributes_estimator(ctx).estimate, audio))


@router.post(
    "/attributes_estimator/estimate_with_file",
    response_model=Attributes,
    tags=["analysis"],
    dependencies=Multipart,
)
async def estimate_attributes_with_file(ctx: Ctx, wav_file: WavFile) -> Attributes:
    audio = await file_audio(wav_file, "wav_file", ctx)
    return attributes_result(await run(attributes_estimator(ctx).estimate, audio))


@router.post(
    "/antispoof_engine/is_spoof_samples",
    response_model=AntispoofResult,
    tags=["analysis"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def is_spoof_samples(ctx: Ctx, request: Request, sample_rate: SampleRate) -> AntispoofResult:
    audio = await samples_audio(request, ctx, sample_rate)
    return antispoof_result(await run(antispoof_engine(ctx).evaluate, audio))


@router.post(
    "/antispoof_engine/is_spoof_file",
    response_model=AntispoofResult,
    tags=["analysis"],
    dependencies=Multipart,
)
async def is_spoof_file(ctx: Ctx, wav_file: WavFile) -> AntispoofResult:
    audio = await file_audio(wav_file, "wav_file", ctx)
    return antispoof_result(await run(antispoof_engine(ctx).evaluate, audio))

"""Speaker attributes (docs/attributes.md): gender, age, phone-call participant.

- **gender**: logistic regression on the CAM++ unit embedding of the speech taken through the
  telephone channel processing (``VoiceEngine.create_template(audio, ChannelType.TEL)``, whatever
  the input's rate), parameters in ``gender_model.json`` fitted by ``python -m train.gender``
  (model card: docs/model-gender.md). ``genderScore`` is the probability of the *returned*
  gender, so it is always in [0.5, 1].
- **age**: ``verilive.voice.age.AgeModel`` (model card: docs/model-age.md) on the CAM++ unit
  embedding of the speech through the age model's channel (MIC): whole years for a voice the
  model judges to be a young child, ``None`` otherwise (adults, too little speech, narrowband
  input). ``None`` means "not judged", not "adult".
- **phoneCallParticipant**: the speech's template matched against the operator and customer
  templates given to the estimator, with the engine's calibrated match probability.

Runtime is numpy only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from verilive.audio import Audio
from verilive.models.store import packaged_path
from verilive.numeric import sigmoid
from verilive.voice.age import AgeModel
from verilive.voice.channel import resolve_channel
from verilive.voice.engine import SpeechAnalysis, VoiceEngine
from verilive.voice.linear_model import EmbeddingLinearModel
from verilive.voice.schemas import ChannelType, Gender, PhoneCallParticipant
from verilive.voice.templates import VoiceTemplate, require_same_space

GENDER_MODEL_FILE = "gender_model.json"
GENDER_PACKAGED_ID = "gender"  # its id in the manifest's packaged section
#: A role is answered when its best calibrated same-speaker probability reaches this.
PARTICIPANT_MIN_PROBABILITY = 0.5


@dataclass(frozen=True)
class SpeakerAttributes:
    """What the voice says about its speaker: P(male) and the gender it decides, the age (None
    unless answered, docs/model-age.md) and the phone-call role matched against the enrolled
    templates (UNDEFINED without templates or without a match)."""

    gender_score: float
    gender: Gender
    age: int | None
    participant: PhoneCallParticipant


@dataclass(frozen=True)
class GenderModel(EmbeddingLinearModel):
    """p(MALE | u) = sigmoid(weights · ((u − mean) / scale) + bias), u = the unit embedding of
    the speech through ``channel`` processing."""

    NAME: ClassVar[str] = "gender model"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GenderModel:
        return cls(**cls.linear_fields(data))

    @classmethod
    def packaged(cls) -> GenderModel:
        return cls.from_dict(json.loads(packaged_path(GENDER_PACKAGED_ID).read_text()))

    def p_male(self, unit: np.ndarray) -> float:
        """Probability that the speaker is male, from an L2-normalised embedding."""
        return sigmoid(self.score(unit))

    def predict(self, unit: np.ndarray) -> tuple[Gender, float]:
        """The more probable gender and its probability (≥ 0.5; MALE on an exact tie)."""
        p = self.p_male(unit)
        return (Gender.MALE, p) if p >= 0.5 else (Gender.FEMALE, 1.0 - p)


class AttributesEstimator:
    """Gender, age and phone-call participant of the speaker of an audio.

    ``operator_templates`` / ``customer_templates``: enrolled voices of each role (e.g. from the
    settings; any number, possibly none). They must live in the engine's embedding space
    (``TemplateMismatch`` otherwise).
    """

    def __init__(
        self,
        engine: VoiceEngine,
        operator_templates: Iterable[VoiceTemplate] = (),
        customer_templates: Iterable[VoiceTemplate] = (),
        gender_model: GenderModel | None = None,
        age_model: AgeModel | None = None,
    ) -> None:
        self.engine = engine
        self.gender_model = gender_model or GenderModel.packaged()
        self.age_model = age_model or AgeModel.packaged()
        for what, model in (("gender", self.gender_model), ("age", self.age_model)):
            if model.init_data_id != engine.init_data_id:
                raise ValueError(
                    f"{what} model was fitted on '{model.init_data_id}' embeddings, "
                    f"the engine makes '{engine.init_data_id}'"
                )
        self.operator_templates = tuple(operator_templates)
        self.customer_templates = tuple(customer_templates)
        enrolled = self.operator_templates + self.customer_templates
        if enrolled:
            require_same_space(enrolled, expected=engine.init_data_id)

    def estimate(self, audio: Audio) -> SpeakerAttributes:
        """Attributes of the speech in ``audio``; raises ``NoSpeech`` when there is none.

        One VAD pass, and one CAM++ pass per channel needed, each made once and shared: gender
        reads the speech's embedding through its model's channel (TEL); age through its model's
        (MIC), only when the input can be judged at all (enough speech, wideband); the
        participant match uses the template the engine makes for this audio by default (TEL at
        ≤ 8 kHz, MIC above; docs/voice.md), only when templates are enrolled."""
        analysis = self.engine.analyse(audio)
        templates: dict[tuple[ChannelType, bool], VoiceTemplate] = {}

        def template(channel: ChannelType, adapted: bool = True) -> VoiceTemplate:
            if (channel, adapted) not in templates:
                templates[(channel, adapted)] = self.engine.create_template(
                    audio, channel, analysis=analysis, adapted_telephone=adapted
                )
            return templates[(channel, adapted)]

        # the gender model was fitted on the plain CAM++'s telephone view, not campplus_tel's
        plain = template(self.gender_model.channel, False)  # NoSpeech
        gender, score = self.gender_model.predict(plain.unit())
        age = self.age(analysis, lambda ch: template(ch, False))
        participant = PhoneCallParticipant.UNDEFINED
        if self.operator_templates or self.customer_templates:
            participant = self.participant(template(resolve_channel(None, analysis.sample_rate)))
        return SpeakerAttributes(gender_score=score, gender=gender, age=age, participant=participant)

    def age(self, analysis: SpeechAnalysis, template: Callable[[ChannelType], VoiceTemplate]) -> int | None:
        """The age model's answer for the analysed speech (docs/model-age.md); ``template(channel)``
        gives the speech's template through a channel, and is called only for judgeable input."""
        model = self.age_model
        if not model.judgeable(analysis.speech_ms, analysis.sample_rate):
            return None
        return model.estimate(template(model.channel).unit(), analysis.speech_ms, analysis.sample_rate)

    def participant(self, template: VoiceTemplate) -> PhoneCallParticipant:
        """UNDEFINED without enrolled templates; else the role whose best calibrated match
        probability is highest, when it reaches 0.5 (OPERATOR on an exact tie); else OTHER."""
        if not (self.operator_templates or self.customer_templates):
            return PhoneCallParticipant.UNDEFINED
        operator = self.best_probability(template, self.operator_templates)
        customer = self.best_probability(template, self.customer_templates)
        if max(operator, customer) < PARTICIPANT_MIN_PROBABILITY:
            return PhoneCallParticipant.OTHER
        return PhoneCallParticipant.OPERATOR if operator >= customer else PhoneCallParticipant.CUSTOMER

    def best_probability(self, template: VoiceTemplate, enrolled: Iterable[VoiceTemplate]) -> float:
        """Highest calibrated same-speaker probability against ``enrolled`` (0 when empty)."""
        return max((self.engine.compare(template, t)[1] for t in enrolled), default=0.0)

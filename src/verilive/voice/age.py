"""Age from the voice (docs/model-age.md): the one place that knows the age model and its rule.

The model is a ridge regression of log(age in years) on the L2-normalised CAM++ embedding of the
speech taken through ``channel`` processing (``VoiceEngine.create_template(audio, channel)``),
parameters in ``age_model.json`` fitted by ``python -m train.age``. Runtime is numpy only; the
caller supplies the embedding, so no model session is touched here.

Contract of :meth:`AgeModel.estimate` (the value of the ``age`` attribute):

- It returns ``None`` unless **all** of these hold: the input's sample rate is at least
  ``min_sample_rate``; the speech lasts at least ``min_speech_ms``; the embedding is finite; and
  the raw estimate is at most ``max_estimate_years``. An embedding of another size is a caller's
  error (``ValueError``), not unsuitable input.
- Otherwise it returns ``max(round(estimate), youngest_answer_years)``: an ``int`` in
  ``[youngest_answer_years, round(max_estimate_years)]``. Only young children's voices are ever
  answered; an adult age is never returned, because adult estimates were no better than the mean
  across corpora (docs/model-age.md, "The answering rule").
- ``None`` means "not judged", never "adult": the model declines on most children too.

:class:`AgeModel` is immutable and checked when built (shapes, finite numbers, a sane rule), so a
damaged ``age_model.json`` fails at start-up, not on a request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from verilive.models.store import packaged_path
from verilive.voice.linear_model import EmbeddingLinearModel

__all__ = ["AGE_MODEL_FILE", "AgeModel"]

AGE_MODEL_FILE = "age_model.json"
AGE_PACKAGED_ID = "age"  # its id in the manifest's packaged section


@dataclass(frozen=True)
class AgeModel(EmbeddingLinearModel):
    """estimate_years(u) = exp(weights · ((u − mean) / scale) + bias), answered under the rule.

    mean, scale, weights: vectors of the embedding's size (scale > 0), bias in log years.
    init_data_id: the embedding space the model was fitted on (the engine's must match).
    channel: the channel processing of the embedding the model reads.
    min_speech_ms: less speech than this (VAD) is not judged.
    max_estimate_years: estimates above this are not answered.
    min_sample_rate: input sampled below this is not judged (it lacks the band the model reads).
    youngest_answer_years: the youngest age in the training data; answers are not extrapolated below it.
    """

    NAME: ClassVar[str] = "age model"

    min_speech_ms: float
    max_estimate_years: float
    min_sample_rate: int
    youngest_answer_years: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.min_speech_ms) and self.min_speech_ms > 0):
            raise ValueError(f"age model: min_speech_ms must be > 0, got {self.min_speech_ms}")
        if not (0 < self.youngest_answer_years <= self.max_estimate_years < 18):
            # the rule answers children only; an adult limit would contradict docs/model-age.md
            raise ValueError(
                "age model: need 0 < youngest_answer_years <= max_estimate_years < 18, got "
                f"{self.youngest_answer_years} and {self.max_estimate_years}"
            )
        if self.min_sample_rate <= 0:
            raise ValueError(f"age model: min_sample_rate must be > 0, got {self.min_sample_rate}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgeModel:
        rule = data["rule"]
        return cls(
            **cls.linear_fields(data),
            min_speech_ms=float(rule["min_speech_ms"]),
            max_estimate_years=float(rule["max_estimate_years"]),
            min_sample_rate=int(rule["min_sample_rate"]),
            youngest_answer_years=int(rule["youngest_answer_years"]),
        )

    @classmethod
    def packaged(cls) -> AgeModel:
        return cls.from_dict(json.loads(packaged_path(AGE_PACKAGED_ID).read_text()))

    def judgeable(self, speech_ms: float, sample_rate: int) -> bool:
        """Whether input with this much speech at this rate can be judged at all (checked before
        an embedding is made, so unjudgeable input costs no CAM++ pass)."""
        return sample_rate >= self.min_sample_rate and speech_ms >= self.min_speech_ms

    def estimate_years(self, unit: np.ndarray) -> float:
        """The raw estimate in years from an L2-normalised embedding, whatever the rule says."""
        return math.exp(self.score(unit))

    def estimate(self, unit: np.ndarray, speech_ms: float, sample_rate: int) -> int | None:
        """The ``age`` attribute: whole years when the rule says the estimate is reliable, else None.
        Raises ValueError on an embedding of the wrong size."""
        u = self._vector(unit)
        if not self.judgeable(speech_ms, sample_rate) or not np.all(np.isfinite(u)):
            return None
        years = self.estimate_years(u)
        if not years <= self.max_estimate_years:  # also catches NaN
            return None
        # np.round (half to even), as train.age rounds the answers it measures
        return max(int(np.round(years)), self.youngest_answer_years)

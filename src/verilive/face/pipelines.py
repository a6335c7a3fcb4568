"""Names of the face liveness pipelines and calibrations this build offers."""

from __future__ import annotations

from enum import StrEnum


class Calibration(StrEnum):
    REGULAR = "REGULAR"
    SOFT = "SOFT"
    HARDENED = "HARDENED"


class Domain(StrEnum):
    GENERAL = "GENERAL"
    DESKTOP = "DESKTOP"


# The two-model ensemble is the default; "fast" runs one model for lower latency.
DEFAULT_PIPELINE = "ensemble"
PIPELINES: tuple[str, ...] = ("ensemble", "fast")

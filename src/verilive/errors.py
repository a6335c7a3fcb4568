"""Exceptions shared by engines and services.

Engines raise these; the HTTP layer (server/errors.py) turns each into the one JSON error
shape with the status given here. Nothing here knows about HTTP beyond a status number.
"""

from __future__ import annotations


class VeriliveError(Exception):
    """Base error. ``code`` is a stable machine-readable name, ``status`` an HTTP status."""

    code: str = "INVALID_INPUT"
    status: int = 400

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


class InvalidInput(VeriliveError):
    code = "INVALID_INPUT"


class InvalidParameter(InvalidInput):
    code = "INVALID_PARAMETER"


class UnsupportedMediaType(InvalidInput):
    code = "UNSUPPORTED_MEDIA_TYPE"
    status = 415


class AudioDecodeError(InvalidInput):
    code = "INVALID_AUDIO"


class PayloadTooLarge(VeriliveError):
    code = "PAYLOAD_TOO_LARGE"
    status = 413


class Misconfigured(VeriliveError):
    """The server's own configuration is wrong (a key, a template in the settings): no client can
    act on it, an operator can."""

    code = "MISCONFIGURED"
    status = 503


class ModelError(VeriliveError):
    """A model is missing, corrupt or failed its check."""

    code = "MODEL_UNAVAILABLE"
    status = 503


class ModelNotInstalled(ModelError):
    code = "MODEL_NOT_INSTALLED"


class ModelVerificationError(ModelError):
    code = "MODEL_VERIFICATION_FAILED"

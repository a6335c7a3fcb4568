"""Base64 text that arrives already decoded (issue 49).

Identification lists travel as base64 strings inside JSON bodies of tens of MB. The server's JSON
reader (server/uploads.py) may decode such a string straight from the request bytes, without
building the 52 MB Python string first; the engine then gets a :class:`DecodedBase64` where it
would get the text, and skips its own base64 step. Only strings that are valid base64 (the standard
alphabet, as ``pybase64.b64decode(..., validate=True)`` reads it) arrive this way, so the engine's
decisions are the same for either form.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DecodedBase64"]


@dataclass(frozen=True, slots=True)
class DecodedBase64:
    """The bytes of a base64 string that was valid base64 (``data``: bytes, or a view of the
    request buffer they were decoded into), and the string's length."""

    data: bytes | memoryview
    text_length: int

    def __len__(self) -> int:
        return self.text_length

"""Voice analysis: the engines (``from verilive.voice import VoiceEngine``), which know nothing about
HTTP, and the service's HTTP routes in ``verilive.voice.api``."""

from verilive.voice.engine import VoiceEngine

__all__ = ["VoiceEngine"]

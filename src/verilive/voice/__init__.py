"""Voice analysis engines (no HTTP): ``from verilive.voice import VoiceEngine``."""

from verilive.voice.engine import VoiceEngine

__all__ = ["VoiceEngine"]

"""Giving freed heap memory back to the system after start-up (issue 49).

Loading the models parses several model files and builds their sessions; glibc keeps much of what
that freed inside its heap, where it counts in the process's RSS. How much stayed depended on the
order things were freed: the voice service started at about 305 or 345 MiB, at random, and a list
that fit under a memory budget in one start did not in the other. ``malloc_trim(0)`` after loading
returns the free pages wherever they are in the heap: 272-273 MiB after every start (2026-11-29,
docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["release_free_memory"]


def release_free_memory() -> bool:
    """glibc's ``malloc_trim(0)``: free heap pages go back to the system. True when glibc did
    release something; False where there is nothing to do or no glibc (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))

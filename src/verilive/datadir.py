"""The service's data directory and the files it makes there, private to the service's user.

The data directory (platformdirs' user data dir by default) holds ``bi.sqlite3``, the capture
replay store and the local evaluation key. It is made 0700 and the SQLite databases the service
creates 0600 (SQLite gives their ``-wal`` and ``-shm`` files the database's mode), whatever the
umask: BI records are not for other local users (issue 44, finding 6). An existing directory or
database keeps the mode its owner gave it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["make_private_dir", "make_private_file"]


def make_private_dir(path: str | Path) -> Path:
    """Make ``path`` (and missing parents) when it is not there; a directory made here is 0700."""
    path = Path(path)
    if path.is_dir():
        return path
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        return path  # made meanwhile by another process, or a file there: the caller's open says so
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask; 0700 is what we mean
    return path


def make_private_file(path: str | Path) -> Path:
    """Create an empty file at ``path`` with mode 0600 unless something is there (so that SQLite,
    which creates its database with 0644 less the umask, opens a private one)."""
    path = Path(path)
    make_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return path
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path

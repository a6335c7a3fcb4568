"""What a person or a log collector reads (issue 45): plain aligned text at a terminal, JSON
elsewhere unless VERILIVE_LOG_JSON says otherwise, and uvicorn's life-cycle lines written once
per process by the runner instead of once per server."""

from __future__ import annotations

import io
import json
import logging

import pytest

from verilive.config import Settings
from verilive.server import logs


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_at_a_terminal_json_elsewhere_unless_told() -> None:
    assert logs.json_lines_wanted(None, Tty()) is False
    assert logs.json_lines_wanted(None, io.StringIO()) is True
    assert logs.json_lines_wanted(True, Tty()) is True
    assert logs.json_lines_wanted(False, io.StringIO()) is False
    assert Settings(_env_file=None).log_json is None  # type: ignore[call-arg]
    assert Settings(_env_file=None, log_json="false").log_json is False  # type: ignore[call-arg]


def test_text_lines_are_aligned_columns() -> None:
    fmt = logs.TextFormatter(logs.TEXT_FORMAT)
    lines = [
        fmt.format(logging.makeLogRecord({"name": n, "levelname": lv, "levelno": 20, "msg": "m"}))
        for n, lv in (("verilive.runner", "INFO"), ("verilive.capture.engine", "WARNING"))
    ]
    # The message starts at the same column whatever the level and logger.
    assert len({line.index(" m") for line in lines}) == 1, lines


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", out)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    logs.configure_logging("INFO", json_lines=True)
    yield out
    root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).filters[:] = []


def test_uvicorn_life_cycle_lines_are_left_to_the_runner(captured: io.StringIO) -> None:
    lg = logging.getLogger("uvicorn.error")
    lg.info("Started server process [%d]", 1)
    lg.info("Application startup complete.")
    lg.info("Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", "http", "127.0.0.1", 8001)
    lg.warning("Invalid HTTP request received.")  # anything else still gets through
    logging.getLogger("verilive.runner").info("serving %s (pid %d)", "face on http://x:1", 7)
    records = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [r["msg"] for r in records] == [
        "Invalid HTTP request received.",
        "serving face on http://x:1 (pid 7)",
    ]

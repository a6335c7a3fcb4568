"""Structured logging with a per-request id.

The request id lives in a contextvar so that any log line written while a request is being
served carries it, including lines from engines that know nothing about HTTP.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import re
import sys

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
# The same id in the ASGI scope: the handler of unexpected errors runs outside the request
# middleware, after the contextvar has been reset.
REQUEST_ID_SCOPE_KEY = "verilive.request_id"

_RESERVED = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = request_id_var.get()
        if rid:
            out["request_id"] = rid
        # Fields passed with logger.info(..., extra={...}) become top-level keys.
        for k, v in record.__dict__.items():
            if k not in _RESERVED and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc_type"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


# Text mode: one line per record whatever its message holds. C0 and C1 controls (CR, LF, ESC, ...),
# DEL and the Unicode line and paragraph separators are written as escapes, so a request path such
# as `/x%0a2026-... INFO verilive.audit: ...` cannot start a forged log line (issue 44). A backslash
# is doubled so that an escape in the output always means a control character in the input.
_CONTROL = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Aligned columns for a person at a terminal: time, level, logger, message.
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)-24s %(message)s"


def escape_controls(text: str) -> str:
    """``text`` on one line: controls as ``\\n``, ``\\r``, ``\\t``, ``\\xNN`` or ``\\uNNNN``."""

    def one(m: re.Match[str]) -> str:
        c = m.group()
        if c in _NAMED:
            return _NAMED[c]
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROL.sub(one, text)


class TextFormatter(logging.Formatter):
    """Plain text, one line per record (message and its arguments escaped); a traceback follows
    on lines of its own, each indented with ``  | `` so that none of them can pass for a record."""

    def __init__(self, fmt: str = TEXT_FORMAT, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # record.message is getMessage(): the message with its args, as the caller passed them.
        # The logger name is escaped too (it is code's, but costs nothing).
        saved = record.message, record.name
        record.message, record.name = escape_controls(record.message), escape_controls(record.name)
        try:
            return super().formatMessage(record)
        finally:
            record.message, record.name = saved

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        head, sep, tail = base.partition("\n")  # the message itself has no newline left
        rid = request_id_var.get()
        head = f"{head} [rid={escape_controls(rid)}]" if rid else head
        if not sep:
            return head
        lines = (escape_controls(line) for line in tail.split("\n"))
        return head + "".join(f"\n  | {line}" for line in lines)


# uvicorn's life-cycle lines, written once per server: `serve all` runs three servers in one
# process, so a person saw each three times. The runner writes one line per process instead, at
# start ("serving ..."), on SIGTERM ("shutting down ...") and at the end ("stopped ...").
_UVICORN_CHATTER = (
    "Started server process",
    "Waiting for application startup",
    "Application startup complete",
    "Uvicorn running on",
    "Waiting for application shutdown",
    "Application shutdown complete",
    "Finished server process",
    "Shutting down",
)


def _not_uvicorn_chatter(record: logging.LogRecord) -> bool:
    return not (record.levelno <= logging.INFO and str(record.msg).startswith(_UVICORN_CHATTER))


def json_lines_wanted(json_lines: bool | None, stream: object = None) -> bool:
    """JSON when asked, plain text when asked; unset: text on a terminal, JSON otherwise
    (containers, files, log collectors)."""
    if json_lines is not None:
        return json_lines
    isatty = getattr(stream if stream is not None else sys.stderr, "isatty", None)
    return not (callable(isatty) and isatty())


def configure_logging(level: str = "INFO", json_lines: bool | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines_wanted(json_lines) else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn's own access log duplicates ours and lacks the request id.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
        lg.filters[:] = [_not_uvicorn_chatter]

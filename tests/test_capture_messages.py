"""The one table of texts the capture page and SDK show (static/messages.json, issue 31): every
status, camera error, configuration and validation code has a text in every language, and the page
uses no text outside it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from verilive.capture.engine import VALIDATION_CODES
from verilive.capture.sdk_routes import STATIC_DIR
from verilive.capture.service import CONFIGURATION_CODES

SDK = (STATIC_DIR / "verilive-capture.js").read_text("utf-8")
DEMO = (STATIC_DIR / "demo.html").read_text("utf-8")


@pytest.fixture(scope="module")
def table() -> dict[str, dict[str, Any]]:
    return json.loads((STATIC_DIR / "messages.json").read_text("utf-8"))


def sdk_statuses() -> list[str]:
    m = re.search(r"export const STATUSES = Object\.freeze\(\[(.*?)\]\)", SDK, re.S)
    assert m, "the SDK exports STATUSES"
    return re.findall(r'"([a-z-]+)"', m.group(1))


def test_every_language_has_every_key(table: dict[str, dict[str, Any]]) -> None:
    assert {"en", "de"} <= set(table)
    keys = set(table["en"]) - {"_about"}
    for lang, texts in table.items():
        assert set(texts) - {"_about"} == keys, lang
        for key in keys:
            assert isinstance(texts[key], str), (lang, key)
            # Only "stopped" is silent; placeholders survive translation.
            assert texts[key] or key == "stopped", (lang, key)
            assert texts[key].count("{n}") == table["en"][key].count("{n}"), (lang, key)
    assert table["de"]["move-closer"] != table["en"]["move-closer"]  # really translated


def test_every_status_the_sdk_reports_has_a_text(table: dict[str, dict[str, Any]]) -> None:
    statuses = sdk_statuses()
    assert len(statuses) == len(set(statuses)) >= 15
    assert set(statuses) <= set(table["en"]), set(statuses) - set(table["en"])
    # Every status literal the SDK assigns or reports is a declared one.
    used = set(re.findall(r'status = "([a-z-]+)"', SDK))
    used |= set(re.findall(r'setStatus\("([a-z-]+)"', SDK))
    used |= set(re.findall(r'setCue\([^)]*?"([a-z-]+)"', SDK))
    used |= set(re.findall(r'return "([a-z-]+)";', SDK))
    used |= set(re.findall(r'status: [^,]*?"([a-z-]+)" : "([a-z-]+)"', SDK)[0])
    assert used and used <= set(statuses), used - set(statuses)
    # The three placement paths' distinct problems (issue 31).
    assert {"no-face", "move-closer", "center", "too-dark", "backlit", "too-bright", "hold-still"} <= set(
        statuses
    )


def test_every_server_code_the_page_can_get_has_a_text(table: dict[str, dict[str, Any]]) -> None:
    assert VALIDATION_CODES and set(table["en"]) >= VALIDATION_CODES, VALIDATION_CODES - set(table["en"])
    assert set(table["en"]) >= CONFIGURATION_CODES


def test_the_page_shows_only_texts_of_the_table(table: dict[str, dict[str, Any]]) -> None:
    keys = set(table["en"])
    used = set(re.findall(r'hint\("([^"]+)"', DEMO))
    used |= set(re.findall(r'data-msg(?:-label|-alt)?="([^"]+)"', DEMO))
    used |= set(re.findall(r'return "(camera-[a-z]+)"', DEMO))
    used |= set(re.findall(r'fail\("([^"]+)"', DEMO))
    used |= set(re.findall(r'"((?:not-)?accepted(?:\.[a-z]+)?)"', DEMO))  # the result's texts
    assert "not-accepted.turn" in used  # a capture without a turn is told to turn (issue 43)
    assert {"idle", "checking", "get-ready", "camera-blocked", "unreachable", "page.start"} <= used
    assert used <= keys, used - keys
    # No English sentence left in the script (the developer note in <details> is marked lang="en").
    script = DEMO[DEMO.index('<script type="module">') :]
    assert not re.search(r'(?:hint|textContent = )\(?"[A-Z][a-z]+ ', script)

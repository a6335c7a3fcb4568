"""Large JSON bodies read by server.uploads.json_model (issue 49): the same answers to bad bodies as
FastAPI's own body parsing, for the routes that take identification lists."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

import numpy as np
import pybase64
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict

from tests.helpers import assert_error
from verilive.base64text import DecodedBase64
from verilive.server.errors import install_error_handlers
from verilive.server.openapi import install_openapi
from verilive.server.uploads import LARGE_STRING, json_body_schema, json_model


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    voice_template: str
    identification_list: str


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = FastAPI()
    install_error_handlers(app)
    install_openapi(app)

    @app.post("/fastapi")
    async def by_fastapi(body: Body) -> dict[str, int]:
        return {"n": len(body.identification_list)}

    @app.post("/ours", openapi_extra=json_body_schema(Body))
    async def by_json_model(request: Request) -> dict[str, int]:
        body = await json_model(request, Body)
        return {"n": len(body.identification_list)}

    @app.post("/large", openapi_extra=json_body_schema(Body))
    async def by_large_path(request: Request) -> dict[str, object]:
        body = await json_model(request, Body, base64_fields=("identification_list",))
        return digest(body)

    @app.post("/ordinary", openapi_extra=json_body_schema(Body))
    async def by_ordinary_path(request: Request) -> dict[str, object]:
        return digest(await json_model(request, Body))

    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def digest(body: Body) -> dict[str, object]:
    """What the engine would see: the list's bytes (or that it is not base64), and which form."""
    value: object = body.identification_list
    if isinstance(value, DecodedBase64):
        raw: bytes | None = bytes(value.data)
    else:
        try:
            raw = pybase64.b64decode(value, validate=True)
        except ValueError:
            raw = None
    return {
        "template": body.voice_template[:20],
        "list": None if raw is None else hashlib.sha256(raw).hexdigest(),
        "length": len(value),  # type: ignore[arg-type]
        "decoded": isinstance(value, DecodedBase64),
    }


JSON = {"content-type": "application/json"}
GOOD = b'{"voice_template": "a", "identification_list": "bcd"}'
CASES = {
    "good": (GOOD, JSON, 200, None),
    "empty": (b"", JSON, 400, "MISSING_BODY"),
    "no content type": (GOOD, {}, 400, "INVALID_BODY"),
    "truncated": (GOOD[:-12], JSON, 400, "INVALID_JSON"),
    "not json": (b"\xff\xfe\x00garbage", JSON, 400, "INVALID_JSON"),
    "missing field": (b'{"voice_template": "a"}', JSON, 400, "MISSING_FIELD"),
    "wrong type": (b'{"voice_template": 3, "identification_list": "b"}', JSON, 400, "INVALID_BODY"),
    "extra field": (GOOD[:-1] + b', "x": 1}', JSON, 400, "INVALID_BODY"),
    "array": (b"[1, 2]", JSON, 400, "INVALID_BODY"),
    "text/plain": (GOOD, {"content-type": "text/plain"}, 400, "INVALID_BODY"),
    "+json": (GOOD, {"content-type": "application/x+json"}, 200, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_model_answers_as_fastapi_does(client: TestClient, case: str) -> None:
    body, headers, status, code = CASES[case]
    ours = client.post("/ours", content=body, headers=headers)
    theirs = client.post("/fastapi", content=body, headers=headers)
    assert ours.status_code == theirs.status_code == status
    if code is None:
        assert ours.json() == theirs.json()
    else:
        assert_error(ours, status, code)
        assert_error(theirs, status, code)


def test_json_model_routes_document_the_same_body(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert paths["/ours"]["post"]["requestBody"] == paths["/fastapi"]["post"]["requestBody"]


def test_a_large_body_is_read_whole(client: TestClient) -> None:
    big = "A" * 60_000_000  # a 100,000-row version-2 list is ~52 MB of base64
    r = client.post("/ours", json={"voice_template": "a", "identification_list": big})
    assert r.status_code == 200 and r.json() == {"n": len(big)}


# --- long base64 strings decoded from the body bytes (issue 49) ------------------------------------------


def _list_text(n_bytes: int = LARGE_STRING, seed: int = 0) -> str:
    raw = np.random.default_rng(seed).integers(0, 256, n_bytes, dtype=np.uint8).tobytes()
    text = base64.b64encode(raw).decode()
    assert len(text) >= LARGE_STRING and "/" in text and "+" in text
    return text


def _body(template: str, listed: str) -> bytes:
    return (f'{{"voice_template": "{template}", "identification_list": "{listed}"}}').encode()


LIST = _list_text()
MID = len(LIST) // 2
LARGE_CASES: dict[str, tuple[bytes, bool]] = {
    # name: (body, decoded from the body bytes)
    "good": (_body("tpl", LIST), True),
    "good, fields swapped, spaces": (
        (f'{{ "identification_list" :\n"{LIST}" , "voice_template":"tpl" }}').encode(),
        True,
    ),
    "padded end": (_body("tpl", _list_text(LARGE_STRING + 1)), True),
    "escaped slashes (PHP's json_encode)": (_body("tpl", LIST.replace("/", "\\/")), False),
    "not base64 in the middle": (_body("tpl", LIST[:MID] + "*" + LIST[MID + 1 :]), False),
    "padding in the middle": (_body("tpl", LIST[:MID] + "=" + LIST[MID + 1 :]), False),
    "length not a multiple of 4": (_body("tpl", LIST[:-1]), False),
    "control character": (_body("tpl", LIST[:MID] + "\x01" + LIST[MID + 1 :]), False),
    "newline": (_body("tpl", LIST[:MID] + "\n" + LIST[MID:]), False),
    "long template too": (_body(LIST, LIST), False),
    "long template only": (_body(LIST, "AAAA"), False),
    "missing template": ((f'{{"identification_list": "{LIST}"}}').encode(), False),
    "template not a string": ((f'{{"voice_template": 3, "identification_list": "{LIST}"}}').encode(), False),
    "extra field": (_body("tpl", LIST)[:-1] + b', "x": 1}', False),
    "truncated in the string": (_body("tpl", LIST)[: 40 + MID], False),
    "unterminated": (_body("tpl", LIST)[:-2], False),
    "list of lists": ((f'{{"voice_template": "tpl", "identification_list": ["{LIST}"]}}').encode(), False),
    "quote inside": (_body("tpl", LIST[:MID] + '", "x": "' + LIST[MID:]), False),
}


@pytest.mark.parametrize("case", sorted(LARGE_CASES))
def test_long_base64_strings_answer_as_the_ordinary_parse(client: TestClient, case: str) -> None:
    body, decoded = LARGE_CASES[case]
    large = client.post("/large", content=body, headers=JSON)
    ordinary = client.post("/ordinary", content=body, headers=JSON)
    assert large.status_code == ordinary.status_code, (large.text[:300], ordinary.text[:300])
    if ordinary.status_code == 200:
        got, want = large.json(), ordinary.json()
        assert got.pop("decoded") is decoded and want.pop("decoded") is False
        assert got == want
    else:
        assert not decoded
        a, b = large.json(), ordinary.json()
        assert (a["error_code"], a["message"]) == (b["error_code"], b["message"])


def test_the_decoded_list_is_the_lists_bytes(client: TestClient) -> None:
    r = client.post("/large", content=_body("tpl", LIST), headers=JSON).json()
    assert r["decoded"] is True and r["length"] == len(LIST)
    assert r["list"] == hashlib.sha256(base64.b64decode(LIST)).hexdigest()
    bad = client.post("/large", content=_body("tpl", LIST[:MID] + "*" + LIST[MID + 1 :]), headers=JSON)
    assert bad.status_code == 200 and bad.json()["list"] is None  # the engine says it is not base64


def test_a_chunked_body_without_length_is_read_whole(client: TestClient) -> None:
    body = _body("tpl", LIST)

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(body), 100_000):
            yield body[i : i + 100_000]

    r = client.post("/large", content=pieces(), headers=JSON)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["list"] == hashlib.sha256(base64.b64decode(LIST)).hexdigest()
    assert r.json()["decoded"] is True


@pytest.mark.parametrize("bad", ["*", "=", "\n", "é"])
def test_a_failed_decode_in_place_leaves_the_body_as_it_came(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """Pieces decoded before the bad one are encoded back: the ordinary parse then sees the body
    the client sent, byte for byte."""
    from verilive.server import uploads

    monkeypatch.setattr(uploads, "_PIECE", 16)  # many pieces in a short text
    text = base64.b64encode(bytes(range(256)) * 3).decode()
    for where in (0, 17, len(text) // 2, len(text) - 3):
        broken = (text[:where] + bad + text[where + 1 :]).encode()
        body = bytearray(b'{"x": "' + broken + b'"}')
        before = bytes(body)
        assert uploads._decode_in_place(memoryview(body), 7, 7 + len(broken)) is None
        assert bytes(body) == before, where
    body = bytearray(b'{"x": "' + text.encode() + b'"}')
    out = uploads._decode_in_place(memoryview(body), 7, 7 + len(text))
    assert out is not None and bytes(out) == bytes(range(256)) * 3

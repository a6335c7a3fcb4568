"""Large JSON bodies read by server.uploads.json_model (issue 49): the same answers to bad bodies as
FastAPI's own body parsing, for the routes that take identification lists."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict

from tests.helpers import assert_error
from verilive.server.errors import install_error_handlers
from verilive.server.openapi import install_openapi
from verilive.server.uploads import json_body_schema, json_model


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

    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


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

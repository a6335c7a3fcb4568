"""Bounded schemathesis fuzzing of every operation of the three services (docs/reliability.md#fuzzing).

Every operation of each service's own OpenAPI document is run with schemathesis's explicit
examples, its coverage phase (boundary and wrong-typed values of every parameter) and a bounded
number of generated requests, positive and negative, seeded and derandomised so a failure is
reproducible. Each response must not be a 5xx, must have a documented status code and content
type, and its body must match the documented schema. The apps run on the real models.

``VERILIVE_FUZZ_EXAMPLES`` and ``VERILIVE_FUZZ_SEED`` make a deeper or different run by hand;
``VERILIVE_FUZZ_REPORT=<file>`` writes the number of requests sent per operation.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from verilive.config import Settings
from verilive.server.app import SERVICES, create_service_app

KEY = Path(__file__).parent / "fixtures" / "capture_test_key.pem"

# Generated requests per operation; the explicit examples and the coverage phase come on top.
MAX_EXAMPLES = int(os.environ.get("VERILIVE_FUZZ_EXAMPLES", "12"))
SEED = int(os.environ.get("VERILIVE_FUZZ_SEED", "20260501"))

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

# Requests sent per service and operation label, filled in as the tests run.
SENT: dict[str, collections.Counter[str]] = {name: collections.Counter() for name in SERVICES}


def _config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                # An on-disk example database would replay earlier runs' failures and make the
                # result depend on the machine's history.
                "database": "none",
            },
        }
    )


def _settings(base: Settings, tmp: Path) -> Settings:
    """Fully working services: BI and replay stores in temporary SQLite files, the test key."""
    return base.model_copy(
        update={
            "bi_database_url": f"sqlite:///{tmp}/bi.sqlite3",
            "capture_private_keys": [str(KEY)],
            "capture_replay_url": f"sqlite:///{tmp}/replay.sqlite3",
        }
    )


def _document(name: str) -> dict[str, Any]:
    # Building an app loads no model and opens no database (its lifespan and first request
    # do), so collecting the tests stays cheap. test_fuzzed_document_is_the_served_one checks
    # that this is the document the app serves at /openapi.json.
    return create_service_app(name, Settings()).openapi()


def _schema(name: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_dict(_document(name), config=_config())


# Loaded at import because schemathesis's lazy fixture loader does not work with pytest 9;
# the requests go to the configured apps of the `apps` fixture instead.
SCHEMAS = {name: _schema(name) for name in SERVICES}
voice = SCHEMAS["voice"]
face = SCHEMAS["face"]
capture = SCHEMAS["capture"]


@pytest.fixture(scope="module")
def apps(models_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, FastAPI]]:
    built = {
        name: create_service_app(name, _settings(models_settings, tmp_path_factory.mktemp(f"fuzz-{name}")))
        for name in SERVICES
    }
    yield built
    report = os.environ.get("VERILIVE_FUZZ_REPORT")
    if report:  # request counts per operation, for docs/reliability.md
        Path(report).write_text(json.dumps({k: dict(sorted(v.items())) for k, v in SENT.items()}, indent=1))
    # Every operation of a service that was fuzzed got requests; a run that silently skipped
    # operations (a schema that could not be loaded, a filter) would prove nothing.
    for name, sent in SENT.items():
        if sent:
            labels = {r.ok().label for r in SCHEMAS[name].get_all_operations()}
            assert labels == set(sent), f"{name}: operations never fuzzed: {sorted(labels - set(sent))}"


def _run(service: str, case: Case, app: FastAPI) -> None:
    SENT[service][case.operation.label] += 1
    case.call_and_validate(checks=CHECKS, app=app)


# Real models on two cores: no per-example deadline, and slow examples are not a health problem.
_HYPOTHESIS = settings(deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.slow
@voice.parametrize()
@_HYPOTHESIS
def test_fuzz_voice(case: Case, apps: dict[str, FastAPI]) -> None:
    _run("voice", case, apps["voice"])


@pytest.mark.slow
@face.parametrize()
@_HYPOTHESIS
def test_fuzz_face(case: Case, apps: dict[str, FastAPI]) -> None:
    _run("face", case, apps["face"])


@pytest.mark.slow
@capture.parametrize()
@_HYPOTHESIS
def test_fuzz_capture(case: Case, apps: dict[str, FastAPI]) -> None:
    _run("capture", case, apps["capture"])


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVICES)
def test_fuzzed_document_is_the_served_one(name: str, apps: dict[str, FastAPI]) -> None:
    with TestClient(apps[name]) as client:
        served = client.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == SCHEMAS[name].raw_schema


# ------------------------------------------------------------------ the checks can fail


def _broken_app() -> FastAPI:
    app = FastAPI()

    # Returned as a Response, so FastAPI does not validate it against the documented model.
    @app.get("/wrong_type", response_model=dict[str, int])
    def wrong_type() -> JSONResponse:
        return JSONResponse({"n": "not a number"})

    @app.get("/crash")
    def crash() -> JSONResponse:
        return JSONResponse({"detail": "internal error"}, status_code=500)

    return app


@pytest.mark.parametrize(("path", "failure"), [("/wrong_type", "JsonSchemaError"), ("/crash", "ServerError")])
def test_checks_catch_bad_responses(path: str, failure: str) -> None:
    app = _broken_app()
    schema = schemathesis.openapi.from_dict(app.openapi(), config=_config())
    with pytest.raises(FailureGroup) as failed:
        schema[path]["GET"].Case().call_and_validate(checks=CHECKS, app=app)
    assert failure in {type(e).__name__ for e in failed.value.exceptions}


# ------------------------------------------------------------------ found by fuzzing


@pytest.mark.slow
def test_service_restarts_on_the_same_app(models_settings: Settings, tmp_path: Path) -> None:
    """A second lifespan on one app (test clients, schemathesis) used to answer 500.

    Shutdown dropped the face decision metrics, and their next use registered them again in
    the app's registry: DuplicateTimeseries. The counter now carries on across restarts.
    """
    app = create_service_app("face", _settings(models_settings, tmp_path))
    ok, jpeg = cv2.imencode(".jpg", np.full((300, 300, 3), 128, np.uint8))
    assert ok
    counts = []
    for _ in range(2):
        with TestClient(app, raise_server_exceptions=False) as client:
            r = client.post("/check_liveness", files={"image": ("grey.jpg", jpeg.tobytes(), "image/jpeg")})
            assert r.status_code == 200, r.text
            assert r.json()["error_code"] == "FACE_NOT_FOUND"
            metrics = client.get("/metrics").text
        line = next(ln for ln in metrics.splitlines() if ln.startswith("verilive_face_decisions_total{"))
        counts.append(float(line.rsplit(" ", 1)[1]))
    assert counts == [1.0, 2.0]


@pytest.mark.slow
def test_unexpected_error_keeps_the_request_id(models_settings: Settings, tmp_path: Path) -> None:
    """A 500 used to say 'quote request id None': its handler runs after the id was reset."""
    app = create_service_app("face", _settings(models_settings, tmp_path))

    @app.get("/fail")
    def fail() -> None:
        raise RuntimeError("planted failure")

    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/fail", headers={"X-Request-ID": "fuzz-500"})
    assert r.status_code == 500
    body = r.json()
    assert body["error_code"] == "INTERNAL_ERROR"
    assert body["request_id"] == "fuzz-500"
    assert "fuzz-500" in body["message"]
    assert r.headers["x-request-id"] == "fuzz-500"
    assert "planted failure" not in r.text

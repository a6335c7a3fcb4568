"""Post-processing of the generated OpenAPI documents.

FastAPI documents a 422 validation response that verilive never sends (bad input is a 400
with the shared error body), so it is replaced by the statuses that are really answered.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from verilive.server.errors import ErrorBody
from verilive.server.uploads import JSON_BODY_MODELS

_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
_NO_INPUT = {"/health", "/metrics", "/api_version"}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def install_openapi(app: FastAPI) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        schemas["ErrorBody"] = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for path, ops in doc.get("paths", {}).items():
            for op in ops.values():
                body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
                name = body.get("schema", {}).get("$ref", "").rpartition("/")[2]
                if name in JSON_BODY_MODELS and name not in schemas:  # a body read by json_model
                    ref = "#/components/schemas/{model}"
                    schemas[name] = JSON_BODY_MODELS[name].model_json_schema(ref_template=ref)
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                if path in _NO_INPUT:
                    continue
                responses.setdefault("400", _error("Bad request: invalid parameter, body, file or data"))
                if "requestBody" in op:
                    responses.setdefault("413", _error("Request body or decoded media over the limit"))
                    responses.setdefault("415", _error("Wrong content type for this endpoint"))
        app.openapi_schema = doc
        return doc

    app.openapi = build  # type: ignore[method-assign]

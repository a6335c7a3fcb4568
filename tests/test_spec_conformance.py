"""Checks the OpenAPI documents of the three services against the spec table (tests/spec_table.py).

One test id per endpoint of the specs. Each test collects every difference it finds for its
endpoint and reports them together, each line naming the place in the OpenAPI document.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.spec_table import (
    ALLOWED_EXTRA_PATHS,
    ENDPOINTS,
    EXTENSION_FIELDS,
    RESOURCES,
    SERVICES,
    AnyOf,
    Body,
    Endpoint,
    J,
    Media,
    Param,
    Ref,
)
from verilive.config import Settings
from verilive.server.app import create_service_app

OCTET = "application/octet-stream"
MULTIPART = "multipart/form-data"
JSON = "application/json"
COMPONENT_PREFIX = "#/components/schemas/"


# ----------------------------------------------------------------------------------------------
# Building the documents
# ----------------------------------------------------------------------------------------------


@functools.cache
def openapi_doc(service: str) -> dict[str, Any]:
    app = create_service_app(service, Settings(require_models=False))
    return app.openapi()


# ----------------------------------------------------------------------------------------------
# Schema helpers
# ----------------------------------------------------------------------------------------------


def deref(doc: dict[str, Any], schema: dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """Follow $ref (and single-entry allOf, and anyOf/oneOf [X, null]) to the schema itself.

    Keywords written next to the $ref / allOf / anyOf (e.g. ``format`` beside ``anyOf``, which
    FastAPI emits for Optional parameters) still apply to the value, so they are merged in;
    the inner schema wins on conflicts. Returns the schema and the name of the first component
    it was reached through, if any.
    """
    name = None
    schema = dict(schema or {})
    for _ in range(20):
        if "$ref" in schema:
            ref = schema.pop("$ref")
            assert ref.startswith(COMPONENT_PREFIX), f"unexpected $ref {ref}"
            comp = ref[len(COMPONENT_PREFIX) :]
            name = name or comp
            schema = {**schema, **doc.get("components", {}).get("schemas", {}).get(comp, {})}
            continue
        if "allOf" in schema and len(schema["allOf"]) == 1:
            inner = schema.pop("allOf")[0]
            schema = {**schema, **inner}
            continue
        for key in ("anyOf", "oneOf"):
            alts = schema.get(key)
            if alts:
                non_null = [a for a in alts if a.get("type") != "null"]
                if len(non_null) == 1 and len(non_null) < len(alts):
                    del schema[key]
                    schema = {**schema, **non_null[0]}
                    break
        else:
            return schema, name
    return schema, name


def schema_types(schema: dict[str, Any]) -> set[str]:
    t = schema.get("type")
    if t is None:
        return set()
    return {t} if isinstance(t, str) else set(t)


def describe(schema: dict[str, Any]) -> str:
    keys = ("type", "format", "enum", "$ref", "anyOf", "oneOf", "allOf", "contentMediaType")
    return str({k: schema[k] for k in keys if k in schema} or schema)


def check_schema(
    doc: dict[str, Any], actual: dict[str, Any] | None, expected: Any, where: str, problems: list[str]
) -> None:
    """Compare one OpenAPI schema with one table entry (J, Ref or AnyOf); append differences."""
    if expected is None:
        return
    if isinstance(expected, AnyOf):
        outer, _ = deref(doc, actual)
        alts = outer.get("anyOf") or outer.get("oneOf")
        if not alts:
            # The document declares a single shape: name every spec shape it does not cover.
            results = []
            for alt in expected.alternatives:
                sub: list[str] = []
                check_schema(doc, actual, alt, where, sub)
                results.append((alt, sub))
            missing = [(alt, sub) for alt, sub in results if sub]
            if len(missing) == len(results):
                for _, sub in missing:
                    problems.extend(sub)
            elif missing:
                problems.append(
                    f"{where}: the spec allows the shapes {[_label(a) for a in expected.alternatives]}; "
                    f"the document declares only one ({describe(actual or {})}), which does not cover "
                    f"{[_label(a) for a, _ in missing]}"
                )
            return
        for alt in expected.alternatives:
            options = []
            for a in alts:
                sub = []
                check_schema(doc, a, alt, where, sub)
                options.append(sub)
            if all(options):
                problems.append(
                    f"{where}: no anyOf/oneOf alternative matches {_label(alt)}: "
                    + " | ".join("; ".join(o) for o in options)
                )
        return

    if actual is None:
        problems.append(f"{where}: no schema declared (expected {_label(expected)})")
        return
    resolved, comp = deref(doc, actual)

    if isinstance(expected, Ref):
        res = RESOURCES[expected.name]
        if res.named and comp != expected.name:
            problems.append(
                f"{where}: expected $ref {COMPONENT_PREFIX}{expected.name}, found "
                f"{COMPONENT_PREFIX + comp if comp else 'an inline schema ' + describe(actual)}"
            )
        props = resolved.get("properties")
        if props is None:
            problems.append(
                f"{where}: expected an object with fields {sorted(res.fields)}, found {describe(resolved)}"
            )
            return
        missing = [f for f in res.fields if f not in props]
        extra = [f for f in props if f not in res.fields and f not in EXTENSION_FIELDS.get(expected.name, ())]
        if missing:
            problems.append(
                f"{where}: missing field(s) {missing} (spec {expected.name}); document has {sorted(props)}"
            )
        if extra:
            problems.append(
                f"{where}: field(s) not in the spec {extra} (spec {expected.name} has {sorted(res.fields)})"
            )
        if res.required is not None:
            req = set(resolved.get("required", []))
            if req != set(res.required):
                problems.append(
                    f"{where}: required fields {sorted(req)}, spec says {sorted(res.required)} are required"
                )
        for fname, ftype in res.fields.items():
            if fname in props:
                check_schema(doc, props[fname], ftype, f"{where}.{fname}", problems)
        return

    assert isinstance(expected, J), expected
    if expected.type is None:
        return
    types = schema_types(resolved)
    if expected.type not in types:
        problems.append(f"{where}: expected type {expected.type!r}, found {describe(resolved)}")
        return
    if expected.format and resolved.get("format") != expected.format:
        problems.append(f"{where}: expected format {expected.format!r}, found {resolved.get('format')!r}")
    if expected.enum is not None:
        enum = resolved.get("enum")
        if enum is None:
            if not expected.enum_optional:
                problems.append(f"{where}: expected enum {list(expected.enum)}, the document declares none")
        elif set(enum) != set(expected.enum):
            problems.append(f"{where}: enum {enum} differs from the spec's {list(expected.enum)}")
    if expected.items is not None:
        check_schema(doc, resolved.get("items"), expected.items, f"{where}[]", problems)
    if expected.values is not None:
        ap = resolved.get("additionalProperties")
        if not isinstance(ap, dict):
            problems.append(
                f"{where}: expected a map (additionalProperties schema), found additionalProperties={ap!r}"
            )
        else:
            check_schema(doc, ap, expected.values, f"{where}{{*}}", problems)


def _label(expected: Any) -> str:
    if isinstance(expected, Ref):
        return expected.name
    if isinstance(expected, J):
        inner = f"<{_label(expected.items)}>" if expected.items is not None else ""
        return f"{expected.type}{inner}"
    return repr(expected)


def is_binary(schema: dict[str, Any]) -> bool:
    return "string" in schema_types(schema) and (
        schema.get("format") == "binary" or "contentMediaType" in schema
    )


# ----------------------------------------------------------------------------------------------
# Per-part checks of one operation
# ----------------------------------------------------------------------------------------------


def check_params(doc: dict[str, Any], op: dict[str, Any], ep: Endpoint, problems: list[str]) -> None:
    declared = [p for p in op.get("parameters", []) if p.get("in") in ("query", "header")]

    def key(p: dict[str, Any] | Param) -> tuple[str, str]:
        loc = p["in"] if isinstance(p, dict) else p.location
        name = p["name"] if isinstance(p, dict) else p.name
        # Header names are case-insensitive in HTTP.
        return (loc, name.lower() if loc == "header" else name)

    by_key = {key(p): p for p in declared}
    by_name = {p["name"]: p for p in op.get("parameters", [])}
    for sp in ep.params:
        where = f"{sp.location} parameter {sp.name!r}"
        dp = by_key.get(key(sp))
        if dp is None:
            other = by_name.get(sp.name)
            hint = f" (declared with in: {other.get('in')!r})" if other else ""
            problems.append(
                f"{where}: missing{hint}; declared: "
                f"{sorted((p['in'], p['name']) for p in op.get('parameters', []))}"
            )
            continue
        if sp.required is not None and bool(dp.get("required", False)) != sp.required:
            problems.append(
                f"{where}: required={bool(dp.get('required', False))}, spec says "
                f"{'required' if sp.required else 'optional'}"
            )
        check_schema(doc, dp.get("schema"), sp.schema, where, problems)
        if sp.explode is not None:
            # OpenAPI: query parameters default to style form, explode true (?types=a&types=b).
            explode = dp.get("explode", dp.get("style", "form") == "form")
            if explode != sp.explode:
                problems.append(
                    f"{where}: explode={explode} (style {dp.get('style', 'form')!r}); the spec wants "
                    + ("one comma-separated value (explode: false)" if not sp.explode else "explode: true")
                )
        if sp.default is not None:
            resolved, _ = deref(doc, dp.get("schema"))
            default = (dp.get("schema") or {}).get("default", resolved.get("default"))
            if default != sp.default:
                problems.append(f"{where}: default {default!r}, spec says {sp.default!r}")
    spec_keys = {key(sp) for sp in ep.params}
    extra = [(p["in"], p["name"]) for p in declared if key(p) not in spec_keys]
    if extra:
        problems.append(f"parameter(s) not in the spec: {extra}")


def check_body(doc: dict[str, Any], op: dict[str, Any], body: Body | None, problems: list[str]) -> None:
    rb = op.get("requestBody")
    if body is None:
        if rb is not None:
            problems.append(f"requestBody declared ({sorted(rb.get('content', {}))}) but the spec has none")
        return
    if rb is None:
        problems.append(f"no requestBody; the spec has a {body.kind} body")
        return
    if "$ref" in rb:
        name = rb["$ref"].rsplit("/", 1)[-1]
        rb = doc.get("components", {}).get("requestBodies", {}).get(name, {})
    content = rb.get("content", {})
    media = {"octet-stream": OCTET, "multipart": MULTIPART, "json": JSON}[body.kind]
    if media not in content:
        problems.append(f"requestBody: expected media type {media}, declared {sorted(content)}")
        return
    schema = content[media].get("schema")
    required = bool(rb.get("required", False))

    if body.kind == "octet-stream":
        # Convention of the implementation (and "(required)" on the voice samples rows).
        if not required:
            problems.append("requestBody: application/octet-stream body must be required: true")
        if schema is not None:
            resolved, _ = deref(doc, schema)
            if resolved and not is_binary(resolved):
                problems.append(
                    f"requestBody: octet-stream schema should be string/binary, found {describe(resolved)}"
                )
        return

    if body.required and not required:
        problems.append("requestBody: the spec says the body is required, document has required: false")

    if body.kind == "multipart":
        if body.parts is None:  # part names not shown
            return
        resolved, _ = deref(doc, schema)
        props = resolved.get("properties", {})
        req = set(resolved.get("required", []))
        for part in body.parts:
            where = f"multipart part {part.name!r}"
            if part.name not in props:
                problems.append(f"{where}: missing; form fields are {sorted(props)}")
                continue
            if part.required and part.name not in req:
                problems.append(f"{where}: spec says required, form schema required={sorted(req)}")
            pschema, _ = deref(doc, props[part.name])
            if part.binary and not is_binary(pschema):
                problems.append(
                    f"{where}: expected a file (string, format binary / contentMediaType), "
                    f"found {describe(pschema)}"
                )
            if part.schema is not None and pschema.get("properties"):
                check_schema(doc, props[part.name], part.schema, where, problems)
        return

    check_schema(doc, schema, body.schema, "requestBody", problems)


def check_response(doc: dict[str, Any], op: dict[str, Any], expected: Any, problems: list[str]) -> None:
    responses = op.get("responses", {})
    ok = responses.get("200")
    if ok is None:
        problems.append(f"no 200 response declared (declared: {sorted(responses)})")
        return
    if expected is None:  # body not shown
        return
    content = ok.get("content", {})
    if isinstance(expected, Media):
        if not any(m.split(";")[0].strip() == expected.media_type for m in content):
            problems.append(
                f"200 response: expected media type {expected.media_type}, declared {sorted(content)}"
            )
        return
    if JSON not in content:
        problems.append(f"200 response: expected {JSON}, declared {sorted(content)}")
        return
    check_schema(doc, content[JSON].get("schema"), expected, "200 response", problems)


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


def _id(ep: Endpoint) -> str:
    return f"{ep.service} {ep.method} {ep.path}"


def _operation(ep: Endpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = openapi_doc(ep.service)
    paths = doc.get("paths", {})
    assert ep.path in paths, f"{_id(ep)}: path {ep.path} is not in the {ep.service} OpenAPI document"
    op = paths[ep.path].get(ep.method.lower())
    assert op is not None, (
        f"{_id(ep)}: {ep.path} has no {ep.method} operation (declared: {sorted(paths[ep.path])})"
    )
    return doc, op


@pytest.mark.parametrize("ep", ENDPOINTS, ids=_id)
def test_endpoint_matches_spec(ep: Endpoint) -> None:
    doc, op = _operation(ep)
    problems: list[str] = []
    check_params(doc, op, ep, problems)
    check_body(doc, op, ep.body, problems)
    check_response(doc, op, ep.response, problems)
    assert not problems, (
        f"{_id(ep)} differs from the spec{f' ({ep.source})' if ep.source else ''}:\n  "
        + "\n  ".join(problems)
    )


ENDPOINTS_WITH_ERRORS = [ep for ep in ENDPOINTS if ep.errors]


@pytest.mark.parametrize("ep", ENDPOINTS_WITH_ERRORS, ids=_id)
def test_error_statuses_documented(ep: Endpoint) -> None:
    """Non-200 statuses the spec gives (400 bodies, 503 of /health) are declared in the document."""
    doc, op = _operation(ep)
    responses = op.get("responses", {})
    problems: list[str] = []
    for status, body in ep.errors.items():
        resp = responses.get(str(status))
        if resp is None:
            problems.append(f"status {status} is not declared (declared: {sorted(responses)})")
            continue
        if body is not None:
            content = resp.get("content", {})
            if JSON not in content:
                problems.append(f"status {status}: expected {JSON}, declared {sorted(content)}")
            else:
                check_schema(doc, content[JSON].get("schema"), body, f"{status} response", problems)
    assert not problems, f"{_id(ep)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("service", SERVICES)
def test_no_operation_outside_the_spec(service: str) -> None:
    doc = openapi_doc(service)
    spec = {(ep.path, ep.method.lower()) for ep in ENDPOINTS if ep.service == service}
    methods = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    extra = [
        f"{m.upper()} {path}"
        for path, item in doc.get("paths", {}).items()
        if path not in ALLOWED_EXTRA_PATHS
        for m in item
        if m in methods and (path, m) not in spec
    ]
    assert not extra, f"{service}: operations in the OpenAPI document that the spec does not have: {extra}"


def test_table_is_consistent() -> None:
    """Self-check of tests/spec_table.py: references resolve, rows are unique, resources used."""
    ids = [_id(ep) for ep in ENDPOINTS]
    assert len(ids) == len(set(ids)), "duplicate rows in the spec table"
    used: set[str] = set()

    def walk(t: Any) -> None:
        if isinstance(t, Ref):
            assert t.name in RESOURCES, f"unknown resource {t.name}"
            if t.name not in used:
                used.add(t.name)
                for f in RESOURCES[t.name].fields.values():
                    walk(f)
        elif isinstance(t, J):
            walk(t.items)
            walk(t.values)
        elif isinstance(t, AnyOf):
            for a in t.alternatives:
                walk(a)

    for ep in ENDPOINTS:
        assert ep.service in SERVICES
        walk(ep.response)
        if ep.body is not None:
            walk(ep.body.schema)
            for part in ep.body.parts or ():
                walk(part.schema)
        for p in ep.params:
            walk(p.schema)
        for e in ep.errors.values():
            walk(e)
    unused = set(RESOURCES) - used
    assert not unused, f"resources never referenced by an endpoint: {sorted(unused)}"

"""Reading request bodies: raw PCM16/bundle bodies, multipart file parts and large JSON bodies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request, UploadFile
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from verilive.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType, VeriliveError

OCTET_STREAM_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}

M = TypeVar("M", bound=BaseModel)

_NOT_RAW = ("multipart/", "application/json", "application/x-www-form-urlencoded", "text/")


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_raw_body(
    request: Request,
    what: str = "request body",
    max_bytes: int | None = None,
    *,
    empty: Callable[[], VeriliveError] | None = None,
) -> bytes:
    """A raw binary body. Content types that clearly mean something else are refused. With
    ``max_bytes``, a larger body is a 413 from its Content-Length, or as soon as the stream passes the
    limit: never read whole first (the service-wide limit is far larger). An empty body raises
    ``empty()`` when given (a service's own error for it), else EMPTY_BODY."""
    mt = media_type(request)
    if mt and any(mt.startswith(p) for p in _NOT_RAW):
        raise UnsupportedMediaType(
            f"Expected the {what} as application/octet-stream, got content type '{mt}'"
        )
    if max_bytes is None:
        body = await request.body()
    else:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise _too_large(what, max_bytes, int(declared))
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(what, max_bytes, size)
            chunks.append(chunk)
        body = b"".join(chunks)
    if not body:
        raise empty() if empty is not None else InvalidInput(f"The {what} is empty", code="EMPTY_BODY")
    return body


def _too_large(what: str, max_bytes: int, size: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The {what} is at most {max_bytes // 1024} KiB; this one is {size} bytes or more")


async def require_multipart(request: Request) -> None:
    """Dependency for file endpoints: a clear 415 instead of a confusing 'missing part'."""
    mt = media_type(request)
    if mt != "multipart/form-data":
        raise UnsupportedMediaType(f"Expected multipart/form-data, got content type '{mt or 'none'}'")


async def read_part(upload: UploadFile, part: str) -> bytes:
    data = await upload.read()
    if not data:
        raise InvalidInput(f"The file part '{part}' is empty", code="EMPTY_PART")
    return data


#: models of JSON bodies read by :func:`json_model`, by name: server/openapi.py adds the schemas of
#: those a service's routes refer to, as FastAPI does for body parameters.
JSON_BODY_MODELS: dict[str, type[BaseModel]] = {}


def json_body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route that reads its JSON body with :func:`json_model`: the request
    body FastAPI would document for a ``model`` parameter."""
    JSON_BODY_MODELS[model.__name__] = model
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def read_body(request: Request) -> bytes | bytearray:
    """The whole body, read into one buffer sized by its Content-Length where it has one.

    Starlette's ``request.body()`` keeps every chunk and joins them: two copies of the body at once,
    and on this kind of machine each fresh 50 MB costs ~30 ms of page faults (issue 49). The
    service-wide size limit still applies: the middleware ends the stream past it (a 413)."""
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else -1
    if size <= 0:
        return b"".join([chunk async for chunk in request.stream()])
    buf = bytearray(size)
    view, at = memoryview(buf), 0
    async for chunk in request.stream():
        end = at + len(chunk)
        if end > size:  # more than declared (the server would normally refuse it first)
            return bytes(buf[:at]) + chunk + b"".join([c async for c in request.stream()])
        view[at:end] = chunk
        at = end
    view.release()
    if at < size:  # the client sent less than it declared and went away
        del buf[at:]
    return buf


#: strings at least this long in a JSON body may be decoded as base64 straight from the body
LARGE_STRING = 1 << 20
# in the JSON text an escaped NUL, which no base64 or template string holds: "\\u0000verilive-..."
_PLACEHOLDER = "\0verilive-large-string-{}"


async def json_model(request: Request, model: type[M], base64_fields: tuple[str, ...] = ()) -> M:
    """The JSON body as ``model``, parsed by pydantic's own JSON reader straight into the model.

    For bodies of tens of MB (identification lists: 52 MB of base64 for 100,000 version-2 rows) the
    standard library's ``json.loads`` that FastAPI uses took ~180 ms and pydantic's ~60 ms.
    ``base64_fields``: top-level string fields that hold base64 and may be large. A string of at
    least LARGE_STRING characters in such a field is decoded from the body bytes directly and
    arrives as :class:`~verilive.base64text.DecodedBase64` (no 52 MB Python string; see
    :func:`_large_base64`); anything unusual about the body takes the ordinary path, so errors
    are the same either way.
    Errors are FastAPI's: the same :class:`RequestValidationError` shapes (``loc`` from ``body``),
    the same rules for a missing body and for a content type that is not JSON."""
    body = await read_body(request)
    if not body:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    mt = media_type(request)
    try:
        if not (mt == "application/json" or (mt.startswith("application/") and mt.endswith("+json"))):
            # FastAPI (strict content type) validates such a body, or one without a content type,
            # as bytes: an error
            return model.model_validate(bytes(body))
        if base64_fields and len(body) >= LARGE_STRING:
            fast = _large_base64(body, model, base64_fields)
            if fast is not None:
                return fast
        return model.model_validate_json(body)
    except ValidationError as e:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        raise RequestValidationError(errors) from None


# base64 text is decoded per piece of this many characters (a multiple of 4)
_PIECE = 1 << 22


def _decode_in_place(view: memoryview, start: int, end: int) -> memoryview | None:
    """The bytes of the base64 text ``view[start:end]``, written piece by piece over the text
    itself (each piece's bytes land behind the text still to read), or None when the text is not
    base64 as ``pybase64.b64decode(..., validate=True)`` reads it (padding may only end it); the
    text is then as it was: the pieces already decoded are encoded back.

    A 52 MB list decoded into a new buffer cost ~30 ms of page faults for its 39 MB; decoded here it
    costs about 13 ms and no memory (issue 49)."""
    import pybase64

    if (end - start) % 4:
        return None
    out = start
    for at in range(start, end, _PIECE):
        stop = min(end, at + _PIECE)
        try:
            piece = pybase64.b64decode(view[at:stop], validate=True)
        except ValueError:  # binascii.Error too
            piece = None
        if piece is None or (stop < end and len(piece) != (stop - at) // 4 * 3):
            # Whole 4-character groups without padding encode back to exactly their text.
            view[start:at] = pybase64.b64encode(view[start:out])
            return None
        view[out : out + len(piece)] = piece
        out += len(piece)
    return view[start:out]


def _large_base64(body: bytes | bytearray, model: type[M], fields: tuple[str, ...]) -> M | None:
    """``model`` from ``body`` with its long strings in ``fields`` decoded from the body bytes, or
    None when the ordinary parse must decide (``body`` is then as it came, nothing reported).

    Every string literal is found by its quotes. A short string with a backslash (an escape) gives
    up; a long one must be base64, whose alphabet has no backslash, so a quote found is always a
    string's end. The rest of the body, with short placeholders for the long strings, is validated
    by pydantic as usual, and the placeholders must come back, each once, in ``fields``. Then the
    long strings are decoded, over their own text when ``body`` is a buffer; one that is not base64
    (which also covers control characters and non-ASCII bytes the JSON reader would refuse) undoes
    the decoding done so far and gives up."""
    from verilive.base64text import DecodedBase64

    data = memoryview(body)
    long: list[tuple[int, int]] = []
    pos = 0
    while (start := body.find(b'"', pos)) != -1:
        end = body.find(b'"', start + 1)
        if end == -1:
            return None
        if end - start - 1 >= LARGE_STRING:
            long.append((start + 1, end))
        elif body.find(b"\\", start + 1, end) != -1:
            return None
        pos = end + 1
    if not long:
        return None
    pieces: list[bytes | memoryview] = []
    copied = 0
    for i, (start, end) in enumerate(long):
        pieces += [data[copied:start], _PLACEHOLDER.format(i).replace("\0", "\\u0000").encode()]
        copied = end
    pieces.append(data[copied:])
    try:
        parsed = model.model_validate_json(b"".join(pieces))
    except ValidationError:
        return None  # reported by the ordinary parse, with the body's own values
    marks = {_PLACEHOLDER.format(i): i for i in range(len(long))}
    found = {
        marks[v]: name for name in fields if isinstance(v := getattr(parsed, name, None), str) and v in marks
    }
    if len(found) != len(long):  # a long string elsewhere, or one twice: not this path's job
        return None
    update: dict[str, DecodedBase64] = {}
    done: list[tuple[int, int, memoryview]] = []
    for i, name in found.items():
        start, end = long[i]
        if isinstance(body, bytearray):
            raw: bytes | memoryview | None = _decode_in_place(data, start, end)
        else:
            raw = _decode_copy(data[start:end])
        if raw is None:
            import pybase64

            for s0, e0, decoded in done:  # leave the body as it came for the ordinary parse
                data[s0:e0] = pybase64.b64encode(decoded)
            return None
        if isinstance(raw, memoryview):
            done.append((start, end, raw))
        update[name] = DecodedBase64(raw, end - start)
    return parsed.model_copy(update=update)


def _decode_copy(text: memoryview) -> bytes | None:
    import pybase64

    try:
        return pybase64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error too
        return None

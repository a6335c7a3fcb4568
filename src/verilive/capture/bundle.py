"""The capture bundle: byte layout, hybrid encryption and key ring (docs/bundle-format.md).

ECDH P-256 with an ephemeral client key, HKDF-SHA256, then AES-256-GCM with the whole header as
associated data. Every primitive exists in WebCrypto, so the browser SDK builds the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import os
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

FORMAT_VERSION = 1
MAGIC = b"VLCB"
HKDF_INFO = b"verilive-capture-bundle/1"
POINT_LEN = 65  # uncompressed P-256 point, WebCrypto exportKey("raw")
IV_LEN = 12
TAG_LEN = 16
PARTS = ("image", "photo", "external")
# The optional fifth part: a burst of small JPEG frames for the 3D check from motion
# (docs/bundle-format.md, "Burst"). At most BURST_MAX_FRAMES frames of at most BURST_MAX_FRAME_BYTES.
BURST = "burst"
BURST_MAX_FRAMES = 32
BURST_MAX_FRAME_BYTES = 1 << 20
# Frames are decoded only up to this many pixels (the libraries send 640 px on the longer side; this
# is twice that on each side): a 20 MB bundle of 40 Mpx frames must not cost seconds and gigabytes.
BURST_MAX_FRAME_PIXELS = 1280 * 1280

ErrorKind = Literal["parse", "decrypt", "meta"]

# The spec's messages for the three kinds (capture-liveness.md, Errors).
MESSAGES: dict[str, str] = {
    "parse": "Failed to parse file",
    "decrypt": "Failed to decrypt message",
    "meta": "Failed to read a meta data",
}

_NONCE_RE = re.compile(r"[A-Za-z0-9_-]{16,128}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_KEY_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_U32 = struct.Struct(">I")


class BundleError(Exception):
    """A bundle that cannot be used; ``kind`` selects the spec's error message."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(f"{MESSAGES[kind]}: {detail}")
        self.kind: str = kind
        self.message: str = MESSAGES[kind]
        self.detail: str = detail


@dataclass(frozen=True)
class Bundle:
    key_id: str
    version: int
    image: bytes
    photo: bytes
    external_data: str
    meta: dict[str, Any]
    context: dict[str, Any]
    environment: dict[str, Any]
    sdk: dict[str, Any]
    nonce: str
    timestamp_ms: int
    # Inner digest/size mismatches; GCM cannot catch a bundle built whole by a public-key holder.
    integrity_problems: tuple[str, ...]
    # The burst's frames (JPEG bytes) and their times in ms from the first; empty without a burst or
    # when the burst part's digest or size does not match (its frames are then not trusted).
    burst: tuple[bytes, ...] = ()
    burst_t_ms: tuple[int, ...] = ()
    has_burst: bool = False


@dataclass(frozen=True)
class Header:
    version: int
    key_id: str
    ephemeral_point: bytes
    iv: bytes
    length: int  # header bytes = AES-GCM associated data


# --- keys -----------------------------------------------------------------------------------------


def key_id_of(public_der: bytes) -> str:
    """Derived key id: first 16 hex characters of SHA-256 of the SPKI DER."""
    return hashlib.sha256(public_der).hexdigest()[:16]


def _spki_der(public_key: ec.EllipticCurvePublicKey) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _load_private(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("capture keys must be P-256 (secp256r1) EC private keys")
    return key


def public_key_b64(private_pem: bytes) -> str:
    """The public key in the clients' form: standard base64 of the DER SubjectPublicKeyInfo."""
    return base64.b64encode(_spki_der(_load_private(private_pem).public_key())).decode("ascii")


def load_public_key_b64(public_key_b64: str) -> tuple[ec.EllipticCurvePublicKey, bytes]:
    """Parse a client-form public key; returns the key and its DER. Raises ValueError."""
    text = "".join(public_key_b64.split())
    text = text.replace("-", "+").replace("_", "/")  # tolerate base64url
    try:
        der = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError("public key is not base64") from exc
    key = serialization.load_der_public_key(der)
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("public key is not a P-256 EC key")
    return key, der


def key_id_of_pem(private_pem: bytes) -> str:
    """The derived key id of a private key PEM."""
    return key_id_of(_spki_der(_load_private(private_pem).public_key()))


def generate_key() -> tuple[str, bytes, str]:
    """A new server key pair: (derived key id, private PKCS#8 PEM, public base64 DER)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    der = _spki_der(key.public_key())
    return key_id_of(der), pem, base64.b64encode(der).decode("ascii")


def _derive_key(shared: bytes, ephemeral_point: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral_point, info=HKDF_INFO).derive(shared)


# --- encoding (client side) ---------------------------------------------------------------------


def part_digests(
    image: bytes, photo: bytes, external_data: str, burst: bytes | None = None
) -> tuple[dict[str, str], dict[str, int]]:
    """SHA-256 hex and byte length of each part, as the meta's `digests` and `sizes` hold them."""
    parts = dict(zip(PARTS, (image, photo, external_data.encode("utf-8")), strict=True))
    if burst is not None:
        parts[BURST] = burst
    return (
        {k: hashlib.sha256(v).hexdigest() for k, v in parts.items()},
        {k: len(v) for k, v in parts.items()},
    )


def dump_meta(meta: Mapping[str, Any]) -> bytes:
    """Canonical meta JSON of the Python client (compact, sorted keys), so vectors reproduce."""
    text = json.dumps(meta, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def encode_burst(frames: Iterable[bytes]) -> bytes:
    """The burst part: each frame's JPEG bytes, u32-length-prefixed, in time order."""
    return b"".join(_U32.pack(len(f)) + bytes(f) for f in frames)


def decode_burst(part: bytes | memoryview) -> list[bytes]:
    """The frames of a burst part; raises BundleError("meta") when its framing is broken."""
    view = memoryview(part)
    frames: list[bytes] = []
    pos = 0
    while pos < len(view):
        if pos + 4 > len(view) or len(frames) == BURST_MAX_FRAMES:
            raise BundleError("meta", "burst framing truncated or too many frames")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if size == 0 or size > BURST_MAX_FRAME_BYTES or pos + size > len(view):
            raise BundleError("meta", "burst frame empty, too large or longer than the part")
        frames.append(bytes(view[pos : pos + size]))
        pos += size
    return frames


def encode_payload(
    meta: Mapping[str, Any] | bytes,
    image: bytes,
    photo: bytes,
    external_data: str,
    burst: bytes | None = None,
) -> bytes:
    """The plaintext: four u32-length-prefixed parts (meta JSON, image, photo, external), and the
    burst part as a fifth when there is one."""
    meta_bytes = meta if isinstance(meta, bytes) else dump_meta(meta)
    chunks: list[bytes] = []
    parts = [meta_bytes, image, photo, external_data.encode("utf-8")]
    if burst is not None:
        parts.append(burst)
    for part in parts:
        chunks += (_U32.pack(len(part)), part)
    return b"".join(chunks)


def encode_header(key_id: str, ephemeral_point: bytes, iv: bytes, version: int = FORMAT_VERSION) -> bytes:
    kid = key_id.encode("utf-8")
    if not 1 <= len(kid) <= 255:
        raise ValueError("key id must be 1..255 bytes of UTF-8")
    if len(ephemeral_point) != POINT_LEN or len(iv) != IV_LEN:
        raise ValueError("ephemeral point must be 65 bytes and the IV 12 bytes")
    return MAGIC + bytes((version, len(kid))) + kid + ephemeral_point + iv


def seal(
    payload: bytes,
    public_key_b64: str,
    key_id: str,
    *,
    ephemeral_key: ec.EllipticCurvePrivateKey | None = None,
    iv: bytes | None = None,
) -> bytes:
    """Encrypt a payload to the server key. ``ephemeral_key`` and ``iv`` are fixed only by test vectors."""
    server_key, _ = load_public_key_b64(public_key_b64)
    eph = ephemeral_key if ephemeral_key is not None else ec.generate_private_key(ec.SECP256R1())
    point = eph.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    iv = iv if iv is not None else os.urandom(IV_LEN)
    header = encode_header(key_id, point, iv)
    aes = AESGCM(_derive_key(eph.exchange(ec.ECDH(), server_key), point))
    return header + aes.encrypt(iv, payload, header)


# --- decoding (server side) ---------------------------------------------------------------------


def parse_header(blob: bytes | memoryview) -> Header:
    """Read and check the header; raises BundleError("parse")."""
    n = len(blob)
    if n < 6:
        raise BundleError("parse", "too short for a header" if n else "empty body")
    if bytes(blob[:4]) != MAGIC:
        raise BundleError("parse", "not a capture bundle (magic)")
    version, klen = blob[4], blob[5]
    if version != FORMAT_VERSION:
        raise BundleError("parse", f"unsupported format version {version}")
    if klen == 0:
        raise BundleError("parse", "empty key id")
    end = 6 + klen + POINT_LEN + IV_LEN
    if n < end + TAG_LEN:
        raise BundleError("parse", "truncated")
    try:
        key_id = bytes(blob[6 : 6 + klen]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError("parse", "key id is not UTF-8") from exc
    point = bytes(blob[6 + klen : 6 + klen + POINT_LEN])
    iv = bytes(blob[end - IV_LEN : end])
    return Header(version, key_id, point, iv, end)


class KeyRing:
    """The server's private keys by key id; several at once so keys can rotate."""

    def __init__(self, keys: Mapping[str, ec.EllipticCurvePrivateKey]) -> None:
        self._keys = dict(keys)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    @classmethod
    def from_pem(cls, pems: Mapping[str, bytes]) -> KeyRing:
        """Key id -> PEM bytes."""
        return cls({kid: _load_private(pem) for kid, pem in pems.items()})

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> KeyRing:
        """Entries ``"<path>"`` (derived key id) or ``"<key id>=<path>"``."""
        keys: dict[str, ec.EllipticCurvePrivateKey] = {}
        for entry in entries:
            kid, sep, path = entry.partition("=")
            if not sep or not _KEY_ID_RE.fullmatch(kid):
                kid, path = "", entry  # a path that happens to hold '='
            try:
                key = _load_private(Path(path).expanduser().read_bytes())
            except (OSError, ValueError, TypeError) as exc:
                raise ValueError(f"capture private key {path!r}: {exc}") from exc
            kid = kid or key_id_of(_spki_der(key.public_key()))
            if kid in keys:
                raise ValueError(f"capture key id {kid!r} is configured twice")
            keys[kid] = key
        return cls(keys)

    @classmethod
    def from_settings(cls, settings: Any) -> KeyRing:
        return cls.from_entries(settings.capture_private_keys)

    def decrypt(self, blob: bytes | bytearray | memoryview) -> Bundle:
        """Decrypt and parse a bundle; raises BundleError and nothing else for bad input."""
        view = memoryview(blob)
        header = parse_header(view)
        try:
            point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), header.ephemeral_point)
        except ValueError as exc:
            raise BundleError("parse", "ephemeral key is not a P-256 point") from exc
        key = self._keys.get(header.key_id)
        if key is None:
            raise BundleError("decrypt", f"unknown key id {header.key_id!r}")
        try:
            aes = AESGCM(_derive_key(key.exchange(ec.ECDH(), point), header.ephemeral_point))
            plain = aes.decrypt(header.iv, view[header.length :], view[: header.length])
        except (InvalidTag, ValueError) as exc:
            raise BundleError("decrypt", "authentication failed") from exc
        return _parse_payload(plain, header)


def _split_parts(plain: bytes) -> list[memoryview]:
    view = memoryview(plain)
    parts: list[memoryview] = []
    pos = 0
    while len(parts) < 4 or (len(parts) == 4 and pos < len(view)):  # four parts, or five with a burst
        if pos + 4 > len(view):
            raise BundleError("meta", "payload framing truncated")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + size > len(view):
            raise BundleError("meta", "payload part longer than the payload")
        parts.append(view[pos : pos + size])
        pos += size
    if pos != len(view):
        raise BundleError("meta", "trailing bytes after the payload parts")
    return parts


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _require(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    # bool is an int subclass in Python but not a JSON number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BundleError("meta", f"meta member {name!r} is missing or not {kind.__name__}")
    return value


def _parse_payload(plain: bytes, header: Header) -> Bundle:
    meta_v, image_v, photo_v, external_v, *burst_v = _split_parts(plain)
    try:
        meta = json.loads(bytes(meta_v).decode("utf-8"), parse_constant=_refuse_constant)
        external = bytes(external_v).decode("utf-8")
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BundleError("meta", f"meta or external data unreadable: {exc}") from exc
    if not isinstance(meta, dict):
        raise BundleError("meta", "meta is not a JSON object")
    context = _require(meta, "context", dict)
    environment = _require(meta, "environment", dict)
    sdk = _require(meta, "sdk", dict)
    for field in ("name", "version", "digest"):
        _require(sdk, field, str)
    nonce = _require(meta, "nonce", str)
    if not _NONCE_RE.fullmatch(nonce):
        raise BundleError("meta", "nonce is not 16..128 base64url characters")
    timestamp = _require(meta, "timestamp_ms", int)
    if timestamp < 0:
        raise BundleError("meta", "timestamp_ms is negative")
    digests = _require(meta, "digests", dict)
    sizes = _require(meta, "sizes", dict)
    for part in PARTS:
        d = _require(digests, part, str)
        if not _HEX64_RE.fullmatch(d):
            raise BundleError("meta", f"digest of {part} is not 64 lowercase hex characters")
        if _require(sizes, part, int) < 0:
            raise BundleError("meta", f"size of {part} is negative")

    image, photo = bytes(image_v), bytes(photo_v)
    problems: list[str] = []
    for part, data in zip(PARTS, (image, photo, external_v), strict=True):
        if sizes[part] != len(data):
            problems.append(f"{part} size mismatch")
        if digests[part] != hashlib.sha256(data).hexdigest():
            problems.append(f"{part} digest mismatch")
    burst, t_ms = _parse_burst(meta, digests, sizes, burst_v[0] if burst_v else None, problems)
    return Bundle(
        key_id=header.key_id,
        version=header.version,
        image=image,
        photo=photo,
        external_data=external,
        meta=meta,
        context=context,
        environment=environment,
        sdk=sdk,
        nonce=nonce,
        timestamp_ms=timestamp,
        integrity_problems=tuple(problems),
        burst=burst,
        burst_t_ms=t_ms,
        has_burst=bool(burst_v),
    )


def _parse_burst(
    meta: dict[str, Any],
    digests: dict[str, Any],
    sizes: dict[str, Any],
    part: memoryview | None,
    problems: list[str],
) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """The burst's frames and times; a burst part needs its digest, size and ``meta.burst`` (a meta
    error otherwise), and its frames are dropped (an integrity problem) when they do not match."""
    if part is None:
        if BURST in digests or "burst" in meta:
            raise BundleError("meta", "meta describes a burst but the payload has none")
        return (), ()
    digest = _require(digests, BURST, str)
    if not _HEX64_RE.fullmatch(digest):
        raise BundleError("meta", "digest of burst is not 64 lowercase hex characters")
    size = _require(sizes, BURST, int)
    info = _require(meta, "burst", dict)
    t_ms = _require(info, "t_ms", list)
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= 60_000 for t in t_ms):
        raise BundleError("meta", "burst t_ms must be integers from 0 to 60000")
    if any(b < a for a, b in itertools.pairwise(t_ms)):
        raise BundleError("meta", "burst t_ms must not decrease")
    if size != len(part) or digest != hashlib.sha256(part).hexdigest():
        problems.append("burst digest mismatch" if size == len(part) else "burst size mismatch")
        return (), ()
    frames = decode_burst(part)
    if len(frames) != len(t_ms):
        raise BundleError("meta", f"burst has {len(frames)} frames but {len(t_ms)} times")
    return tuple(frames), tuple(t_ms)

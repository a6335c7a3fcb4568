"""Capture bundle format (docs/bundle-format.md): vector, round trips, every failure is a BundleError."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from typer.testing import CliRunner

from verilive.capture import bundle as B
from verilive.capture.bundle import Bundle, BundleError, KeyRing
from verilive.capture.client import CaptureClient, build_bundle, sdk_identity
from verilive.cli import app
from verilive.config import Settings

FIXTURES = Path(__file__).parent / "fixtures"
VECTOR = json.loads((FIXTURES / "bundle_vector1.json").read_text(encoding="utf-8"))
TEST_PEM = (FIXTURES / VECTOR["recipient_private_key_file"]).read_bytes()
TEST_PUB = B.public_key_b64(TEST_PEM)
TEST_KID = VECTOR["key_id"]
VECTOR_BLOB = base64.b64decode(VECTOR["bundle_b64"])


@pytest.fixture(scope="module")
def ring() -> KeyRing:
    return KeyRing.from_pem({TEST_KID: TEST_PEM})


@pytest.fixture(scope="module")
def jpeg() -> bytes:
    """A 640x480 JPEG with structure (gradient and a disc), the kind of image a client sends."""
    y, x = np.mgrid[0:480, 0:640]
    img = np.dstack([(x * 255 // 639), (y * 255 // 479), np.full_like(x, 128)]).astype(np.uint8)
    cv2.circle(img, (320, 240), 100, (20, 200, 240), -1)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def error_of(ring: KeyRing, blob: bytes) -> BundleError:
    with pytest.raises(BundleError) as info:
        ring.decrypt(blob)
    return info.value


def kind_of(ring: KeyRing, blob: bytes) -> str:
    return error_of(ring, blob).kind


def sealed(payload: bytes) -> bytes:
    return B.seal(payload, TEST_PUB, TEST_KID)


def good_meta(image: bytes, photo: bytes, external: str) -> dict[str, Any]:
    digests, sizes = B.part_digests(image, photo, external)
    return {
        "context": {},
        "environment": {},
        "sdk": {"name": "t", "version": "1", "digest": "0" * 64},
        "nonce": "A" * 22,
        "timestamp_ms": 1,
        "digests": digests,
        "sizes": sizes,
    }


# --- the committed test vector ----------------------------------------------------------------------


def test_vector_decrypts_to_the_documented_parts(ring: KeyRing) -> None:
    b = ring.decrypt(VECTOR_BLOB)
    assert hashlib.sha256(VECTOR_BLOB).hexdigest() == VECTOR["bundle_sha256"]
    assert (b.key_id, b.version) == (TEST_KID, B.FORMAT_VERSION)
    assert b.image == bytes.fromhex(VECTOR["image_hex"])
    assert b.photo == bytes.fromhex(VECTOR["photo_hex"])
    assert b.external_data == VECTOR["external_data"] == "order-42/ü€"
    assert b.meta == json.loads(VECTOR["meta_json"])
    assert b.nonce == "AAECAwQFBgcICQoLDA0ODw" and b.timestamp_ms == 1767225600000
    assert b.context["resolution"] == {"width": 640, "height": 480}
    assert b.sdk["name"] == "verilive-test-vector"
    assert b.integrity_problems == ()


def test_vector_is_reproduced_byte_for_byte() -> None:
    eph = ec.derive_private_key(int(VECTOR["ephemeral_private_scalar_hex"], 16), ec.SECP256R1())
    payload = B.encode_payload(
        VECTOR["meta_json"].encode("utf-8"),
        bytes.fromhex(VECTOR["image_hex"]),
        bytes.fromhex(VECTOR["photo_hex"]),
        VECTOR["external_data"],
    )
    assert hashlib.sha256(payload).hexdigest() == VECTOR["payload_sha256"]
    # The Python client's canonical meta serialisation is the documented one.
    assert B.dump_meta(json.loads(VECTOR["meta_json"])).decode("utf-8") == VECTOR["meta_json"]
    blob = B.seal(payload, TEST_PUB, TEST_KID, ephemeral_key=eph, iv=bytes.fromhex(VECTOR["iv_hex"]))
    assert blob == VECTOR_BLOB
    assert VECTOR["recipient_public_key_b64"] == TEST_PUB
    assert B.key_id_of(base64.b64decode(TEST_PUB)) == TEST_KID


def test_vector_is_in_the_doc() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "bundle-format.md").read_text(encoding="utf-8")
    flat = "".join(doc.split())
    assert VECTOR["bundle_b64"] in flat
    assert VECTOR["bundle_sha256"] in doc and VECTOR["meta_json"] in doc


# --- round trips -------------------------------------------------------------------------------------


def test_client_round_trip(ring: KeyRing, jpeg: bytes) -> None:
    blob = build_bundle(TEST_PUB, TEST_KID, jpeg, external_data="ext ✓", context={"camera_label": "cam"})
    b = ring.decrypt(blob)
    assert isinstance(b, Bundle)
    assert b.image == jpeg  # a JPEG is sent as is, not re-encoded
    assert b.external_data == "ext ✓" and b.integrity_problems == ()
    photo = cv2.imdecode(np.frombuffer(b.photo, np.uint8), cv2.IMREAD_COLOR)
    assert photo.shape[:2] == (240, 320)  # longer side scaled to 320
    assert b.context["camera_label"] == "cam"  # the caller's value wins ...
    assert b.context["resolution"] == {"width": 640, "height": 480}  # ... over measured defaults
    assert b.environment["client"] == "python" and b.environment["webdriver"] is False
    assert b.sdk == sdk_identity() and len(b.sdk["digest"]) == 64
    assert len(b.nonce) == 22 and b.timestamp_ms > 1_700_000_000_000


def test_nonces_and_ciphertexts_are_fresh(jpeg: bytes, ring: KeyRing) -> None:
    a, b = (build_bundle(TEST_PUB, None, jpeg) for _ in range(2))
    assert a != b
    assert ring.decrypt(a).nonce != ring.decrypt(b).nonce


def test_png_input_is_sent_as_jpeg(ring: KeyRing, tmp_path: Path) -> None:
    img = np.zeros((600, 800, 3), np.uint8)
    img[100:500, 200:600] = (0, 0, 255)
    path = tmp_path / "x.png"
    cv2.imwrite(str(path), img)
    b = ring.decrypt(build_bundle(TEST_PUB, TEST_KID, path))
    assert b.image[:2] == b"\xff\xd8" and b.context["resolution"] == {"width": 800, "height": 600}
    back = cv2.imdecode(np.frombuffer(b.image, np.uint8), cv2.IMREAD_COLOR)
    assert back.shape == (600, 800, 3) and np.abs(back.astype(int) - img).mean() < 3


def test_capture_client(ring: KeyRing, jpeg: bytes) -> None:
    client = CaptureClient()
    with pytest.raises(ValueError, match="set_encryption_key"):
        client.capture(jpeg)
    with pytest.raises(ValueError):
        client.set_encryption_key("not a key", "k")
    client.set_encryption_key(TEST_PUB, TEST_KID)
    client.set_external_data("session-7")
    out = client.capture(jpeg)
    assert set(out) == {"photo", "encryptedFile"}
    b = ring.decrypt(out["encryptedFile"])
    assert b.photo == out["photo"] and b.external_data == "session-7" and b.image == jpeg


def test_digests_override_gives_integrity_problems(ring: KeyRing, jpeg: bytes) -> None:
    override = {"image": "ab" * 32, "sizes": {"photo": 1}}
    blob = build_bundle(TEST_PUB, TEST_KID, jpeg, digests_override=override)
    b = ring.decrypt(blob)
    assert set(b.integrity_problems) == {"image digest mismatch", "photo size mismatch"}


def test_swapped_image_by_a_public_key_holder_is_an_integrity_problem(ring: KeyRing, jpeg: bytes) -> None:
    # An attacker re-encrypts a bundle with another image but keeps the honest meta: GCM accepts it.
    honest = ring.decrypt(build_bundle(TEST_PUB, TEST_KID, jpeg))
    forged = sealed(B.encode_payload(honest.meta, jpeg[:-10] + b"\xff\xd9", honest.photo, ""))
    assert ring.decrypt(forged).integrity_problems == ("image size mismatch", "image digest mismatch")


# --- keys, rotation, CLI -------------------------------------------------------------------------------


def test_key_rotation_two_keys_both_decrypt(tmp_path: Path, jpeg: bytes) -> None:
    kid2, pem2, pub2 = B.generate_key()
    (tmp_path / "old.pem").write_bytes(TEST_PEM)
    (tmp_path / "new.pem").write_bytes(pem2)
    settings = Settings(capture_private_keys=[str(tmp_path / "new.pem"), f"legacy-1={tmp_path / 'old.pem'}"])
    ring2 = KeyRing.from_settings(settings)
    assert set(ring2.key_ids) == {kid2, "legacy-1"}
    assert kid2 == B.key_id_of(base64.b64decode(pub2)) and B.public_key_b64(pem2) == pub2
    assert ring2.decrypt(build_bundle(pub2, None, jpeg)).key_id == kid2
    assert ring2.decrypt(build_bundle(TEST_PUB, "legacy-1", jpeg)).key_id == "legacy-1"
    # The same old key under its derived id is unknown to this ring: no silent fallback to other keys.
    assert kind_of(ring2, build_bundle(TEST_PUB, TEST_KID, jpeg)) == "decrypt"


def test_key_ring_refuses_bad_keys(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a pem")
    with pytest.raises(ValueError, match=r"bad\.pem"):
        KeyRing.from_entries([str(tmp_path / "bad.pem")])
    with pytest.raises(ValueError, match="twice"):
        KeyRing.from_entries([str(FIXTURES / "capture_test_key.pem")] * 2)
    with pytest.raises(ValueError):
        KeyRing.from_entries([str(tmp_path / "missing.pem")])


def test_cli_keys_generate(tmp_path: Path, jpeg: bytes) -> None:
    out = tmp_path / "k.pem"
    result = CliRunner().invoke(app, ["keys", "generate", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = dict(line.split(": ", 1) for line in result.output.strip().splitlines())
    pub, kid = lines["public key"], lines["key id"]
    assert B.public_key_b64(out.read_bytes()) == pub
    client = CaptureClient(pub, kid)  # the printed key is what the client accepts
    b = KeyRing.from_entries([str(out)]).decrypt(client.capture(jpeg)["encryptedFile"])
    assert b.key_id == kid
    # An existing key file is never overwritten.
    before = out.read_bytes()
    again = CliRunner().invoke(app, ["keys", "generate", "--out", str(out)])
    assert again.exit_code == 1 and out.read_bytes() == before


# --- failures are BundleErrors of the right kind ---------------------------------------------------


def test_wrong_key_is_decrypt(jpeg: bytes) -> None:
    _, other_pem, _ = B.generate_key()
    wrong = KeyRing.from_pem({TEST_KID: other_pem})
    assert kind_of(wrong, VECTOR_BLOB) == "decrypt"
    err = error_of(wrong, VECTOR_BLOB)
    assert err.message == "Failed to decrypt message"


def test_unknown_key_id_is_decrypt(ring: KeyRing, jpeg: bytes) -> None:
    assert kind_of(ring, build_bundle(TEST_PUB, "someone-else", jpeg)) == "decrypt"


@pytest.mark.parametrize(
    "blob", [b"", b"V", os.urandom(1 << 20), b"VLCB", b"VLCB\x02\x10" + b"x" * 200], ids=repr
)
def test_not_a_bundle_is_parse(ring: KeyRing, blob: bytes) -> None:
    err = error_of(ring, blob)
    assert err.kind == "parse" and err.message == "Failed to parse file"


def test_random_megabyte_behind_a_valid_magic_is_parse_or_decrypt(ring: KeyRing) -> None:
    blob = b"VLCB\x01" + os.urandom(1 << 20)
    assert kind_of(ring, blob) in {"parse", "decrypt"}


K = len(TEST_KID)
REGIONS = {  # name: (start, end) in the vector bundle
    "magic": (0, 4),
    "version": (4, 5),
    "key id length": (5, 6),
    "key id": (6, 6 + K),
    "ephemeral key": (6 + K, 71 + K),
    "iv": (71 + K, 83 + K),
    "ciphertext": (83 + K, len(VECTOR_BLOB) - 16),
    "tag": (len(VECTOR_BLOB) - 16, len(VECTOR_BLOB)),
}
EXPECTED_KIND = {
    "magic": {"parse"},
    "version": {"parse"},
    "key id length": {"parse"},
    "key id": {"parse", "decrypt"},  # non-UTF-8 is parse, another valid id is unknown: decrypt
    "ephemeral key": {"parse"},  # (x', y) with one flipped bit is not on the curve
    "iv": {"decrypt"},
    "ciphertext": {"decrypt"},
    "tag": {"decrypt"},
}


@pytest.mark.parametrize("region", list(REGIONS))
def test_flipped_bits_in_every_region(ring: KeyRing, region: str) -> None:
    start, end = REGIONS[region]
    positions = range(start, end) if end - start <= 80 else np.linspace(start, end - 1, 80).astype(int)
    seen: set[str] = set()
    for pos in positions:
        for bit in range(8) if end - start <= 16 else (0, 7):
            blob = bytearray(VECTOR_BLOB)
            blob[pos] ^= 1 << bit
            seen.add(kind_of(ring, bytes(blob)))
    assert seen <= EXPECTED_KIND[region], (region, seen)


def test_truncated_at_every_offset(ring: KeyRing) -> None:
    kinds = {n: kind_of(ring, VECTOR_BLOB[:n]) for n in range(len(VECTOR_BLOB))}
    header_end = REGIONS["iv"][1]
    assert all(kinds[n] == "parse" for n in range(header_end + 16))  # shorter than header + tag
    assert all(kinds[n] == "decrypt" for n in range(header_end + 16, len(VECTOR_BLOB)))
    for start, _ in REGIONS.values():  # every region boundary, spelled out
        assert kinds[start] in {"parse", "decrypt"}
    assert kind_of(ring, VECTOR_BLOB + b"\0") == "decrypt"  # extended: the tag no longer matches


# --- decrypted but badly formed: "meta" --------------------------------------------------------------


def meta_variants() -> dict[str, bytes]:
    image, photo, ext = b"\xff\xd8img\xff\xd9", b"\xff\xd8ph\xff\xd9", "e"
    ok = good_meta(image, photo, ext)

    def with_meta(meta: Any) -> bytes:
        raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
        return B.encode_payload(raw, image, photo, ext)

    def changed(**kw: Any) -> dict[str, Any]:
        return {**ok, **kw}

    def without(name: str) -> dict[str, Any]:
        return {k: v for k, v in ok.items() if k != name}

    return {
        "not json": with_meta(b"{not json"),
        "json list": with_meta([1, 2]),
        "nan": with_meta(b'{"x": NaN}'),
        "meta not utf-8": with_meta(b"\xff\xfe"),
        "deep nesting": with_meta(b"[" * 100_000 + b"]" * 100_000),
        "no context": with_meta(without("context")),
        "no digests": with_meta(without("digests")),
        "context a list": with_meta(changed(context=[])),
        "sdk without digest": with_meta(changed(sdk={"name": "t", "version": "1"})),
        "timestamp a bool": with_meta(changed(timestamp_ms=True)),
        "timestamp a string": with_meta(changed(timestamp_ms="1")),
        "timestamp negative": with_meta(changed(timestamp_ms=-1)),
        "short nonce": with_meta(changed(nonce="abc")),
        "nonce not base64url": with_meta(changed(nonce="+" * 22)),
        "digest not hex": with_meta(changed(digests={**ok["digests"], "image": "Z" * 64})),
        "size missing": with_meta(changed(sizes={"image": 1, "photo": 1})),
        "external not utf-8": B.encode_payload(json.dumps(ok).encode(), image, photo, "")[:-4]
        + b"\x00\x00\x00\x02\xc3\x28",
        "empty payload": b"",
        "framing truncated": with_meta(ok)[:-3],
        "trailing bytes": with_meta(ok) + b"\0",
        "length past the end": b"\xff\xff\xff\xff" + b"{}",
    }


@pytest.mark.parametrize(("name", "payload"), list(meta_variants().items()), ids=list(meta_variants()))
def test_bad_payload_is_meta(ring: KeyRing, name: str, payload: bytes) -> None:
    err = error_of(ring, sealed(payload))
    assert err.kind == "meta", name
    assert err.message == "Failed to read a meta data"


def test_good_hand_made_payload_decrypts(ring: KeyRing) -> None:
    # The control for the cases above: the same construction with nothing broken is accepted.
    image, photo, ext = b"\xff\xd8img\xff\xd9", b"\xff\xd8ph\xff\xd9", "e"
    meta = good_meta(image, photo, ext)
    meta["extra"] = {"kept": True}
    b = ring.decrypt(sealed(B.encode_payload(json.dumps(meta).encode(), image, photo, ext)))
    assert b.integrity_problems == () and b.meta["extra"] == {"kept": True}


def test_encoder_refuses_bad_header_fields() -> None:
    with pytest.raises(ValueError):
        B.seal(b"", TEST_PUB, "")
    with pytest.raises(ValueError):
        B.seal(b"", TEST_PUB, "k" * 256)
    with pytest.raises(ValueError):
        B.seal(b"", TEST_PUB, "k", iv=b"short")


# --- the burst part (docs/bundle-format.md, "Burst") -------------------------------------------------

VECTOR4 = json.loads((FIXTURES / "bundle_vector4.json").read_text(encoding="utf-8"))
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def test_vector4_with_a_burst_is_reproduced_and_decrypts(ring: KeyRing) -> None:
    scalar = int.from_bytes(hashlib.sha256(b"verilive bundle test vector 4 ephemeral key").digest()) % P256_N
    iv = hashlib.sha256(b"verilive bundle test vector 4 iv").digest()[:12]
    assert f"{scalar:064x}" == VECTOR4["ephemeral_private_scalar_hex"] and iv.hex() == VECTOR4["iv_hex"]
    frames = [bytes.fromhex(h) for h in VECTOR4["burst_frames_hex"]]
    burst = B.encode_burst(frames)
    assert burst.hex() == VECTOR4["burst_hex"]
    payload = B.encode_payload(
        VECTOR4["meta_json"].encode("utf-8"),
        bytes.fromhex(VECTOR4["image_hex"]),
        bytes.fromhex(VECTOR4["photo_hex"]),
        VECTOR4["external_data"],
        burst,
    )
    assert hashlib.sha256(payload).hexdigest() == VECTOR4["payload_sha256"]
    eph = ec.derive_private_key(scalar, ec.SECP256R1())
    blob = B.seal(payload, TEST_PUB, TEST_KID, ephemeral_key=eph, iv=iv)
    assert blob == base64.b64decode(VECTOR4["bundle_b64"])
    assert hashlib.sha256(blob).hexdigest() == VECTOR4["bundle_sha256"]
    b = ring.decrypt(blob)
    assert b.burst == tuple(frames) and b.burst_t_ms == (0, 200, 400) and b.has_burst
    assert b.meta["burst"]["cue"] == "turn-left-then-back" and b.integrity_problems == ()
    doc = (Path(__file__).resolve().parents[1] / "docs" / "bundle-format.md").read_text(encoding="utf-8")
    assert VECTOR4["bundle_b64"] in "".join(doc.split()) and VECTOR4["meta_json"] in doc


VECTOR5 = json.loads((FIXTURES / "bundle_vector5.json").read_text(encoding="utf-8"))


def test_vector5_names_the_stills_frame(ring: KeyRing) -> None:
    """Vector 5 (docs/bundle-format.md): a burst bound to its still by ``meta.burst.still_index``;
    made by scripts/bundle_vector5.py, rebuilt here byte for byte."""
    scalar = int.from_bytes(hashlib.sha256(b"verilive bundle test vector 5 ephemeral key").digest()) % P256_N
    iv = hashlib.sha256(b"verilive bundle test vector 5 iv").digest()[:12]
    frames = [bytes.fromhex(h) for h in VECTOR5["burst_frames_hex"]]
    payload = B.encode_payload(
        VECTOR5["meta_json"].encode("utf-8"),
        bytes.fromhex(VECTOR5["image_hex"]),
        bytes.fromhex(VECTOR5["photo_hex"]),
        VECTOR5["external_data"],
        B.encode_burst(frames),
    )
    assert hashlib.sha256(payload).hexdigest() == VECTOR5["payload_sha256"]
    blob = B.seal(
        payload, TEST_PUB, TEST_KID, ephemeral_key=ec.derive_private_key(scalar, ec.SECP256R1()), iv=iv
    )
    assert blob == base64.b64decode(VECTOR5["bundle_b64"])
    b = ring.decrypt(blob)
    assert (
        b.meta["burst"]["still_index"] == 0 and b.burst_t_ms == (0, 400, 800) and b.integrity_problems == ()
    )
    doc = (Path(__file__).resolve().parents[1] / "docs" / "bundle-format.md").read_text(encoding="utf-8")
    assert VECTOR5["bundle_b64"] in "".join(doc.split()) and VECTOR5["meta_json"] in doc


def test_bundles_without_a_burst_have_none(ring: KeyRing) -> None:
    b = ring.decrypt(VECTOR_BLOB)
    assert b.burst == () and b.burst_t_ms == () and not b.has_burst


def _burst_frames(n: int = 4) -> list[np.ndarray]:
    y, x = np.mgrid[0:480, 0:640]
    return [
        np.dstack([(x + 7 * i) % 256, y % 256, np.full_like(x, 60 * i % 256)]).astype(np.uint8)
        for i in range(n)
    ]


def test_client_burst_round_trip(ring: KeyRing, jpeg: bytes) -> None:
    frames = _burst_frames()
    blob = build_bundle(TEST_PUB, TEST_KID, jpeg, burst=frames, burst_info={"turn_deg": 12.0}, still_index=1)
    b = ring.decrypt(blob)
    assert len(b.burst) == 4 and b.burst_t_ms == (0, 200, 400, 600)
    assert all(f[:2] == b"\xff\xd8" for f in b.burst)  # JPEG
    assert b.meta["burst"] == {
        "cue": "turn-left-then-back",
        "turn_deg": 12.0,
        "t_ms": [0, 200, 400, 600],
        "still_index": 1,
    }
    assert b.integrity_problems == ()
    # Frames are downscaled to 640 px at most: a 1280 x 960 frame comes back 640 x 480.
    big = [cv2.resize(f, (1280, 960)) for f in frames[:3]]
    b = ring.decrypt(build_bundle(TEST_PUB, TEST_KID, jpeg, burst=big, still_index=0))
    shape = cv2.imdecode(np.frombuffer(b.burst[0], np.uint8), cv2.IMREAD_COLOR).shape
    assert shape == (480, 640, 3)


def test_client_refuses_bad_bursts(jpeg: bytes) -> None:
    frames = _burst_frames()
    with pytest.raises(ValueError, match="3 to 32"):
        build_bundle(TEST_PUB, TEST_KID, jpeg, burst=frames[:2], still_index=0)
    with pytest.raises(ValueError, match="3 to 32"):
        build_bundle(TEST_PUB, TEST_KID, jpeg, burst=frames * 9, still_index=0)
    with pytest.raises(ValueError, match="one time per"):
        build_bundle(TEST_PUB, TEST_KID, jpeg, burst=frames, burst_t_ms=[0, 1], still_index=0)
    with pytest.raises(ValueError, match="BGR"):
        build_bundle(TEST_PUB, TEST_KID, jpeg, burst=[np.zeros((4, 4), np.uint8)] * 3, still_index=0)
    # The library always says which burst frame is the still (docs/motion3d.md, "Binding").
    for index in (None, -1, 4, True, "0"):
        with pytest.raises(ValueError, match="still_index"):
            build_bundle(TEST_PUB, TEST_KID, jpeg, burst=frames, still_index=index)  # type: ignore[arg-type]


def _burst_payload(frames: list[bytes], meta_burst: Any = None, **digest_kw: Any) -> bytes:
    image, photo, ext = b"\xff\xd8img\xff\xd9", b"\xff\xd8ph\xff\xd9", "e"
    part = B.encode_burst(frames)
    meta = good_meta(image, photo, ext)
    d, s = B.part_digests(image, photo, ext, part)
    meta["digests"], meta["sizes"] = d, s
    meta["burst"] = {"t_ms": [100 * i for i in range(len(frames))]} if meta_burst is None else meta_burst
    for k, v in digest_kw.items():
        meta["digests" if k == "digest" else "sizes"]["burst"] = v
    return B.encode_payload(json.dumps(meta).encode(), image, photo, ext, part)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_changed_byte_in_any_frame_is_an_integrity_problem(ring: KeyRing, index: int) -> None:
    frames = [b"\xff\xd8frame%d\xff\xd9" % i for i in range(3)]
    payload = bytearray(_burst_payload(frames))
    # The frames are the payload's last bytes; change one byte inside frame ``index``.
    start = len(payload) - sum(4 + len(f) for f in frames[index:]) + 4
    payload[start + 3] ^= 0x01
    b = ring.decrypt(sealed(bytes(payload)))
    assert b.integrity_problems == ("burst digest mismatch",)
    assert b.burst == () and b.has_burst  # not trusted, not used


def test_burst_meta_errors(ring: KeyRing) -> None:
    frames = [b"\xff\xd8f%d\xff\xd9" % i for i in range(3)]
    image, photo, ext = b"\xff\xd8img\xff\xd9", b"\xff\xd8ph\xff\xd9", "e"
    plain = json.dumps(good_meta(image, photo, ext)).encode()
    cases = {
        "no burst meta": _burst_payload(frames, meta_burst={}),
        "t_ms not a list": _burst_payload(frames, meta_burst={"t_ms": "0,1,2"}),
        "t_ms decreasing": _burst_payload(frames, meta_burst={"t_ms": [0, 200, 100]}),
        "t_ms bools": _burst_payload(frames, meta_burst={"t_ms": [True, True, True]}),
        "t_ms count": _burst_payload(frames, meta_burst={"t_ms": [0, 1]}),
        "digest missing": _burst_payload(frames, digest=None),
        "meta burst without part": B.encode_payload(
            json.dumps({**good_meta(image, photo, ext), "burst": {"t_ms": []}}).encode(), image, photo, ext
        ),
        "empty frame": _burst_payload([b"", *frames[1:]]),
        "six parts": B.encode_payload(plain, image, photo, ext, b"") + b"\0\0\0\0",
    }
    for name, payload in cases.items():
        err = error_of(ring, sealed(payload))
        assert err.kind == "meta", name


def test_burst_framing_broken_under_a_matching_digest_is_meta(ring: KeyRing) -> None:
    image, photo, ext = b"\xff\xd8img\xff\xd9", b"\xff\xd8ph\xff\xd9", "e"
    part = b"\x00\x00\x00\x09short"  # says 9 bytes, has 5
    meta = good_meta(image, photo, ext)
    meta["digests"], meta["sizes"] = B.part_digests(image, photo, ext, part)
    meta["burst"] = {"t_ms": [0]}
    payload = B.encode_payload(json.dumps(meta).encode(), image, photo, ext, part)
    assert kind_of(ring, sealed(payload)) == "meta"

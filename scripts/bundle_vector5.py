"""Write tests/fixtures/bundle_vector5.json: test vector 5 of docs/bundle-format.md, a bundle whose
burst names the still's frame (``meta.burst.still_index``). Python ``seal`` with a fixed ephemeral key
and IV, derived like vector 4's from their labels. Run from the repository root:

    .venv/bin/python scripts/bundle_vector5.py
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from verilive.capture import bundle as B

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def main() -> None:
    v4 = json.loads((FIXTURES / "bundle_vector4.json").read_text(encoding="utf-8"))
    pem = (FIXTURES / v4["recipient_private_key_file"]).read_bytes()
    public = B.public_key_b64(pem)
    scalar = int.from_bytes(hashlib.sha256(b"verilive bundle test vector 5 ephemeral key").digest()) % P256_N
    iv = hashlib.sha256(b"verilive bundle test vector 5 iv").digest()[:12]
    image = b"\xff\xd8verilive bound still\xff\xd9"
    photo = b"\xff\xd8verilive bound photo\xff\xd9"
    external = "bound-1"
    frames = [b"\xff\xd8verilive bound frame %d\xff\xd9" % i for i in range(3)]
    burst = B.encode_burst(frames)
    digests, sizes = B.part_digests(image, photo, external, burst)
    meta = {
        "burst": {"attempts": 1, "cue": "turn-left-then-back", "still_index": 0, "t_ms": [0, 400, 800]},
        "context": {"camera_label": "test camera", "resolution": {"height": 640, "width": 480}},
        "digests": digests,
        "environment": {"client": "python", "userAgent": "verilive-test-vector"},
        "nonce": "MDEyMzQ1Njc4OWFiY2RlZg",
        "sdk": {"digest": "0" * 64, "name": "verilive-test-vector", "version": "5"},
        "sizes": sizes,
        "timestamp_ms": 1767398400000,
    }
    meta_json = B.dump_meta(meta).decode("utf-8")
    payload = B.encode_payload(meta_json.encode("utf-8"), image, photo, external, burst)
    eph = ec.derive_private_key(scalar, ec.SECP256R1())
    blob = B.seal(payload, public, v4["key_id"], ephemeral_key=eph, iv=iv)
    out = {
        "description": "capture bundle format 1, test vector 5: a burst bound to its still "
        "(meta.burst.still_index; Python seal, fixed ephemeral key and IV)",
        "recipient_private_key_file": v4["recipient_private_key_file"],
        "key_id": v4["key_id"],
        "ephemeral_private_scalar_hex": f"{scalar:064x}",
        "iv_hex": iv.hex(),
        "meta_json": meta_json,
        "image_hex": image.hex(),
        "photo_hex": photo.hex(),
        "external_data": external,
        "burst_frames_hex": [f.hex() for f in frames],
        "burst_hex": burst.hex(),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "bundle_sha256": hashlib.sha256(blob).hexdigest(),
        "bundle_b64": base64.b64encode(blob).decode("ascii"),
    }
    (FIXTURES / "bundle_vector5.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

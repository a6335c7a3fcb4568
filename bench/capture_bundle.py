"""Server-side time to decrypt and parse a 1 MB capture bundle (no HTTP, no image decoding).

    python -m bench.capture_bundle [--repeats 200] [--size 1048576]

Prints the median of KeyRing.decrypt and of its stages: the ECDH + HKDF key agreement, the
AES-256-GCM decryption, and the digest checks of the parts.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from bench._common import summary
from verilive.capture import bundle as B
from verilive.capture.client import sdk_identity


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up: first-call allocations and imports are not the steady state
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--size", type=int, default=1 << 20, help="bundle size in bytes (about)")
    args = ap.parse_args()

    key_id, pem, pub = B.generate_key()
    ring = B.KeyRing.from_pem({key_id: pem})
    # JPEG data is incompressible, so random bytes stand in for it; the format does not decode images.
    photo = os.urandom(20_000)
    image = os.urandom(max(0, args.size - len(photo) - 1200))
    digests, sizes = B.part_digests(image, photo, "external")
    meta = {
        "context": {"camera_label": "bench", "resolution": {"width": 1920, "height": 1080}},
        "environment": {"client": "python"},
        "sdk": sdk_identity(),
        "nonce": "A" * 22,
        "timestamp_ms": 0,
        "digests": digests,
        "sizes": sizes,
    }
    payload = B.encode_payload(meta, image, photo, "external")
    blob = B.seal(payload, pub, key_id)
    header = B.parse_header(blob)
    server_key = ring._keys[key_id]  # the bench looks inside on purpose, to time the stages
    point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), header.ephemeral_point)
    aes_key = B._derive_key(server_key.exchange(ec.ECDH(), point), header.ephemeral_point)
    view = memoryview(blob)

    def agree() -> None:
        p = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), header.ephemeral_point)
        B._derive_key(server_key.exchange(ec.ECDH(), p), header.ephemeral_point)

    def gcm() -> None:
        AESGCM(aes_key).decrypt(header.iv, view[header.length :], view[: header.length])

    def digest() -> None:
        for part in (image, photo):
            hashlib.sha256(part).hexdigest()

    print(f"bundle {len(blob):,} bytes, {os.cpu_count()} CPUs")
    print(f"KeyRing.decrypt (ms):  {summary(timed(lambda: ring.decrypt(blob), args.repeats))}")
    print(f"  ECDH + HKDF (ms):    {summary(timed(agree, args.repeats))}")
    print(f"  AES-256-GCM (ms):    {summary(timed(gcm, args.repeats))}")
    print(f"  SHA-256 parts (ms):  {summary(timed(digest, args.repeats))}")


if __name__ == "__main__":
    main()

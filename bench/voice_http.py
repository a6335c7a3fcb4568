"""HTTP benchmarks of one voice service process (loopback, real models).

    python -m bench.voice_http throughput [--clients 4] [--requests 200]
    python -m bench.voice_http identify [--size 100000] [--repeats 20]

throughput: template creations per second for 3 s clips (create_voice_template_from_samples),
            and the server's RSS after the run; --antispoof: the anti-spoofing call instead
            (every model of the anti-spoofing path loaded: VAD, CAM++, Whisper base).
identify:   server time (Server-Timing header) of /identification_engine/identify against a
            list of `size` templates, list parsing included.
diarize:    /diarization_engine/get_segmentation_from_samples on a two-party call of `minutes`
            (train.conversations, held-aside voices), wideband at 16 kHz and through a G.711 line at
            8 kHz: wall time per call as RTF, and the server's RSS peak (issue 48).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import soundfile as sf
import soxr

from bench._common import SHARED, rss_mb, server, server_ms, summary
from verilive.voice.engine import INIT_DATA_ID
from verilive.voice.identification import IdentificationList, quantise

LIBRI = SHARED / "data/voice/librispeech_251spk_gender"


def clips(n: int, seconds: float = 3.0) -> list[bytes]:
    """n clips of ``seconds``; a file shorter than that is continued with the next ones."""
    files = sorted(LIBRI.glob("*.flac"))
    out = []
    for i in range(n):
        parts, have, j = [], 0, i
        while have < seconds * 16000:
            x, _ = sf.read(files[j % len(files)], dtype="int16")
            parts.append(x)
            have += x.size
            j += n
        out.append(np.concatenate(parts)[: int(seconds * 16000)].astype("<i2").tobytes())
    return out


ANTISPOOF_PATH = "/antispoof_engine/is_spoof_samples?sample_rate=16000"


def throughput(clients: int, requests: int, antispoof: bool = False, seconds: float = 3.0) -> None:
    bodies = clips(50, seconds)
    with server("voice") as (url, pid), httpx.Client(base_url=url, timeout=120) as c:
        path = (
            ANTISPOOF_PATH
            if antispoof
            else "/voice_template_factory/create_voice_template_from_samples?sample_rate=16000"
        )
        headers = {"content-type": "application/octet-stream"}
        for b in bodies[:4]:  # warm-up
            c.post(path, content=b, headers=headers).raise_for_status()

        def one(i: int) -> float:
            r = c.post(path, content=bodies[i % len(bodies)], headers=headers)
            r.raise_for_status()
            return server_ms(r)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            times = list(pool.map(one, range(requests)))
        wall = time.perf_counter() - t0
        rss, peak = rss_mb(pid)
    what = "anti-spoofing checks" if antispoof else "template creations"
    print(f"{requests} {what} of {seconds:g} s clips, {clients} concurrent clients")
    print(f"throughput: {requests / wall:.1f} per second")
    print(f"server ms: {summary(times)}")
    print(f"server RSS: {rss:.0f} MiB now, {peak:.0f} MiB peak")


def _units(rng: np.random.Generator, size: int) -> np.ndarray:
    units = rng.standard_normal((size, 192)).astype(np.float32)
    return units / np.linalg.norm(units, axis=1, keepdims=True)


def pieces(payload: bytes, size: int = 1 << 18) -> Iterator[bytes]:
    """``payload`` in ``size`` pieces. httpx's synchronous client sends one bytes body by slicing
    what is left after every ``send`` (httpcore's ``SyncStream.write``): for 52 MB that copying took
    the client ~100 ms on these 2 cores, time the server spent waiting for the body."""
    for i in range(0, len(payload), size):
        yield payload[i : i + size]


def identify(
    size: int, repeats: int, list_version: int = 2, probe_rate: int = 16000, client: str = "pieces"
) -> None:
    """A list of ``size`` random rows (version 2: wideband rows with both views) and one probe made
    by the server from LibriSpeech at ``probe_rate`` (8000: a telephone probe, the two-product case).
    ``client``: "pieces" sends the body in 256 KB pieces with its Content-Length (as curl or a
    streaming client would); "bytes" hands httpx the whole body (its slow path, see ``pieces``)."""
    rng = np.random.default_rng(0)
    codes, scales = quantise(_units(rng, size))
    if list_version == 1:
        ident = IdentificationList(INIT_DATA_ID, codes, scales)
    else:
        cross_codes, cross_scales = quantise(_units(rng, size))
        ident = IdentificationList(
            INIT_DATA_ID, codes, scales, np.full(size, 3, np.uint8), cross_codes, cross_scales
        )
    list_text = ident.encode()
    with server("voice") as (url, pid), httpx.Client(base_url=url, timeout=120) as c:
        x, sr = sf.read(sorted(LIBRI.glob("*.flac"))[0], dtype="float32")
        if probe_rate != sr:
            x = soxr.resample(x, sr, probe_rate)
        probe = c.post(
            f"/voice_template_factory/create_voice_template_from_samples?sample_rate={probe_rate}",
            content=(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes(),
            headers={"content-type": "application/octet-stream"},
        ).json()
        _, peak_before = rss_mb(pid)  # models loaded, one template made: the peak before identify
        # Encoded once: the client's own JSON encoding would compete with the server for the CPU.
        payload = json.dumps({"voice_template": probe, "identification_list": list_text}).encode()
        times = []
        for i in range(repeats + 2):
            r = c.post(
                "/identification_engine/identify",
                content=pieces(payload) if client == "pieces" else payload,
                headers={"content-type": "application/json", "content-length": str(len(payload))},
            )
            r.raise_for_status()
            assert len(r.json()["scores"]) == size
            if i >= 2:  # the first calls warm allocators up
                times.append(server_ms(r))
        rss, peak = rss_mb(pid)
    print(
        f"identify against {size} templates (list version {list_version}, {len(list_text) / 1e6:.1f} MB "
        f"as base64), probe at {probe_rate} Hz, body sent as {client}"
    )
    print(f"server ms: {summary(times)}")
    print(f"server RSS: {rss:.0f} MiB now, {peak:.0f} MiB peak ({peak_before:.0f} MiB before identify calls)")


def diarize(minutes: float, repeats: int) -> None:
    import zlib

    from common.telephone import LINES, telephone
    from train.conversations import conversation, pick_voices, speech_pools

    pools = speech_pools(SHARED / "data", "calls")
    rng = np.random.default_rng(4802)
    wave, _ = conversation(pick_voices(pools, rng, 2, "speechocean762"), rng, minutes * 60.0, overlap_p=0.1)
    line = telephone(wave, 16000, LINES["g711u"], zlib.crc32(b"bench"))
    bodies = {
        16000: (np.clip(wave, -1, 1) * 32767).astype("<i2").tobytes(),
        8000: (np.clip(line, -1, 1) * 32767).astype("<i2").tobytes(),
    }
    seconds = wave.size / 16000
    path = "/diarization_engine/get_segmentation_from_samples?sample_rate={}"
    headers = {"content-type": "application/octet-stream"}
    with server("voice") as (url, pid), httpx.Client(base_url=url, timeout=600) as c:
        c.post(path.format(8000), content=bodies[8000][:160000], headers=headers).raise_for_status()
        c.post(path.format(16000), content=bodies[16000][:320000], headers=headers).raise_for_status()
        before, _ = rss_mb(pid)
        print(f"server RSS after a 10 s call at each rate (every diarization model loaded): {before:.0f} MiB")
        for rate, body in bodies.items():
            walls, speakers = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                r = c.post(path.format(rate), content=body, headers=headers)
                r.raise_for_status()
                walls.append(time.perf_counter() - t0)
                speakers.append(len(r.json()))
            rtf = [w / seconds for w in walls]
            print(
                f"{rate} Hz, {seconds / 60:.1f} min two-party call: RTF {min(rtf):.4f} best, "
                f"{float(np.median(rtf)):.4f} median of {repeats} (wall, HTTP included); speakers {speakers}"
            )
        rss, peak = rss_mb(pid)
    print(f"server RSS: {rss:.0f} MiB now, {peak:.0f} MiB peak")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--clients", type=int, default=4)
    t.add_argument("--requests", type=int, default=200)
    t.add_argument("--antispoof", action="store_true", help="the anti-spoofing call instead")
    t.add_argument("--seconds", type=float, default=3.0, help="clip length (LibriSpeech, 16 kHz)")
    d = sub.add_parser("diarize")
    d.add_argument("--minutes", type=float, default=10.0)
    d.add_argument("--repeats", type=int, default=3)
    i = sub.add_parser("identify")
    i.add_argument("--size", type=int, default=100_000)
    i.add_argument("--repeats", type=int, default=20)
    i.add_argument("--list-version", type=int, choices=(1, 2), default=2)
    i.add_argument("--probe-rate", type=int, choices=(8000, 16000), default=16000)
    i.add_argument("--client", choices=("pieces", "bytes"), default="pieces", help="how httpx sends the body")
    args = ap.parse_args()
    if args.what == "throughput":
        throughput(args.clients, args.requests, args.antispoof, args.seconds)
    elif args.what == "diarize":
        diarize(args.minutes, args.repeats)
    else:
        identify(args.size, args.repeats, args.list_version, args.probe_rate, args.client)


if __name__ == "__main__":
    main()

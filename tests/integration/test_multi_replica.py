"""Multi-replica test on this machine: the deployment of docs/deployment.md, on loopback.

Two `verilive serve` processes per service, nginx with deploy/nginx/nginx.conf in front, one
PostgreSQL for the BI records and one Redis for the capture replay store, all started here
(tests/servers.py; the Debian packages come from scripts/install-test-deps.sh). Checked:

- a capture bundle accepted by one replica and replayed to the other is SUSPICIOUS_ACTIVITY;
- the same speech gives the same voice template on either replica;
- face decisions spread over both replicas by nginx all appear in one `/bi_report`;
- SIGKILL of a face replica in the middle of a load: every answered 200 has its BI record, only
  requests in flight at the kill fail, and the other replica answers everything after it.

Results and the command are in docs/reliability.md ("Multi-replica test").
"""

from __future__ import annotations

import contextlib
import io
import itertools
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile as sf
from common.capture_samples import genuine_bundle

from tests.integration.cluster import Cluster, Nginx, Replica, replica_env
from tests.servers import free_port, postgres_server, redis_server
from verilive.capture.bundle import public_key_b64
from verilive.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

SERVICES = ("face", "voice", "capture")
KEY = Path(__file__).resolve().parents[1] / "fixtures" / "capture_test_key.pem"
FACE_IMAGE = "data/face/pad_silentface/image_T1.jpg"  # 480x640, a live face: enough for 480p capture
SPEECH = "data/voice/librispeech_251spk_gender/103-1240-0000.flac"
OCTET = {"content-type": "application/octet-stream"}
REQUESTS = "verilive_http_requests"
_variants = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(models_settings: Settings) -> Iterator[Cluster]:
    # ExitStack: whatever fails part-way, everything started so far is stopped and removed.
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(postgres_server())
        redis_url = stack.enter_context(redis_server())
        base = Path(tempfile.mkdtemp(prefix="verilive-cluster-"))
        stack.callback(shutil.rmtree, base, True)
        # The documented form of the setting (postgresql://), which verilive maps to psycopg.
        bi_url = f"postgresql://{pg.user}:{pg.password}@127.0.0.1:{pg.port}/{pg.new_database()}"
        env = replica_env(models_settings.models_dir, bi_url, redis_url, KEY)
        replicas = {s: [Replica(s, f"{s}-{x}", free_port(), env, base) for x in ("a", "b")] for s in SERVICES}
        for r in itertools.chain.from_iterable(replicas.values()):
            stack.callback(r.stop)
            r.start()
        for r in itertools.chain.from_iterable(replicas.values()):
            r.wait_healthy()
        nginx = Nginx.configure(base / "nginx", {s: [r.port for r in rs] for s, rs in replicas.items()})
        stack.callback(nginx.stop)
        nginx.start()
        c = Cluster(replicas=replicas, nginx=nginx, bi_url=bi_url, redis_url=redis_url)
        for s in SERVICES:
            assert httpx.get(f"{c.url(s)}/health", timeout=10).status_code == 200
        yield c


@pytest.fixture(scope="module")
def face_jpeg(shared_dir: Path) -> bytes:
    return (shared_dir / FACE_IMAGE).read_bytes()


def capture_decision(url: str, blob: bytes) -> dict[str, Any]:
    r = httpx.post(f"{url}/check_capture_liveness", content=blob, headers=OCTET, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["capture_liveness"]


def check_liveness(client: httpx.Client, jpeg: bytes) -> httpx.Response:
    return client.post("/check_liveness", files={"image": ("face.jpg", jpeg, "image/jpeg")})


def face_ok(r: httpx.Response) -> bool:
    return r.status_code == 200 and isinstance(r.json().get("probability"), float)


def bi_total(url: str) -> int:
    r = httpx.get(f"{url}/bi_report", timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["total"])


def answered(replica: Replica) -> float:
    """check_liveness requests this replica answered with 200, from its own /metrics."""
    return replica.counter(REQUESTS, route="/check_liveness", status="200")


# ------------------------------------------------------------------------------------- capture


def test_bundle_replayed_to_the_other_replica_is_suspicious(cluster: Cluster, shared_dir: Path) -> None:
    a, b = cluster.replicas["capture"]
    public = public_key_b64(KEY.read_bytes())
    records_before = len(httpx.get(f"{a.url}/bi_records", timeout=30).json())

    # Genuine captures with a bound head-turn burst (required by default); the second is mirrored so
    # that its burst is not a replay of the first's.
    first = genuine_bundle(public, shared_dir)
    assert capture_decision(a.url, first)["rejection"] == []
    replayed = capture_decision(b.url, first)
    assert "SUSPICIOUS_ACTIVITY" in replayed["rejection"], replayed
    assert replayed["probability"] < 0.5

    # The other way round, so neither replica merely rejects everything it gets second.
    second = genuine_bundle(public, shared_dir, mirror=True)
    assert capture_decision(b.url, second)["rejection"] == []
    replayed = capture_decision(a.url, second)
    assert "SUSPICIOUS_ACTIVITY" in replayed["rejection"], replayed

    # All four decisions, from both replicas, are in the one BI table, read through either.
    for replica in (a, b):
        records = httpx.get(f"{replica.url}/bi_records", timeout=30).json()[records_before:]
        assert len(records) == 4, records
        assert [bool(r["rejection"]) for r in records] == [False, True, False, True], records


# --------------------------------------------------------------------------------------- voice


def test_voice_replicas_behind_nginx_agree(cluster: Cluster, shared_dir: Path) -> None:
    a, b = cluster.replicas["voice"]
    x, sr = sf.read(shared_dir / SPEECH, dtype="int16")
    buf = io.BytesIO()
    sf.write(buf, x, sr, format="WAV", subtype="PCM_16")
    route = "/voice_template_factory/create_voice_template_from_file"
    before = {r.name: r.counter(REQUESTS, route=route, status="200") for r in (a, b)}
    with httpx.Client(base_url=cluster.url("voice"), timeout=120) as client:
        templates = []
        for _ in range(4):
            r = client.post(route, files={"wav_file": ("speech.wav", buf.getvalue(), "audio/wav")})
            assert r.status_code == 200, r.text
            templates.append(r.json())
        spread = {r.name: r.counter(REQUESTS, route=route, status="200") - before[r.name] for r in (a, b)}
        assert sum(spread.values()) == 4 and all(n > 0 for n in spread.values()), spread
        # A template made on one replica is valid on the other: same speech, same template.
        assert len(set(templates)) == 1
        r = client.post(
            "/voice_template_matcher/match_voice_templates",
            json={"template1": templates[0], "template2": templates[-1]},
        )
        assert r.status_code == 200 and r.json()["probability"] > 0.99, r.text


# ---------------------------------------------------------------------------------------- face


def test_face_decisions_from_both_replicas_in_one_report(cluster: Cluster, face_jpeg: bytes) -> None:
    a, b = cluster.replicas["face"]
    sent = 20
    before = {r.name: answered(r) for r in (a, b)}
    total_before = bi_total(a.url)
    with httpx.Client(base_url=cluster.url("face"), timeout=60) as client:
        for _ in range(sent):
            r = check_liveness(client, face_jpeg)
            assert face_ok(r), r.text
    spread = {r.name: answered(r) - before[r.name] for r in (a, b)}
    assert sum(spread.values()) == sent, spread
    assert all(n > 0 for n in spread.values()), f"nginx sent everything to one replica: {spread}"
    # One report, whichever replica (or nginx) answers it, counts every decision of both.
    for url in (a.url, b.url, cluster.url("face")):
        assert bi_total(url) - total_before == sent


@dataclass(frozen=True)
class Outcome:
    status: int  # 0: no HTTP answer at all
    after_kill: bool  # the request was started after the killed replica had exited


def test_killing_a_replica_under_load_loses_no_record(cluster: Cluster, face_jpeg: bytes) -> None:
    a, b = cluster.replicas["face"]
    total, clients, kill_after = 120, 4, 40
    total_before = bi_total(b.url)
    a_before, b_before = answered(a), answered(b)

    lock = threading.Lock()
    indices = itertools.count()
    outcomes: list[Outcome] = []
    killed, kill_now = threading.Event(), threading.Event()

    def client() -> None:
        with httpx.Client(base_url=cluster.url("face"), timeout=60) as c:
            while True:
                with lock:
                    if next(indices) >= total:
                        return
                    after = killed.is_set()
                try:
                    status = check_liveness(c, face_jpeg).status_code
                except httpx.TransportError:
                    status = 0
                with lock:
                    outcomes.append(Outcome(status, after))
                    if sum(o.status == 200 for o in outcomes) == kill_after:
                        kill_now.set()

    threads = [threading.Thread(target=client, name=f"load-{i}") for i in range(clients)]
    for t in threads:
        t.start()
    try:
        assert kill_now.wait(timeout=180), "the load did not reach the kill point"
        a_served = answered(a) - a_before  # proves A was taking part in this load
        a.kill()
        killed.set()
    finally:
        for t in threads:
            t.join(timeout=240)
    try:
        assert not any(t.is_alive() for t in threads)
        assert len(outcomes) == total
        ok = sum(o.status == 200 for o in outcomes)
        failed = [o for o in outcomes if o.status != 200]
        after = [o for o in outcomes if o.after_kill]
        records = bi_total(b.url) - total_before
        # Requests nginx tried on the dead replica first and then passed to the live one.
        error_log = cluster.nginx.workdir / "error.log"
        retried = error_log.read_text(errors="replace").count("Connection refused")
        print(
            f"\nmulti-replica kill: {total} requests, {clients} clients, replica A served {a_served:.0f}"
            f" before SIGKILL; 200: {ok}; failed: {len(failed)} {sorted(o.status for o in failed)};"
            f" started after the kill: {len(after)}, all 200: {all(o.status == 200 for o in after)};"
            f" BI records: {records}; nginx connect() refused, passed to the next replica: {retried}"
        )
        assert a_served > 0
        # Only requests in flight at the kill may fail, at most one per client, and never as 200.
        assert all(not o.after_kill for o in failed), failed
        assert len(failed) <= clients, failed
        # The surviving replica answered everything started after the kill.
        assert len(after) > 0 and all(o.status == 200 for o in after)
        assert answered(b) - b_before >= len(after)
        # No accepted request lost its record. A request killed after its record was written but
        # before its answer left can add a record without a 200, hence the upper bound.
        assert ok <= records <= ok + len(failed), (ok, records, len(failed))
    finally:
        # Put the cluster back for any test that runs after this one.
        a.start()
        a.wait_healthy()

"""The browser capture SDK end to end, in headless Chromium from Debian driven by Selenium.

A real uvicorn capture server on 127.0.0.1 serves /demo and the SDK; Chromium's fake camera plays a
real face photo (pad_silentface/image_T1.jpg) as a 1280x720 Y4M video. The tests check that the
bundle the page builds decrypts on the server, that /extract_image gives its JPEG back, that the
automation flags and the fake camera give UNTRUSTED_ENVIRONMENT, and that the bundle test vectors of
docs/bundle-format.md work in both directions between WebCrypto and the Python library.

Chromium and chromedriver come from Debian (/usr/bin/chromium, /usr/bin/chromedriver), installed by
scripts/install-test-deps.sh (`make test` runs it); the tests install nothing. No browser is downloaded.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cv2
import httpx
import numpy as np
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.servers import missing_message
from verilive.capture.bundle import KeyRing, encode_payload, generate_key, public_key_b64, seal
from verilive.capture.sdk_routes import STATIC_DIR
from verilive.capture.sdk_routes import router as sdk_router
from verilive.config import Settings
from verilive.server.app import create_service_app
from verilive.server.errors import install_error_handlers

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FIXTURES = Path(__file__).parent / "fixtures"
TEST_KEY = FIXTURES / "capture_test_key.pem"
SDK_PATH = STATIC_DIR / "verilive-capture.js"
FACE = "data/face/pad_silentface/image_T1.jpg"
FRAME_W, FRAME_H = 1280, 720  # 720 lines: above the server's 480p IMAGE_TOO_SMALL limit
PLAIN_CHROME_UA = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36"
)
P256_N = int("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", 16)


# ------------------------------------------------------------------ helpers


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def pkcs8_b64(key: ec.EllipticCurvePrivateKey) -> str:
    der = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.b64encode(der).decode("ascii")


def test_private_pkcs8_b64() -> str:
    key = serialization.load_pem_private_key(TEST_KEY.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return pkcs8_b64(key)


test_private_pkcs8_b64.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def vector2_inputs() -> dict[str, Any]:
    """The fixed inputs of test vector 2 (docs/bundle-format.md), as buildBundle takes them.

    Floats are not whole numbers and keys are in a fixed order, so JSON.stringify gives one exact
    meta text; the ephemeral key is derived from a phrase the way vector 1's is.
    """
    scalar = int.from_bytes(hashlib.sha256(b"verilive bundle test vector 2 ephemeral key").digest()) % P256_N
    eph = ec.derive_private_key(scalar, ec.SECP256R1())
    return {
        "publicKeyB64": public_key_b64(TEST_KEY.read_bytes()),
        "keyId": "9371b67134414515",
        "image": base64.b64encode(b"\xff\xd8verilive browser test image\xff\xd9").decode(),
        "photo": base64.b64encode(b"\xff\xd8verilive browser test photo\xff\xd9").decode(),
        "externalData": "kiosk-7/ñ✓",
        "context": {
            "camera_label": "test camera (browser)",
            "track_settings": {"width": 1280, "height": 720, "frameRate": 30, "facingMode": "user"},
            "resolution": {"width": 1280, "height": 720},
            "frame_timing": {
                "count": 29,
                "mean_ms": 33.367,
                "std_ms": 1.25,
                "min_ms": 30.1,
                "max_ms": 36.9,
                "source": "requestVideoFrameCallback",
            },
            "frames_seen": 30,
        },
        "environment": {
            "client": "browser",
            "userAgent": "verilive-test-vector",
            "platform": "Linux x86_64",
            "webdriver": False,
            "automation": {"headless_ua": False, "cdc_props": False},
            "screen": {
                "width": 1920,
                "height": 1080,
                "availWidth": 1920,
                "availHeight": 1040,
                "devicePixelRatio": 1,
                "colorDepth": 24,
            },
            "maxTouchPoints": 0,
            "touch": False,
            "userAgentData": None,
        },
        "sdk": {
            "name": "verilive-test-vector",
            "version": "2",
            "digest": hashlib.sha256(b"verilive bundle test vector 2 sdk").hexdigest(),
        },
        "nonce": b64url(bytes(range(16, 32))),
        "timestampMs": 1767312000000,  # 2026-01-02T00:00:00Z
        "ephemeralPkcs8B64": pkcs8_b64(eph),
        "iv": base64.b64encode(bytes(range(16, 28))).decode(),
        "_scalar_hex": f"{scalar:064x}",
        "_public_hex": eph.public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        .hex(),
    }


def face_frame(shared_dir: Path) -> np.ndarray:
    """The portrait photo in a 1280x720 frame, the sides filled with a blurred copy (like a webcam)."""
    src = cv2.imread(str(shared_dir / FACE))
    assert src is not None
    h, w = src.shape[:2]
    fg = cv2.resize(src, (round(w * FRAME_H / h), FRAME_H), interpolation=cv2.INTER_AREA)
    frame = cv2.GaussianBlur(cv2.resize(src, (FRAME_W, FRAME_H)), (0, 0), 25)
    x = (FRAME_W - fg.shape[1]) // 2
    frame[:, x : x + fg.shape[1]] = fg
    return frame


def write_y4m(path: Path, frame: np.ndarray | list[np.ndarray], frames: int = 3, fps: int = 30) -> None:
    """Chromium's --use-file-for-fake-video-capture reads Y4M 4:2:0 (it loops the file). ``frame``:
    one picture repeated ``frames`` times, or a list of pictures of one size played in order."""
    pictures = frame if isinstance(frame, list) else [frame] * frames
    h, w = pictures[0].shape[:2]
    with path.open("wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F{fps}:1 Ip A1:1 C420jpeg\n".encode("ascii"))
        for pic in pictures:
            f.write(b"FRAME\n" + cv2.cvtColor(pic, cv2.COLOR_BGR2YUV_I420).tobytes())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(settings: Settings) -> Iterator[str]:
    """A real uvicorn capture server in a thread; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_service_app("capture", settings), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # model loading; generous, only a failure waits this long
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the capture server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def ensure_chromium() -> None:
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    message = missing_message(f"{CHROMIUM} or {CHROMEDRIVER}", "chromium and chromium-driver")
    # Without root: skipped, as when this fixture installed the browser itself.
    if os.geteuid() != 0:
        pytest.skip(message)
    pytest.fail(message)


def make_driver(video: Path | None, *, hide_automation: bool = False) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never fetch a browser
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the test may run as root in a container
        "--disable-dev-shm-usage",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        "--window-size=900,1000",
    ):
        opts.add_argument(arg)
    if video is not None:
        opts.add_argument(f"--use-file-for-fake-video-capture={video}")
    if hide_automation:
        # What a cheap attacker does: navigator.webdriver false, no "Headless" in the user agent.
        opts.add_argument("--disable-blink-features=AutomationControlled")
        opts.add_argument(f"--user-agent={PLAIN_CHROME_UA}")
        opts.add_experimental_option("excludeSwitches", ["enable-automation"])
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    driver.set_script_timeout(60)
    return driver


def run_js(driver: Any, body: str, *args: Any) -> Any:
    """Run an async function body in the page with the SDK imported as `sdk`; returns its value.

    Errors in the page come back as {"error": ...} so the assertion shows the browser's message.
    """
    script = (
        "const done = arguments[arguments.length - 1];"
        "const args = Array.from(arguments).slice(0, -1);"
        "import('/sdk/verilive-capture.js').then(async (sdk) => {"
        f"  try {{ done({{ok: await (async () => {{ {body} }})()}}); }}"
        "  catch (e) { done({error: String(e && e.stack || e)}); }"
        "}, (e) => done({error: 'import failed: ' + e}));"
    )
    out = driver.execute_async_script(script, *args)
    assert "error" not in out, out.get("error")
    return out["ok"]


def wait_state(driver: Any, states: set[str], timeout_s: float = 90) -> str:
    """Poll the demo's state until it is one of `states` (or "error", which fails at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = driver.execute_script("return window.veriliveDemo && window.veriliveDemo.state")
        if state in states:
            return str(state)
        if state == "error":
            err = driver.execute_script("return window.veriliveDemo.error")
            raise AssertionError(f"the demo failed: {err}")
        if time.monotonic() > deadline:
            hint = driver.execute_script("return document.getElementById('hint').textContent")
            seen = driver.execute_script("return (window.veriliveDemo.statuses || []).slice(-16)")
            raise AssertionError(f"the demo stayed in state {state!r} (hint: {hint!r}; statuses {seen})")
        time.sleep(0.2)


def wait_title(driver: Any, state: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not driver.title.endswith(f"· {state}"):
        if driver.title.endswith("· error") or time.monotonic() > deadline:
            raise AssertionError(f"the demo did not reach {state!r}: title {driver.title!r}")
        time.sleep(0.2)


def decode(jpeg: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


def assert_still_is_its_burst_frame(bundle: Any) -> np.ndarray:
    """The contract of issue 43: ``meta.burst.still_index`` names the burst frame recorded with the
    still, the still is that frame at full resolution (same captured area, same pixels), and the
    frame times span a plausible turn. Returns the still's burst frame."""
    info = bundle.meta["burst"]
    index = info["still_index"]
    assert isinstance(index, int) and 0 <= index < len(bundle.burst), info
    still, frame = decode(bundle.image), decode(bundle.burst[index])
    (h, w), (fh, fw) = still.shape[:2], frame.shape[:2]
    assert bundle.context["resolution"] == {"width": w, "height": h}
    assert max(fh, fw) <= 640
    scale = fw / w
    assert abs(h * scale - fh) <= 1.5, (still.shape, frame.shape)  # the same area, scaled
    gray = lambda im: cv2.cvtColor(im, cv2.COLOR_BGR2GRAY).astype(np.float64).ravel()  # noqa: E731
    scaled = cv2.resize(still, (fw, fh), interpolation=cv2.INTER_AREA)
    corr = float(np.corrcoef(gray(scaled), gray(frame))[0, 1])
    assert corr > 0.98, corr
    t = bundle.burst_t_ms
    assert t[0] == 0 and len(t) <= 32
    gaps = np.diff(t)
    assert gaps.min() >= 30 and gaps.max() <= 2000, t
    assert 800 <= t[-1] <= 10_000, t
    return frame


def assert_cues_readable(log: list[list[Any]], least_ms: int = 1500) -> None:
    """Every turn cue but the last ("and back", which the burst's end or the answer follows) stays on
    screen at least ``least_ms``."""
    for (t0, status), (t1, _) in itertools.pairwise(log):
        if status in {"turn-left", "turn-again"}:
            assert t1 - t0 >= least_ms, (status, t1 - t0, log)


def hint_changes(log: list[list[Any]]) -> list[tuple[int, str]]:
    """The placement hints the person saw before the first turn cue, with their times (ms)."""
    out = []
    for t, status in log:
        if status.startswith("turn-"):
            break
        if status not in {"idle", "starting", "looking", "stopped"}:
            out.append((int(t), str(status)))
    return out


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def server_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    key_id, pem, _ = generate_key()
    path = tmp_path_factory.mktemp("capture-key") / "key.pem"
    path.write_bytes(pem)
    path.chmod(0o600)
    return key_id, path


@pytest.fixture(scope="module")
def server(
    models_settings: Settings, server_key: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("capture-server")
    settings = models_settings.model_copy(
        update={
            "capture_private_keys": [str(server_key[1])],
            "capture_replay_url": f"sqlite:///{tmp}/replay.sqlite3",
            "bi_database_url": f"sqlite:///{tmp}/bi.sqlite3",
        }
    )
    with running_server(settings) as url:
        yield url


@pytest.fixture(scope="module")
def frame(shared_dir: Path) -> np.ndarray:
    return face_frame(shared_dir)


@pytest.fixture(scope="module")
def video(frame: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("camera-input") / "face.y4m"
    write_y4m(path, frame)
    return path


@pytest.fixture(scope="module")
def driver(video: Path) -> Iterator[Any]:
    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        yield drv
    finally:
        drv.quit()


def last_rejection(server: str) -> list[str]:
    """Rejection reasons of the server's newest capture BI record: what the back end keeps."""
    records = httpx.get(f"{server}/bi_records", timeout=60).json()
    return (records[-1]["rejection"] or "").split(",")


# ------------------------------------------------------------------ the SDK routes (no browser)


def test_sdk_routes_serve_the_exact_sdk_the_key_and_the_demo(
    server: str, server_key: tuple[str, Path]
) -> None:
    sdk = SDK_PATH.read_bytes()
    digest = hashlib.sha256(sdk).hexdigest()
    with httpx.Client(base_url=server) as c:
        js = c.get("/sdk/verilive-capture.js")
        assert js.status_code == 200 and js.content == sdk
        assert js.headers["content-type"].startswith("text/javascript")
        # The SDK re-fetches itself to hash its code; revalidation must give the same bytes.
        again = c.get("/sdk/verilive-capture.js", headers={"If-None-Match": js.headers["etag"]})
        assert again.status_code == 304 and js.headers["etag"] == f'"{digest}"'

        manifest = c.get("/sdk/manifest.json").json()
        assert manifest["sha256"] == digest
        assert manifest["integrity"] == "sha256-" + base64.b64encode(hashlib.sha256(sdk).digest()).decode()
        assert manifest["version"] == "1.3.0"

        key = c.get("/sdk/public_key").json()
        assert key == {"keyId": server_key[0], "publicKey": public_key_b64(server_key[1].read_bytes())}

        demo = c.get("/demo")
        assert demo.status_code == 200 and demo.headers["content-type"].startswith("text/html")
        assert 'from "/sdk/verilive-capture.js"' in demo.text

        paths = c.get("/openapi.json").json()["paths"]
        assert not [p for p in paths if p.startswith("/sdk") or p == "/demo"]


def test_public_key_route_without_a_key_is_a_clear_503() -> None:
    app = FastAPI()
    settings = Settings(capture_private_keys=[], capture_eval_key="off")
    app.state.ctx = SimpleNamespace(settings=settings, engine=lambda name, build: build())
    install_error_handlers(app)
    app.include_router(sdk_router)
    with TestClient(app) as c:
        r = c.get("/sdk/public_key")
    assert r.status_code == 503
    assert "VERILIVE_CAPTURE_PRIVATE_KEYS" in r.json()["message"]
    assert r.json()["error_code"] == "NO_CAPTURE_KEY"


def test_sdk_version_is_what_the_allow_list_reads() -> None:
    from verilive.capture.sdk_allowlist import build_allowlist

    sdk = SDK_PATH.read_bytes()
    entry = build_allowlist(include_python=False).entries.get(hashlib.sha256(sdk).hexdigest())
    assert entry is not None and entry.version == "1.3.0"


def test_vector2_decrypts_in_python() -> None:
    vec = json.loads((FIXTURES / "bundle_vector2.json").read_text("utf-8"))
    blob = base64.b64decode(vec["bundle_b64"])
    assert hashlib.sha256(blob).hexdigest() == vec["bundle_sha256"]
    bundle = KeyRing.from_pem({vec["key_id"]: TEST_KEY.read_bytes()}).decrypt(blob)
    inputs = vector2_inputs()
    assert bundle.image == bytes.fromhex(vec["image_hex"]) == base64.b64decode(inputs["image"])
    assert bundle.photo == bytes.fromhex(vec["photo_hex"]) == base64.b64decode(inputs["photo"])
    assert bundle.external_data == vec["external_data"] == inputs["externalData"]
    assert bundle.nonce == inputs["nonce"] and bundle.timestamp_ms == inputs["timestampMs"]
    assert bundle.context == inputs["context"] and bundle.environment == inputs["environment"]
    assert bundle.sdk == inputs["sdk"]
    assert bundle.integrity_problems == ()
    assert vec["ephemeral_private_pkcs8_b64"] == inputs["ephemeralPkcs8B64"]
    assert blob[4 + 1 + 1 + 16 : 4 + 1 + 1 + 16 + 65].hex() == vec["ephemeral_public_hex"]
    # Python's seal, given the browser's meta text, ephemeral key and IV, makes the same bytes.
    payload = encode_payload(
        vec["meta_json"].encode("utf-8"), bundle.image, bundle.photo, bundle.external_data
    )
    assert hashlib.sha256(payload).hexdigest() == vec["payload_sha256"]
    eph = ec.derive_private_key(int(vec["ephemeral_private_scalar_hex"], 16), ec.SECP256R1())
    again = seal(
        payload,
        vec["recipient_public_key_b64"],
        vec["key_id"],
        ephemeral_key=eph,
        iv=bytes.fromhex(vec["iv_hex"]),
    )
    assert again == blob


# ------------------------------------------------------------------ the demo end to end


def test_demo_capture_decrypts_extracts_and_flags_the_automated_fake_camera(
    driver: Any, server: str, server_key: tuple[str, Path], frame: np.ndarray, video: Path
) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{server}/demo")
    wait_state(driver, {"idle"})
    driver.find_element(By.CSS_SELECTOR, "#dev summary").click()  # the field is folded away (issue 31)
    field = driver.find_element(By.ID, "external")
    field.clear()
    field.send_keys("e2e-order-7")
    driver.find_element(By.ID, "start").click()
    wait_state(driver, {"done"})  # the demo captures by itself once the face is in the oval

    response = driver.execute_script("return window.veriliveDemo.response")
    blob = base64.b64decode(
        run_js(driver, "return sdk.bytesToB64(await window.veriliveDemo.bundle.arrayBuffer());")
    )

    # The bundle decrypts with the server's key, and holds the camera frame and its true context.
    bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
    assert bundle.key_id == server_key[0]
    assert bundle.integrity_problems == ()
    assert bundle.external_data == "e2e-order-7"
    image = cv2.imdecode(np.frombuffer(bundle.image, np.uint8), cv2.IMREAD_COLOR)
    # What is captured is what the preview showed: the centred 3:4 part of the 16:9 frame.
    crop_w = FRAME_H * 3 // 4
    x0 = (FRAME_W - crop_w) // 2
    assert image.shape == (FRAME_H, crop_w, 3)
    assert bundle.context["resolution"] == {"width": crop_w, "height": FRAME_H}
    assert bundle.context["crop"] == {
        "x": x0, "y": 0, "width": crop_w, "height": FRAME_H, "frame_width": FRAME_W, "frame_height": FRAME_H,
    }  # fmt: skip
    # The fake camera played our face frame: the capture is that part of it (after two lossy codecs).
    diff = np.abs(
        cv2.resize(image, (90, 120)).astype(float)
        - cv2.resize(frame[:, x0 : x0 + crop_w], (90, 120)).astype(float)
    )
    assert diff.mean() < 12, diff.mean()
    photo = cv2.imdecode(np.frombuffer(bundle.photo, np.uint8), cv2.IMREAD_COLOR)
    assert photo.shape[:2] == (320, 240)
    assert bundle.context["frames_seen"] >= 1 and bundle.context["frame_timing"]["count"] >= 1
    # Headless Chromium on Linux has no FaceDetector: the face was found by the placement endpoint.
    assert bundle.context["placement"]["status"] == "ready"
    assert bundle.context["placement"]["method"] == "server"
    assert 0.25 <= bundle.context["placement"]["size"] <= 0.7
    # The SDK took the still, then asked for a head turn and recorded a burst starting with the still's
    # own frame; a still picture never turns, so it asked three times, each attempt with its own
    # still, and sent one attempt's still and burst (issue 43).
    assert len(bundle.burst) == 16 and len(bundle.burst_t_ms) == 16
    assert bundle.meta["burst"]["cue"] == "turn-left-then-back"
    assert bundle.meta["burst"]["attempts"] == 3, bundle.meta["burst"]
    assert bundle.meta["burst"]["turn_deg"] < 8, bundle.meta["burst"]
    assert 2800 <= bundle.burst_t_ms[-1] <= 5000  # 16 frames, 200 ms apart (timers may run late)
    first = assert_still_is_its_burst_frame(bundle)
    assert first.shape == (640, 480, 3)  # the 540 x 720 area scaled to 640 on the long side
    assert len(blob) < 1_500_000
    # Chromium names a file-fed fake camera after the file; the SDK reports that as a sign.
    assert bundle.context["camera_label"] == str(video)
    assert bundle.environment["automation"]["camera_is_file"] is True
    assert bundle.sdk == {
        "name": "verilive-capture-js",
        "version": "1.3.0",
        "digest": hashlib.sha256(SDK_PATH.read_bytes()).hexdigest(),
    }
    env = bundle.environment
    assert env["client"] == "browser" and env["webdriver"] is True
    assert env["userAgent"] == driver.execute_script("return navigator.userAgent")
    assert env["automation"]["headless_ua"] is True  # --headless=new still says HeadlessChrome

    # The server extracts the same JPEG.
    with httpx.Client(base_url=server, timeout=60) as c:
        extracted = c.post(
            "/extract_image", content=blob, headers={"content-type": "application/octet-stream"}
        )
    assert extracted.status_code == 200 and extracted.headers["content-type"] == "image/jpeg"
    assert extracted.content == bundle.image

    # The demo's own request: the browser gets the verdict only, never the reasons (docs/security.md).
    assert response["status"] == 200, response
    liveness = response["body"]["capture_liveness"]
    assert liveness == {"accepted": False}, liveness
    # The reasons stay on the server: a webdriver-driven browser with a fake camera is not trusted.
    rejection = last_rejection(server)
    assert "UNTRUSTED_ENVIRONMENT" in rejection
    assert httpx.get(f"{server}/bi_records", timeout=60).json()[-1]["motion3d"] == "cannot_judge"
    # The SDK is the shipped one and its bundle is consistent: those detectors stay quiet.
    assert "SDK_INTEGRITY_VIOLATION" not in rejection
    assert "UNTRUSTED_CORRUPTED_PAYLOAD" not in rejection
    # What the person sees: a refusal, never the reasons; the page saw no turn, so it says to turn.
    verdict = driver.find_element(By.ID, "verdict").text
    assert "not accepted" in verdict
    assert "UNTRUSTED" not in driver.find_element(By.ID, "result").text
    assert driver.execute_script("return window.veriliveDemo.explained") == "not-accepted.turn"
    assert "turn your head" in driver.find_element(By.ID, "explain").text
    # Each cue stays long enough to read; "looking for your face" never comes back after a turn.
    log = driver.execute_script("return window.veriliveDemo.statusLog")
    assert_cues_readable(log)
    statuses = [s for _, s in log]
    assert "looking" not in statuses[statuses.index("turn-left") :], statuses


# ------------------------------------------------------------------ test vectors, both directions


def test_browser_decrypts_and_reproduces_python_vector1(driver: Any, server: str) -> None:
    vec = json.loads((FIXTURES / "bundle_vector1.json").read_text("utf-8"))
    driver.get(f"{server}/sdk/manifest.json")  # any page of the server's origin can import the SDK
    opened = run_js(
        driver,
        "const o = await sdk.openBundle(args[0], args[1]);"
        "const hex = (u) => Array.from(u, (b) => b.toString(16).padStart(2, '0')).join('');"
        "return {keyId: o.keyId, meta: new TextDecoder().decode(o.payload.subarray(4, 4 + "
        "new DataView(o.payload.buffer).getUint32(0))), image: hex(o.image), photo: hex(o.photo),"
        " external: o.externalData, nonce: o.meta.nonce};",
        vec["bundle_b64"],
        test_private_pkcs8_b64(),
    )
    assert opened == {
        "keyId": vec["key_id"],
        "meta": vec["meta_json"],
        "image": vec["image_hex"],
        "photo": vec["photo_hex"],
        "external": vec["external_data"],
        "nonce": "AAECAwQFBgcICQoLDA0ODw",
    }
    # Sealing vector 1's payload with its ephemeral key and IV gives its bytes exactly.
    sealed = run_js(
        driver,
        "const o = await sdk.openBundle(args[0], args[1]);"
        "const out = await sdk.sealPayload(o.payload, {publicKeyB64: args[2], keyId: args[3],"
        " ephemeralPkcs8B64: args[4], iv: args[5]});"
        "return sdk.bytesToB64(out);",
        vec["bundle_b64"],
        test_private_pkcs8_b64(),
        vec["recipient_public_key_b64"],
        vec["key_id"],
        vec["ephemeral_private_pkcs8_b64"],
        base64.b64encode(bytes.fromhex(vec["iv_hex"])).decode(),
    )
    assert sealed == vec["bundle_b64"]


def browser_vector2(driver: Any) -> bytes:
    inputs = {k: v for k, v in vector2_inputs().items() if not k.startswith("_")}
    return build_in_browser(driver, inputs)


def build_in_browser(driver: Any, inputs: dict[str, Any]) -> bytes:
    # Passed as JSON text: WebDriver's own marshalling may reorder keys, JSON.parse keeps them.
    js = "return sdk.bytesToB64(await sdk.buildBundle(JSON.parse(args[0])));"
    return base64.b64decode(run_js(driver, js, json.dumps(inputs, ensure_ascii=False)))


def test_browser_build_bundle_gives_vector2_which_python_decrypts(driver: Any, server: str) -> None:
    vec = json.loads((FIXTURES / "bundle_vector2.json").read_text("utf-8"))
    driver.get(f"{server}/sdk/manifest.json")
    blob = browser_vector2(driver)
    assert base64.b64encode(blob).decode() == vec["bundle_b64"]
    bundle = KeyRing.from_pem({vec["key_id"]: TEST_KEY.read_bytes()}).decrypt(blob)
    assert bundle.integrity_problems == ()
    assert bundle.external_data == "kiosk-7/ñ✓"
    # And a fresh bundle (random key and IV, real environment) from the same browser decrypts too.
    fresh = {k: v for k, v in vector2_inputs().items() if k not in {"ephemeralPkcs8B64", "iv", "environment"}}
    fresh = {k: v for k, v in fresh.items() if not k.startswith("_")}
    fresh["nonce"] = None
    out = build_in_browser(driver, fresh)
    assert out[: 6 + 16] == blob[: 6 + 16] and out[22:87] != blob[22:87]  # same key id, new ephemeral key
    again = KeyRing.from_pem({vec["key_id"]: TEST_KEY.read_bytes()}).decrypt(out)
    assert again.environment["client"] == "browser" and again.environment["webdriver"] is True
    assert again.nonce != bundle.nonce and len(again.nonce) == 22


def test_hidden_webdriver_is_still_an_untrusted_environment(
    server: str, video: Path, server_key: tuple[str, Path]
) -> None:
    pytest.importorskip("selenium")
    ensure_chromium()
    from selenium.webdriver.common.by import By

    drv = make_driver(video, hide_automation=True)
    try:
        drv.get(f"{server}/demo")
        wait_title(drv, "idle")  # the title, not a script: scripts are what leave chromedriver's traces
        drv.find_element(By.ID, "start").click()
        wait_title(drv, "done")
        response = drv.execute_script("return window.veriliveDemo.response")
        blob = base64.b64decode(
            run_js(drv, "return sdk.bytesToB64(await window.veriliveDemo.bundle.arrayBuffer());")
        )
    finally:
        drv.quit()
    bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
    env = bundle.environment
    assert env["webdriver"] is False and env["userAgent"] == PLAIN_CHROME_UA
    assert env["automation"]["headless_ua"] is False
    # What is left: the file-fed camera (and chromedriver's page globals).
    assert env["automation"]["camera_is_file"] is True
    assert response["status"] == 200, response
    assert "rejection" not in response["body"]["capture_liveness"]
    assert "UNTRUSTED_ENVIRONMENT" in last_rejection(server)


# ------------------------------------------------------------------ the head-turn cue, end to end


def centred(picture: np.ndarray, width: int = 960, height: int = 540) -> np.ndarray:
    """A portrait clip frame scaled to the frame's height, centred on a plain grey background (no
    skin colour outside the oval, as a plain wall behind a person)."""
    h, w = picture.shape[:2]
    fg = cv2.resize(picture, (round(w * height / h), height), interpolation=cv2.INTER_AREA)
    out = np.full((height, width, 3), 118, np.uint8)
    x = (width - fg.shape[1]) // 2
    out[:, x : x + fg.shape[1]] = fg
    return out


def run_demo(driver: Any, server: str, shots: Path, name: str) -> tuple[bytes, dict[str, Any]]:
    """Start the demo, screenshot the first cue the person sees, wait for the answer; returns the
    bundle and the demo's response."""
    from selenium.webdriver.common.by import By

    driver.get(f"{server}/demo")
    wait_state(driver, {"idle"})
    driver.find_element(By.ID, "start").click()
    deadline = time.monotonic() + 120
    shot = False
    progress = 0
    while driver.execute_script("return window.veriliveDemo.state") not in {"done", "error"}:
        cue = driver.execute_script("return document.querySelector('.vlc-wrap')?.dataset.cue")
        progress = max(progress, int(driver.execute_script(
            "return document.querySelector('.vlc-wrap')?.dataset.progress || 0"
        )))  # fmt: skip
        if cue and not shot:
            driver.save_screenshot(str(shots / f"{name}-{cue}.png"))
            shot = True
        if time.monotonic() > deadline:
            seen = driver.execute_script("return window.veriliveDemo.statusLog.slice(-20)")
            raw = driver.execute_script("return window.veriliveDemo.capture.placement")
            raise AssertionError(f"the demo did not finish; statuses {seen}; placement {raw}")
        time.sleep(0.1)
    assert shot, "the page never showed the turn cue"
    assert progress >= 75, progress  # the ring filled (placement holding, then the burst's frames)
    wait_state(driver, {"done"})
    driver.save_screenshot(str(shots / f"{name}-done.png"))
    blob = base64.b64decode(
        run_js(driver, "return sdk.bytesToB64(await window.veriliveDemo.bundle.arrayBuffer());")
    )
    return blob, driver.execute_script("return window.veriliveDemo.response")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the screenshots go: VERILIVE_SCREENSHOT_DIR when set (to look at them), else tmp."""
    where = os.environ.get("VERILIVE_SCREENSHOT_DIR")
    path = Path(where) if where else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


# Real head-turn clips (shared/data/face/video_motion): a part that starts frontal and turns, played
# forwards then backwards at 5 frames per second, so the loop has no cut; each clip frame scaled to
# `scale` of the 540-line frame and moved up by `up` of it, so the face sits in the oval. Yaw as the
# service's detector reads it: "left" stays under 3 degrees to 1.8 s, then turns to 37-47 and back by
# 5.8 s; "right" turns to -16 to -25; "d3" to +14 and -14; "capture4" (a 320x240 webcam, upscaled)
# to -20 and +18. Not here: liveportrait/d12.mp4 never holds still (luma change 10.9 between checks,
# over the page's 8), so the page waits for a still face, as it did before issue 43.
TURN_CLIPS = {
    "left": ("antispoof_tranvanluyt/real.mp4", 0.4, 7.4, 1.0, 0.0),
    "right": ("antispoof_tranvanluyt/real.mp4", 6.0, 11.8, 1.0, 0.0),
    "d3": ("liveportrait/d3.mp4", 3.4, 8.2, 0.6, 0.12),
    "capture4": ("headtrackr/capture4.mp4", 0.0, 5.0, 1.0, 0.2),
}


def placed(picture: np.ndarray, scale: float, up: float, width: int = 960, height: int = 540) -> np.ndarray:
    """A clip frame at `scale` of the frame's height, centred, moved up by `up` of the height, on
    plain grey (as a plain wall behind a person)."""
    h, w = picture.shape[:2]
    fh = round(height * scale)
    fg = cv2.resize(picture, (round(w * fh / h), fh), interpolation=cv2.INTER_AREA)
    out = np.full((height, width, 3), 118, np.uint8)
    x = (width - fg.shape[1]) // 2
    y = (height - fh) // 2 - round(up * height)
    top, cut = max(0, y), max(0, -y)
    out[top : top + fh - cut, x : x + fg.shape[1]] = fg[cut:]
    return out


def turn_video(shared_dir: Path, tmp_path: Path, clip: str = "left") -> Path:
    name, start_s, stop_s, scale, up = TURN_CLIPS[clip]
    cap = cv2.VideoCapture(str(shared_dir / "data/face/video_motion" / name))
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    frames = []
    index = 0
    while True:
        ok, f = cap.read()
        if not ok or index / fps > stop_s:
            break
        # 5 frames a second of the part (a frame whenever a new 200 ms step begins)
        if index / fps >= start_s and int(index / fps * 5) != int((index - 1) / fps * 5):
            frames.append(placed(f, scale, up))
        index += 1
    assert len(frames) >= 20, (name, len(frames))
    video = tmp_path / f"turn-{clip}.y4m"
    write_y4m(video, frames + frames[::-1], fps=5)
    return video


def test_a_person_following_the_cue_gives_a_judged_3d_burst(
    server: str, server_key: tuple[str, Path], shared_dir: Path, tmp_path: Path, shots: Path
) -> None:
    """The fake camera plays a real head-turn clip that starts frontal (``TURN_CLIPS["left"]``)."""
    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(turn_video(shared_dir, tmp_path))
    try:
        blob, response = run_demo(drv, server, shots, "turn")
    finally:
        drv.quit()
    bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
    assert bundle.integrity_problems == () and 5 <= len(bundle.burst) <= 16
    info = bundle.meta["burst"]
    assert 1 <= info["attempts"] <= 3
    assert_still_is_its_burst_frame(bundle)
    assert response["status"] == 200, response
    record = httpx.get(f"{server}/bi_records", timeout=60).json()[-1]
    # Judged, not "cannot judge": the turn the page asked for is enough for the server's check.
    assert record["motion3d"] == "3d", (record, info)
    # The automation flags still make the capture UNTRUSTED_ENVIRONMENT; the face part is not flat.
    assert "UNTRUSTED_ENVIRONMENT" in (record["rejection"] or "")


def test_a_hand_held_print_is_not_judged_3d_in_the_browser(
    server: str, models_settings: Settings, shared_dir: Path, tmp_path: Path, shots: Path
) -> None:
    """The fake camera plays a real printed photo tilted in the hand (a simulated plane motion)."""
    from tests.motion_data import print_burst

    pytest.importorskip("selenium")
    ensure_chromium()
    frames = print_burst(shared_dir, models_settings, frames=10)
    video = tmp_path / "print.y4m"
    write_y4m(video, frames + frames[::-1], fps=5)
    drv = make_driver(video)
    try:
        _, response = run_demo(drv, server, shots, "print")
    finally:
        drv.quit()
    assert response["status"] == 200, response
    record = httpx.get(f"{server}/bi_records", timeout=60).json()[-1]
    assert record["motion3d"] in {"cannot_judge", "flat"}, record


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_demo_without_a_configured_key(
    models_settings: Settings, tmp_path: Path, shots: Path, video: Path, mode: str
) -> None:
    """No VERILIVE_CAPTURE_PRIVATE_KEYS (issue 31). ``auto`` on loopback: the local evaluation key
    makes the demo work out of the box. ``off`` (what a non-loopback server gets): the page tells
    the operator the fix and leaves no button to press."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    settings = models_settings.model_copy(
        update={
            "capture_private_keys": [],
            "capture_eval_key": mode,
            "capture_eval_key_path": tmp_path / "eval-key.pem",
            "capture_replay_url": f"sqlite:///{tmp_path}/replay.sqlite3",
            "bi_database_url": f"sqlite:///{tmp_path}/bi.sqlite3",
        }
    )
    drv = make_driver(video)
    try:
        with running_server(settings) as url:
            drv.get(f"{url}/demo")
            if mode == "auto":
                wait_state(drv, {"idle"})
                assert drv.find_element(By.ID, "start").is_enabled()
                assert (tmp_path / "eval-key.pem").is_file()
            else:
                wait_state(drv, {"setup"})
                hint = drv.find_element(By.ID, "hint").text
                assert "verilive keys generate" in hint and "VERILIVE_CAPTURE_PRIVATE_KEYS" in hint
                for button in ("start", "shoot", "again"):  # no dead-end buttons
                    assert not drv.find_element(By.ID, button).is_displayed(), button
                assert not (tmp_path / "eval-key.pem").exists()
            drv.save_screenshot(str(shots / f"no-configured-key-{mode}.png"))
    finally:
        drv.quit()


def test_auto_capture_re_arms_and_the_developer_section_shows_the_request_id(
    server: str, frame: np.ndarray, tmp_path: Path, shots: Path
) -> None:
    """The face arrives after auto-capture's wait ran out (issue 31): the page waits again and takes
    it. The camera plays 3 s of an empty grey wall, then the face, at 5 frames per second; the page's
    wait is shortened to 1.5 s (``?autoTimeoutMs``)."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    rng = np.random.default_rng(0)
    wall = np.clip(128 + rng.normal(0, 4, frame.shape), 0, 255).astype(np.uint8)
    video = tmp_path / "late-face.y4m"
    write_y4m(video, [wall] * 15 + [frame] * 25, fps=5)
    drv = make_driver(video)
    try:
        drv.get(f"{server}/demo?autoTimeoutMs=1500")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        wait_state(drv, {"done"}, timeout_s=120)
        assert drv.switch_to.active_element.get_attribute("id") == "result"  # focus follows the answer
        drv.find_element(By.CSS_SELECTOR, "#dev summary").click()
        drv.save_screenshot(str(shots / "late-face-done.png"))
        assert drv.execute_script("return window.veriliveDemo.rearms") >= 1
        rid = drv.execute_script("return window.veriliveDemo.requestId")
        raw = drv.find_element(By.ID, "raw").text
        assert rid and f"Request id: {rid}" in raw and "log" in raw
    finally:
        drv.quit()


def test_a_blocked_camera_says_how_to_allow_it(server: str, shots: Path) -> None:
    """Camera permission denied (a Chromium content setting, no fake-UI auto-accept): the page names
    the fix, shows no empty preview, offers Try again, and moves focus to the message."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=900,1000",
                "--use-fake-device-for-media-stream"):  # fmt: skip
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"profile.default_content_setting_values.media_stream_camera": 2})
    drv = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    try:
        drv.get(f"{server}/demo")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        deadline = time.monotonic() + 30
        while drv.execute_script("return window.veriliveDemo.state") != "error":
            assert time.monotonic() < deadline, "the page did not report the blocked camera"
            time.sleep(0.1)
        drv.save_screenshot(str(shots / "camera-blocked.png"))
        hint = drv.find_element(By.ID, "hint").text
        assert "blocked" in hint and "Allow" in hint, hint
        assert drv.find_element(By.ID, "again").is_displayed()
        assert not drv.find_element(By.ID, "camera").is_displayed()  # no empty black box
        assert "NotAllowedError" in drv.find_element(By.ID, "raw").get_attribute("textContent")
        assert drv.switch_to.active_element.get_attribute("id") == "hint"
    finally:
        drv.quit()


AXE_VERSION = "4.10.2"
AXE_URL = f"https://registry.npmjs.org/axe-core/-/axe-core-{AXE_VERSION}.tgz"
AXE_SHA256 = "9ea2d2d6917da998122bdacfd3b473e31ead53f4b87146c716a12edf89158100"


@pytest.fixture(scope="module")
def axe_js() -> str:
    """axe-core's browser script, from the npm registry (pinned, sha256-checked, cached)."""
    import tarfile
    import urllib.request

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verilive-test"
    tgz = cache / f"axe-core-{AXE_VERSION}.tgz"
    if not tgz.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        part = tgz.with_suffix(".part")
        with urllib.request.urlopen(AXE_URL, timeout=60) as resp:
            part.write_bytes(resp.read())
        part.replace(tgz)
    digest = hashlib.sha256(tgz.read_bytes()).hexdigest()
    assert digest == AXE_SHA256, f"{tgz}: sha256 {digest}, expected {AXE_SHA256}"
    with tarfile.open(tgz) as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None
        return member.read().decode("utf-8")


def axe_violations(driver: Any, axe_js: str) -> list[dict[str, Any]]:
    driver.execute_script(axe_js)
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'best-practice']})"
        ".then((r) => done(r.violations.map((v) => ({id: v.id, impact: v.impact,"
        " nodes: v.nodes.map((n) => n.target.join(' '))}))), (e) => done([{id: 'axe failed: ' + e}]));"
    )
    return list(result)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_demo_page_has_no_serious_accessibility_violations(
    server: str, axe_js: str, video: Path, shots: Path, scheme: str
) -> None:
    """axe-core (WCAG 2 A and AA, best practices) on the demo page before and after a capture, in
    light and dark mode: no serious or critical violation (issue 31)."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        drv.execute_cdp_cmd(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
        )
        drv.get(f"{server}/demo")
        wait_state(drv, {"idle"})
        found = {"idle": axe_violations(drv, axe_js)}
        drv.find_element(By.ID, "start").click()
        wait_state(drv, {"done"}, timeout_s=120)
        drv.find_element(By.CSS_SELECTOR, "#dev summary").click()
        drv.save_screenshot(str(shots / f"demo-done-{scheme}.png"))
        found["done"] = axe_violations(drv, axe_js)
    finally:
        drv.quit()
    bad = {k: [v for v in vs if v.get("impact") in ("serious", "critical") or "axe failed" in v["id"]]
           for k, vs in found.items()}  # fmt: skip
    assert bad == {"idle": [], "done": []}, bad


def test_phone_viewport_then_try_again_with_get_ready(server: str, video: Path, shots: Path) -> None:
    """At 390×844 (a phone): nothing wider than the screen, the result and the one button to press in
    view; Try again counts down ("Get ready…") before the camera opens again (issue 31)."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        drv.set_window_size(390, 844)
        drv.get(f"{server}/demo")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        wait_state(drv, {"done"}, timeout_s=120)
        drv.save_screenshot(str(shots / "phone-390-done.png"))
        width = drv.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width
        shown = [b.get_attribute("id") for b in drv.find_elements(By.TAG_NAME, "button") if b.is_displayed()]
        assert shown == ["again"], shown
        for element in ("result", "again"):
            top, bottom = drv.execute_script(
                "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
                "return [r.top, r.bottom];",
                element,
            )
            assert top >= 0 and bottom <= 844, (element, top, bottom)
        drv.find_element(By.ID, "again").click()
        assert drv.execute_script("return window.veriliveDemo.state") == "ready"
        assert drv.find_element(By.ID, "hint").text.startswith("Get ready")
        wait_state(drv, {"camera", "sending", "done"}, timeout_s=30)
    finally:
        drv.quit()


# ------------------------------------------------------------------ distinct hints (issue 31)


def scene(frame: np.ndarray, kind: str) -> np.ndarray:
    """A 1280x720 camera picture for one placement problem, made from the real face frame."""
    h, w = frame.shape[:2]
    rng = np.random.default_rng(3)

    def paste(background: np.ndarray, picture: np.ndarray, scale: float) -> np.ndarray:
        small = cv2.resize(picture, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        sh, sw = small.shape[:2]
        y0 = max(0, round(0.45 * h - sh / 2))
        x0 = (w - sw) // 2
        out = background.copy()
        out[y0 : y0 + sh, x0 : x0 + sw] = small[: h - y0]
        return out

    grey = np.clip(118 + rng.normal(0, 4, frame.shape), 0, 255).astype(np.uint8)
    if kind == "move-closer":  # the whole picture at 40 %: a face well inside the oval, but small
        return paste(grey, frame, 0.4)
    if kind == "no-face":  # a skin-coloured wall: no face, whatever its colour
        return np.clip(np.array([120, 150, 200]) + rng.normal(0, 6, frame.shape), 0, 255).astype(np.uint8)
    if kind == "too-dark":
        return (frame.astype(np.float32) * 0.12).astype(np.uint8)
    if kind == "backlit":  # a dim head in front of a bright window
        mask = np.zeros((h, w), np.float32)
        cv2.ellipse(mask, (w // 2, round(0.4 * h)), (round(0.2 * h), round(0.32 * h)), 0, 0, 360, 1.0, -1)
        mask = cv2.GaussianBlur(mask, (0, 0), 6)[..., None]
        return (frame.astype(np.float32) * 0.45 * mask + 240.0 * (1 - mask)).astype(np.uint8)
    raise ValueError(kind)


@pytest.fixture(scope="module")
def texts() -> dict[str, dict[str, str]]:
    return json.loads((SDK_PATH.parent / "messages.json").read_text("utf-8"))


def wait_hint(driver: Any, status: str, timeout_s: float = 45) -> None:
    """Wait until the page has shown `status` for three polls in a row."""
    deadline = time.monotonic() + timeout_s
    streak = 0
    while streak < 3:
        shown = driver.execute_script("return window.veriliveDemo.hint")
        streak = streak + 1 if shown == status else 0
        if time.monotonic() > deadline:
            seen = driver.execute_script("return window.veriliveDemo.statuses.slice(-12)")
            raise AssertionError(f"the page shows {shown!r}, not {status!r} (statuses {seen})")
        time.sleep(0.25)


@pytest.mark.parametrize("kind", ["move-closer", "no-face", "too-dark", "backlit"])
def test_each_placement_problem_gets_its_own_hint(
    server: str, frame: np.ndarray, tmp_path: Path, shots: Path, texts: dict[str, dict[str, str]], kind: str
) -> None:
    """A small face inside the oval is told to come closer (not "put your face in the oval"), a
    skin-coloured wall has no face (not "move back"), a dark picture gets advice on light (not "no
    face"), and a face against a bright window is told it is backlit. Headless Chromium has no
    FaceDetector, so the placement endpoint finds the faces. Nothing is captured meanwhile."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    video = tmp_path / f"{kind}.y4m"
    write_y4m(video, scene(frame, kind))
    drv = make_driver(video)
    try:
        drv.get(f"{server}/demo?autoTimeoutMs=600000")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        wait_hint(drv, kind)
        drv.save_screenshot(str(shots / f"hint-{kind}.png"))
        assert drv.find_element(By.ID, "hint").text == texts["en"][kind]
        # The hint is over the preview, in view.
        hint_box, preview = drv.execute_script(
            "const a = document.getElementById('hint').getBoundingClientRect();"
            "const b = document.querySelector('.vlc-wrap').getBoundingClientRect();"
            "return [[a.top, a.bottom], [b.top, b.bottom]];"
        )
        assert preview[0] <= hint_box[0] < hint_box[1] <= preview[1], (hint_box, preview)
        statuses = drv.execute_script("return window.veriliveDemo.statuses")
        assert "ready" not in statuses and drv.execute_script("return window.veriliveDemo.state") == "camera"
        # The overlay is decoration for screen readers; the video is labelled.
        assert (
            drv.execute_script("return document.querySelector('.vlc-wrap svg').getAttribute('aria-hidden')")
            == "true"
        )
        assert drv.execute_script(
            "return document.querySelector('.vlc-wrap video').getAttribute('aria-label')"
        )
    finally:
        drv.quit()


def test_the_page_speaks_german_from_the_same_table(
    server: str, video: Path, shots: Path, texts: dict[str, dict[str, str]]
) -> None:
    """?lang=de: the page's texts, the hints and the result come from the table's German column."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    de = texts["de"]
    try:
        drv.get(f"{server}/demo?lang=de")
        wait_state(drv, {"idle"})
        assert drv.execute_script("return document.documentElement.lang") == "de"
        assert drv.find_element(By.TAG_NAME, "h1").text == de["page.title"]
        assert drv.find_element(By.ID, "hint").text == de["idle"]
        drv.find_element(By.ID, "start").click()
        wait_state(drv, {"done"}, timeout_s=120)
        drv.save_screenshot(str(shots / "german-done.png"))
        assert drv.find_element(By.ID, "verdict").text in (de["accepted"], de["not-accepted"])
        assert drv.find_element(By.ID, "again").text == de["page.again"]
        shown = set(drv.execute_script("return window.veriliveDemo.statuses"))
        assert {"turn-left", "ready"} <= shown
    finally:
        drv.quit()


def test_placement_rules_in_the_browser(driver: Any, server: str) -> None:
    """The SDK's placement rules on synthetic frames, run in Chromium: one status per problem, the
    light rules included (too bright has no camera scene of its own), and the captured area."""
    driver.get(f"{server}/demo")
    out = run_js(
        driver,
        """
        const w = 54, h = 72;
        const frame = (bg, face = null, box = null) => {
          const px = new Uint8ClampedArray(w * h * 4);
          for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
            const inX = box && x >= box.x * w && x < (box.x + box.w) * w;
            const inFace = inX && y >= box.y * h && y < (box.y + box.h) * h;
            const v = inFace ? face : bg;
            px.set([v, v, v, 255], 4 * (y * w + x));
          }
          return px;
        };
        const good = { x: 0.31, y: 0.24, w: 0.38, h: 0.38 };
        const P = (faces, px) => sdk.facePlacement(faces, px, w, h).status;
        return {
          ready: P([good], frame(120, 140, good)),
          noFace: P([], frame(120)),
          dark: P([], frame(20)),
          darkFace: P([good], frame(30, 30, good)),
          backlit: P([good], frame(235, 70, good)),
          bright: P([good], frame(200, 252, good)),
          small: P([{ x: 0.45, y: 0.38, w: 0.1, h: 0.12 }], frame(120, 140)),
          offCentre: P([{ x: 0.0, y: 0.24, w: 0.38, h: 0.38 }], frame(120, 140)),
          big: P([{ x: 0.05, y: 0.02, w: 0.9, h: 0.85 }], frame(120, 140)),
          twoFaces: P([good, { x: 0.7, y: 0.3, w: 0.25, h: 0.3 }], frame(120, 140, good)),
          smallSecond: P([good, { x: 0.8, y: 0.1, w: 0.05, h: 0.06 }], frame(120, 140, good)),
          heuristicDark: sdk.heuristicPlacement(frame(20), w, h).status,
          crops: [[1280, 720], [640, 480], [720, 1280], [480, 640]]
            .map(([W, H]) => sdk.cropRect(W, H, 0.75, 480)),
          whole: sdk.cropRect(1280, 720, null, 480),
        };
        """,
    )
    assert out.pop("crops") == [
        {"x": 370, "y": 0, "w": 540, "h": 720},
        {"x": 80, "y": 0, "w": 480, "h": 480},  # 640x480: kept at 480p, not 360x480
        {"x": 0, "y": 160, "w": 720, "h": 960},
        {"x": 0, "y": 0, "w": 480, "h": 640},
    ]
    assert out.pop("whole") == {"x": 0, "y": 0, "w": 1280, "h": 720}
    assert out == {
        "ready": "ready",
        "noFace": "no-face",
        "dark": "too-dark",
        "darkFace": "too-dark",
        "backlit": "backlit",
        "bright": "too-bright",
        "small": "move-closer",
        "offCentre": "center",
        "big": "move-back",
        "twoFaces": "one-face",
        "smallSecond": "ready",
        "heuristicDark": "too-dark",
    }


def test_the_page_works_from_the_keyboard(server: str, video: Path) -> None:
    """Tab to the button, Enter to start; focus follows the result; Tab then Enter tries again."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        drv.get(f"{server}/demo")
        wait_state(drv, {"idle"})
        body = drv.find_element(By.TAG_NAME, "body")
        for _ in range(6):
            if drv.switch_to.active_element.get_attribute("id") == "start":
                break
            (drv.switch_to.active_element if _ else body).send_keys(Keys.TAB)
        assert drv.switch_to.active_element.get_attribute("id") == "start"
        drv.switch_to.active_element.send_keys(Keys.ENTER)
        wait_state(drv, {"done"}, timeout_s=120)
        assert drv.switch_to.active_element.get_attribute("id") == "result"
        drv.switch_to.active_element.send_keys(Keys.TAB)
        assert drv.switch_to.active_element.get_attribute("id") == "again"
        drv.switch_to.active_element.send_keys(Keys.ENTER)
        assert drv.execute_script("return window.veriliveDemo.state") == "ready"
    finally:
        drv.quit()


FAKE_FACE_DETECTOR = """
window.FaceDetector = class {
  constructor() { window.__faceDetectorCalls = 0; }
  async detect(video) {
    window.__faceDetectorCalls += 1;
    const [x, y, width, height] = window.__fakeBox;
    return [{ boundingBox: { x, y, width, height }, landmarks: [] }];
  }
};
"""


@pytest.mark.parametrize(
    ("box", "status"),
    [((520, 120, 240, 270), "ready"), ((590, 200, 100, 110), "move-closer"), ((40, 120, 240, 270), "center")],
)
def test_a_browser_face_detector_is_used_in_the_captured_area(
    server: str, video: Path, box: tuple[int, int, int, int], status: str
) -> None:
    """Where the browser has FaceDetector (a stand-in here: Chromium on Linux has none), its boxes,
    in the 1280x720 camera frame, are mapped into the captured 540x720 area, and no frame goes to
    the placement endpoint. A face left of the captured area (x 40-280) is off centre."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        drv.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument",
            {"source": FAKE_FACE_DETECTOR + f"window.__fakeBox = {list(box)};"},
        )
        drv.get(f"{server}/demo?autoTimeoutMs=600000")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        wait_hint(drv, "turn-left" if status == "ready" else status)
        placement = drv.execute_script("return window.veriliveDemo.statuses")
        assert drv.execute_script("return window.__faceDetectorCalls") > 3
        sent = drv.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter(e => e.name.includes('/sdk/placement')).length"
        )
        assert sent == 0
        if status == "ready":
            assert "ready" in placement and "looking" not in placement
            wait_state(drv, {"done"}, timeout_s=120)
            bundle = drv.execute_script("return window.veriliveDemo.response")
            assert bundle["status"] == 200
        else:
            assert "ready" not in placement
    finally:
        drv.quit()


# ------------------------------------------------------------------ the turn as a person meets it (issue 43)


@pytest.fixture(scope="module")
def trusted_server(
    models_settings: Settings, server_key: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The capture server with VERILIVE_CAPTURE_MOTION3D=require, as issue 43 makes the default. Many
    captures of one test browser in a row are not a burst of attacks here (limit 1000), and the still
    photo camera gives the same image every time (hashes kept 1 s)."""
    tmp = tmp_path_factory.mktemp("capture-server-require")
    settings = models_settings.model_copy(
        update={
            "capture_private_keys": [str(server_key[1])],
            "capture_replay_url": f"sqlite:///{tmp}/replay.sqlite3",
            "bi_database_url": f"sqlite:///{tmp}/bi.sqlite3",
            "capture_motion3d": "require",
            "capture_device_captures_per_minute": 1000,
            "capture_image_hash_ttl_s": 1.0,
        }
    )
    with running_server(settings) as url:
        yield url


@pytest.fixture
def trusted_camera(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a person's own browser and camera give: for this test only, the test browser's automation
    traces and its file-fed camera are not held against the capture (the environment detector is
    stubbed); every other check runs as in production."""
    import verilive.capture.engine as capture_engine

    monkeypatch.setattr(capture_engine, "untrusted_environment", lambda bundle: [])


def still_yaw(server: str, bundle: Any) -> float:
    """The still's yaw as the service's detector reads it (the placement endpoint, 240x320)."""
    still = decode(bundle.image)
    small = cv2.resize(
        still, (240, round(240 * still.shape[0] / still.shape[1])), interpolation=cv2.INTER_AREA
    )
    body = httpx.post(
        f"{server}/sdk/placement",
        content=cv2.imencode(".jpg", small)[1].tobytes(),
        headers={"content-type": "image/jpeg"},
        timeout=60,
    ).json()
    assert body["faces"], body
    return float(body["faces"][0]["yaw"])


@pytest.mark.parametrize("clip", os.environ.get("VERILIVE_TURN_CLIPS", "left,d3").split(","))
def test_a_real_head_turn_through_the_page_is_accepted_with_require(
    trusted_server: str,
    trusted_camera: None,
    server_key: tuple[str, Path],
    shared_dir: Path,
    tmp_path: Path,
    shots: Path,
    clip: str,
) -> None:
    """Issue 43's judge: a real head-turn clip as the camera, through the demo page, accepted with
    require; the still is the burst's first frame and frontal, the answer within 12 s of the click,
    and the hints before the turn do not flicker."""
    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(turn_video(shared_dir, tmp_path, clip))
    try:
        blob, response = run_demo(drv, trusted_server, shots, f"require-{clip}")
        demo = drv.execute_script("return window.veriliveDemo")
    finally:
        drv.quit()
    bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
    info = bundle.meta["burst"]
    record = httpx.get(f"{trusted_server}/bi_records", timeout=60).json()[-1]
    assert response["body"]["capture_liveness"] == {"accepted": True}, json.dumps([record, info])
    assert record["motion3d"] == "3d" and not record["rejection"], record
    assert_still_is_its_burst_frame(bundle)
    assert abs(still_yaw(trusted_server, bundle)) <= 15, info  # taken frontal, before the turn
    assert demo["turn"]["seen"] is True and info["turn_deg"] >= 8, info
    elapsed = demo["resultAt"] - demo["clickedAt"]
    assert elapsed <= 12_000, elapsed
    hints = hint_changes(demo["statusLog"])
    assert len(hints) <= 4, hints
    assert_cues_readable(demo["statusLog"])


def test_a_still_photo_is_refused_with_require_and_the_page_asks_for_the_turn(
    trusted_server: str, trusted_camera: None, server_key: tuple[str, Path], video: Path, shots: Path
) -> None:
    """A still photo never turns: the page asks again (each time with a new frontal still), sends
    one attempt, the server refuses it (UNTRUSTED_CONTENT under require), and the page tells the
    person to turn their head when asked."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        blob, response = run_demo(drv, trusted_server, shots, "require-still")
        explained = drv.execute_script("return window.veriliveDemo.explained")
        demo = drv.execute_script("return window.veriliveDemo")
        print(f"still photo: click to result {demo['resultAt'] - demo['clickedAt']} ms")
        explain = drv.find_element(By.ID, "explain").text
    finally:
        drv.quit()
    assert response["body"]["capture_liveness"] == {"accepted": False}, response
    record = httpx.get(f"{trusted_server}/bi_records", timeout=60).json()[-1]
    assert "UNTRUSTED_CONTENT" in (record["rejection"] or ""), record
    assert record["motion3d"] != "3d", record
    bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
    assert bundle.meta["burst"]["attempts"] == 3
    assert_still_is_its_burst_frame(bundle)
    assert explained == "not-accepted.turn" and "turn your head" in explain, explain


def test_take_photo_now_during_the_cue_takes_it_now(
    server: str, server_key: tuple[str, Path], video: Path, shots: Path
) -> None:
    """ "Take photo now" pressed while the turn cue shows: the page sends at once the shortest valid
    burst of this attempt (0.8 s or more), with no further attempts (issue 43: it ran all three)."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        drv.get(f"{server}/demo?autoTimeoutMs=600000")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        deadline = time.monotonic() + 60
        while not drv.execute_script("return document.querySelector('.vlc-wrap')?.dataset.cue"):
            assert time.monotonic() < deadline, "no cue"
            time.sleep(0.05)
        pressed = time.monotonic()
        drv.find_element(By.ID, "shoot").click()
        wait_state(drv, {"sending", "done"}, timeout_s=30)
        took = time.monotonic() - pressed
        wait_state(drv, {"done"})
        blob = base64.b64decode(
            run_js(drv, "return sdk.bytesToB64(await window.veriliveDemo.bundle.arrayBuffer());")
        )
    finally:
        drv.quit()
    assert took < 2.5, took
    bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
    assert bundle.meta["burst"]["attempts"] == 1, bundle.meta["burst"]
    assert len(bundle.burst) < 16 and bundle.burst_t_ms[-1] < 2400, bundle.burst_t_ms
    assert_still_is_its_burst_frame(bundle)


def test_desktop_page_does_not_scroll_while_the_camera_is_on(server: str, video: Path, shots: Path) -> None:
    """At 1280x757 (issue 43: the page scrolled) the title, the preview, the hint and the button fit."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    drv = make_driver(video)
    try:
        drv.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 757, "deviceScaleFactor": 1, "mobile": False},
        )
        drv.get(f"{server}/demo?autoTimeoutMs=600000")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        deadline = time.monotonic() + 60
        while not drv.execute_script("return document.querySelector('.vlc-wrap')?.dataset.cue"):
            assert time.monotonic() < deadline, "no cue"
            time.sleep(0.05)
        drv.save_screenshot(str(shots / "desktop-1280x757-cue.png"))
        size = drv.execute_script(
            "return [document.documentElement.scrollHeight, window.innerHeight,"
            " document.getElementById('shoot').getBoundingClientRect().bottom]"
        )
        assert size[0] <= size[1] and size[2] <= size[1], size
    finally:
        drv.quit()


def test_hints_hold_steady_on_a_restless_picture(
    server: str, frame: np.ndarray, tmp_path: Path, shots: Path
) -> None:
    """The camera switches every 0.4 s between a small face, a skin-coloured wall and a dark picture
    (three hints): the page changes its hint at most every 0.8 s, not with every check."""
    from selenium.webdriver.common.by import By

    pytest.importorskip("selenium")
    ensure_chromium()
    pictures = []
    for kind in ("move-closer", "no-face", "too-dark"):
        pictures += [scene(frame, kind)] * 2
    video = tmp_path / "restless.y4m"
    write_y4m(video, pictures * 3, fps=5)
    drv = make_driver(video)
    try:
        drv.get(f"{server}/demo?autoTimeoutMs=600000")
        wait_state(drv, {"idle"})
        drv.find_element(By.ID, "start").click()
        time.sleep(10)
        log = drv.execute_script("return window.veriliveDemo.statusLog")
    finally:
        drv.quit()
    hints = hint_changes(log)
    gaps = np.diff([t for t, _ in hints])
    print(f"hint changes in 10 s: {len(hints)}, shortest gap {gaps.min() if len(gaps) else None} ms")
    assert len(hints) >= 2, hints  # it does show what is wrong
    assert gaps.min() >= 790, hints
    assert len(hints) <= 13, hints


@pytest.mark.skipif(not os.environ.get("VERILIVE_TURN_RUNS"), reason="a measurement: VERILIVE_TURN_RUNS=N")
def test_measure_real_head_turns_through_the_page(
    trusted_server: str, trusted_camera: None, server_key: tuple[str, Path], shared_dir: Path, tmp_path: Path
) -> None:
    """Issue 43's measurement: every clip of TURN_CLIPS, VERILIVE_TURN_RUNS times, alternately at
    1280x757 and 390x844, through the demo with require: accepted share, time from the click to the
    answer, attempts, the turn the page measured, the still's yaw and the hints before the cue.
    Prints one line per run and the summary; writes turn-runs.json to VERILIVE_SCREENSHOT_DIR."""
    pytest.importorskip("selenium")
    ensure_chromium()
    rows = []
    for clip in TURN_CLIPS:
        video = turn_video(shared_dir, tmp_path, clip)
        for run in range(int(os.environ["VERILIVE_TURN_RUNS"])):
            size = (1280, 757) if run % 2 == 0 else (390, 844)
            drv = make_driver(video)
            try:
                drv.execute_cdp_cmd(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": False},
                )
                blob, response = run_demo(drv, trusted_server, tmp_path, f"{clip}-{run}")
                demo = drv.execute_script("return window.veriliveDemo")
            finally:
                drv.quit()
            bundle = KeyRing.from_pem({server_key[0]: server_key[1].read_bytes()}).decrypt(blob)
            record = httpx.get(f"{trusted_server}/bi_records", timeout=60).json()[-1]
            row = {
                "clip": clip,
                "viewport": f"{size[0]}x{size[1]}",
                "accepted": response["body"]["capture_liveness"]["accepted"],
                "motion3d": record["motion3d"],
                "rejection": record["rejection"],
                "attempts": bundle.meta["burst"]["attempts"],
                "turn_deg": bundle.meta["burst"]["turn_deg"],
                "still_yaw": still_yaw(trusted_server, bundle),
                "click_to_result_ms": demo["resultAt"] - demo["clickedAt"],
                "hints_before_cue": len(hint_changes(demo["statusLog"])),
            }
            print(json.dumps(row))
            rows.append(row)
    accepted = sum(r["accepted"] for r in rows)
    times = sorted(r["click_to_result_ms"] for r in rows)
    median = times[len(times) // 2]
    print(f"accepted {accepted}/{len(rows)}; click to result median {median} ms, max {times[-1]} ms")
    out = Path(os.environ.get("VERILIVE_SCREENSHOT_DIR", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    (out / "turn-runs.json").write_text(json.dumps(rows, indent=1))

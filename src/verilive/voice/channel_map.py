"""The telephone channel map (docs/telephone.md): a linear map of telephone-band CAM++ embeddings
towards the wideband embedding of the same recording.

Fitted by ``python -m eval.telephone --write-map`` (ridge regression towards the identity on the
unit embeddings of recordings heard wideband and through simulated phone lines: no speaker
labels), shipped in the package beside this wrapper and loaded through the model store
(manifest ``packaged``, id ``telephone_map``). Matching applies it to every telephone view before
comparing (``templates.pair_views``); the stored templates keep the unmapped views, so a new map
needs no re-enrolment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verilive.models.store import packaged_path

PACKAGED_ID = "telephone_map"


@dataclass(frozen=True)
class TelephoneMap:
    matrix: np.ndarray  # float32 (dim, dim): mapped = v @ matrix

    @classmethod
    def packaged(cls) -> TelephoneMap:
        m = np.load(packaged_path(PACKAGED_ID), allow_pickle=False).astype(np.float32)
        if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.all(np.isfinite(m)):
            raise ValueError(f"the telephone map must be a finite square matrix, got shape {m.shape}")
        return cls(m)

    @classmethod
    def identity(cls, dim: int = 192) -> TelephoneMap:
        return cls(np.eye(dim, dtype=np.float32))

    def __call__(self, v: np.ndarray) -> np.ndarray:
        return (np.asarray(v, np.float32) @ self.matrix).astype(np.float32)

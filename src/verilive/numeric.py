"""The small math every engine needs, written once: logistic, log-odds and softmax.

Each is stable at the extremes: ``sigmoid`` never overflows (it branches on the sign), ``logit``
clips its probabilities to [eps, 1 - eps] so that a model's 0 or 1 becomes a large finite log-odds,
and ``softmax`` subtracts the row maximum before exponentiating.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["P_EPS", "logit", "sigmoid", "sigmoid_array", "softmax"]

P_EPS = 1e-6  # default probability clip of logit: |log-odds| <= 13.8


def sigmoid(x: float) -> float:
    """1 / (1 + exp(-x)) for a scalar, without overflow for any finite x."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def sigmoid_array(x: np.ndarray) -> np.ndarray:
    """Element-wise logistic of an array (float64), without overflow."""
    z = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def logit(p: np.ndarray, eps: float = P_EPS) -> np.ndarray:
    """Log-odds log(p / (1 - p)) of probabilities clipped to [eps, 1 - eps] (float64)."""
    q = np.clip(np.asarray(p, dtype=np.float64), eps, 1.0 - eps)
    return np.log(q) - np.log1p(-q)


def softmax(z: np.ndarray) -> np.ndarray:
    """Probabilities along the last axis (float64)."""
    x = np.asarray(z, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

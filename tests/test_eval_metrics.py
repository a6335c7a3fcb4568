"""The evaluation and training scripts' own statistics (common/metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest
from common.metrics import bootstrap_eer, eer


def _trials(rng: np.random.Generator, groups: int, per_group: int) -> tuple[np.ndarray, ...]:
    """Targets ~ N(1, 1), non-targets ~ N(-1, 1); every clip of a group shares its group's offset
    (speaker effect), so clips of one group are correlated."""
    n = groups * per_group
    g = np.repeat(np.arange(groups), per_group)
    offset = rng.normal(0, 1.0, groups)[g]
    y = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    s = np.concatenate([1 + offset + 0.3 * rng.normal(size=n), -1 - offset + 0.3 * rng.normal(size=n)])
    return s, y, np.concatenate([g, g + groups])


def test_bootstrap_eer_interval() -> None:
    s, y, g = _trials(np.random.default_rng(0), groups=30, per_group=8)
    point = eer(s, y)[0]
    lo, hi = bootstrap_eer(s, y, g, n_boot=400)
    assert 0 <= lo < point < hi <= 0.5
    # treating correlated clips as independent understates the uncertainty
    lo1, hi1 = bootstrap_eer(s, y, np.arange(s.size), n_boot=400)
    assert hi1 - lo1 < 0.7 * (hi - lo)
    # the same seed gives the same interval
    assert bootstrap_eer(s, y, g, n_boot=400) == (lo, hi)


def test_bootstrap_eer_separable_and_bad_input() -> None:
    y = np.array([True] * 5 + [False] * 5)
    s = np.where(y, 1.0, -1.0)
    assert bootstrap_eer(s, y, np.arange(10), n_boot=50) == (0.0, 0.0)
    with pytest.raises(ValueError, match="one entry per score"):
        bootstrap_eer(s, y, np.arange(9))

"""The evaluation and training scripts' own statistics (common/metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest
from common.metrics import bootstrap_eer, eer, eer_between


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


def test_eer_is_interpolated_between_operating_points() -> None:
    # targets 1, 2, 3; non-targets 0, 2.5. Accepting >= 2: miss 1/3, false alarm 1/2; >= 2.5: miss
    # 2/3, false alarm 1/2. The rates cross half-way, at 1/2 (the nearest-point rule, which this
    # module does not use, would report the mean at the first of the two points: 5/12).
    s = np.array([1.0, 2.0, 3.0, 0.0, 2.5])
    y = np.array([True, True, True, False, False])
    assert eer(s, y) == pytest.approx((0.5, 2.25))
    assert eer_between(s[y], s[~y]) == pytest.approx(0.5)


def test_eer_between_empty_or_unmeasured_is_nan() -> None:
    assert np.isnan(eer_between(np.array([]), np.array([0.0, 1.0])))
    assert np.isnan(eer_between(np.array([1.0, 2.0]), np.array([])))
    assert np.isnan(eer_between(np.array([1.0, np.nan]), np.array([0.0])))
    assert eer_between(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 0.0

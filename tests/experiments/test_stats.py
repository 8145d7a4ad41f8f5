"""Paired differences and their Student-t intervals against hand-worked values and scipy."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments import stats


def test_hand_worked_interval():
  # d = (0.02, 0.04, 0.00): mean 0.02, sd 0.02, t_{0.975, 2} = 4.302653, half = 4.302653 *
  # 0.02 / sqrt(3) = 0.0496827.
  x = {0: 0.82, 1: 0.84, 2: 0.80}
  y = {0: 0.80, 1: 0.80, 2: 0.80}
  d = stats.paired_difference(x, y)
  assert d.n == 3 and d.mean == pytest.approx(0.02)
  assert d.low == pytest.approx(0.02 - 0.0496827, abs=1e-6)
  assert d.high == pytest.approx(0.02 + 0.0496827, abs=1e-6)
  assert not d.excludes_zero


@pytest.mark.parametrize('seed', range(6))
def test_interval_excludes_zero_exactly_when_the_paired_t_test_rejects(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(3, 9))
  y = rng.random(n)
  x = y + rng.normal(loc=rng.choice([0.0, 0.05]), scale=0.03, size=n)
  d = stats.paired_difference(dict(enumerate(x)), dict(enumerate(y)))
  diffs = x - y
  assert d.mean == pytest.approx(diffs.mean())
  half = scipy_stats.t.ppf(0.975, n - 1) * diffs.std(ddof=1) / math.sqrt(n)
  assert (d.low, d.high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
  assert d.excludes_zero == (scipy_stats.ttest_rel(x, y).pvalue < 0.05)


def test_pairs_only_shared_finite_seeds():
  d = stats.paired_difference({0: 0.5, 1: 0.7, 2: float('nan'), 5: 0.9},
                              {0: 0.4, 1: 0.5, 2: 0.3, 3: 0.2})
  assert d.n == 2 and d.mean == pytest.approx(0.15)
  one = stats.paired_difference({0: 0.5}, {0: 0.4})
  assert one.n == 1 and math.isnan(one.low) and not one.excludes_zero
  assert stats.paired_difference({0: 0.5}, {1: 0.4}) is None
  with pytest.raises(ValueError, match='confidence'):
    stats.paired_difference({0: 1.0}, {0: 1.0}, confidence=1.5)


def test_mean_std():
  assert stats.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
  assert stats.mean_std([4.0]) == (4.0, 0.0)
  assert stats.mean_std([1.0, None, float('nan'), 3.0]) == (2.0, pytest.approx(math.sqrt(2)))
  assert all(math.isnan(v) for v in stats.mean_std([]))

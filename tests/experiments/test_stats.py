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


def test_p_value_is_scipys_paired_t_test():
  x = {0: 0.82, 1: 0.85, 2: 0.80, 3: 0.86}
  y = {0: 0.80, 1: 0.80, 2: 0.81, 3: 0.82}
  d = stats.paired_difference(x, y)
  expected = scipy_stats.ttest_rel([x[k] for k in range(4)], [y[k] for k in range(4)])
  assert d.p_value == pytest.approx(expected.pvalue, rel=1e-9)
  assert d.sd == pytest.approx(np.std([0.02, 0.05, -0.01, 0.04], ddof=1))


def test_holm_against_a_hand_worked_case():
  # m = 4; sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (max with 0.06), 0.5; NaN ignored.
  adjusted = stats.holm([0.03, 0.5, 0.01, float('nan'), 0.02])
  assert adjusted[0] == pytest.approx(0.06) and adjusted[1] == pytest.approx(0.5)
  assert adjusted[2] == pytest.approx(0.04) and math.isnan(adjusted[3])
  assert adjusted[4] == pytest.approx(0.06)
  assert stats.holm([0.9, 0.8]) == [1.0, 1.0]


@pytest.mark.parametrize('seed', range(4))
def test_holm_against_a_plain_loop(seed):
  rng = np.random.default_rng(seed)
  p = rng.random(7) ** 3
  order = np.argsort(p)
  reference = np.empty(7)
  for rank, i in enumerate(order):
    reference[i] = max(min(1.0, (7 - r) * p[order[r]]) for r in range(rank + 1))
  np.testing.assert_allclose(stats.holm(list(p)), reference)


def test_power_and_minimal_detectable_difference_agree_with_a_simulation():
  rng = np.random.default_rng(0)
  sd, n = 0.02, 10
  mdd = stats.minimal_detectable_difference(sd, n)
  # The textbook approximation (t_{0.975} + t_{0.8}) sd / sqrt(n) is close to the exact value.
  approx = (scipy_stats.t.ppf(0.975, n - 1) + scipy_stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
  assert mdd == pytest.approx(approx, rel=0.05)
  assert stats.paired_power(mdd, sd, n) == pytest.approx(0.8, abs=1e-6)
  draws = rng.normal(mdd, sd, size=(20000, n))
  rejected = scipy_stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05
  assert rejected.mean() == pytest.approx(0.8, abs=0.015)


def test_seeds_needed_is_the_smallest_n_with_enough_power():
  # The audit's numbers: a paired sd of 0.0118 needs about 12 seeds to detect one point.
  n = stats.seeds_needed(0.0118, 0.01)
  assert stats.paired_power(0.01, 0.0118, n) >= 0.8 > stats.paired_power(0.01, 0.0118, n - 1)
  assert stats.minimal_detectable_difference(0.0118, n) <= 0.01
  assert stats.seeds_needed(0.0, 0.01) == 2
  with pytest.raises(ValueError, match='difference'):
    stats.seeds_needed(0.01, 0.0)
  with pytest.raises(ValueError, match="sd must be a finite number >= 0, got -0.01"):
    stats.seeds_needed(-0.01, 0.01)
  with pytest.raises(ValueError, match='power must be a number in'):
    stats.minimal_detectable_difference(0.01, 5, power=1.0)


def test_plateau_compares_the_last_window_with_the_window_before():
  flat = [0.5] * 5 + [0.80, 0.81, 0.80, 0.82] + [0.81, 0.815, 0.82, 0.81]
  last, previous, plateaued = stats.plateau(flat, window=4, tolerance=0.01)
  assert plateaued
  assert last == pytest.approx(np.mean([0.81, 0.815, 0.82, 0.81]))
  assert previous == pytest.approx(np.mean([0.80, 0.81, 0.80, 0.82]))
  climbing = [0.1 * i for i in range(1, 9)]  # last 4 mean 0.65, the 4 before 0.25
  last, previous, plateaued = stats.plateau(climbing, window=4, tolerance=0.01)
  assert not plateaued and last - previous == pytest.approx(0.4)
  assert stats.plateau(climbing, window=4, tolerance=0.5)[2]
  falling = list(reversed(climbing))
  assert not stats.plateau(falling, window=4, tolerance=0.01)[2]
  # Missing rounds are skipped; too few values or a NaN in the windows: not plateaued.
  assert stats.plateau([None, 0.5, None, 0.5, 0.5, 0.5], window=2, tolerance=0.0)[2]
  last, _, plateaued = stats.plateau([0.5] * 7, window=4, tolerance=0.01)
  assert not plateaued and np.isnan(last)
  assert not stats.plateau([0.5] * 7 + [float('nan')], window=4, tolerance=1.0)[2]


def test_train_loss_rise():
  assert stats.train_loss_rise([3.0, 2.0, 1.0]) == 0.0
  # Running minimum 1.0 before the rise to 2.5, later 0.5 before 0.7: the largest rise is 1.5.
  assert stats.train_loss_rise([3.0, 1.0, 2.5, 0.5, 0.7]) == pytest.approx(1.5)


def test_mean_curve_skips_missing_rounds():
  assert stats.mean_curve([[0.2, None, 0.6], [0.4, 0.5]]) == pytest.approx([0.3, 0.5, 0.6])
  assert stats.mean_curve([[None], [None]]) == [None] and stats.mean_curve([]) == []


def _window_noise_reference(values):
  """Least squares by the normal equations, then the residuals' sd (n - 2) over sqrt(n)."""
  n = len(values)
  xs = list(range(n))
  x_mean, y_mean = sum(xs) / n, sum(values) / n
  slope = (sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, values))
           / sum((x - x_mean) ** 2 for x in xs))
  residuals = [y - (y_mean + slope * (x - x_mean)) for x, y in zip(xs, values)]
  return math.sqrt(sum(r * r for r in residuals) / (n - 2)) / math.sqrt(n)


def test_window_noise_hand_worked_and_against_a_loop():
  # A line is all trend: no noise. 0, 1, 0, 1: the line 0.2 + 0.2 x leaves -0.2, 0.6, -0.6, 0.2,
  # squares 0.8 over 2 degrees of freedom = 0.4, over n = 4: 0.1, root 0.3162.
  assert stats.window_noise([0.5, 0.6, 0.7, 0.8]) == pytest.approx(0.0, abs=1e-12)
  assert stats.window_noise([0.0, 1.0, 0.0, 1.0]) == pytest.approx(math.sqrt(0.1))
  rng = np.random.default_rng(3)
  for n in (3, 5, 20):
    values = list(rng.uniform(0.6, 0.9, n))
    assert stats.window_noise(values) == pytest.approx(_window_noise_reference(values))
  assert math.isnan(stats.window_noise([0.1, 0.2]))
  assert math.isnan(stats.window_noise([0.1, float('nan'), 0.2]))

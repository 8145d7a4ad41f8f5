"""Statistics over seeds: means, Student-t intervals of paired differences, Holm's adjustment,
the power of a paired t-test, and curves (mean, plateau, largest rise)."""

import itertools
import math
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from tff_conflict import _checks


class Interval(NamedTuple):
  """Mean of n paired differences, its interval [low, high], the two-sided t-test's `p_value`, the
  sample `sd` (NaN for n < 2); `family`: where `p_value` was adjusted (None: not; '': no test)."""
  mean: float
  low: float
  high: float
  n: int
  p_value: float = float('nan')
  sd: float = float('nan')
  family: Optional[str] = None

  @property
  def excludes_zero(self) -> bool:
    return self.n >= 2 and (self.low > 0 or self.high < 0)


def _finite(values) -> list[float]:
  return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean_std(values: Sequence[Optional[float]]) -> tuple[float, float]:
  """Mean and sample sd (ddof = 1; 0 for one value) of the finite values; NaNs for none."""
  finite = _finite(values)
  if len(finite) < 2:
    return (finite[0], 0.0) if finite else (float('nan'), float('nan'))
  return float(np.mean(finite)), float(np.std(finite, ddof=1))


def paired_difference(x: Mapping[object, Optional[float]], y: Mapping[object, Optional[float]],
                      confidence: float = 0.95) -> Optional[Interval]:
  """Student's t interval `mean +- t_{(1 + c)/2, n - 1} sd / sqrt(n)` of x[k] - y[k] over the
  keys both hold finite (None: none), with the paired t-test's p-value (0 for a constant nonzero
  difference, 1 for a constant 0); it excludes 0 where the test rejects at level 1 - c."""
  _checks.check_fraction('confidence', confidence)
  keys = sorted(k for k in set(x) & set(y) if _finite([x[k]]) and _finite([y[k]]))
  if not keys:
    return None
  d = np.array([float(x[k]) - float(y[k]) for k in keys])
  n, mean = int(d.size), float(d.mean())
  if n < 2:
    return Interval(mean, float('nan'), float('nan'), n)
  sd = float(d.std(ddof=1))
  half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))
  p_value = (float(2 * scipy_stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1)) if sd > 0
             else 1.0 if mean == 0 else 0.0)
  return Interval(mean, mean - half, mean + half, n, p_value, sd)


def holm(p_values: Sequence[float]) -> list[float]:
  """Holm's step-down adjusted p-values in the given order, `adj_(i) = max_{j <= i} min(1,
  (m - j + 1) p_(j))` over the m finite ones (Holm, Scand. J. Statist. 6(2), 1979); NaN stays."""
  finite = sorted((float(p), i) for i, p in enumerate(p_values) if math.isfinite(p))
  out, running = [float('nan')] * len(p_values), 0.0
  for rank, (p, i) in enumerate(finite):
    running = max(running, min(1.0, (len(finite) - rank) * p))
    out[i] = running
  return out


def paired_power(difference: float, sd: float, n: int, alpha: float = 0.05) -> float:
  """A two-sided paired t-test's power, `P(|T| > t_{1 - alpha/2, n-1})`, T noncentral t (n - 1
  degrees of freedom, noncentrality `difference sqrt(n) / sd`)."""
  if n < 2:
    return float('nan')
  if sd <= 0:
    return 1.0 if difference != 0 else alpha
  crit = scipy_stats.t.ppf(1 - alpha / 2, n - 1)
  nc = abs(difference) * math.sqrt(n) / sd
  return float(scipy_stats.nct.sf(crit, n - 1, nc) + scipy_stats.nct.cdf(-crit, n - 1, nc))


def minimal_detectable_difference(sd: float, n: int, *, alpha: float = 0.05,
                                  power: float = 0.8) -> float:
  """The smallest |mean difference| `paired_power` detects with probability `power`; NaN for
  n < 2 or a non-finite sd."""
  _checks.check_fraction('alpha', alpha)
  _checks.check_fraction('power', power)
  if n < 2 or not math.isfinite(sd) or sd < 0:
    return float('nan')
  if sd == 0:
    return 0.0
  high = sd
  while paired_power(high, sd, n, alpha) < power:
    high *= 2
  return float(optimize.brentq(lambda d: paired_power(d, sd, n, alpha) - power, 0.0, high))


def seeds_needed(sd: float, difference: float, *, alpha: float = 0.05, power: float = 0.8,
                 maximum: int = 10_000) -> int:
  """The fewest pairs (>= 2, at most `maximum`) whose paired t-test detects `difference` with
  probability `power` at differences' sd `sd`; `ArgumentError` for a bad argument."""
  _checks.check_fraction('alpha', alpha)
  _checks.check_fraction('power', power)
  _checks.check_positive('difference', difference)
  _checks.check_nonnegative('sd', sd)
  n = 2
  while n < maximum and paired_power(difference, sd, n, alpha) < power:
    n += 1
  return n


def plateau(values: Sequence[Optional[float]], *, window: int, tolerance: float
            ) -> tuple[float, float, bool]:
  """(mean of the last `window` values, of the `window` before, whether within `tolerance`);
  None values are skipped; fewer than `2 window` values or a non-finite one: not plateaued."""
  present = [float(v) for v in values if v is not None]
  if len(present) < 2 * window:
    return float('nan'), float('nan'), False
  last = float(np.mean(present[-window:]))
  previous = float(np.mean(present[-2 * window:-window]))
  return last, previous, bool(abs(last - previous) <= tolerance)


def train_loss_rise(losses: Sequence[float]) -> float:
  """`max_r (l_r - min_{s<r} l_s)`: FedAvg's instability with many local epochs in the FedProx
  paper (Li et al., MLSys 2020, arXiv:1812.06127, Fig. 1-2)."""
  rise, low = 0.0, math.inf
  for loss in losses:
    rise, low = max(rise, loss - low), min(low, loss)
  return rise


def mean_curve(curves: Sequence[Sequence[Optional[float]]]) -> list[Optional[float]]:
  """The mean over seeds per round (None where no seed has a value)."""
  rounds = ([v for v in values if v is not None] for values in itertools.zip_longest(*curves))
  return [float(sum(values) / len(values)) if values else None for values in rounds]


def window_noise(values: Sequence[float]) -> float:
  """The within-run noise of a window's mean: the sample sd of `values` about their least-squares
  line (n - 2 degrees of freedom: a slow trend is not noise) over sqrt(n); nan for fewer than 3
  values or a non-finite one."""
  y = np.asarray(values, dtype=float)
  if y.size < 3 or not np.all(np.isfinite(y)):
    return float('nan')
  x = np.arange(y.size)
  residuals = y - np.polyval(np.polyfit(x, y, 1), x)
  return float(np.sqrt(np.sum(residuals ** 2) / (y.size - 2) / y.size))

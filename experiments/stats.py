"""Statistics over seeds, the one place every table computes them: mean and sample standard
deviation (ddof = 1), and Student-t confidence intervals of a mean and of paired differences
(scipy's t quantile). `mean(d) +- t_{(1 + c)/2, n - 1} sd(d) / sqrt(n)` excludes 0 exactly when a
two-sided (paired) t-test rejects a zero mean at level 1 - c."""

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Interval:
  """A mean with its confidence interval.

  Attributes:
    mean: the mean.
    low, high: the interval's ends (NaN with fewer than two values).
    n: the number of values (pairs, for a paired difference).
    confidence: the interval's level, e.g. 0.95.
  """
  mean: float
  low: float
  high: float
  n: int
  confidence: float = 0.95

  @property
  def half_width(self) -> float:
    return (self.high - self.low) / 2 if self.n >= 2 else float('nan')

  @property
  def excludes_zero(self) -> bool:
    """Whether the interval lies entirely above or below 0 (False when there is none)."""
    return self.n >= 2 and (self.low > 0 or self.high < 0)


PairedDifference = Interval  # `paired_difference`'s result: the interval of mean(x_s - y_s)


def _finite(values) -> list[float]:
  return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean_std(values: Sequence[Optional[float]]) -> tuple[float, float]:
  """Mean and sample standard deviation (ddof = 1; 0 for a single value) of the finite values;
  (NaN, NaN) when there is none."""
  finite = _finite(values)
  if not finite:
    return float('nan'), float('nan')
  if len(finite) == 1:
    return finite[0], 0.0
  return float(np.mean(finite)), float(np.std(finite, ddof=1))


def _check_confidence(confidence: float) -> None:
  if not 0 < confidence < 1:
    raise ValueError(f'confidence must be in (0, 1), got {confidence!r}')


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
  """Student's t interval of the mean of `values` (all finite; at least one).

  Raises:
    ValueError: no values, a value that is not finite, or a confidence outside (0, 1).
  """
  _check_confidence(confidence)
  d = np.asarray(list(values), dtype=np.float64)
  if d.size == 0:
    raise ValueError('values must hold at least one value, got none')
  if not np.all(np.isfinite(d)):
    raise ValueError(f'values must be finite, got {d.tolist()}')
  n, mean = int(d.size), float(d.mean())
  if n < 2:
    return Interval(mean, float('nan'), float('nan'), n, confidence)
  from scipy import stats  # pylint: disable=g-import-not-at-top
  half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
  return Interval(mean, mean - half, mean + half, n, confidence)


def paired_difference(x: Mapping[object, Optional[float]], y: Mapping[object, Optional[float]],
                      confidence: float = 0.95) -> Optional[Interval]:
  """`t_interval` of the differences x[k] - y[k] over the keys (seeds) both hold with finite
  values; None when no key is shared."""
  _check_confidence(confidence)
  keys = [k for k in set(x) & set(y) if _finite([x[k]]) and _finite([y[k]])]
  if not keys:
    return None
  try:
    keys.sort()
  except TypeError:  # keys of mixed types
    keys.sort(key=str)
  return t_interval([float(x[k]) - float(y[k]) for k in keys], confidence)

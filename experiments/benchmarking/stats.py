"""Statistics of a benchmark: mean and spread over seeds, paired differences with Student-t
confidence intervals."""

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PairedDifference:
  """`mean(x_s - y_s)` over the seeds s both have, with its confidence interval.

  Attributes:
    mean: the mean difference.
    low, high: the interval's ends (NaN with fewer than two pairs).
    n: the number of pairs.
    confidence: the interval's level, e.g. 0.95.
  """
  mean: float
  low: float
  high: float
  n: int
  confidence: float

  @property
  def excludes_zero(self) -> bool:
    """Whether the interval lies entirely above or below 0 (False when there is none)."""
    return self.n >= 2 and (self.low > 0 or self.high < 0)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (ddof = 1; 0 for a single value) of the finite values;
  (NaN, NaN) when there is none."""
  finite = [float(v) for v in values if v is not None and math.isfinite(v)]
  if not finite:
    return float('nan'), float('nan')
  if len(finite) == 1:
    return finite[0], 0.0
  return float(np.mean(finite)), float(np.std(finite, ddof=1))


def paired_difference(x: Mapping[int, float], y: Mapping[int, float],
                      confidence: float = 0.95) -> Optional[PairedDifference]:
  """The paired difference x - y over the keys (seeds) both hold with finite values.

  The interval is Student's t on the n differences d_s: `mean(d) +- t_{(1 + c)/2, n - 1} sd(d) /
  sqrt(n)`, with `sd` the sample standard deviation (ddof = 1). It excludes 0 exactly when a
  two-sided paired t-test rejects equality at level 1 - c.

  Returns:
    None when no seed is shared.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
  if not 0 < confidence < 1:
    raise ValueError(f'confidence must be in (0, 1), got {confidence!r}')
  keys = sorted(k for k in set(x) & set(y)
                if x[k] is not None and y[k] is not None
                and math.isfinite(x[k]) and math.isfinite(y[k]))
  if not keys:
    return None
  d = np.array([x[k] - y[k] for k in keys], dtype=np.float64)
  n = d.size
  mean = float(d.mean())
  if n < 2:
    return PairedDifference(mean, float('nan'), float('nan'), n, confidence)
  half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
  return PairedDifference(mean, mean - half, mean + half, n, confidence)

"""The measured weighted mean (FedAvg's aggregate with the conflict diagnostics) against a float64
loop reference."""

import math

import numpy as np
import pytest

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry


def _reference(updates, weights):
  """(sum_k w_k u_k, sum_k w_k |u_k|) over the clients taking part, w normalised; loops."""
  keep = ref.take_part(updates, [w > 0 for w in weights])
  total = sum(weights[k] for k in keep)
  mean = np.zeros(len(updates[0]))
  mean_norm = 0.0
  for k in keep:
    u = np.asarray(updates[k], np.float64)
    mean = mean + weights[k] / total * u
    mean_norm += weights[k] / total * math.sqrt(ref.dot(u, u))
  return mean, mean_norm, keep


@pytest.mark.parametrize('num_clients,dtype,rtol', [
    (1, np.float64, 1e-12), (3, np.float64, 1e-12), (10, np.float64, 1e-12),
    (3, np.float32, 1e-5), (10, np.float32, 1e-5)])
def test_matches_reference(num_clients, dtype, rtol):
  updates = ref.conflicting_updates(num_clients, 32, seed=num_clients).astype(dtype)
  weights = np.random.default_rng(num_clients).integers(1, 20, size=num_clients).astype(float)
  expected, mean_norm, keep = _reference(list(updates.astype(np.float64)), list(weights))
  agg, diag = conflict.weighted_mean_with_diagnostics(updates, weights)
  assert agg.dtype == dtype
  ref.assert_close(agg, expected, rtol)
  tol = geometry.conflict_tolerance(dtype)
  fraction, min_cos, mean_cos = ref.pair_stats([updates[k].astype(np.float64) for k in keep],
                                               tol)
  np.testing.assert_allclose(diag['conflict_fraction_before'].numpy(), fraction, atol=1e-6)
  np.testing.assert_allclose(diag['conflict_fraction_after'].numpy(), fraction, atol=1e-6)
  np.testing.assert_allclose(diag['min_cosine'].numpy(), min_cos, atol=1e-5)
  np.testing.assert_allclose(diag['mean_cosine'].numpy(), mean_cos, atol=1e-5)
  np.testing.assert_allclose(diag['aggregate_norm'].numpy(), np.linalg.norm(expected), rtol=1e-5)
  np.testing.assert_allclose(diag['mean_update_norm'].numpy(), mean_norm, rtol=1e-5)
  np.testing.assert_allclose(diag['mean_norm_ratio'].numpy(),
                             np.linalg.norm(expected) / mean_norm, rtol=1e-5)


def test_hand_worked_cancellation_and_exclusions():
  # u1 = (3, 0), u2 = (-1, 0) weights 1, 1: mean (1, 0), mean norm (3 + 1)/2 = 2, ratio 0.5.
  # A NaN row and a zero-weight row take no part.
  u = np.array([[3.0, 0.0], [-1.0, 0.0], [np.nan, 1.0], [5.0, 5.0]])
  agg, diag = conflict.weighted_mean_with_diagnostics(u, [1.0, 1.0, 1.0, 0.0])
  np.testing.assert_allclose(agg.numpy(), [1.0, 0.0])
  assert diag['num_clients'].numpy() == 2
  assert diag['num_excluded_nonfinite'].numpy() == 1
  assert diag['conflict_fraction_before'].numpy() == 1.0
  np.testing.assert_allclose(diag['mean_update_norm'].numpy(), 2.0)
  np.testing.assert_allclose(diag['mean_norm_ratio'].numpy(), 0.5)


def test_no_client_moved_gives_zero_ratio_not_nan():
  agg, diag = conflict.weighted_mean_with_diagnostics(np.zeros((3, 4)), [1.0, 2.0, 3.0])
  np.testing.assert_array_equal(agg.numpy(), np.zeros(4))
  assert diag['mean_update_norm'].numpy() == 0.0 and diag['mean_norm_ratio'].numpy() == 0.0
  agg, diag = conflict.weighted_mean_with_diagnostics(np.ones((2, 3)), [1.0, 1.0],
                                                      include=[False, False], validate=False)
  np.testing.assert_array_equal(agg.numpy(), np.zeros(3))
  assert diag['mean_norm_ratio'].numpy() == 0.0

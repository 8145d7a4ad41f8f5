"""Corrective gradient weights against the float64 loop reference and hand-worked cases."""

import numpy as np
import pytest

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry


@pytest.mark.parametrize('num_clients,dtype,rtol,alpha', ref.parameter_cases(0.1, [0.0, 0.7]))
def test_matches_reference(num_clients, dtype, rtol, alpha):
  rng = np.random.default_rng(num_clients)
  updates = ref.conflicting_updates(num_clients, 64, seed=60 + num_clients).astype(dtype)
  grads = ref.conflicting_updates(num_clients, 64, seed=80 + num_clients).astype(dtype)
  losses = rng.uniform(0.1, 3.0, size=num_clients)
  weights = rng.integers(1, 50, size=num_clients).astype(float)
  expected, x = ref.corrective(updates.astype(np.float64), grads.astype(np.float64), losses,
                               weights, alpha)
  scale = float(np.max(np.abs(x))) if alpha else 0.0
  ref.assert_close(conflict.corrective_weights(grads, losses, alpha=alpha), x, rtol, scale=1e-30)
  agg, diag = conflict.corrective_aggregate_with_diagnostics(updates, grads, losses, weights,
                                                             alpha=alpha)
  assert agg.dtype == dtype
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.corrective_aggregate(updates, grads, losses, weights, alpha=alpha),
                   expected, rtol)
  ref.assert_close(diag['corrective_weights'], x, 1e-5, scale=scale)
  assert diag['corrective_weights'].dtype == np.float32
  tol = geometry.conflict_tolerance(dtype)
  cf_before, min_cos, mean_cos = ref.pair_stats(list(grads.astype(np.float64)), tol)
  cf_after, _, _ = ref.pair_stats([x[i] * grads[i].astype(np.float64)
                                   for i in range(num_clients)], tol)
  np.testing.assert_allclose(diag['conflict_fraction_before'].numpy(), cf_before, atol=1e-6)
  np.testing.assert_allclose(diag['conflict_fraction_after'].numpy(), cf_after, atol=1e-6)
  np.testing.assert_allclose(diag['min_cosine'].numpy(), min_cos, atol=1e-5)
  np.testing.assert_allclose(diag['mean_cosine'].numpy(), mean_cos, atol=1e-5)
  if alpha == 0.0:   # exactly FedAvg
    fedavg = (weights / weights.sum()) @ updates.astype(np.float64)
    ref.assert_close(agg, fedavg, rtol)
    assert not np.any(x)


def test_hand_worked():
  # D1 = (1, 0), D2 = (-1, 2), L = (1, 1), alpha = 0.1: S = (0, 2), m = (0, 4),
  # |D| = (1, sqrt5), c = min(0.1, 0.1/sqrt5) = 0.1/sqrt5, sqrt(sum (m/|D|)^2) = 4/sqrt5,
  # x1 = 0, x2 = (0.1/sqrt5) / (4/sqrt5) * 4/5 = 0.02.
  # u1 = (1, 1), u2 = (3, -1), weights 1:3: FedAvg (2.5, -0.5); + 0.02 (-1, 2) = (2.48, -0.46).
  d = np.array([[1.0, 0.0], [-1.0, 2.0]])
  np.testing.assert_allclose(conflict.corrective_weights(d, [1.0, 1.0]).numpy(), [0.0, 0.02],
                             atol=1e-15)
  agg = conflict.corrective_aggregate(np.array([[1.0, 1.0], [3.0, -1.0]]), d, [1.0, 1.0],
                                      [1.0, 3.0])
  np.testing.assert_allclose(agg.numpy(), [2.48, -0.46], rtol=1e-12)
  # D1 = (1, 0), D2 = (0, 2): m = (1, 4), c = min(0.1, 0.05) = 0.05, denom = sqrt(1 + 4),
  # x = 0.05/sqrt5 * (1/1, 4/4).
  np.testing.assert_allclose(
      conflict.corrective_weights(np.array([[1.0, 0.0], [0.0, 2.0]]), [1.0, 1.0]).numpy(),
      [0.05 / np.sqrt(5)] * 2, rtol=1e-12)


def test_zero_gradient_gets_zero_weight_and_is_left_out_of_c():
  d = ref.conflicting_updates(4, 8, seed=2)
  d[1] = 0.0
  losses = np.array([1.0, 1e-6, 2.0, 0.5])   # client 1 would set c = 0 if it entered the min
  x = conflict.corrective_weights(d, losses).numpy()
  np.testing.assert_allclose(x, ref.corrective_x(d, losses, 0.1), rtol=1e-10)
  assert x[1] == 0 and np.all(x[[0, 2, 3]] != 0)
  assert not np.any(conflict.corrective_weights(np.zeros((3, 4)), [1.0, 1.0, 1.0]).numpy())


def test_nonfinite_update_gradient_or_loss_excludes_client():
  rng = np.random.default_rng(0)
  u = ref.conflicting_updates(5, 6, seed=1)
  d = ref.conflicting_updates(5, 6, seed=2)
  losses = rng.uniform(0.5, 2.0, 5)
  weights = np.ones(5)
  keep = [0, 2, 4]
  expected, x_keep = ref.corrective(u[keep], d[keep], losses[keep], weights[keep], 0.1)
  u_bad, d_bad, l_bad = u.copy(), d.copy(), losses.copy()
  u_bad[1, 3] = np.nan
  d_bad[3, 0] = np.inf
  for case in [(u_bad, d_bad, losses), (u_bad, d, np.where(np.arange(5) == 3, np.nan, losses))]:
    agg, diag = conflict.corrective_aggregate_with_diagnostics(*case, weights)
    ref.assert_close(agg, expected, 1e-10)
    assert diag['num_excluded_nonfinite'].numpy() == 2 and diag['num_clients'].numpy() == 3
    x = diag['corrective_weights'].numpy()
    assert x[1] == 0 and x[3] == 0
    np.testing.assert_allclose(x[keep], x_keep, rtol=1e-5)
  del l_bad
  # A NaN update with weight 0 does not poison the FedAvg part either.
  u_bad = u.copy()
  u_bad[2] = np.nan
  w0 = np.array([1.0, 1.0, 0.0, 1.0, 1.0])
  expected, _ = ref.corrective(u[[0, 1, 3, 4]], d[[0, 1, 3, 4]], losses[[0, 1, 3, 4]],
                               np.ones(4), 0.1)
  ref.assert_close(conflict.corrective_aggregate(u_bad, d, losses, w0), expected, 1e-10)


def test_weight_zero_and_excluded_clients_take_no_part():
  u = ref.conflicting_updates(6, 9, seed=11)
  d = ref.conflicting_updates(6, 9, seed=12)
  losses = np.linspace(0.5, 2.0, 6)
  weights = np.array([1.0, 2.0, 0.0, 1.0, 1.0, 3.0])
  include = np.array([True, True, True, True, False, True])
  keep = [0, 1, 3, 5]
  expected, x_keep = ref.corrective(u[keep], d[keep], losses[keep], weights[keep], 0.1)
  agg, diag = conflict.corrective_aggregate_with_diagnostics(u, d, losses, weights,
                                                             include=include)
  ref.assert_close(agg, expected, 1e-10)
  x = diag['corrective_weights'].numpy()
  assert x[2] == 0 and x[4] == 0
  np.testing.assert_allclose(x[keep], x_keep, rtol=1e-5)
  x_only = conflict.corrective_weights(d, losses, include=weights > 0).numpy()
  np.testing.assert_allclose(x_only[[0, 1, 3, 4, 5]],
                             ref.corrective_x(d[[0, 1, 3, 4, 5]], losses[[0, 1, 3, 4, 5]], 0.1),
                             rtol=1e-10)

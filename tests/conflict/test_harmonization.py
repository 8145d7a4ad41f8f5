"""FedGH (fedgh paper, Algorithm 1) against the float64 loop reference and hand-worked cases."""

import numpy as np
import pytest
import tensorflow as tf

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry


def _check_diagnostics(diag, updates, out, count, tol):
  cf_before, min_cos, mean_cos = ref.pair_stats(list(updates), tol)
  cf_after, _, _ = ref.pair_stats(out, tol)
  assert diag['num_clients'].numpy() == len(updates)
  assert diag['num_excluded_nonfinite'].numpy() == 0
  assert diag['num_projections'].numpy() == count
  np.testing.assert_allclose(diag['conflict_fraction_before'].numpy(), cf_before, atol=1e-6)
  np.testing.assert_allclose(diag['conflict_fraction_after'].numpy(), cf_after, atol=1e-6)
  np.testing.assert_allclose(diag['min_cosine'].numpy(), min_cos, atol=1e-5)
  np.testing.assert_allclose(diag['mean_cosine'].numpy(), mean_cos, atol=1e-5)


@pytest.mark.parametrize('dtype,rtol', [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize('num_clients', [1, 2, 3, 10, 50])
def test_index_order_matches_reference(num_clients, dtype, rtol):
  updates = ref.conflicting_updates(num_clients, 64, seed=num_clients).astype(dtype)
  weights = np.random.default_rng(1).integers(1, 100, size=num_clients).astype(np.float64)
  orders = [list(range(num_clients))] * num_clients
  expected, out, count = ref.fedgh(updates.astype(np.float64), weights, orders)
  agg, diag = conflict.harmonize_with_diagnostics(updates, weights, order='index')
  assert agg.dtype == dtype
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.harmonize(updates, weights, order='index'), expected, rtol)
  _check_diagnostics(diag, updates.astype(np.float64), out, count,
                     geometry.conflict_tolerance(dtype))
  np.testing.assert_allclose(diag['aggregate_norm'].numpy(), np.linalg.norm(expected), rtol=1e-4)
  if num_clients >= 10:
    assert diag['conflict_fraction_before'].numpy() > 0.3  # the inputs do conflict
    assert count > 0


@pytest.mark.parametrize('dtype,rtol', [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize('num_clients', [2, 3, 10, 50])
def test_random_order_matches_reference_with_the_orders_used(num_clients, dtype, rtol):
  updates = ref.conflicting_updates(num_clients, 32, seed=100 + num_clients).astype(dtype)
  weights = np.ones(num_clients)
  orders = conflict.projection_order(num_clients, 'random', seed=7).numpy()
  for row in range(num_clients):   # each row is a permutation of all clients
    assert sorted(orders[row].tolist()) == list(range(num_clients))
  expected, _, _ = ref.fedgh(updates.astype(np.float64), weights, orders)
  ref.assert_close(conflict.harmonize(updates, weights, seed=7), expected, rtol)


def test_same_seed_same_result_and_seed_forms():
  updates = ref.conflicting_updates(10, 16, seed=3)
  weights = np.ones(10)
  a = conflict.harmonize(updates, weights, seed=11).numpy()
  np.testing.assert_array_equal(a, conflict.harmonize(updates, weights, seed=11).numpy())
  np.testing.assert_array_equal(
      a, conflict.harmonize(updates, weights, seed=tf.constant(11, tf.int64)).numpy())
  np.testing.assert_array_equal(
      a, conflict.harmonize(updates, weights, seed=tf.constant([11, 0], tf.int32)).numpy())
  results = {conflict.harmonize(updates, weights, seed=s).numpy().tobytes() for s in range(8)}
  assert len(results) > 1   # the order matters on these inputs, and seeds change it
  orders = {conflict.projection_order(10, 'random', s).numpy().tobytes() for s in range(8)}
  assert len(orders) == 8


def test_hand_worked_2d():
  # u1 = (1, 0), u2 = (-1, 1): u1.u2 = -1 < 0.
  # u1 <- u1 - (-1)/|u2|^2 u2 = (1, 0) + 1/2 (-1, 1) = (0.5, 0.5)
  # u2 <- u2 - (-1)/|u1|^2 u1 = (-1, 1) + (1, 0) = (0, 1)
  # equal weights: (0.25, 0.75); one projection each.
  agg, diag = conflict.harmonize_with_diagnostics([[1.0, 0.0], [-1.0, 1.0]], [3.0, 3.0])
  np.testing.assert_allclose(agg.numpy(), [0.25, 0.75], rtol=1e-6)
  assert diag['num_projections'].numpy() == 2
  assert diag['conflict_fraction_before'].numpy() == 1.0
  assert diag['conflict_fraction_after'].numpy() == 0.0   # (0.5, 0.5) . (0, 1) > 0
  # weights 1:3 -> 0.25 (0.5, 0.5) + 0.75 (0, 1) = (0.125, 0.875)
  np.testing.assert_allclose(
      conflict.harmonize(np.array([[1.0, 0.0], [-1.0, 1.0]]), [1.0, 3.0]).numpy(),
      [0.125, 0.875], rtol=1e-12)


def test_hand_worked_3d_order_matters():
  # a = (1,0,0), b = (-1,1,0), c = (-1,-1,1); a.b = -1, a.c = -1, b.c = 0.
  # index order:
  #  a: vs b: a + b/2 = (.5,.5,0); vs c: (.5,.5,0).c = -1 -> + c/3 = (1/6, 1/6, 1/3)
  #  b: vs a: b + a = (0,1,0); vs c: -1 -> + c/3 = (-1/3, 2/3, 1/3)
  #  c: vs a: c + a = (0,-1,1); vs b: (0,-1,1).b = -1 -> + b/2 = (-1/2, -1/2, 1)
  #  mean: (-2/9, 1/9, 5/9), 6 projections.
  u = np.array([[1.0, 0, 0], [-1, 1, 0], [-1, -1, 1]])
  agg, diag = conflict.harmonize_with_diagnostics(u, [1.0, 1.0, 1.0], order='index')
  np.testing.assert_allclose(agg.numpy(), [-2 / 9, 1 / 9, 5 / 9], rtol=1e-12)
  assert diag['num_projections'].numpy() == 6
  # For c the reversed order (b first: c.b = 0, no projection; then a) gives (0,-1,1) instead.
  expected_rev = (np.array([1 / 6, 1 / 6, 1 / 3]) + np.array([-1 / 3, 2 / 3, 1 / 3])
                  + np.array([0.0, -1.0, 1.0])) / 3
  got, _, count = ref.fedgh(u, [1, 1, 1], [[0, 1, 2], [0, 1, 2], [1, 0, 2]])
  np.testing.assert_allclose(got, expected_rev, rtol=1e-12)
  assert count == 5


def test_weight_zero_client_is_not_a_projection_partner():
  u = ref.conflicting_updates(6, 12, seed=5)
  u[2] = -5.0 * u[0]               # would be projected against by almost everyone
  weights = np.array([1.0, 2.0, 0.0, 1.0, 3.0, 1.0])
  keep = [0, 1, 3, 4, 5]
  expected, _, _ = ref.fedgh(u[keep], weights[keep], [list(range(5))] * 5)
  agg, diag = conflict.harmonize_with_diagnostics(u, weights, order='index')
  ref.assert_close(agg, expected, 1e-10)
  assert diag['num_clients'].numpy() == 5
  # the same through `include`
  include = weights > 0
  ref.assert_close(conflict.harmonize(u, np.where(include, weights, 7.0), order='index',
                                      include=include), expected, 1e-10)

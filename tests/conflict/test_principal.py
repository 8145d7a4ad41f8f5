"""FedLD principal-gradient aggregation against an SVD-based float64 loop reference, on the whole
row (the paper) and per tensor (the authors' pcgrad_svd, the default with tensor_sizes)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry


@pytest.mark.parametrize('num_clients,dtype,rtol,ratio', ref.parameter_cases(0.8, [0.1, 1.0]))
def test_matches_reference(num_clients, dtype, rtol, ratio):
  updates = ref.conflicting_updates(num_clients, 64, seed=40 + num_clients).astype(dtype)
  weights = np.random.default_rng(num_clients).integers(1, 50, size=num_clients).astype(float)
  expected, out, num_kept, explained = ref.fedld(updates.astype(np.float64), weights, ratio)
  agg, diag = conflict.principal_aggregate_with_diagnostics(updates, weights,
                                                            component_ratio=ratio)
  assert agg.dtype == dtype
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.principal_aggregate(updates, weights, component_ratio=ratio),
                   expected, rtol)
  tol = geometry.conflict_tolerance(dtype)
  cf_before, min_cos, mean_cos = ref.pair_stats(list(updates.astype(np.float64)), tol)
  cf_after, _, _ = ref.pair_stats(out, tol)
  assert diag['num_components'].numpy() == num_kept
  np.testing.assert_allclose(diag['explained_variance'].numpy(), explained, rtol=1e-5)
  np.testing.assert_allclose(diag['conflict_fraction_before'].numpy(), cf_before, atol=1e-6)
  np.testing.assert_allclose(diag['conflict_fraction_after'].numpy(), cf_after, atol=1e-6)
  np.testing.assert_allclose(diag['min_cosine'].numpy(), min_cos, atol=1e-5)
  np.testing.assert_allclose(diag['mean_cosine'].numpy(), mean_cos, atol=1e-5)
  np.testing.assert_allclose(diag['aggregate_norm'].numpy(), np.linalg.norm(expected), rtol=1e-4)


@pytest.mark.parametrize('num_clients', [3, 10])
def test_orientation_rules_give_the_same_aggregate(num_clients):
  updates = ref.conflicting_updates(num_clients, 16, seed=7)
  weights = np.ones(num_clients)
  by_mean, *_ = ref.fedld(updates, weights, 1.0, orientation='mean')
  by_majority, *_ = ref.fedld(updates, weights, 1.0, orientation='majority')
  np.testing.assert_allclose(by_mean, by_majority, rtol=1e-12, atol=1e-14)
  ref.assert_close(conflict.principal_aggregate(updates, weights, component_ratio=1.0), by_mean,
                   1e-10)


def test_rank_deficient_more_clients_than_dimensions():
  updates = ref.conflicting_updates(12, 5, seed=3)     # at most 5 non-zero eigenvalues
  weights = np.arange(1.0, 13.0)
  for ratio in (0.8, 1.0):
    expected, *_ = ref.fedld(updates, weights, ratio)
    ref.assert_close(conflict.principal_aggregate(updates, weights, component_ratio=ratio),
                     expected, 1e-10)


def test_hand_worked_orthogonal_l1_and_lk():
  # u1 = (3, 0), u2 = (0, 1): Gamma = diag(9, 1)/2, lambda = (4.5, 0.5), S = 5, v1 ~ u1, v2 ~ u2.
  # L = floor(0.8 * 2) = 1: u1 -> |u1| 4.5/5 u1/|u1| = (2.7, 0); u2 . v1 = 0 -> u2 -> 0.
  # equal weights: (1.35, 0). L = 2: u2 -> |u2| 0.5/5 u2/|u2| = (0, 0.1) -> (1.35, 0.05).
  u = np.array([[3.0, 0.0], [0.0, 1.0]])
  agg, diag = conflict.principal_aggregate_with_diagnostics(u, [1.0, 1.0])
  np.testing.assert_allclose(agg.numpy(), [1.35, 0.0], atol=1e-12)
  assert diag['num_components'].numpy() == 1
  np.testing.assert_allclose(diag['explained_variance'].numpy(), 0.9, rtol=1e-6)
  agg, diag = conflict.principal_aggregate_with_diagnostics(u, [1.0, 1.0], component_ratio=1.0)
  np.testing.assert_allclose(agg.numpy(), [1.35, 0.05], atol=1e-12)
  assert diag['num_components'].numpy() == 2
  np.testing.assert_allclose(diag['explained_variance'].numpy(), 1.0, rtol=1e-6)


def test_hand_worked_2d_conflict():
  # u1 = (1, 0), u2 = (-1, 1): U U^T = [[1, -1], [-1, 2]], eigenvalues (3 +- sqrt5)/2, so with
  # Gamma = U U^T / 2 and S = trace(Gamma) = 3/2: lambda_1 / S = (3 + sqrt5)/6 = phi^2/3.
  # e_1 ~ (1, -phi) (phi the golden ratio), v_1 = u1 - phi u2 = (phi^2, -phi) ~ (phi, -1).
  # L = floor(0.8 * 2) = 1. u1 . v1 > 0 -> u1' = |u1| phi^2/3 vhat; u2 . v1 < 0 ->
  # u2' = -|u2| phi^2/3 vhat. Equal weights: (1 - sqrt2)/2 * phi^2/3 * vhat.
  phi = (1 + math.sqrt(5)) / 2
  vhat = np.array([phi, -1.0]) / math.sqrt(phi ** 2 + 1)
  expected = (1 - math.sqrt(2)) / 2 * phi ** 2 / 3 * vhat
  agg = conflict.principal_aggregate(np.array([[1.0, 0.0], [-1.0, 1.0]]), [2.0, 2.0])
  np.testing.assert_allclose(agg.numpy(), expected, rtol=1e-12)


def test_component_ratio_floor_is_not_fooled_by_rounding():
  updates = ref.conflicting_updates(100, 4, seed=2)
  _, diag = conflict.principal_aggregate_with_diagnostics(updates, np.ones(100),
                                                          component_ratio=0.29)
  assert diag['num_components'].numpy() == 29   # 0.29 * 100 = 28.999999999999996


def test_weight_zero_and_excluded_clients_take_no_part():
  updates = ref.conflicting_updates(7, 12, seed=8)
  weights = np.array([1.0, 0.0, 2.0, 3.0, 1.0, 2.0, 1.0])
  include = np.array([True, True, True, False, True, True, True])
  keep = [0, 2, 4, 5, 6]
  expected, _, num_kept, _ = ref.fedld(updates[keep], weights[keep], 0.8)
  agg, diag = conflict.principal_aggregate_with_diagnostics(updates, weights, include=include)
  ref.assert_close(agg, expected, 1e-10)
  assert diag['num_clients'].numpy() == 5 and diag['num_components'].numpy() == num_kept == 4


@pytest.mark.parametrize('num_clients,dtype,rtol', [(3, np.float64, 1e-10), (10, np.float64, 1e-10),
                                                    (10, np.float32, 1e-4), (50, np.float64, 1e-10)])
def test_preserve_norms_matches_reference(num_clients, dtype, rtol):
  updates = ref.conflicting_updates(num_clients, 64, seed=70 + num_clients).astype(dtype)
  weights = np.random.default_rng(num_clients).integers(1, 50, size=num_clients).astype(float)
  expected, out, _, _ = ref.fedld(updates.astype(np.float64), weights, 0.8, preserve_norms=True)
  agg, diag = conflict.principal_aggregate_with_diagnostics(updates, weights,
                                                            preserve_norms=True)
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.principal_aggregate(updates, weights, preserve_norms=True), expected,
                   rtol)
  # Every revised update has its original length (the reference checks it loop by loop).
  for u, revised in zip(updates.astype(np.float64), out):
    if np.linalg.norm(revised) > 0:
      np.testing.assert_allclose(np.linalg.norm(revised), np.linalg.norm(u), rtol=1e-12)
  # ... so the server step is longer than eq. (7)'s.
  _, plain = conflict.principal_aggregate_with_diagnostics(updates, weights)
  assert diag['norm_ratio'].numpy() > plain['norm_ratio'].numpy()


def test_preserve_norms_hand_worked():
  # u1 = (3, 0), u2 = (0, 1), L = 2: eq. (7) gives (2.7, 0) and (0, 0.1); rescaled to |u_i|:
  # (3, 0) and (0, 1), whose equal-weight mean is the plain mean (1.5, 0.5).
  u = np.array([[3.0, 0.0], [0.0, 1.0]])
  agg = conflict.principal_aggregate(u, [1.0, 1.0], component_ratio=1.0, preserve_norms=True)
  np.testing.assert_allclose(agg.numpy(), [1.5, 0.5], atol=1e-12)
  # The 2-d conflict of test_hand_worked_2d_conflict, L = 1: u1' = |u1| vhat, u2' = -|u2| vhat.
  phi = (1 + math.sqrt(5)) / 2
  vhat = np.array([phi, -1.0]) / math.sqrt(phi ** 2 + 1)
  agg = conflict.principal_aggregate(np.array([[1.0, 0.0], [-1.0, 1.0]]), [1.0, 1.0],
                                     preserve_norms=True)
  np.testing.assert_allclose(agg.numpy(), (1 - math.sqrt(2)) / 2 * vhat, atol=1e-12)
  with pytest.raises(ValueError, match='preserve_norms must be a bool, got 1'):
    conflict.principal_aggregate(u, [1.0, 1.0], preserve_norms=1)


# ---- revision='projection': the plain orthogonal projection on the kept directions ---------------

@pytest.mark.parametrize('num_clients,dtype,rtol,sizes,preserve_norms', [
    (2, np.float64, 1e-10, None, False), (10, np.float64, 1e-10, None, False),
    (10, np.float32, 1e-4, None, False), (10, np.float64, 1e-10, None, True),
    (5, np.float64, 1e-10, (12, 4, 20, 1, 3), False),
    (10, np.float64, 1e-10, (12, 4, 20, 1, 3), True)])
def test_projection_matches_reference(num_clients, dtype, rtol, sizes, preserve_norms):
  updates = ref.conflicting_updates(num_clients, 40, seed=130 + num_clients).astype(dtype)
  weights = np.random.default_rng(num_clients).integers(1, 9, size=num_clients).astype(float)
  u64 = updates.astype(np.float64)
  if sizes is None:
    expected, _, _, _ = ref.fedld(u64, weights, 0.8, preserve_norms=preserve_norms,
                                  revision='projection')
  else:
    expected, _, _, _ = ref.fedld_per_tensor(u64, weights, 0.8, sizes,
                                             preserve_norms=preserve_norms, revision='projection')
  agg, diag = conflict.principal_aggregate_with_diagnostics(
      updates, weights, tensor_sizes=sizes, preserve_norms=preserve_norms, revision='projection')
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.principal_aggregate(updates, weights, tensor_sizes=sizes,
                                                preserve_norms=preserve_norms,
                                                revision='projection'), expected, rtol)
  # The projection differs from eq. (7) and shortens the step less.
  eq7, eq7_diag = conflict.principal_aggregate_with_diagnostics(
      updates, weights, tensor_sizes=sizes, preserve_norms=preserve_norms)
  assert not np.allclose(agg.numpy(), eq7.numpy(), rtol=1e-3)
  if not preserve_norms:
    assert diag['norm_ratio'].numpy() > eq7_diag['norm_ratio'].numpy()


def test_projection_hand_worked():
  # u1 = (3, 0), u2 = (0, 1): Gamma = diag(4.5, 0.5), v_1 = e_1, v_2 = e_2. All directions kept
  # (L = 2): each update is its own projection, the aggregate the plain mean (1.5, 0.5)
  # (eq. (7) gives (1.35, 0.05)); L = 1: u1' = (3, 0), u2' = 0, the mean (1.5, 0).
  u = np.array([[3.0, 0.0], [0.0, 1.0]])
  agg = conflict.principal_aggregate(u, [1.0, 1.0], component_ratio=1.0, revision='projection')
  np.testing.assert_allclose(agg.numpy(), [1.5, 0.5], atol=1e-12)
  eq7 = conflict.principal_aggregate(u, [1.0, 1.0], component_ratio=1.0)
  np.testing.assert_allclose(eq7.numpy(), [1.35, 0.05], atol=1e-12)
  agg = conflict.principal_aggregate(u, [1.0, 1.0], component_ratio=0.5, revision='projection')
  np.testing.assert_allclose(agg.numpy(), [1.5, 0.0], atol=1e-12)
  with pytest.raises(ValueError, match=r"revision must be one of .*'projection'.*got 'plain'"):
    conflict.principal_aggregate(u, [1.0, 1.0], revision='plain')


# ---- granularity='tensor' (default) with tensor_sizes: the authors' per-tensor pcgrad_svd --------

SIZES = (12, 4, 20, 1, 3)   # d = 40: a kernel, a bias, a kernel, a scalar, a bias


@pytest.mark.parametrize('num_clients,dtype,rtol,preserve_norms', [
    (1, np.float64, 1e-10, False), (2, np.float64, 1e-10, False), (5, np.float64, 1e-10, False),
    (10, np.float32, 1e-4, False), (30, np.float64, 1e-10, False), (1, np.float64, 1e-10, True),
    (5, np.float64, 1e-10, True), (10, np.float32, 1e-4, True)])
def test_per_tensor_matches_reference(num_clients, dtype, rtol, preserve_norms):
  updates = ref.conflicting_updates(num_clients, sum(SIZES), seed=90 + num_clients)
  updates[:, 12:16] *= 50.0     # tensors of very different scales, as in a real model
  updates = updates.astype(dtype)
  weights = np.random.default_rng(num_clients).integers(1, 9, size=num_clients).astype(float)
  expected, out, num_kept, explained = ref.fedld_per_tensor(
      updates.astype(np.float64), weights, 0.8, SIZES, preserve_norms=preserve_norms)
  agg, diag = conflict.principal_aggregate_with_diagnostics(
      updates, weights, tensor_sizes=SIZES, preserve_norms=preserve_norms)
  assert agg.dtype == dtype
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.principal_aggregate(updates, weights, tensor_sizes=list(SIZES),
                                                granularity='tensor',
                                                preserve_norms=preserve_norms), expected, rtol)
  tol = geometry.conflict_tolerance(dtype)
  cf_after, _, _ = ref.pair_stats(out, tol)
  assert diag['num_components'].numpy() == num_kept
  np.testing.assert_allclose(diag['explained_variance'].numpy(), explained, rtol=1e-5)
  np.testing.assert_allclose(diag['conflict_fraction_after'].numpy(), cf_after, atol=1e-6)
  np.testing.assert_allclose(diag['aggregate_norm'].numpy(), np.linalg.norm(expected), rtol=1e-4)
  if num_clients == 1:   # K = 1 returns the update unchanged, tensor by tensor
    ref.assert_close(agg, updates[0], rtol)


def test_per_tensor_differs_from_model_and_model_ignores_tensor_sizes():
  updates = ref.conflicting_updates(6, sum(SIZES), seed=5)
  weights = np.ones(6)
  whole, *_ = ref.fedld(list(updates), weights, 0.8)
  per_tensor, *_ = ref.fedld_per_tensor(updates, weights, 0.8, SIZES)
  assert np.max(np.abs(whole - per_tensor)) > 1e-2 * np.max(np.abs(whole))
  model = conflict.principal_aggregate(updates, weights, granularity='model', tensor_sizes=SIZES)
  ref.assert_close(model, whole, 1e-10)
  # Without tensor_sizes a row is one tensor: both granularities are the paper's computation.
  ref.assert_close(conflict.principal_aggregate(updates, weights), whole, 1e-10)
  ref.assert_close(conflict.principal_aggregate(updates, weights, tensor_sizes=[40]), whole, 1e-10)


def test_per_tensor_hand_worked():
  # Two tensors of size 1 and 2. Tensor a: (3), (-1): one direction, lambda = (9 + 1)/2 = S, so
  # each slice keeps itself: a' = (3), (-1) -> mean 1. Tensor b: u1 = (3, 0), u2 = (0, 1) as in
  # test_hand_worked_orthogonal_l1_and_lk: L = 1 -> (1.35, 0).
  u = np.array([[3.0, 3.0, 0.0], [-1.0, 0.0, 1.0]])
  agg, diag = conflict.principal_aggregate_with_diagnostics(u, [1.0, 1.0], tensor_sizes=(1, 2))
  np.testing.assert_allclose(agg.numpy(), [1.0, 1.35, 0.0], atol=1e-12)
  # explained: (5 + 4.5) / (5 + 5) pooled over the tensors.
  np.testing.assert_allclose(diag['explained_variance'].numpy(), 0.95, rtol=1e-6)
  assert diag['num_components'].numpy() == 1


def test_per_tensor_edge_cases_zero_slices_and_non_finite_clients():
  updates = ref.conflicting_updates(6, sum(SIZES), seed=11)
  updates[:, 16:36] = 0.0          # a tensor nobody changed: its slice of the aggregate is 0
  updates[2, :12] = 0.0            # a client that did not change the first tensor
  updates[4, 37] = np.nan          # excluded from every tensor
  weights = np.array([1.0, 2.0, 1.0, 3.0, 1.0, 1.0])
  keep = [0, 1, 2, 3, 5]
  expected, *_ = ref.fedld_per_tensor(updates[keep], weights[keep], 0.8, SIZES)
  agg, diag = conflict.principal_aggregate_with_diagnostics(updates, weights, tensor_sizes=SIZES)
  assert np.all(np.isfinite(agg.numpy()))
  ref.assert_close(agg, expected, 1e-10)
  np.testing.assert_array_equal(agg.numpy()[16:36], 0.0)
  assert diag['num_clients'].numpy() == 5 and diag['num_excluded_nonfinite'].numpy() == 1
  # Every client excluded: all zeros.
  zero = conflict.principal_aggregate(updates, weights, tensor_sizes=SIZES, validate=False,
                                      include=np.zeros(6, bool))
  np.testing.assert_array_equal(zero.numpy(), 0.0)


def test_per_tensor_in_a_graph_with_unknown_shapes():
  updates = ref.conflicting_updates(5, sum(SIZES), seed=3)
  weights = np.arange(1.0, 6.0)
  expected, *_ = ref.fedld_per_tensor(updates, weights, 0.8, SIZES)
  fn = tf.function(lambda u, w: conflict.principal_aggregate(u, w, tensor_sizes=SIZES),
                   input_signature=[tf.TensorSpec([None, None], tf.float64),
                                    tf.TensorSpec([None], tf.float64)])
  ref.assert_close(fn(updates, weights), expected, 1e-10)
  with pytest.raises(tf.errors.InvalidArgumentError, match='tensor_sizes must sum'):
    fn(updates[:, :30], weights)


@pytest.mark.parametrize('sizes,match', [
    ((12, 4), 'tensor_sizes must sum to the number of columns of updates, 40'),
    ((40, 0), 'tensor_sizes must be an integer >= 1, got 0'),
    ((), 'tensor_sizes must be None or a non-empty sequence'),
    (7, 'tensor_sizes must be None or a sequence of integers'),
    ((20.0, 20), 'tensor_sizes must be an integer >= 1, got 20.0')])
def test_bad_tensor_sizes(sizes, match):
  updates = ref.conflicting_updates(3, 40, seed=1)
  with pytest.raises(ValueError, match=match):
    conflict.principal_aggregate(updates, np.ones(3), tensor_sizes=sizes)
  with pytest.raises(ValueError, match=match):
    tf.function(lambda u: conflict.principal_aggregate(u, np.ones(3), tensor_sizes=sizes))(
        tf.constant(updates))
  with pytest.raises(ValueError, match="granularity must be one of 'tensor', 'model', got 'layer'"):
    conflict.principal_aggregate(updates, np.ones(3), granularity='layer')

"""GradientHarmonizationFactory: type signatures, execution against a float64 loop reference
(docs/methods.md, FedGH; order="index") and the kernel, exclusion, per-round seeds."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.aggregators import helpers
from tff_conflict import aggregators
from tff_conflict import conflict

STATE_TYPE = tff.to_type(collections.OrderedDict(
    seed=tff.TensorType(np.int64), round=tff.TensorType(np.int64)))


def fedgh_reference(updates, weights):
  """FedGH (fedgh paper, Algorithm 1) with j ascending, float64 loops."""
  updates = np.asarray(updates, np.float64)
  weights = np.asarray(weights, np.float64)
  k = len(updates)
  out = np.zeros_like(updates)
  for i in range(k):
    u = updates[i].copy()
    for j in range(k):
      if j == i:
        continue
      dot = u @ updates[j]
      if dot < 0:
        u = u - dot / (updates[j] @ updates[j]) * updates[j]
    out[i] = u
  return (weights / weights.sum()) @ out


@pytest.mark.parametrize('bad', [dict(order='sorted'), dict(order=None), dict(seed='1'),
                                 dict(seed=1.5), dict(seed=True)])
def test_constructor_rejects(bad):
  key = next(iter(bad))
  with pytest.raises(ValueError, match=key):
    aggregators.GradientHarmonizationFactory(**bad)


def test_is_weighted_factory():
  assert isinstance(aggregators.GradientHarmonizationFactory(),
                    tff.aggregators.WeightedAggregationFactory)


@pytest.mark.parametrize('dtype', [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize('index', range(4))
def test_type_signatures(dtype, index):
  _, value_type = helpers.value_types(dtype)[index]
  process = aggregators.GradientHarmonizationFactory(seed=1).create(value_type,
                                                                    helpers.WEIGHT_TYPE)
  helpers.check_signatures(process, value_type, helpers.WEIGHT_TYPE, STATE_TYPE,
                           ['num_projections'])


@pytest.mark.parametrize('value_type,weight_type', [
    (tff.TensorType(np.int32, [3]), tff.TensorType(np.float32)),
    (tff.TensorType(np.float32, [3]), tff.TensorType(np.float32, [2])),
    (tff.TensorType(np.float32, [3]), tff.TensorType(np.str_)),
])
def test_create_rejects_types(value_type, weight_type):
  with pytest.raises(TypeError):
    aggregators.GradientHarmonizationFactory().create(value_type, weight_type)


def test_execution_matches_reference_and_kernel_nested_structure():
  _, value_type = helpers.value_types(np.float32)[3]
  rng = np.random.default_rng(0)
  k = 6
  stack = helpers.conflicting_updates(k, 10, rng)
  template = helpers.random_value(value_type, rng)
  values = [helpers.unflatten_like(row, template) for row in stack]
  weights = [3.0, 1.0, 2.0, 5.0, 1.0, 4.0]
  process = aggregators.GradientHarmonizationFactory(order='index').create(
      value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  got = helpers.flat_np(out.result)
  f32 = helpers.stack_np(values)
  expected = fedgh_reference(f32, weights)
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.linalg.norm(expected))
  kernel = conflict.harmonize(tf.constant(f32, tf.float32), tf.constant(weights), order='index')
  np.testing.assert_allclose(got, kernel.numpy(), rtol=1e-6, atol=1e-6)
  m = out.measurements
  assert m['num_clients'] == k and m['num_participating'] == k
  assert m['num_excluded_nonfinite'] == 0 and m['num_excluded_zero_weight'] == 0
  assert m['num_projections'] > 0 and m['conflict_fraction_before'] > 0
  np.testing.assert_allclose(m['aggregate_norm'], np.linalg.norm(expected), rtol=1e-4)
  plain_mean = np.asarray(weights) / np.sum(weights) @ f32
  np.testing.assert_allclose(m['norm_ratio'], np.linalg.norm(expected) / np.linalg.norm(plain_mean),
                             rtol=1e-4)
  # The result keeps the value's containers.
  assert list(out.result.keys()) == ['zeta', 'alpha']
  assert list(out.result['alpha'].keys()) == ['w', 'b']


@pytest.mark.parametrize('num_clients', [1, pytest.param(2, marks=pytest.mark.slow), 7, 101])
def test_client_counts(num_clients):
  rng = np.random.default_rng(num_clients)
  # d > K: with K >> d (e.g. 101 clients, d = 3) the Gram matrix is rank-deficient and the
  # Gram-form kernel amplifies the ~1e-15 matmul rounding difference between the worker's TF
  # build and this process's into an 8% difference of the aggregate (the loop reference agrees
  # with the kernel run in this process); model updates have d >> K.
  value_type = tff.TensorType(np.float64, [128])
  stack = helpers.conflicting_updates(num_clients, 128, rng)
  weights = [float(w) for w in rng.uniform(1, 5, size=num_clients).astype(np.float32)]
  process = aggregators.GradientHarmonizationFactory(order='index').create(
      value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), list(stack), weights)
  kernel = conflict.harmonize(tf.constant(stack), tf.constant(weights, tf.float64),
                              order='index')
  np.testing.assert_allclose(out.result, kernel.numpy(), rtol=1e-10, atol=1e-12)
  expected = fedgh_reference(stack, weights)
  np.testing.assert_allclose(out.result, expected, rtol=1e-9, atol=1e-12)
  assert out.measurements['num_clients'] == num_clients
  if num_clients == 1:
    np.testing.assert_allclose(out.result, stack[0], rtol=1e-12)


def test_zero_weight_and_non_finite_clients_take_no_part():
  rng = np.random.default_rng(3)
  value_type = tff.TensorType(np.float32, [4])
  stack = helpers.conflicting_updates(6, 4, rng).astype(np.float32)
  weights = [1.0, 2.0, 0.0, 1.0, 3.0, 1.0]
  values = list(stack)
  values[3] = np.array([np.nan, 1, 1, 1], np.float32)
  values[5] = np.array([np.inf, 0, 0, 0], np.float32)
  process = aggregators.GradientHarmonizationFactory(order='index').create(
      value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  keep = [0, 1, 4]
  expected = fedgh_reference(stack[keep], np.asarray(weights)[keep])
  np.testing.assert_allclose(out.result, expected, rtol=1e-4, atol=1e-5)
  m = out.measurements
  assert (m['num_clients'], m['num_excluded_nonfinite'], m['num_excluded_zero_weight'],
          m['num_participating']) == (6, 2, 1, 3)


def test_all_clients_excluded_gives_zeros():
  value_type = tff.to_type([tff.TensorType(np.float32, [2]), tff.TensorType(np.float32, [])])
  process = aggregators.GradientHarmonizationFactory().create(value_type, helpers.WEIGHT_TYPE)
  values = [[np.ones(2, np.float32), np.float32(1)], [np.full(2, np.nan, np.float32),
                                                       np.float32(0)]]
  out = process.next(process.initialize(), values, [0.0, 1.0])
  for leaf in tf.nest.flatten(out.result):
    np.testing.assert_array_equal(leaf, np.zeros_like(leaf))
  assert out.measurements['num_participating'] == 0
  assert np.isfinite(out.measurements['aggregate_norm'])


def test_per_round_seed_is_reproducible_and_follows_state():
  rng = np.random.default_rng(5)
  value_type = tff.TensorType(np.float32, [16])
  stack = helpers.conflicting_updates(8, 16, rng).astype(np.float32)
  weights = list(rng.uniform(1, 3, 8).astype(np.float32))
  process = aggregators.GradientHarmonizationFactory(seed=7).create(value_type,
                                                                    helpers.WEIGHT_TYPE)
  state = process.initialize()
  assert state['seed'] == 7 and state['round'] == 0
  results = []
  for r in range(2):
    out = process.next(state, list(stack), weights)
    kernel = conflict.harmonize(tf.constant(stack), tf.constant(weights), order='random',
                                seed=tf.constant([7, r], tf.int64))
    np.testing.assert_allclose(out.result, kernel.numpy(), rtol=1e-6, atol=1e-6)
    state = out.state
    assert state['round'] == r + 1
    results.append(out.result)
  # A second process with the same seed repeats the first round exactly.
  again = process.next(process.initialize(), list(stack), weights)
  np.testing.assert_array_equal(again.result, results[0])


def test_seed_none_draws_a_seed_at_initialize():
  process = aggregators.GradientHarmonizationFactory().create(tff.TensorType(np.float32, [2]),
                                                              helpers.WEIGHT_TYPE)
  seeds = {int(process.initialize()['seed']) for _ in range(3)}
  assert len(seeds) > 1


def test_composes_with_tff_clipping_wrapper():
  value_type = tff.TensorType(np.float32, [2])
  factory = tff.aggregators.clipping_factory(
      1.0, aggregators.GradientHarmonizationFactory(order='index'))
  assert isinstance(factory, tff.aggregators.WeightedAggregationFactory)
  process = factory.create(value_type, helpers.WEIGHT_TYPE)
  values = [np.array([3.0, 4.0], np.float32), np.array([-0.6, 0.0], np.float32)]
  out = process.next(process.initialize(), values, [1.0, 1.0])
  clipped = np.array([[0.6, 0.8], [-0.6, 0.0]])
  np.testing.assert_allclose(out.result, fedgh_reference(clipped, [1.0, 1.0]), rtol=1e-5)
  assert 'num_projections' in out.measurements['clipping']

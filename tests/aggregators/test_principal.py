"""PrincipalGradientFactory per model tensor (the default, the fedld authors' pcgrad_svd) and on
the whole flattened value, run in TFF's runtime, against the float64 loop reference; the
first-round plain mean."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.aggregators import helpers
from tests.conflict import references as ref
from tff_conflict import aggregators

# Four tensors: the structure of a small dense model (kernel, bias, kernel, bias).
VALUE_TYPE = tff.to_type(collections.OrderedDict(
    dense=collections.OrderedDict(kernel=tff.TensorType(np.float64, [4, 3]),
                                  bias=tff.TensorType(np.float64, [3])),
    out=collections.OrderedDict(kernel=tff.TensorType(np.float64, [3, 2]),
                                bias=tff.TensorType(np.float64, [2]))))
SIZES = (12, 3, 6, 2)


def _values(k, seed):
  rng = np.random.default_rng(seed)
  template = helpers.random_value(VALUE_TYPE, rng)
  stack = helpers.conflicting_updates(k, sum(SIZES), rng)
  stack[:, 12:15] *= 30.0   # a tensor of another scale, as a bias often is
  return [helpers.unflatten_like(row, template) for row in stack], stack


@pytest.fixture(scope='module')
def default_process():
  """The default factory's process (built once: K varies between calls)."""
  return aggregators.PrincipalGradientFactory().create(VALUE_TYPE, helpers.WEIGHT_TYPE)


@pytest.fixture(scope='module')
def plain_first_process():
  return aggregators.PrincipalGradientFactory(first_round_plain_mean=True).create(
      VALUE_TYPE, helpers.WEIGHT_TYPE)


def test_tensor_sizes_follow_the_flattening_order():
  assert aggregators.principal.tensor_sizes(VALUE_TYPE) == SIZES
  assert aggregators.principal.tensor_sizes(tff.TensorType(np.float32, [5, 2])) == (10,)


@pytest.mark.parametrize('k', [1, 3, 8])
def test_default_is_per_tensor_and_matches_the_float64_reference(default_process, k):
  values, stack = _values(k, seed=k)
  weights = [float(w) for w in np.random.default_rng(k).integers(1, 20, size=k)]
  factory = aggregators.PrincipalGradientFactory()
  assert factory.granularity == 'tensor' and not factory.first_round_plain_mean
  process = default_process
  out = process.next(process.initialize(), values, weights)
  expected, revised, num_kept, explained = ref.fedld_per_tensor(stack, weights, 0.8, SIZES)
  ref.assert_close(helpers.flat_np(out.result), expected, 1e-10)
  assert out.measurements['num_components'] == num_kept
  np.testing.assert_allclose(out.measurements['explained_variance'], explained, rtol=1e-5)
  np.testing.assert_allclose(out.measurements['aggregate_norm'], np.linalg.norm(expected),
                             rtol=1e-5)
  if k == 1:   # one client: its update, unchanged
    ref.assert_close(helpers.flat_np(out.result), stack[0], 1e-10)
  else:        # and not the paper's whole-model computation
    whole, *_ = ref.fedld(list(stack), weights, 0.8)
    assert np.max(np.abs(whole - expected)) > 1e-3 * np.max(np.abs(expected))


def test_model_granularity_is_the_whole_flattened_value():
  values, stack = _values(6, seed=4)
  weights = [1.0, 2.0, 1.0, 3.0, 1.0, 2.0]
  process = aggregators.PrincipalGradientFactory(granularity='model').create(
      VALUE_TYPE, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  expected, _, num_kept, explained = ref.fedld(list(stack), weights, 0.8)
  ref.assert_close(helpers.flat_np(out.result), expected, 1e-10)
  np.testing.assert_allclose(out.measurements['explained_variance'], explained, rtol=1e-5)


def test_per_tensor_excludes_non_finite_and_zero_weight_clients(default_process):
  values, stack = _values(5, seed=9)
  values[1]['out']['bias'] = np.array([np.nan, 0.0])
  weights = [1.0, 1.0, 2.0, 0.0, 3.0]
  process = default_process
  out = process.next(process.initialize(), values, weights)
  keep = [0, 2, 4]
  expected, *_ = ref.fedld_per_tensor(stack[keep], np.asarray(weights)[keep], 0.8, SIZES)
  ref.assert_close(helpers.flat_np(out.result), expected, 1e-10)
  m = out.measurements
  assert (m['num_clients'], m['num_excluded_nonfinite'], m['num_excluded_zero_weight'],
          m['num_participating']) == (5, 1, 1, 3)


def test_first_round_plain_mean_then_principal(plain_first_process):
  values, stack = _values(4, seed=2)
  weights = [1.0, 3.0, 2.0, 2.0]
  process = plain_first_process
  state = process.initialize()
  first = process.next(state, values, weights)
  w = np.asarray(weights) / np.sum(weights)
  ref.assert_close(helpers.flat_np(first.result), w @ stack, 1e-12)
  assert first.measurements['num_components'] == 0
  np.testing.assert_allclose(first.measurements['norm_ratio'], 1.0, rtol=1e-6)
  second = process.next(first.state, values, weights)
  expected, *_ = ref.fedld_per_tensor(stack, weights, 0.8, SIZES)
  ref.assert_close(helpers.flat_np(second.result), expected, 1e-10)
  assert second.measurements['num_components'] == 3
  assert second.state['round'] == 2


def test_type_signature_without_and_with_the_round_counter(default_process,
                                                          plain_first_process):
  plain, counted = default_process, plain_first_process
  assert plain.initialize.type_signature.result.member == tff.StructWithPythonType([], tuple)
  assert counted.initialize.type_signature.result.member == tff.StructWithPythonType(
      [('round', np.int64)], collections.OrderedDict)
  for process in (plain, counted):
    result = process.next.type_signature.result
    assert result.result.member == VALUE_TYPE
    names = [name for name, _ in tff.structure.iter_elements(result.measurements.member)]
    assert names[-2:] == ['num_components', 'explained_variance']


def test_projection_revision_per_tensor_matches_the_reference():
  values, stack = _values(5, seed=11)
  weights = [2.0, 1.0, 1.0, 3.0, 1.0]
  factory = aggregators.PrincipalGradientFactory(revision='projection')
  assert factory.revision == 'projection'
  process = factory.create(VALUE_TYPE, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  expected, *_ = ref.fedld_per_tensor(stack, weights, 0.8, SIZES, revision='projection')
  ref.assert_close(helpers.flat_np(out.result), expected, 1e-10)
  eq7, *_ = ref.fedld_per_tensor(stack, weights, 0.8, SIZES)
  assert np.max(np.abs(eq7 - expected)) > 1e-3 * np.max(np.abs(expected))


@pytest.mark.parametrize('bad', [dict(granularity='layer'), dict(granularity=None),
                                 dict(first_round_plain_mean=1), dict(revision='plain')])
def test_bad_arguments(bad):
  key = next(iter(bad))
  with pytest.raises(ValueError, match=f'{key} must be'):
    aggregators.PrincipalGradientFactory(**bad)

"""PrincipalGradientFactory, DominantGradientCorrectionFactory, CorrectiveGradientFactory:
type signatures (TFF mean_test.py style) and execution on Python lists of client values,
compared with the conflict kernels on the same stacks."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.aggregators import helpers
from tff_conflict import aggregators
from tff_conflict import conflict
from tff_conflict.aggregators import _gather as gather

EMPTY = tff.StructWithPythonType([], tuple)  # what tff.federated_value((), tff.SERVER) has


# ---------------------------------------------------------------- constructors

def _dgc(**kwargs):
  """DGC with the weight channel stated (required): losses unless the test says otherwise."""
  kwargs.setdefault('weights_are_losses', True)
  return aggregators.DominantGradientCorrectionFactory(**kwargs)


@pytest.mark.parametrize('make,bad', [
    (aggregators.PrincipalGradientFactory, dict(component_ratio=0.0)),
    (aggregators.PrincipalGradientFactory, dict(component_ratio=1.5)),
    (aggregators.PrincipalGradientFactory, dict(component_ratio='0.8')),
    (aggregators.PrincipalGradientFactory, dict(max_gather_bytes=-1)),
    (_dgc, dict(selection_ratio=-0.1)),
    (_dgc, dict(selection_ratio=True)),
    (_dgc, dict(weights_are_losses=1)),
    (_dgc, dict(max_gather_bytes=1.5)),
    (aggregators.CorrectiveGradientFactory, dict(alpha=-0.1)),
    (aggregators.CorrectiveGradientFactory, dict(alpha=1.5)),
    (aggregators.CorrectiveGradientFactory, dict(alpha=float('nan'))),
    (aggregators.CorrectiveGradientFactory, dict(alpha=None)),
    (aggregators.CorrectiveGradientFactory, dict(max_gather_bytes='1GB')),
    (aggregators.GradientHarmonizationFactory, dict(max_gather_bytes=True)),
])
def test_constructor_rejects(make, bad):
  key = next(iter(bad))
  with pytest.raises(ValueError, match=key):
    make(**bad)


def test_keyword_only():
  with pytest.raises(TypeError):
    aggregators.PrincipalGradientFactory(0.5)  # pylint: disable=too-many-function-args


def test_dgc_needs_weights_are_losses():
  """No silent default: the weight of TFF's builders (a number of examples) would be read as a
  loss and rank clients by p_i / n_i."""
  with pytest.raises(TypeError, match=r'needs weights_are_losses=True or False \(no default\): '
                                      r'True when .* mean training loss .*False when .* numbers '
                                      r'of examples'):
    aggregators.DominantGradientCorrectionFactory()
  with pytest.raises(TypeError, match='weights_are_losses'):
    aggregators.DominantGradientCorrectionFactory(selection_ratio=0.3, max_gather_bytes=0)
  for value in (True, False):
    assert aggregators.DominantGradientCorrectionFactory(
        weights_are_losses=value).weights_are_losses is value


def test_public_properties():
  dgc = aggregators.DominantGradientCorrectionFactory(selection_ratio=0.25,
                                                      weights_are_losses=False)
  assert (dgc.selection_ratio, dgc.weights_are_losses, dgc.max_gather_bytes) == (0.25, False, None)
  principal = aggregators.PrincipalGradientFactory(component_ratio=0.5, max_gather_bytes=0)
  assert (principal.component_ratio, principal.max_gather_bytes) == (0.5, 0)
  corrective = aggregators.CorrectiveGradientFactory(alpha=0.3, max_gather_bytes=10**6)
  assert (corrective.alpha, corrective.max_gather_bytes) == (0.3, 10**6)
  fedgh = aggregators.GradientHarmonizationFactory(order='index', seed=7)
  assert (fedgh.order, fedgh.seed) == ('index', 7)


def test_max_gather_bytes_argument_refuses_with_clear_errors():
  value_type = tff.TensorType(np.float32, [3])
  values = [np.ones(3, np.float32)] * 3
  # A limit below one client's estimate admits no client: refused when the process is built.
  admits_none = r'max_gather_bytes = 1 admits no client: .* d = 3 \(16 bytes per client\)'
  with pytest.raises(ValueError, match=admits_none):
    _dgc(max_gather_bytes=1).create(value_type, helpers.WEIGHT_TYPE)
  # A limit for 2 clients refuses the round's third client.
  # d = 3 floats and the weight are small fields: 16 bytes, no large field.
  two = gather.estimated_gather_bytes(0, 2, small_row_bytes=16)
  assert gather.max_clients_for(0, two, small_row_bytes=16) == 2
  small = _dgc(max_gather_bytes=two).create(value_type, helpers.WEIGHT_TYPE)
  with pytest.raises(Exception) as info:
    small.next(small.initialize(), values, [1.0] * 3)
  assert 'K_max = 2' in str(info.value) and f'{two} bytes' in str(info.value)
  # 0 builds without the check, whatever the process-wide limit says.
  with aggregators.gather_memory_limit(1):
    unchecked = _dgc(max_gather_bytes=0).create(value_type, helpers.WEIGHT_TYPE)
    with pytest.raises(ValueError, match=admits_none):
      _dgc().create(value_type, helpers.WEIGHT_TYPE)
  out = unchecked.next(unchecked.initialize(), values, [1.0] * 3)
  np.testing.assert_allclose(out.result, np.ones(3))


# ---------------------------------------------------------------- type signatures

@pytest.mark.parametrize('dtype,index', [
    (np.float32, 1), (np.float64, 3), pytest.param(np.float32, 2, marks=pytest.mark.slow)])
@pytest.mark.parametrize('factory,extra', [
    (aggregators.PrincipalGradientFactory(), ['num_components', 'explained_variance']),
    (_dgc(weights_are_losses=False), ['num_dominant', 'num_projections']),
    pytest.param(_dgc(weights_are_losses=True),
                 ['num_dominant', 'num_projections'], marks=pytest.mark.slow),
])
def test_type_signatures(factory, extra, dtype, index):
  _, value_type = helpers.value_types(dtype)[index]
  process = factory.create(value_type, helpers.WEIGHT_TYPE)
  helpers.check_signatures(process, value_type, helpers.WEIGHT_TYPE, EMPTY, extra)


def _corrective_type(update_type):
  return tff.StructWithPythonType(
      [('update', update_type), ('gradient', update_type), ('loss', tff.TensorType(np.float32))],
      collections.OrderedDict)


@pytest.mark.parametrize('dtype,index', [(np.float32, 3), (np.float64, 1)])
def test_corrective_type_signature(dtype, index):
  _, update_type = helpers.value_types(dtype)[index]
  value_type = _corrective_type(update_type)
  process = aggregators.CorrectiveGradientFactory().create(value_type, helpers.WEIGHT_TYPE)
  helpers.check_signatures(process, value_type, helpers.WEIGHT_TYPE, EMPTY,
                           ['corrective_weights'])
  x_type = process.next.type_signature.result.measurements.member['corrective_weights']
  assert x_type == tff.TensorType(np.float32, [None])


@pytest.mark.parametrize('value_type', [
    tff.TensorType(np.float32, [3]),
    tff.to_type(collections.OrderedDict(gradient=tff.TensorType(np.float32, [3]),
                                        update=tff.TensorType(np.float32, [3]),
                                        loss=tff.TensorType(np.float32))),
    tff.to_type(collections.OrderedDict(update=tff.TensorType(np.float32, [3]),
                                        gradient=tff.TensorType(np.float32, [2]),
                                        loss=tff.TensorType(np.float32))),
    tff.to_type(collections.OrderedDict(update=tff.TensorType(np.float32, [3]),
                                        gradient=tff.TensorType(np.float32, [3]),
                                        loss=tff.TensorType(np.float32, [2]))),
])
def test_corrective_rejects_value_types(value_type):
  with pytest.raises(TypeError, match='value_type'):
    aggregators.CorrectiveGradientFactory().create(value_type, helpers.WEIGHT_TYPE)


@pytest.mark.parametrize('factory', [aggregators.PrincipalGradientFactory(),
                                     _dgc()])
def test_create_rejects_non_float(factory):
  with pytest.raises(TypeError):
    factory.create(tff.TensorType(np.int32, [3]), helpers.WEIGHT_TYPE)


# ---------------------------------------------------------------- execution

def _values(value_type, k, d_seed=0):
  rng = np.random.default_rng(d_seed)
  template = helpers.random_value(value_type, rng)
  stack = helpers.conflicting_updates(k, helpers.flat_np(template).size, rng)
  values = [helpers.unflatten_like(row, template) for row in stack]
  return values, helpers.stack_np(values)


def test_principal_matches_kernel_on_nested_values():
  _, value_type = helpers.value_types(np.float32)[3]
  values, stack = _values(value_type, 6)
  weights = [1.0, 2.0, 3.0, 1.0, 2.0, 5.0]
  process = aggregators.PrincipalGradientFactory(component_ratio=0.5).create(
      value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  kernel, diag = conflict.principal_aggregate_with_diagnostics(
      tf.constant(stack, tf.float32), tf.constant(weights), component_ratio=0.5,
      tensor_sizes=aggregators.principal.tensor_sizes(value_type))
  np.testing.assert_allclose(helpers.flat_np(out.result), kernel.numpy(), rtol=1e-4, atol=1e-5)
  assert out.measurements['num_components'] == diag['num_components'] == 3
  np.testing.assert_allclose(out.measurements['explained_variance'],
                             diag['explained_variance'], rtol=1e-5)


def test_principal_excludes_zero_weight_and_non_finite():
  value_type = tff.TensorType(np.float64, [12])
  values, stack = _values(value_type, 5, d_seed=1)
  values[1] = np.full(12, np.nan)
  weights = [1.0, 1.0, 2.0, 0.0, 3.0]
  process = aggregators.PrincipalGradientFactory().create(value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  keep = [0, 2, 4]
  kernel = conflict.principal_aggregate(tf.constant(stack[keep]),
                                        tf.constant(np.asarray(weights)[keep]))
  np.testing.assert_allclose(out.result, kernel.numpy(), rtol=1e-10, atol=1e-12)
  m = out.measurements
  assert (m['num_clients'], m['num_excluded_nonfinite'], m['num_excluded_zero_weight'],
          m['num_participating']) == (5, 1, 1, 3)
  w = np.asarray(weights)[keep]
  plain_mean = w / w.sum() @ stack[keep]   # of the clients that took part
  np.testing.assert_allclose(m['norm_ratio'],
                             np.linalg.norm(out.result) / np.linalg.norm(plain_mean), rtol=1e-6)


@pytest.mark.parametrize('weights_are_losses', [False, True])
def test_dominant_matches_kernel(weights_are_losses):
  _, value_type = helpers.value_types(np.float32)[1]
  values, stack = _values(value_type, 7, d_seed=2)
  weights = [0.5, 2.0, 1.0, 3.0, 0.25, 1.5, 4.0]
  process = aggregators.DominantGradientCorrectionFactory(
      selection_ratio=0.4, weights_are_losses=weights_are_losses).create(
          value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  losses = weights if weights_are_losses else [1.0] * 7
  kernel, diag = conflict.dominant_correction_with_diagnostics(
      tf.constant(stack, tf.float32), tf.constant(losses), selection_ratio=0.4)
  np.testing.assert_allclose(helpers.flat_np(out.result), kernel.numpy(), rtol=1e-4, atol=1e-5)
  assert out.measurements['num_dominant'] == diag['num_dominant'] == 3
  assert out.measurements['num_projections'] == diag['num_projections']


def test_dominant_losses_change_the_result_and_zero_means_no_loss():
  value_type = tff.TensorType(np.float64, [10])
  values, stack = _values(value_type, 5, d_seed=3)
  with_losses = aggregators.DominantGradientCorrectionFactory(weights_are_losses=True).create(
      value_type, helpers.WEIGHT_TYPE)
  # Weight 0 = "no loss reported": client 2 takes no part (it is not a loss of 0, which the
  # kernel would clamp to 1e-12 and make client 2 the most dominant).
  losses = [1.0, 0.1, 0.0, 5.0, 2.0]
  out = with_losses.next(with_losses.initialize(), values, losses)
  keep = [0, 1, 3, 4]
  kernel = conflict.dominant_correction(tf.constant(stack[keep]),
                                        tf.constant(np.asarray(losses)[keep]))
  np.testing.assert_allclose(out.result, kernel.numpy(), rtol=1e-10, atol=1e-12)
  assert out.measurements['num_excluded_zero_weight'] == 1
  # The unweighted mean of Algorithm 2 line 9: K = 4 clients taking part.
  assert out.measurements['num_participating'] == 4
  plain_mean = stack[keep].mean(axis=0)
  np.testing.assert_allclose(out.measurements['norm_ratio'],
                             np.linalg.norm(out.result) / np.linalg.norm(plain_mean), rtol=1e-6)


def test_corrective_matches_kernel_and_fills_every_field():
  _, update_type = helpers.value_types(np.float32)[3]
  value_type = _corrective_type(update_type)
  rng = np.random.default_rng(4)
  k = 5
  updates, u_stack = _values(update_type, k, d_seed=4)
  gradients, g_stack = _values(update_type, k, d_seed=5)
  losses = rng.uniform(0.5, 2.0, k).astype(np.float32)
  values = [collections.OrderedDict(update=u, gradient=g, loss=l)
            for u, g, l in zip(updates, gradients, losses)]
  weights = [10.0, 20.0, 5.0, 8.0, 7.0]
  process = aggregators.CorrectiveGradientFactory(alpha=0.3).create(value_type,
                                                                    helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  kernel, diag = conflict.corrective_aggregate_with_diagnostics(
      tf.constant(u_stack, tf.float32), tf.constant(g_stack, tf.float32), tf.constant(losses),
      tf.constant(weights), alpha=0.3)
  np.testing.assert_allclose(helpers.flat_np(out.result['update']), kernel.numpy(), rtol=1e-4,
                             atol=1e-5)
  np.testing.assert_allclose(out.measurements['corrective_weights'], diag['corrective_weights'],
                             rtol=1e-5)
  w = np.asarray(weights) / np.sum(weights)
  np.testing.assert_allclose(helpers.flat_np(out.result['gradient']), w @ g_stack, rtol=1e-5)
  np.testing.assert_allclose(out.result['loss'], w @ losses, rtol=1e-6)
  assert list(out.result.keys()) == ['update', 'gradient', 'loss']
  np.testing.assert_allclose(
      out.measurements['norm_ratio'],
      np.linalg.norm(helpers.flat_np(out.result['update'])) / np.linalg.norm(w @ u_stack),
      rtol=1e-4)


@pytest.mark.slow
def test_corrective_alpha_zero_is_weighted_mean_and_excludes_nonfinite_loss():
  update_type = tff.TensorType(np.float64, [6])
  value_type = _corrective_type(update_type)
  updates, u_stack = _values(update_type, 4, d_seed=6)
  gradients, _ = _values(update_type, 4, d_seed=7)
  values = [collections.OrderedDict(update=u, gradient=g, loss=np.float32(1.0))
            for u, g in zip(updates, gradients)]
  values[2]['loss'] = np.float32(np.nan)
  weights = [1.0, 3.0, 2.0, 4.0]
  process = aggregators.CorrectiveGradientFactory(alpha=0.0).create(value_type,
                                                                    helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  keep = [0, 1, 3]
  w = np.asarray(weights)[keep] / np.sum(np.asarray(weights)[keep])
  np.testing.assert_allclose(out.result['update'], w @ u_stack[keep], rtol=1e-12)
  assert out.measurements['num_excluded_nonfinite'] == 1
  assert out.measurements['corrective_weights'].shape == (3,)


@pytest.mark.parametrize('factory', [
    pytest.param(aggregators.PrincipalGradientFactory(), marks=pytest.mark.slow),
    _dgc()])
def test_all_excluded_gives_zeros(factory):
  process = factory.create(tff.TensorType(np.float32, [3]), helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), [np.ones(3, np.float32), np.full(3, np.inf,
                                                                             np.float32)],
                     [0.0, 1.0])
  np.testing.assert_array_equal(out.result, np.zeros(3))
  assert out.measurements['num_participating'] == 0


# ---------------------------------------------------------------- the measured mean (FedAvg)

def test_measured_mean_type_signature():
  _, value_type = helpers.value_types(np.float32)[3]
  process = aggregators.MeasuredMeanFactory().create(value_type, helpers.WEIGHT_TYPE)
  helpers.check_signatures(process, value_type, helpers.WEIGHT_TYPE, EMPTY,
                           ['mean_update_norm', 'mean_norm_ratio'])


def test_measured_mean_equals_tff_mean_and_the_kernel():
  _, value_type = helpers.value_types(np.float32)[1]
  values, stack = _values(value_type, 5, d_seed=6)
  weights = [3.0, 1.0, 0.0, 2.0, 4.0]
  process = aggregators.MeasuredMeanFactory().create(value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  mean = tff.aggregators.MeanFactory().create(value_type, helpers.WEIGHT_TYPE)
  expected = mean.next(mean.initialize(), values, weights).result
  np.testing.assert_allclose(helpers.flat_np(out.result), helpers.flat_np(expected), rtol=1e-5,
                             atol=1e-6)
  _, diag = conflict.weighted_mean_with_diagnostics(tf.constant(stack, tf.float32),
                                                    tf.constant(weights))
  for key in ('conflict_fraction_before', 'mean_update_norm', 'mean_norm_ratio'):
    np.testing.assert_allclose(out.measurements[key], diag[key], rtol=1e-5)
  assert out.measurements['num_participating'] == 4


def test_principal_preserve_norms_matches_kernel():
  _, value_type = helpers.value_types(np.float32)[3]
  values, stack = _values(value_type, 6, d_seed=8)
  weights = [1.0, 2.0, 3.0, 1.0, 2.0, 5.0]
  factory = aggregators.PrincipalGradientFactory(preserve_norms=True)
  assert factory.preserve_norms
  process = factory.create(value_type, helpers.WEIGHT_TYPE)
  out = process.next(process.initialize(), values, weights)
  kernel = conflict.principal_aggregate(tf.constant(stack, tf.float32), tf.constant(weights),
                                        preserve_norms=True,
                                        tensor_sizes=aggregators.principal.tensor_sizes(value_type))
  np.testing.assert_allclose(helpers.flat_np(out.result), kernel.numpy(), rtol=1e-4, atol=1e-5)

"""`tff_conflict._checks`: one argument order `(name, value)`, normalized results, and one error,
`tff_conflict.ArgumentError`, naming the argument and the value (also from builders, losses, kernels
and aggregators, eagerly and inside `tf.function`)."""

import math
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tff_conflict
from tff_conflict import _checks
from tff_conflict import aggregators
from tff_conflict import conflict
from tff_conflict import learning
from tff_conflict import losses


@pytest.mark.parametrize('check,good,bad,wording', [
    (_checks.check_finite, [0, -2.5, np.float32(1.5)], [math.nan, math.inf, True, '1', None],
     'x must be a finite number, got'),
    (_checks.check_nonnegative, [0, 0.0, 3, np.float64(2.0)],
     [-1e-9, math.nan, math.inf, np.bool_(True), '0', None], 'x must be a finite number >= 0, got'),
    (_checks.check_positive, [1e-300, 2, np.int64(3)], [0, 0.0, -1, math.nan, math.inf, False],
     'x must be a finite number > 0, got'),
    (_checks.check_ratio, [1, 1.0, 1e-9, np.float32(0.5)], [0, -0.5, 1.0001, math.nan, math.inf,
                                                            True, '0.5'],
     r'x must be a number in \(0, 1\], got'),
    (_checks.check_fraction, [1e-9, 0.5, np.float32(0.25)], [0, 1, 1.0, -0.5, math.nan, math.inf,
                                                             True, '0.5'],
     r'x must be a number in \(0, 1\), got'),
    (_checks.check_unit_interval, [0, 1, 0.5, np.float64(1.0)], [-1e-12, 1.5, math.nan, True],
     r'x must be a number in \[0, 1\], got'),
])
def test_real_checks(check, good, bad, wording):
  for value in good:
    result = check('x', value)
    assert type(result) is float and result == float(value)
  for value in bad:
    with pytest.raises(ValueError, match=wording) as info:
      check('x', value)
    assert repr(value) in str(info.value)


def test_integer_checks():
  assert _checks.check_int('n', np.int32(3), minimum=1) == 3
  assert type(_checks.check_int('n', np.int64(3))) is int
  assert _checks.check_int('n', -7) == -7
  for bad in (0, 2.0, True, '3', None):
    with pytest.raises(ValueError, match=f'n must be an integer >= 1, got {bad!r}'):
      _checks.check_int('n', bad, minimum=1)
  assert _checks.check_optional_int('n', None, minimum=1) is None
  assert _checks.check_optional_int('n', 0, minimum=0) == 0
  with pytest.raises(ValueError, match='n must be None or an integer >= 1, got 0'):
    _checks.check_optional_int('n', 0, minimum=1)
  assert _checks.check_seed('seed', None) is None
  assert _checks.check_seed('seed', -2**63) == -2**63
  for bad in (2**63, 1.0, True, np.array([1, 2])):
    with pytest.raises(ValueError, match='seed must be None or an integer in'):
      _checks.check_seed('seed', bad)


def test_choice_and_bool():
  assert _checks.check_choice('mode', 'b', ('a', 'b')) == 'b'
  for bad in ('c', None, 1, ['a']):
    with pytest.raises(ValueError, match=re.escape(f"mode must be one of 'a', 'b', got {bad!r}")):
      _checks.check_choice('mode', bad, ('a', 'b'))
  assert _checks.check_bool('flag', np.bool_(False)) is False
  for bad in (0, 1, 'True', None):
    with pytest.raises(ValueError, match=f'flag must be a bool, got {bad!r}'):
      _checks.check_bool('flag', bad)


def _raised(call):
  with pytest.raises(tff_conflict.ArgumentError) as info:
    call()
  return info.value


def test_the_error_carries_the_argument_and_the_value():
  error = _raised(lambda: _checks.check_ratio('selection_ratio', 1.5))
  assert (error.argument, error.value) == ('selection_ratio', 1.5)
  assert isinstance(error, ValueError) and not isinstance(error, TypeError)
  assert str(error) == 'selection_ratio must be a number in (0, 1], got 1.5'
  wrong_type = tff_conflict.ArgumentTypeError.must_be('inner', 3, 'a factory')
  assert isinstance(wrong_type, tff_conflict.ArgumentError) and isinstance(wrong_type, TypeError)
  assert (wrong_type.argument, wrong_type.value, str(wrong_type)) == (
      'inner', 3, 'inner must be a factory, got 3')


def test_builders_losses_kernels_and_aggregators_raise_it(tiny_keras_model_fn):
  spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))
  sgd = lambda: tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  cases = [
      (lambda: learning.build_fedprox(tiny_keras_model_fn, input_spec=spec,
                                      client_optimizer_fn=sgd, proximal_strength=-1.0),
       'proximal_strength', -1.0),
      (lambda: learning.build_fedavg(tiny_keras_model_fn, input_spec=spec,
                                     client_optimizer_fn=sgd, clip_norm=0.0), 'clip_norm', 0.0),
      (lambda: losses.FocalLoss(gamma=float('nan')), 'gamma', None),
      (lambda: conflict.harmonize(np.ones([3, 4], np.int32), np.ones(3)), 'updates', None),
      (lambda: conflict.harmonize(np.ones([3, 4]), np.ones(3), seed=True), 'seed', True),
      (lambda: aggregators.DominantGradientCorrectionFactory(selection_ratio=0.0,
                                                             weights_are_losses=True),
       'selection_ratio', 0.0),
  ]
  for call, argument, value in cases:
    error = _raised(call)
    assert error.argument == argument and error.argument in str(error), str(error)
    if value is not None:
      assert error.value == value and repr(value) in str(error), str(error)
  error = _raised(lambda: learning.build_fedavg(tiny_keras_model_fn, input_spec=spec,
                                                client_optimizer_fn=object()))
  assert error.argument == 'client_optimizer_fn' and 'object object' in str(error)
  # A value only a trace sees: the same error, not TF's StagingError, with its attributes.
  focal = losses.FocalLoss()
  error = _raised(tf.function(lambda: focal(tf.zeros([2, 3], tf.int32), tf.zeros([2, 3]))))
  assert error.argument == 'labels' and 'got shape (2, 3)' in str(error)
  error = _raised(lambda: tf.function(
      lambda u: conflict.principal_aggregate(u, tf.ones(3), tensor_sizes=(2, 0)))(tf.ones([3, 2])))
  assert (error.argument, error.value) == ('tensor_sizes', 0)
  # A wrong type is also a TypeError (TFF's factories raise TypeError for an unusable type).
  factory = aggregators.DominantGradientCorrectionFactory(weights_are_losses=True)
  with pytest.raises(tff_conflict.ArgumentTypeError) as info:
    factory.create(tff.TensorType(np.int32, [3]), tff.TensorType(np.float32))
  assert isinstance(info.value, TypeError) and info.value.argument == 'value_type'


def test_data_evaluation_and_runtime_refusals_carry_the_argument_and_the_value():
  from tff_conflict import data, evaluation, runtime  # pylint: disable=g-import-not-at-top
  cases = [
      (lambda: data.iid_partition(3, 5, seed=0), 'num_clients', 5),
      (lambda: data.parse_regime('digits:halves'), 'regime', 'digits:halves'),
      (lambda: evaluation.confusion_matrix([0, 1], [0, 1, 1], 2), 'predictions', [0, 1, 1]),
      (lambda: learning.ClientControls([], 3), 'client_ids', []),
      (lambda: runtime.parse_worker_addresses('localhost:0'), 'addresses', 'localhost:0'),
      (lambda: learning.build_fedavg(3, client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.1)), 'model_fn', 3),
  ]
  for call, argument, value in cases:
    error = _raised(call)
    assert error.argument == argument and argument in str(error), str(error)
    assert np.asarray(error.value).tolist() == value, str(error)

"""flatten / unflatten: TFF type order, dtypes, round trip inside a TFF computation."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.aggregators import helpers
from tff_conflict.aggregators import _flatten as flatten


@pytest.mark.parametrize('dtype', [np.float16, np.float32, np.float64])
@pytest.mark.parametrize('index', range(4))
def test_round_trip_in_tff_computation(dtype, index):
  name, value_type = helpers.value_types(dtype)[index]
  rng = np.random.default_rng(index)
  value = helpers.random_value(value_type, rng)

  @tff.tensorflow.computation(value_type)
  def flat(v):
    return flatten.flatten(v, value_type)

  @tff.tensorflow.computation(flat.type_signature.result)
  def unflat(vec):
    return flatten.unflatten(vec, value_type)

  vector = flat(value)
  assert vector.shape == (flatten.flat_size(value_type),), name
  expected_dtype = np.float64 if dtype == np.float64 else np.float32
  assert vector.dtype == expected_dtype
  np.testing.assert_allclose(vector, helpers.flat_np(value), rtol=1e-6)
  assert unflat.type_signature.result == value_type
  back = unflat(vector)
  for a, b in zip(tf.nest.flatten(back), tf.nest.flatten(value)):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


def test_order_is_tff_type_order_not_sorted_keys():
  value_type = tff.to_type(collections.OrderedDict(
      b=tff.TensorType(np.float32, [2]), a=tff.TensorType(np.float32, [1])))

  @tff.tensorflow.computation(value_type)
  def flat(v):
    return flatten.flatten(v, value_type)

  np.testing.assert_array_equal(
      flat(collections.OrderedDict(b=np.array([1., 2.], np.float32), a=np.array([3.], np.float32))),
      [1., 2., 3.])


def test_mixed_dtypes_use_float64_and_cast_back():
  value_type = tff.to_type([tff.TensorType(np.float32, [2]), tff.TensorType(np.float64, [1])])
  assert flatten.stack_dtype(value_type) == tf.float64
  vec = tf.constant([1.5, -2.0, 1e-300], tf.float64)
  out = flatten.unflatten(vec, value_type)
  assert out[0].dtype == tf.float32 and out[1].dtype == tf.float64
  np.testing.assert_array_equal(out[1].numpy(), [1e-300])


@pytest.mark.parametrize('bad', [
    tff.TensorType(np.int32, [3]),
    tff.to_type([tff.TensorType(np.float32, [2]), tff.TensorType(np.int64, [])]),
    tff.TensorType(np.float32, [None]),
    tff.StructType([]),
    tff.SequenceType(tff.TensorType(np.float32, [2])),
])
def test_check_value_type_rejects(bad):
  with pytest.raises(TypeError, match='value_type'):
    flatten.check_value_type(bad)


def test_flat_size():
  assert flatten.flat_size(helpers.value_types()[3][1]) == 2 + 6 + 2

"""tff_conflict.runtime._reduce_loop: ReduceDataset ops replaced by loops that compute the same."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.runtime import _reduce_loop
from tff_conflict.runtime import _tf_stamp


def _graph_def(comp):
  return _tf_stamp.unpack_graph_def(_tf_stamp.computation_proto(comp).tensorflow.graph_def)


def _reduce_nodes(graph_def):
  """(function name or None for the top level, node name) of every ReduceDataset."""
  found = [(None, n.name) for n in graph_def.node if n.op == 'ReduceDataset']
  for function in graph_def.library.function:
    found += [(function.signature.name, n.name) for n in function.node_def
              if n.op == 'ReduceDataset']
  return found


@tf.function
def _scaled_sum(dataset, scale):
  return dataset.reduce(np.float32(0.0), lambda total, x: total + x * scale)


@tff.tensorflow.computation(tff.SequenceType(np.float32), np.float32)
def _stateful_and_nested(dataset, scale):
  """A reduce function that updates a variable (top level) and one inside a tf.function."""
  variable = tf.Variable(0.0)

  def reduce_fn(total, x):
    variable.assign_add(x * scale)
    return total + variable.read_value()

  running = dataset.reduce(np.float32(0.0), reduce_fn)
  return running, _scaled_sum(dataset.map(lambda x: 2.0 * x), scale)


_ELEMENT = collections.OrderedDict(x=tff.TensorType(np.float32, [None, 2]),
                                   y=tff.TensorType(np.int32, [None]))


@tff.tensorflow.computation(tff.SequenceType(_ELEMENT))
def _structured(dataset):
  """Two reduces of one dataset of batches; the state has a growing leading dimension."""
  counts = dataset.reduce(
      (np.int64(0), tf.zeros([0], tf.int32)),
      lambda state, batch: (state[0] + tf.cast(tf.shape(batch['y'])[0], tf.int64),
                            tf.concat([state[1], batch['y']], axis=0)))
  sums = dataset.reduce(tf.zeros([2]), lambda total, batch: total + tf.reduce_sum(batch['x'], 0))
  return counts[0], counts[1], sums


def test_top_level_and_nested_reduces_are_replaced():
  graph_def = _graph_def(_stateful_and_nested)
  found = _reduce_nodes(graph_def)
  assert any(f is None for f, _ in found) and any(f is not None for f, _ in found)
  assert _reduce_loop.replace_reduce_datasets(graph_def) == len(found)
  assert not _reduce_nodes(graph_def)


@pytest.mark.parametrize('values', [[1.0, 2.0, 3.0], [], [5.0]])
def test_stateful_and_nested_reduces_equal_tff(values):
  stamped = _tf_stamp.StampedComputation(_stateful_and_nested, 'reduce')
  dataset = tf.data.Dataset.from_tensor_slices(np.array(values, np.float32))
  running, scaled = [t.numpy() for t in stamped([dataset, np.float32(2.0)])]
  expected = _stateful_and_nested(dataset, np.float32(2.0))
  # A hand-worked reference: the variable holds 2 * (x_1 + ... + x_i) after element i.
  partial_sums = np.cumsum(np.array(values, np.float64))
  assert running == pytest.approx(float(np.sum(2.0 * partial_sums)))
  assert scaled == pytest.approx(4.0 * float(np.sum(values)))
  np.testing.assert_allclose([running, scaled], expected, rtol=1e-6)


@pytest.mark.parametrize('num_batches', [0, 1, 3])
def test_structured_elements_and_growing_state_equal_tff(num_batches):
  rng = np.random.default_rng(num_batches)
  x = rng.normal(size=(3 * num_batches, 2)).astype(np.float32)
  y = rng.integers(0, 9, size=3 * num_batches).astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(3)
  stamped = _tf_stamp.StampedComputation(_structured, 'structured')
  count, labels, sums = [t.numpy() for t in stamped([dataset])]
  assert count == 3 * num_batches
  np.testing.assert_array_equal(labels, y)
  np.testing.assert_allclose(sums, x.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-6)
  expected = _structured(dataset)
  assert count == expected[0]
  np.testing.assert_array_equal(labels, expected[1])
  np.testing.assert_allclose(sums, expected[2], rtol=1e-6)


def test_missing_reduce_function_is_a_clear_error():
  graph_def = _graph_def(_stateful_and_nested)
  top = next(n for n in graph_def.node if n.op == 'ReduceDataset')
  top.attr['f'].func.name = 'no_such_function'
  with pytest.raises(ValueError, match='no_such_function'):
    _reduce_loop.replace_reduce_datasets(graph_def)

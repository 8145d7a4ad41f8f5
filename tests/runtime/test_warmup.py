"""tff_conflict.runtime._warmup: which graphs may be called ahead, the placeholders, and the
background thread (order, waiting, failures, device scope)."""

import collections
import threading

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow.python.eager import context

from tff_conflict.runtime import _warmup


def _graph_def(fn, *specs):
  return tf.function(fn, autograph=False).get_concrete_function(*specs).graph.as_graph_def()


_SCALAR = tf.TensorSpec([], tf.float32)


def test_replayable_graphs():
  assert _warmup.replayable(_graph_def(lambda x: tf.square(x) + 1.0, _SCALAR))
  # An assertion, a loop and an in-memory dataset end with the call.
  assert _warmup.replayable(_graph_def(
      lambda x: tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), (0, x))[1],
      _SCALAR))
  assert _warmup.replayable(_graph_def(
      lambda x: tf.data.Dataset.from_tensor_slices(tf.stack([x, x])).reduce(0.0, tf.add),
      _SCALAR))
  with tf.Graph().as_default():  # a variable created, initialized and updated inside the graph
    v = tf.compat.v1.get_variable('v', initializer=1.0, use_resource=True)
    tf.compat.v1.assign_add(v, 2.0)
    tf.debugging.Assert(v.read_value() > 0, [v.read_value()])
    with_variable = tf.compat.v1.get_default_graph().as_graph_def()
  assert _warmup.replayable(with_variable)


@pytest.mark.parametrize('fn', [
    lambda x: x + tf.random.uniform([], seed=1),
    lambda x: tf.random.shuffle(tf.stack([x, x]), seed=2)[0],
    lambda x: tf.data.Dataset.from_tensor_slices(tf.stack([x, x])).shuffle(2, seed=3).reduce(
        0.0, tf.add),
])
def test_random_ops_are_not_replayable(fn):
  assert not _warmup.replayable(_graph_def(fn, _SCALAR))


def test_print_and_random_ops_inside_library_functions_are_not_replayable():
  inner = tf.function(lambda x: x * tf.random.uniform([], seed=4), autograph=False)
  graph_def = _graph_def(lambda x: tf.cond(x > 0, lambda: inner(x), lambda: x), _SCALAR)
  assert graph_def.library.function  # the draw is inside a library function
  assert not _warmup.replayable(graph_def)

  def printing(x):
    tf.print(x)
    return x

  assert not _warmup.replayable(_graph_def(printing, _SCALAR))


def test_zeros_and_placeholder_client_data():
  a, b = _warmup.zeros([tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([], tf.int64)])
  assert a.shape == (0, 3) and a.dtype == tf.float32
  assert b.shape == () and b.dtype == tf.int64 and int(b) == 0
  with pytest.raises(ValueError, match='placeholder'):
    _warmup.zeros([tf.TensorSpec([], tf.variant)])

  element = collections.OrderedDict(x=tff.TensorType(np.float32, [None, 4]),
                                    y=tff.TensorType(np.int32, [None]))
  data_type = tff.StructType([('data', tff.SequenceType(element)),
                              ('scale', tff.TensorType(np.float32, [2]))])
  variant, scale = _warmup.placeholder_client_data(data_type)
  assert variant.dtype == tf.variant
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 4], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  (batch,) = list(tf.data.experimental.from_variant(variant, spec))  # one empty batch
  assert batch['x'].shape == (0, 4) and batch['y'].shape == (0,)
  np.testing.assert_array_equal(scale, [0.0, 0.0])


def test_calls_run_in_order_on_one_thread_and_waits_block_until_done():
  release = threading.Event()
  log = []
  warmup = _warmup.Warmup()
  warmup.add('first', lambda: (release.wait(10), log.append(('first', threading.get_ident()))))
  warmup.add('second', lambda: log.append(('second', threading.get_ident())))
  warmup.close()
  waiter = threading.Thread(target=lambda: (warmup.wait('second'), log.append(('waited', 0))))
  waiter.start()
  waiter.join(0.2)
  assert log == []  # 'second' waits for 'first', and the waiter for 'second'
  release.set()
  waiter.join(10)
  assert [name for name, _ in log] == ['first', 'second', 'waited']
  assert log[0][1] == log[1][1] != threading.get_ident()
  warmup.wait('never added')  # returns at once
  warmup.join(10)
  assert warmup.names == ('first', 'second') and not warmup.errors


def test_a_failing_call_is_recorded_and_the_next_ones_run():
  warmup = _warmup.Warmup()
  warmup.add('bad', lambda: tf.debugging.assert_positive(tf.constant(-1.0)))
  ran = []
  warmup.add('good', lambda: ran.append(1))
  warmup.close()
  warmup.wait('good')
  assert ran == [1]
  assert set(warmup.errors) == {'bad'}
  assert isinstance(warmup.errors['bad'], tf.errors.InvalidArgumentError)
  with pytest.raises(ValueError, match="'late'"):
    warmup.add('late', lambda: None)


def test_a_name_is_used_once():
  warmup = _warmup.Warmup()
  warmup.add('a', lambda: None)
  with pytest.raises(ValueError, match="'a'"):
    warmup.add('a', lambda: None)
  warmup.close()
  warmup.join(10)


def test_calls_run_with_the_builders_device_scope():
  seen = []
  with tf.device('/CPU:0'):
    warmup = _warmup.Warmup()
  warmup.add('device', lambda: seen.append(context.context().device_name))
  warmup.close()
  warmup.join(10)
  assert seen and seen[0].endswith('device:CPU:0')

"""tff_conflict.runtime._fingerprint: equal for the same computation traced after other work,
different for computations that differ, including in which function a call names."""

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow.core.framework import graph_pb2

from tff_conflict.runtime import _fingerprint
from tff_conflict.runtime import _tf_stamp


def _branchy(swap=False, offset=1.0):
  """A TF computation whose graph has a function library (a `tf.cond` and a `tf.while_loop`)."""

  @tff.tensorflow.computation(tf.float32)
  def comp(x):
    plus, minus = (lambda: x + offset), (lambda: x - offset)
    y = tf.cond(x > 0, minus if swap else plus, plus if swap else minus)
    return tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), (0, y))[1]

  return comp


def _trace_something_else():
  """Traces unrelated functions, which advances TensorFlow's function-name counter."""
  for k in range(3):
    tf.function(lambda x, k=k: tf.cond(x > k, lambda: x, lambda: -x)).get_concrete_function(
        tf.TensorSpec([], tf.float32))


def _proto(comp):
  return _tf_stamp.computation_proto(comp)


def test_same_computation_traced_after_other_work_has_the_same_fingerprint():
  first = _proto(_branchy())
  _trace_something_else()
  second = _proto(_branchy())
  # TensorFlow numbered the library functions differently ...
  assert first.SerializeToString(deterministic=True) != second.SerializeToString(
      deterministic=True)
  # ... the fingerprint does not depend on that.
  assert _fingerprint.fingerprint(first) == _fingerprint.fingerprint(second)


def test_different_computations_have_different_fingerprints():
  base = _fingerprint.fingerprint(_proto(_branchy()))
  # Same library contents, but the cond's branches swapped: only the references differ.
  assert _fingerprint.fingerprint(_proto(_branchy(swap=True))) != base
  # A constant inside a branch function.
  assert _fingerprint.fingerprint(_proto(_branchy(offset=2.0))) != base


def test_a_cycle_in_the_library_is_hashed_as_it_is():
  graph_def = graph_pb2.GraphDef()
  for name, callee in (('f_1', 'g_1'), ('g_1', 'f_1')):
    function = graph_def.library.function.add()
    function.signature.name = name
    function.node_def.add(name='call', op=callee)
  with pytest.raises(_fingerprint._Cycle):  # pylint: disable=protected-access
    _fingerprint.canonical_graph_def(graph_def)


def test_canonical_graph_renames_functions_and_arguments_consistently():
  graph_def = graph_pb2.GraphDef()
  callee = graph_def.library.function.add()
  callee.signature.name = 'callee_123'
  callee.signature.input_arg.add(name='callee_123_arg', type=tf.float32.as_datatype_enum)
  callee.signature.output_arg.add(name='out', type=tf.float32.as_datatype_enum)
  callee.ret['out'] = 'callee_123_arg'
  node = graph_def.node.add(name='call', op='StatefulPartitionedCall')
  node.attr['f'].func.name = 'callee_123'
  renamed = graph_pb2.GraphDef()
  renamed.CopyFrom(graph_def)
  renamed.library.function[0].signature.name = 'callee_456'
  renamed.library.function[0].signature.input_arg[0].name = 'callee_456_arg'
  renamed.library.function[0].ret['out'] = 'callee_456_arg'
  renamed.node[0].attr['f'].func.name = 'callee_456'
  a = _fingerprint.canonical_graph_def(graph_def)
  b = _fingerprint.canonical_graph_def(renamed)
  assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
  name = a.library.function[0].signature.name
  assert a.node[0].attr['f'].func.name == name and name.startswith('f')
  assert a.library.function[0].ret['$o0'] == '$i0'

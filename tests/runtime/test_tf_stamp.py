"""tff_conflict.runtime._tf_stamp: a computation's initializer and results in one graph."""

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict.runtime import _tf_stamp


def _graph(initial_value_reads_other_variable):
  """A v1 graph: variables v (1.0) and w, an initializer `init`, and `out = x + v + w`.

  w starts at 2.0, or at 2 * (a read of v inside the initializer) that `out` uses too.
  """
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [], name='x')
    v = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name='v')
    w = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name='w')
    init_v = tf.raw_ops.AssignVariableOp(resource=v, value=1.0)
    with tf.control_dependencies([init_v]):
      v_read_in_init = tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.float32)
    if initial_value_reads_other_variable:
      init_w = tf.raw_ops.AssignVariableOp(resource=w, value=2.0 * v_read_in_init)
      v_read = v_read_in_init
    else:
      init_w = tf.raw_ops.AssignVariableOp(resource=w, value=2.0)
      v_read = tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.float32)
    tf.group(init_v, init_w, name='init')
    w_read = tf.raw_ops.ReadVariableOp(resource=w, dtype=tf.float32)
    tf.identity(x + v_read + w_read, name='out')
  return graph.as_graph_def()


def _run_in_one_step(graph_def, fetch):
  graph = tf.Graph()
  with graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name='')
    with tf.compat.v1.Session(graph=graph) as session:
      return session.run(fetch, {'x:0': 10.0})


def test_initializer_runs_first_in_one_graph():
  graph_def = _graph(initial_value_reads_other_variable=False)
  assert _tf_stamp.order_after_initializer(graph_def, 'init', ['out:0'])
  # Only the results are fetched: the initializer runs because they depend on it.
  pruned = _tf_stamp.extract_subgraph(graph_def, ['out:0', 'x'])
  assert {n.name for n in pruned.node} < {n.name for n in graph_def.node}
  for _ in range(3):
    assert _run_in_one_step(pruned, 'out:0') == 13.0


def test_initializer_whose_reads_are_used_later_is_left_alone():
  graph_def = _graph(initial_value_reads_other_variable=True)
  before = graph_def.SerializeToString()
  assert not _tf_stamp.order_after_initializer(graph_def, 'init', ['out:0'])
  assert graph_def.SerializeToString() == before


def test_stamped_computation_with_variables_restarts_from_initial_values():
  """Each call starts from freshly initialized variables, as one call in TFF's runtime."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation(np.float32)
  def accumulate_into_variable(x):
    variable = tf.Variable(1.0)
    with tf.control_dependencies([variable.assign_add(x)]):
      return variable.read_value() * 2.0

  stamped = _tf_stamp.StampedComputation(accumulate_into_variable, 'variable')
  for x in (1.0, 5.0, 1.0):
    (result,) = stamped([np.float32(x)])
    assert result.numpy() == 2.0 * (1.0 + x)


def test_graph_functions_run_initializer_then_results_eagerly_and_traced():
  """The fallback: the initializer as a function of its own, called before the results."""
  graph_def = _graph(initial_value_reads_other_variable=True)
  init = _tf_stamp.GraphFunction(_tf_stamp.extract_subgraph(graph_def, ['init', 'x']),
                                 'test_graph_function_init', ['x:0'], [], effect_name='init')
  run = _tf_stamp.GraphFunction(_tf_stamp.extract_subgraph(graph_def, ['out:0', 'x']),
                                'test_graph_function_run', ['x:0'], ['out:0'])
  x = tf.constant(10.0)
  assert init([x]) == []
  (out,) = run([x])
  assert out.dtype == tf.float32 and out.numpy() == 13.0

  @tf.function
  def both(x):
    with tf.control_dependencies(init([x])):
      return run([x])[0]

  assert both(tf.constant(20.0)).numpy() == 23.0


# `replayable`: whether an extra call (the gathered-stack check's) can change later results.


def _fn_graph_def(fn, *specs):
  return tf.function(fn, autograph=False).get_concrete_function(*specs).graph.as_graph_def()


_SCALAR = tf.TensorSpec([], tf.float32)


def test_replayable_graphs():
  assert _tf_stamp.replayable(_fn_graph_def(lambda x: tf.square(x) + 1.0, _SCALAR))
  # An assertion, a loop and an in-memory dataset end with the call.
  assert _tf_stamp.replayable(_fn_graph_def(
      lambda x: tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), (0, x))[1],
      _SCALAR))
  assert _tf_stamp.replayable(_fn_graph_def(
      lambda x: tf.data.Dataset.from_tensor_slices(tf.stack([x, x])).reduce(0.0, tf.add),
      _SCALAR))
  with tf.Graph().as_default():  # a variable created, initialized and updated inside the graph
    v = tf.compat.v1.get_variable('v', initializer=1.0, use_resource=True)
    tf.compat.v1.assign_add(v, 2.0)
    tf.debugging.Assert(v.read_value() > 0, [v.read_value()])
    with_variable = tf.compat.v1.get_default_graph().as_graph_def()
  assert _tf_stamp.replayable(with_variable)


@pytest.mark.parametrize('fn', [
    lambda x: x + tf.random.uniform([], seed=1),
    lambda x: tf.random.shuffle(tf.stack([x, x]), seed=2)[0],
    lambda x: tf.data.Dataset.from_tensor_slices(tf.stack([x, x])).shuffle(2, seed=3).reduce(
        0.0, tf.add),
])
def test_random_ops_are_not_replayable(fn):
  assert not _tf_stamp.replayable(_fn_graph_def(fn, _SCALAR))


def test_print_and_random_ops_inside_library_functions_are_not_replayable():
  inner = tf.function(lambda x: x * tf.random.uniform([], seed=4), autograph=False)
  graph_def = _fn_graph_def(lambda x: tf.cond(x > 0, lambda: inner(x), lambda: x), _SCALAR)
  assert graph_def.library.function  # the draw is inside a library function
  assert not _tf_stamp.replayable(graph_def)

  def printing(x):
    tf.print(x)
    return x

  assert not _tf_stamp.replayable(_fn_graph_def(printing, _SCALAR))


def test_shared_names_get_the_suffix():
  with tf.Graph().as_default() as graph:
    tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name='v')
    tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name='')
  graph_def = graph.as_graph_def()
  _tf_stamp.uniquify_shared_names(graph_def, 'sfx')
  assert sorted(n.attr['shared_name'].s for n in graph_def.node) == [b'empty_0_sfx', b'v_sfx']

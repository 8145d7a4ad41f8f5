"""tff_conflict.runtime._tf_stamp: a computation's initializer and results in one graph."""

import numpy as np
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

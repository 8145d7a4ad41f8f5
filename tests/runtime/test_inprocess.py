"""tff_conflict.runtime.inprocess: rounds run in-process from MapReduceForm equal TFF's C++ runtime's."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tests.conftest import tiny_model_fn_for
from tff_conflict.runtime import inprocess
from tff_conflict import runtime

_ROUNDS = 3


def _input_spec():
  return make_tiny_client_datasets(num_clients=1)[0].element_spec


def _tff_model_fn():
  return tff.learning.models.from_keras_model(
      make_tiny_keras_model(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=_input_spec(), metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def _fed_avg(**kwargs):
  return tff.learning.algorithms.build_weighted_fed_avg(
      _tff_model_fn, tff.learning.optimizers.build_sgdm(0.1), **kwargs)


def _leaves(value):
  """(path, leaf) pairs of a TFF/Python structure, keys in declared order (not sorted)."""
  if isinstance(value, (list, tuple)) and not hasattr(value, '_fields'):
    items = enumerate(value)
  elif isinstance(value, collections.abc.Mapping):
    items = value.items()
  elif hasattr(value, '__attrs_attrs__'):
    items = ((a.name, getattr(value, a.name)) for a in value.__attrs_attrs__)
  elif hasattr(value, '_fields'):
    items = zip(value._fields, value)
  else:
    return [((), value)]
  return [((k,) + path, leaf) for k, v in items for path, leaf in _leaves(v)]


def assert_same_result(actual, expected, atol=1e-5):
  """Same containers, paths and leaf types; values equal to float round-off."""
  assert type(actual) is type(expected)
  a, e = _leaves(actual), _leaves(expected)
  assert [p for p, _ in a] == [p for p, _ in e]
  for (path, x), (_, y) in zip(a, e):
    assert type(x) is type(y), path
    np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), atol=atol,
                               rtol=1e-5, err_msg=str(path))


def _run_rounds(runner, data, rounds=_ROUNDS, state=None):
  state = runner.initialize() if state is None else state
  outputs = []
  for _ in range(rounds):
    output = runner.next(state, data)
    outputs.append(output)
    state = output.state
  return state, outputs


@pytest.fixture(scope='module')
def fed_avg():
  return _fed_avg()


@pytest.fixture(scope='module')
def cpp_fed_avg_rounds(fed_avg):
  return _run_rounds(fed_avg, make_tiny_client_datasets(num_clients=5))


# {} is the default 'buffered' accumulation, which for FedAvg (no gathered stack) is TFF's chain
# with `work` and `accumulate` fused into one call per client.
@pytest.mark.parametrize('options', [
    {}, {'accumulation': 'tree'}, {'accumulation': 'sequential'}, {'num_threads': 2},
    {'accumulation': 'tree', 'num_threads': 2}])
def test_fed_avg_rounds_equal_cpp_runtime(fed_avg, cpp_fed_avg_rounds, options):
  before = set(runtime.worker_pids())
  runner = inprocess.InProcessRunner(fed_avg, **options)
  state, outputs = _run_rounds(runner, make_tiny_client_datasets(num_clients=5))
  cpp_state, cpp_outputs = cpp_fed_avg_rounds
  assert_same_result(state, cpp_state)
  for output, cpp_output in zip(outputs, cpp_outputs):
    assert_same_result(output, cpp_output)
  assert_same_result(runner.get_model_weights(state), fed_avg.get_model_weights(cpp_state))
  assert set(runtime.worker_pids()) <= before  # the runner starts no worker_binary


def test_state_moves_between_runtimes(fed_avg, cpp_fed_avg_rounds):
  """A C++-runtime state continues in-process (and back) with the same results."""
  data = make_tiny_client_datasets(num_clients=5)
  runner = inprocess.InProcessRunner(fed_avg)
  _, cpp_outputs = cpp_fed_avg_rounds
  output = runner.next(cpp_outputs[0].state, data)
  assert_same_result(output, cpp_outputs[1])
  back = fed_avg.next(output.state, data)
  assert_same_result(back, cpp_outputs[2])
  weights = fed_avg.get_model_weights(cpp_outputs[0].state)
  moved = runner.set_model_weights(runner.initialize(), weights)
  assert_same_result(runner.get_model_weights(moved), weights)
  hparams = fed_avg.get_hparams(cpp_outputs[0].state)
  assert_same_result(runner.get_hparams(cpp_outputs[0].state), hparams)
  hparams['client_work']['learning_rate'] = np.float32(0.25)
  assert_same_result(runner.set_hparams(moved, hparams),
                     fed_avg.set_hparams(fed_avg.set_model_weights(fed_avg.initialize(), weights),
                                         hparams))


def test_returned_state_is_read_only_and_reused(fed_avg):
  runner = inprocess.InProcessRunner(fed_avg)
  state = runner.initialize()
  kernel = state.global_model_weights.trainable[0]
  with pytest.raises(ValueError):
    kernel[0, 0] = 1.0  # arrays are read-only, so the device copy cannot go stale
  data = make_tiny_client_datasets(num_clients=2)
  first = runner.next(state, data)
  # A state rebuilt from equal copies gives the same round as the remembered one.
  copied = fed_avg.set_model_weights(state, fed_avg.get_model_weights(state))
  again = runner.next(copied, data)
  assert_same_result(again, first, atol=0)


def test_no_clients_matches_cpp_runtime(fed_avg):
  runner = inprocess.InProcessRunner(fed_avg)
  state = fed_avg.initialize()
  assert_same_result(runner.next(state, []), fed_avg.next(state, []))


@pytest.mark.parametrize('options', [{}, {'accumulation': 'tree', 'num_threads': 2}])
def test_clients_with_empty_datasets_match_cpp_runtime(fed_avg, options):
  data = make_tiny_client_datasets(num_clients=4)
  data[0] = data[0].take(0)
  data[2] = data[2].take(0)
  state = fed_avg.initialize()
  runner = inprocess.InProcessRunner(fed_avg, **options)
  assert_same_result(runner.next(state, data), fed_avg.next(state, data))
  only_empty = [data[0], data[2]]
  assert_same_result(runner.next(state, only_empty), fed_avg.next(state, only_empty))


def _stacking_process(keep_positive_only=False):
  """A round whose federated_aggregate stacks each client's sum (or only positive-sum clients)."""
  value_type = tff.TensorType(np.float32, [2])
  stack_type = tff.TensorType(np.float32, [None, 2])

  @tff.tensorflow.computation
  def initialize_fn():
    return tf.zeros([0, 2])

  @tff.tensorflow.computation
  def zero():
    return tf.zeros([0, 2])

  @tff.tensorflow.computation(stack_type, value_type)
  def accumulate(acc, value):
    appended = tf.concat([acc, value[tf.newaxis]], axis=0)
    if not keep_positive_only:
      return appended
    return tf.cond(tf.reduce_sum(value) > 0, lambda: appended, lambda: tf.identity(acc))

  @tff.tensorflow.computation(stack_type, stack_type)
  def merge(a, b):
    return tf.concat([a, b], axis=0)

  @tff.tensorflow.computation(stack_type)
  def report(acc):
    return acc

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(initialize_fn, tff.SERVER)

  @tff.tensorflow.computation(tff.SequenceType(value_type))
  def client_sum(ds):
    return ds.reduce(tf.zeros([2]), lambda a, x: a + x)

  @tff.tensorflow.computation(stack_type)
  def client_sum_of_rows(stack):
    return tf.reduce_sum(stack, axis=0)

  @tff.federated_computation(tff.FederatedType(stack_type, tff.SERVER),
                             tff.FederatedType(tff.SequenceType(value_type), tff.CLIENTS))
  def next_fn(state, data):
    sums = tff.federated_map(client_sum, data)
    stacked = tff.federated_aggregate(sums, zero(), accumulate, merge, report)
    return stacked, tff.federated_map(client_sum_of_rows, stacked)

  return tff.templates.IterativeProcess(initialize, next_fn)


def _random_client_values(seed, num_clients=11):
  rng = np.random.default_rng(seed)
  values = [rng.normal(size=(int(rng.integers(1, 4)), 2)).astype(np.float32)
            for _ in range(num_clients)]
  return values, [tf.data.Dataset.from_tensor_slices(v) for v in values]


def test_tree_accumulation_keeps_client_order():
  """A concatenating federated_aggregate returns the client values in client order."""
  process = _stacking_process()
  values, data = _random_client_values(3)
  expected = np.stack([v.astype(np.float64).sum(axis=0) for v in values])
  for accumulation in ('buffered', 'tree', 'sequential'):
    runner = inprocess.InProcessRunner(process, accumulation=accumulation, num_threads=3)
    assert runner.buffered_leaves == ((0,) if accumulation == 'buffered' else ())
    stacked, total = runner.next(runner.initialize(), data)
    np.testing.assert_allclose(stacked, expected, rtol=1e-6)
    np.testing.assert_allclose(total, expected.sum(axis=0), rtol=1e-5)
  cpp_stacked, _ = process.next(process.initialize(), data)
  np.testing.assert_allclose(stacked, cpp_stacked, rtol=1e-6)


def test_buffered_stack_with_clients_that_add_no_row_and_with_no_clients():
  """Clients left out by `accumulate` add no row; no clients give the empty stack."""
  process = _stacking_process(keep_positive_only=True)
  values, data = _random_client_values(5, num_clients=9)
  kept = [v.sum(axis=0) for v in values if v.sum() > 0]
  assert 0 < len(kept) < len(values)
  cpp_stacked, cpp_total = process.next(process.initialize(), data)
  for accumulation in ('buffered', 'tree'):
    runner = inprocess.InProcessRunner(process, accumulation=accumulation)
    stacked, total = runner.next(runner.initialize(), data)
    np.testing.assert_allclose(stacked, np.stack(kept), rtol=1e-6)
    np.testing.assert_allclose(stacked, cpp_stacked, rtol=1e-6)
    np.testing.assert_allclose(total, cpp_total, rtol=1e-5)
    empty, empty_total = runner.next(runner.initialize(), [])
    assert empty.shape == (0, 2) and empty.dtype == np.float32
    np.testing.assert_array_equal(empty_total, [0.0, 0.0])


def _secure_process(modular=True):
  """A round with `federated_secure_sum_bitwidth` (feeding the state) and, if `modular`, a
  modular secure sum as its output (else the bitwidth sum)."""

  @tff.federated_computation
  def initialize():
    return tff.federated_value(np.int32(0), tff.SERVER)

  @tff.tensorflow.computation(tff.SequenceType(np.int32))
  def client_total(ds):
    return ds.reduce(np.int32(0), lambda a, x: a + x)

  @tff.tensorflow.computation(np.int32, np.int32)
  def add(a, b):
    return a + b

  @tff.federated_computation(tff.FederatedType(np.int32, tff.SERVER),
                             tff.FederatedType(tff.SequenceType(np.int32), tff.CLIENTS))
  def next_fn(state, data):
    totals = tff.federated_map(client_total, data)
    bitwidth = tff.federated_secure_sum_bitwidth(totals, 16)
    output = (tff.backends.mapreduce.federated_secure_modular_sum(totals, 1000) if modular
              else bitwidth)
    return tff.federated_map(add, (state, bitwidth)), output

  return tff.templates.IterativeProcess(initialize, next_fn)


def test_secure_sums_are_summed():
  """federated_secure_sum_bitwidth / secure_sum / modular parts of MapReduceForm."""
  process = _secure_process(modular=False)
  runner = inprocess.InProcessRunner(process)
  assert runner.map_reduce_form.securely_aggregates_tensors
  values = [[1, 2, 3], [10], [100, 200]]
  data = [tf.data.Dataset.from_tensor_slices(np.array(v, np.int32)) for v in values]
  state = runner.initialize()
  state, total = runner.next(state, data)
  assert int(total) == 316 and int(state) == 316
  state, total = runner.next(state, data)
  assert int(total) == 316 and int(state) == 632


def test_secure_modular_sums():
  """`federated_secure_modular_sum` (MapReduceForm's own intrinsic, which TFF's C++ runtime does
  not run): the sum of the clients' values mod the modulus; the bitwidth sum feeds the state."""
  process = _secure_process()
  data = [tf.data.Dataset.from_tensor_slices(np.array(v, np.int32))
          for v in ([1, 2, 3], [600], [700, 20])]
  runner = inprocess.InProcessRunner(process)
  state = runner.initialize()
  for round_num in (1, 2):
    state, modular = runner.next(state, data)
    assert int(modular) == (6 + 600 + 720) % 1000
    assert int(state) == round_num * 1326


def test_not_map_reduce_compatible_is_a_clear_error():
  """Two aggregations in sequence (aggregate, broadcast, aggregate) are not MapReduceForm."""

  @tff.federated_computation
  def initialize():
    return tff.federated_value(np.float32(0.0), tff.SERVER)

  @tff.tensorflow.computation(np.float32, np.float32)
  def scale(x, y):
    return x * y

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, values):
    mean = tff.federated_mean(values)
    scaled = tff.federated_map(scale, (values, tff.federated_broadcast(mean)))
    return state, tff.federated_mean(scaled)

  process = tff.templates.IterativeProcess(initialize, next_fn)
  with pytest.raises(ValueError, match='cannot be compiled to MapReduceForm'):
    inprocess.InProcessRunner(process)


@pytest.mark.parametrize('kwargs, match', [
    ({'num_threads': 0}, 'num_threads'), ({'num_threads': True}, 'num_threads'),
    ({'accumulation': 'pairs'}, 'accumulation')])
def test_bad_arguments(fed_avg, kwargs, match):
  with pytest.raises(ValueError, match=match):
    inprocess.InProcessRunner(fed_avg, **kwargs)


def test_bad_process_and_client_data(fed_avg):
  with pytest.raises(ValueError, match='learning_process'):
    inprocess.InProcessRunner(object())
  runner = inprocess.InProcessRunner(fed_avg)
  state = runner.initialize()
  with pytest.raises(ValueError, match='client_data'):
    runner.next(state, make_tiny_client_datasets(num_clients=1)[0])
  with pytest.raises(ValueError, match=r'client_data\[1\]'):
    runner.next(state, [make_tiny_client_datasets(num_clients=1)[0], np.zeros(3)])


def test_make_runner(fed_avg):
  assert runtime.make_runner(fed_avg, 'cpp') is fed_avg
  assert isinstance(runtime.make_runner(fed_avg, 'inprocess', num_threads=2),
                    runtime.InProcessRunner)
  with pytest.raises(ValueError, match="'gpu'"):
    runtime.make_runner(fed_avg, 'gpu')
  with pytest.raises(ValueError, match='inprocess'):
    runtime.make_runner(fed_avg, 'cpp', num_threads=2)


def _learning_builders():
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  return learning.ALGORITHMS


# A gathering conflict method and the corrective pipeline (two gathered fields) stay in the
# default selection; the others run with `-m slow`.
_FAST_BUILDERS = ('fedgh', 'fed_corrective')


@pytest.mark.parametrize('name', [
    pytest.param(n, marks=() if n in _FAST_BUILDERS else pytest.mark.slow)
    for n in ('fedavg', 'fedprox', 'fednova', 'feddecorr', 'fedgh', 'fedmgc', 'fedga', 'fedld',
              'fed_corrective')])
def test_project_builder_rounds_equal_cpp_runtime(name):
  """Every tff_conflict.learning builder: 3 rounds in-process == 3 rounds in the C++ runtime,
  with one and two threads; also with a client whose dataset is empty, and with no clients."""
  builders = _learning_builders()
  assert name in builders
  process = builders[name](
      tiny_model_fn_for(name), input_spec=_input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  data = make_tiny_client_datasets(num_clients=4)
  # Both start from one initial state: an aggregator may draw a random seed at initialize.
  initial = process.initialize()
  cpp_state, cpp_outputs = _run_rounds(process, data, state=initial)
  # Gathering (server-side conflict) methods get their stacks in one buffer; the others gather
  # nothing.
  gathers = name in ('fedgh', 'fedmgc', 'fedld', 'fed_corrective')
  for num_threads in (1, 2):
    runner = inprocess.InProcessRunner(process, num_threads=num_threads)
    assert bool(runner.buffered_leaves) == gathers
    state, outputs = _run_rounds(runner, data, state=initial)
    assert_same_result(state, cpp_state)
    for output, cpp_output in zip(outputs, cpp_outputs):
      assert_same_result(output, cpp_output)
  with_empty = [data[0].take(0)] + data[1:]
  assert_same_result(runner.next(initial, with_empty), process.next(initial, with_empty))
  assert_same_result(runner.next(initial, []), process.next(initial, []))


def _random_and_asserting_process():
  """Client work draws from a seeded random op; `update` asserts that the state is positive."""

  @tff.federated_computation
  def initialize():
    return tff.federated_value(np.int32(1), tff.SERVER)

  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def client_value(ds):
    return ds.reduce(np.float32(0), lambda a, x: a + x) + tf.random.uniform([], seed=7)

  @tff.tensorflow.computation(np.int32, np.float32)
  def update(state, unused_total):
    with tf.control_dependencies([tf.debugging.assert_positive(state)]):
      return state + 1

  @tff.federated_computation(tff.FederatedType(np.int32, tff.SERVER),
                             tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS))
  def next_fn(state, data):
    total = tff.federated_sum(tff.federated_map(client_value, data))
    return tff.federated_map(update, (state, total)), total

  return tff.templates.IterativeProcess(initialize, next_fn)


def test_random_ops_draw_anew_each_round_and_assertions_run():
  """A client's seeded random op draws anew at each round (its kernel keeps its state), and an
  assertion in `update` runs and passes on a positive state."""
  process = _random_and_asserting_process()
  data = [tf.data.Dataset.from_tensor_slices(np.array([1.0, 2.0], np.float32))]
  runner = inprocess.InProcessRunner(process)
  state, totals = runner.initialize(), []
  for _ in range(3):
    state, total = runner.next(state, data)
    totals.append(float(total))
  assert int(state) == 4
  assert all(3.0 <= t < 4.0 for t in totals)
  assert len(set(totals)) == 3  # three different draws: the values depend on the call count



def test_buffered_stack_over_several_merge_blocks():
  """37 clients (merged in blocks of 16, 16 and 5, some adding no row) stack and sum as in the
  C++ runtime and as with one merge per client ('tree')."""
  process = _stacking_process(keep_positive_only=True)
  values, data = _random_client_values(7, num_clients=37)
  cpp_stacked, cpp_total = process.next(process.initialize(), data)
  runner = inprocess.InProcessRunner(process)
  assert runner.buffered_leaves == (0,)
  stacked, total = runner.next(runner.initialize(), data)
  np.testing.assert_array_equal(stacked, cpp_stacked)
  np.testing.assert_allclose(total, cpp_total, rtol=1e-5)
  tree = inprocess.InProcessRunner(process, accumulation='tree')
  tree_stacked, tree_total = tree.next(tree.initialize(), data)
  np.testing.assert_array_equal(stacked, tree_stacked)
  np.testing.assert_array_equal(total, tree_total)

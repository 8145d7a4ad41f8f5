"""tff_conflict.runtime.remote / tff_conflict.runtime.worker: rounds split over two loopback workers.

Each test starts its own `python -m tff_conflict.runtime.worker` processes on 127.0.0.1, ends them, and
checks that none is left; the session's local context is restored afterwards.
"""

import collections
import concurrent.futures
import socket
import subprocess
import sys
import time

import numpy as np
import portpicker
import psutil
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tff_conflict.runtime import remote
from tff_conflict import runtime

_CALL_LIMIT_S = 240  # a federated call that takes longer than this counts as a hang


def _start_worker(port):
  return subprocess.Popen(
      [sys.executable, '-m', 'tff_conflict.runtime.worker', f'--port={port}', '--die_with_parent'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _gone(pid):
  try:
    return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


@pytest.fixture
def workers():
  """Two workers on loopback; yields (addresses, processes); ends them and restores the context."""
  ports = [portpicker.pick_unused_port() for _ in range(2)]
  procs = [_start_worker(port) for port in ports]
  try:
    yield [f'127.0.0.1:{port}' for port in ports], procs
  finally:
    runtime.set_local_context()
    for proc in procs:
      proc.kill()
      proc.wait(timeout=30)
    assert all(_gone(p.pid) for p in procs)


def _bounded(fn, *args, limit_s=_CALL_LIMIT_S):
  """Runs fn(*args) in a thread; fails the test if it does not finish within `limit_s`."""
  context_stack = tff.framework.get_context_stack()
  context = context_stack.current  # TFF's context stack is per thread

  def call():
    with context_stack.install(context):
      return fn(*args)

  pool = concurrent.futures.ThreadPoolExecutor(1)
  try:
    return pool.submit(call).result(timeout=limit_s)
  finally:
    pool.shutdown(wait=False)


@tff.tensorflow.computation(tff.SequenceType(np.float32))
def _client_sum(ds):
  return ds.reduce(np.float32(0.0), lambda a, x: a + x)


@tff.federated_computation(tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS))
def _weighted_total(data):
  return tff.federated_sum(tff.federated_map(_client_sum, data))


def _client_values(num_clients=6):
  rng = np.random.default_rng(0)
  return [rng.normal(size=int(rng.integers(1, 5))).astype(np.float32)
          for _ in range(num_clients)]


def test_aggregation_split_over_two_workers_equals_local(workers):
  addresses, _ = workers
  values = _client_values()
  data = [tf.data.Dataset.from_tensor_slices(v) for v in values]
  local = _weighted_total(data)
  runtime.set_remote_context(addresses, rpc_timeout_s=120)
  assert not runtime.worker_pids()  # the local worker was ended
  split = _bounded(_weighted_total, data)
  expected = sum(float(v.astype(np.float64).sum()) for v in values)
  np.testing.assert_allclose(split, expected, rtol=1e-5)
  np.testing.assert_allclose(split, local, rtol=1e-6)


def _gather_ids(data):
  """Each client's row (sum, 2 * sum) gathered at the server with a tiny counter (carries,
  overflows); clients with a negative sum take no part."""
  from tff_conflict.aggregators import _gather as gather  # pylint: disable=g-import-not-at-top
  row_type = collections.OrderedDict(update=tff.TensorType(np.float32, [2]),
                                     weight=tff.TensorType(np.float32))

  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def make_row(ds):
    total = ds.reduce(np.float32(0.0), lambda a, x: a + x)
    update = tf.stack([total, total * 2.0])
    weight = tf.where(total > 0.0, 1.0, 0.0)   # clients with a negative sum take no part
    return collections.OrderedDict(update=update, weight=weight,
                                   status=gather.row_status(weight, update))

  @tff.federated_computation(tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS))
  def gather_fn(client_data):
    rows = tff.federated_map(make_row, client_data)
    return gather.federated_gather(rows, row_type, vector_size=2, limit_bytes=None,
                                   radices=(2, 2), small_row_bytes=0)

  return gather_fn(data)


def test_gather_split_over_two_workers_keeps_each_workers_clients_in_order(workers):
  """Each worker accumulates its share in a chain; the partial counters are merged here.

  TFF's `MergeableCompExecutionContext` gives the workers contiguous parts of the client list
  (the first ceil(K / 2) clients, then the rest) and merges their partial results in the order the
  workers finish, so the two blocks may come in either order; within a block the order is the
  clients'. Locally (one chain) the order is exactly the clients'.
  """
  addresses, _ = workers
  values = _client_values(num_clients=13)
  data = [tf.data.Dataset.from_tensor_slices(v) for v in values]
  totals = [float(v.astype(np.float32).sum()) for v in values]
  kept = [t for t in totals if t > 0]
  assert 3 < len(kept) < len(totals)
  first = [t for t in totals[:7] if t > 0]   # the first worker's clients: ceil(13 / 2)
  second = [t for t in totals[7:] if t > 0]
  assert first and second
  local = _gather_ids(data)
  runtime.set_remote_context(addresses, rpc_timeout_s=120)
  split = _bounded(_gather_ids, data)
  np.testing.assert_allclose(local['stacks']['update'][:, 0], kept, rtol=1e-6)
  got = list(split['stacks']['update'][:, 0])
  assert (np.allclose(got, first + second, rtol=1e-6)
          or np.allclose(got, second + first, rtol=1e-6)), (got, first, second)
  for out in (local, split):
    np.testing.assert_allclose(out['stacks']['update'][:, 1], 2.0 * out['stacks']['update'][:, 0],
                               rtol=1e-6)   # every row stays whole
    np.testing.assert_array_equal(out['counts'], [len(kept), len(totals) - len(kept), 0])


def test_worker_that_dies_gives_clear_error(workers):
  addresses, procs = workers
  data = [tf.data.Dataset.from_tensor_slices(v) for v in _client_values()]
  runtime.set_remote_context(addresses, rpc_timeout_s=120)
  _bounded(_weighted_total, data)
  procs[1].kill()  # the second worker dies between two rounds of a run
  procs[1].wait()
  start = time.monotonic()
  with pytest.raises(remote.WorkerError, match=addresses[1]):
    _bounded(_weighted_total, data)
  assert time.monotonic() - start < _CALL_LIMIT_S


def test_unreachable_or_silent_worker_fails_within_timeout():
  port = portpicker.pick_unused_port()  # nothing listens there
  with pytest.raises(remote.WorkerError, match=f'127.0.0.1:{port}.*not reachable'):
    remote.create_remote_context([f'127.0.0.1:{port}'], connect_timeout_s=1)
  with socket.socket() as silent:  # accepts TCP connections but never speaks gRPC
    silent.bind(('127.0.0.1', 0))
    silent.listen()
    address = f'127.0.0.1:{silent.getsockname()[1]}'
    start = time.monotonic()
    with pytest.raises(remote.WorkerError, match='connect_timeout_s=1'):
      remote.create_remote_context([address], connect_timeout_s=1)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize('addresses', [
    '', [], 'localhost', 'localhost:0', 'localhost:70000', ['a:1', 'a:1'], 'a:1,b', 3])
def test_bad_addresses(addresses):
  with pytest.raises(ValueError, match='addresses'):
    remote.parse_worker_addresses(addresses)


def test_parse_addresses():
  assert remote.parse_worker_addresses('h1:1, h2:65535') == ['h1:1', 'h2:65535']
  assert remote.parse_worker_addresses(['10.0.0.1:80', '[::1]:81']) == ['10.0.0.1:80', '[::1]:81']


@pytest.mark.parametrize('name, value', [('rpc_timeout_s', 0), ('connect_timeout_s', -1.0),
                                         ('rpc_timeout_s', True)])
def test_bad_timeouts(name, value):
  with pytest.raises(ValueError, match=name):
    remote.create_remote_context('127.0.0.1:1', **{name: value})


def test_worker_command_rejects_bad_port():
  result = subprocess.run([sys.executable, '-m', 'tff_conflict.runtime.worker', '--port=0'],
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 2 and '--port' in result.stderr


@pytest.mark.slow
def test_training_round_split_over_two_workers_equals_local(workers):
  addresses, _ = workers
  data = make_tiny_client_datasets(num_clients=4)
  spec = data[0].element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        make_tiny_keras_model(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), input_spec=spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.1))
  state = process.initialize()
  local = process.next(state, data)
  runtime.set_remote_context(addresses, rpc_timeout_s=600)
  # Compiling a learning round to mergeable form and warming two cold workers takes minutes on
  # a loaded 2-core machine.
  split = _bounded(process.next, state, data, limit_s=900)
  for a, b in zip(tf.nest.flatten(split.state.global_model_weights),
                  tf.nest.flatten(local.state.global_model_weights)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  metrics, local_metrics = (m['client_work']['train'] for m in (split.metrics, local.metrics))
  assert metrics['num_examples'] == local_metrics['num_examples'] == 64
  np.testing.assert_allclose(metrics['loss'], local_metrics['loss'], rtol=1e-5)
  assert isinstance(split.metrics, collections.OrderedDict)

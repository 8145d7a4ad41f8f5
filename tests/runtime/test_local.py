"""tff_conflict.runtime: the local context leaves no `worker_binary` behind, however Python ends."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

from tests import conftest
from tff_conflict import runtime

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The child starts a worker with one federated computation, reports the worker PIDs on stdout,
# then ends as `mode` says. Its stdout is a pipe: a surviving worker would hold it open.
_CHILD = textwrap.dedent('''
    import sys, time
    import numpy as np
    from tff_conflict import runtime
    import tensorflow_federated as tff
    runtime.set_local_context()

    @tff.federated_computation(tff.FederatedType(tff.TensorType(np.float32), tff.CLIENTS))
    def mean(x):
      return tff.federated_mean(x)

    assert float(mean([1.0, 2.0])) == 1.5
    print('WORKERS', *runtime.worker_pids(), flush=True)
    mode = sys.argv[1]
    if mode == 'exception':
      raise RuntimeError('uncaught on purpose')
    if mode == 'wait':
      time.sleep(600)
''')


def _is_running(pid):
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def _start_child(mode, token=''):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=_REPO_ROOT,
             TFF_CONFLICT_TEST_TOKEN=token)
  return subprocess.Popen(conftest.with_default_sigint([sys.executable, '-c', _CHILD, mode]),
                          stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _read_worker_pids(proc, timeout=120):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    line = proc.stdout.readline()
    if line.startswith('WORKERS'):
      return [int(p) for p in line.split()[1:]]
    if not line and proc.poll() is not None:
      break
  proc.kill()
  pytest.fail(f'child did not report its workers; stderr: {proc.stderr.read()[-2000:]}')


def _assert_gone(pids, timeout=15):
  conftest.wait_until(lambda: not any(_is_running(p) for p in pids), timeout)
  assert not [p for p in pids if _is_running(p)], f'worker_binary still running: {pids}'


@pytest.mark.parametrize('mode,end,expected_returncode', [
    ('normal', None, 0),
    ('exception', None, 1),
    ('wait', signal.SIGTERM, -signal.SIGTERM),
    ('wait', signal.SIGINT, -signal.SIGINT),  # KeyboardInterrupt; Python re-raises the signal.
    ('wait', signal.SIGKILL, -signal.SIGKILL),  # No Python code runs: the kernel ends the worker.
])
def test_worker_ends_with_process(mode, end, expected_returncode):
  token = uuid.uuid4().hex
  proc = _start_child(mode, token)
  pids = _read_worker_pids(proc)
  assert len(pids) == 1, f'expected one worker, got {pids}'
  if mode == 'wait':  # the child's worker, found from outside by the token in its environment
    assert runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token) == pids
    assert runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token + 'x') == []
  if end is not None:
    proc.send_signal(end)
  try:
    # A worker that outlived its parent would keep this pipe open and communicate() would hang.
    _, stderr = proc.communicate(timeout=60)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail('the child or its worker kept stdout open after the child ended')
  assert proc.returncode == expected_returncode, stderr[-2000:]
  _assert_gone(pids)
  assert runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token) == []
  assert 'Exception ignored' not in stderr, stderr[-2000:]


def test_worker_pids_tracks_this_process_worker():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(tff.TensorType(np.float32), tff.CLIENTS))
  def mean(x):
    return tff.federated_mean(x)

  assert float(mean([2.0, 4.0])) == 3.0
  pids = runtime.worker_pids()
  assert len(pids) == 1
  assert _is_running(pids[0])
  assert 'worker_binary' in ' '.join(psutil.Process(pids[0]).cmdline())


@pytest.mark.parametrize('bad', [0, -2, 1.5, '4', True])
def test_set_local_context_rejects_bad_limit(bad):
  with pytest.raises(ValueError, match='max_concurrent_computation_calls'):
    runtime.set_local_context(max_concurrent_computation_calls=bad)

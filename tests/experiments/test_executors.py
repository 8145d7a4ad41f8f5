"""The executors behind one interface: each job's value comes back under its ticket; a worker
that dies is its job's failure and is replaced; a job's exception ends the command; workers fit
TensorFlow's threads to their share; no worker outlives the executor or the process that
started it (SIGKILL included)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from experiments import config as config_lib
from experiments import executors


def make_state():
  """A worker's state: its pid (and TensorFlow's threads, read in `run`)."""
  return {'pid': os.getpid()}


def run(state, job):
  """Doubles `job`, or dies ('die') / raises ('raise'), reporting the worker that ran it."""
  if job == 'die':
    os.kill(os.getpid(), signal.SIGKILL)
  if job == 'raise':
    raise ArithmeticError('a bad job')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return dict(value=2 * job, pid=state['pid'],
              intra=tf.config.threading.get_intra_op_parallelism_threads(),
              inter=tf.config.threading.get_inter_op_parallelism_threads())


def _drain(executor, tickets):
  out = {}
  while len(out) < len(tickets):
    for outcome in executor.wait():
      out[tickets[outcome.ticket]] = outcome
  return out


def _children():
  """This process's live descendants, but multiprocessing's resource tracker (one per process
  that spawns, ending with it)."""
  return [p for p in psutil.Process().children(recursive=True) if p.is_running()
          and p.status() != psutil.STATUS_ZOMBIE
          and 'resource_tracker' not in ' '.join(p.cmdline())]


def test_inline_runs_each_job_in_this_process_in_order():
  executor = executors.make('inline', make_state, run)
  tickets = {executor.submit(j): j for j in (1, 2, 3)}
  seen = [tickets[o.ticket] for _ in range(3) for o in executor.wait()]
  assert seen == [1, 2, 3]
  executor = executors.make('inline', make_state, run, state={'pid': -1})
  executor.submit(4)
  assert executor.wait()[0].value['pid'] == -1   # the state given, not a new one


def test_local_workers_run_jobs_replace_a_dead_worker_and_leave_no_process():
  before = {p.pid for p in _children()}
  with executors.make('local', make_state, run, workers=2) as executor:
    tickets = {executor.submit(j): j for j in (1, 2, 3, 'die', 4, 5)}
    outcomes = _drain(executor, tickets)
    assert {j: o.value['value'] for j, o in outcomes.items() if j != 'die'} == {
        1: 2, 2: 4, 3: 6, 4: 8, 5: 10}
    assert outcomes['die'].value is None and 'killed by signal 9' in outcomes['die'].error
    pids = {o.value['pid'] for j, o in outcomes.items() if j != 'die'}
    assert len(pids) >= 2 and os.getpid() not in pids
    share = executors.threads_per_worker(2)
    assert all(o.value['intra'] == share and o.value['inter'] == max(
        share, executors.MIN_INTER_OP_THREADS) for j, o in outcomes.items() if j != 'die')
    executor.submit('raise')
    with pytest.raises(ArithmeticError, match='a bad job'):
      executor.wait()
  time.sleep(0.5)
  assert {p.pid for p in _children()} - before == set()


def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
  driver = textwrap.dedent(f'''
      import sys, time
      sys.path.insert(0, {os.getcwd()!r})
      from experiments import executors
      from tests.experiments import test_executors as t
      executor = executors.make('local', t.make_state, t.run, workers=2)
      tickets = [executor.submit(j) for j in (1, 2)]
      pids = set()
      while len(pids) < 2:
        pids |= {{o.value['pid'] for o in executor.wait()}}
        for j in (3, 4):
          executor.submit(j)
      print(' '.join(map(str, sorted(pids))), flush=True)
      time.sleep(600)
  ''')
  process = subprocess.Popen([sys.executable, '-c', driver], stdout=subprocess.PIPE, text=True,
                             cwd=os.getcwd())
  try:
    workers = [int(p) for p in process.stdout.readline().split()]
    assert len(workers) == 2 and all(psutil.pid_exists(p) for p in workers)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
      time.sleep(0.2)
    assert not any(_alive(p) for p in workers)
  finally:
    process.kill()


def _alive(pid):
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def test_what_a_worker_cannot_receive_is_refused_naming_the_executor():
  with pytest.raises(config_lib.ConfigError) as e:
    executors.make('local', lambda: None, run, workers=1)
  assert e.value.argument == 'executor' and e.value.value == 'local'
  with pytest.raises(config_lib.ConfigError) as e:
    executors.make('threads', make_state, run)
  assert e.value.argument == 'executor'


@pytest.mark.parametrize('changes, argument', [
    (dict(executor='inline', executor_workers=2), 'workers'),
    (dict(executor='local', executor_workers=0), 'workers'),
    (dict(executor='local', ray_address='auto'), 'ray_address'),
    (dict(executor='dask'), 'executor'),
])
def test_executor_settings_are_checked_naming_the_flag(changes, argument):
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.OutputConfig(**changes)
  assert e.value.argument == argument


def test_ray_actors_run_jobs_replace_a_dead_one_and_end_with_the_executor(monkeypatch):
  pytest.importorskip('ray')
  from tests.experiments import ray_cluster  # pylint: disable=g-import-not-at-top
  marker = os.urandom(8).hex()
  monkeypatch.setenv(ray_cluster.MARKER_VARIABLE, marker)   # inherited by Ray's processes
  handler = signal.getsignal(signal.SIGTERM)
  with executors.make('ray', make_state, run, workers=2) as executor:
    tickets = {executor.submit(j): j for j in (1, 2, 'die', 3)}
    outcomes = _drain(executor, tickets)
    assert {j: o.value['value'] for j, o in outcomes.items() if j != 'die'} == {1: 2, 2: 4, 3: 6}
    assert outcomes['die'].value is None and 'Ray worker died' in outcomes['die'].error
    assert os.getpid() not in {o.value['pid'] for j, o in outcomes.items() if j != 'die'}
    assert signal.getsignal(signal.SIGTERM) is handler   # Ray's sys.exit handler undone
    executor.submit('raise')
    with pytest.raises(ArithmeticError, match='a bad job'):
      executor.wait()
  deadline = time.monotonic() + 20
  while time.monotonic() < deadline and ray_cluster.leftover_ray_processes(marker):
    time.sleep(0.5)
  assert ray_cluster.leftover_ray_processes(marker) == []


class _Recorder(executors._Slots):  # pylint: disable=protected-access
  """Slots whose jobs never run: records which slot each job went to."""

  def __init__(self, workers, affinity):
    super().__init__(workers, affinity)
    self.went = []

  def _start(self, slot, job):
    self.went.append((slot, job))
    return object()

  def finish(self, slot):
    handle = next(h for h, (s, _) in self._busy.items() if s == slot)
    del self._busy[handle]
    self._dispatch()


def test_a_free_worker_takes_a_job_of_what_it_built_before_else_something_new():
  slots = _Recorder(2, affinity=lambda job: job[0])
  for job in ('a1', 'b1', 'a2', 'a3', 'c1', 'b2'):
    slots.submit(job)
  assert slots.went == [(0, 'a1'), (1, 'b1')]
  slots.finish(1)   # slot 1 ran b: takes b2 before the earlier a2
  slots.finish(0)   # slot 0 ran a: a2
  slots.finish(1)   # slot 1: no b left; c is new to every slot, a is slot 0's
  assert slots.went[2:] == [(1, 'b2'), (0, 'a2'), (1, 'c1')]

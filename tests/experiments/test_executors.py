"""The executors behind one interface (`executors.Executor`), checked by one contract over every
entry of `executors.REGISTRY`: each job's value comes back under its ticket (in submission order
where promised); a job's exception ends the command; a worker that dies is its job's failure, its
cause named, and is replaced; no process outlives `close()`. Besides: local workers fit
TensorFlow's threads to their share and end with the process that started them (SIGKILL
included); Ray caps --workers to what its cluster places."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import psutil
import pytest

from experiments import config as config_lib
from experiments import executors
from tests import conftest as root_conftest
from tests.experiments import conftest


def make_state():
  """A worker's state: its pid (and TensorFlow's threads, read in `run`)."""
  return {'pid': os.getpid()}


def run(state, job):
  """Doubles `job`, or dies ('die': SIGKILL, 'exit': exit code 3) or raises ('raise'), reporting
  the worker that ran it."""
  if job == 'die':
    os.kill(os.getpid(), signal.SIGKILL)
  if job == 'exit':
    os._exit(3)  # pylint: disable=protected-access
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


@pytest.fixture(params=sorted(executors.REGISTRY))
def kind(request, monkeypatch):
  """Each executor's name; Ray's processes marked (`ray_cluster.MARKER_VARIABLE`) as `marker`."""
  if request.param == 'ray':
    pytest.importorskip('ray')
    from tests.experiments import ray_cluster  # pylint: disable=g-import-not-at-top
    monkeypatch.setenv(ray_cluster.MARKER_VARIABLE, os.urandom(8).hex())  # Ray's inherit it
  return request.param


def _left_behind(kind, before):
  """The processes `kind`'s executor left: this process's new children, and Ray's marked ones
  (a Ray worker still starting when its raylet ended takes a while to notice: once seen at over
  20 s with the load average at 10 on 2 cores)."""
  deadline = time.monotonic() + 90
  while True:
    left = [p.pid for p in _children() if p.pid not in before]
    if kind == 'ray':
      from tests.experiments import ray_cluster  # pylint: disable=g-import-not-at-top
      left += [p.pid for p in ray_cluster.leftover_ray_processes(
          os.environ[ray_cluster.MARKER_VARIABLE])]
    if not left or time.monotonic() > deadline:
      return left
    time.sleep(0.3)


def _options(kind, workers=2):
  return executors.Options(kind, None if kind == 'inline' else workers)


def test_every_executor_returns_each_value_under_its_ticket_raises_run_errors_and_ends(kind):
  before = {p.pid for p in _children()}
  handler = signal.getsignal(signal.SIGTERM)
  with executors.make(_options(kind), make_state, run) as executor:
    assert executor.workers == (1 if kind == 'inline' else 2)
    tickets = {executor.submit(j): j for j in (1, 2, 3, 4, 5)}
    assert executor.pending == 5
    order = [tickets[o.ticket] for _ in range(5) for o in executor.wait()]
    if kind == 'inline':   # its promise: submission order
      assert order == [1, 2, 3, 4, 5]
    tickets.update({executor.submit(j): j for j in (6, 7)})
    outcomes = _drain(executor, {t: j for t, j in tickets.items() if j in (6, 7)})
    assert {j: o.value['value'] for j, o in outcomes.items()} == {6: 12, 7: 14}
    assert all(o.error is None for o in outcomes.values()) and executor.pending == 0
    assert signal.getsignal(signal.SIGTERM) is handler   # Ray's handler never installed
    executor.submit('raise')
    with pytest.raises(ArithmeticError, match='a bad job'):
      executor.wait()
  assert _left_behind(kind, before) == []


def test_a_dead_worker_is_its_jobs_failure_with_its_cause_named_and_is_replaced(kind):
  if kind == 'inline':
    pytest.skip('inline runs in this process: no worker dies alone')
  before = {p.pid for p in _children()}
  with executors.make(_options(kind), make_state, run) as executor:
    tickets = {executor.submit(j): j for j in (1, 'die', 2, 'exit', 3, 4)}
    outcomes = _drain(executor, tickets)
    assert {j: o.value['value'] for j, o in outcomes.items() if isinstance(j, int)} == {
        1: 2, 2: 4, 3: 6, 4: 8}
    died = {j: outcomes[j].error for j in ('die', 'exit')}
    assert all(outcomes[j].value is None for j in died) and not any(
        'unknown' in e for e in died.values()), died
    if kind == 'local':
      assert 'killed by signal 9' in died['die'] and 'exit code 3' in died['exit'], died
    else:   # Ray reports the pid and its exit type and detail, not the signal
      assert all('pid ' in e and 'SYSTEM_ERROR' in e for e in died.values()), died
    assert os.getpid() not in {o.value['pid'] for j, o in outcomes.items() if isinstance(j, int)}
    assert executor.submit(5) and executor.wait()[0].value['value'] == 10   # replaced
  assert _left_behind(kind, before) == []


def test_local_workers_fit_tensorflow_threads_and_spread_over_processes():
  with executors.make(executors.Options('local', 2), make_state, run) as executor:
    outcomes = _drain(executor, {executor.submit(j): j for j in (1, 2, 3, 4)})
  assert len({o.value['pid'] for o in outcomes.values()}) >= 2
  share = executors.threads_per_worker(2)
  assert all(o.value['intra'] == share and o.value['inter'] == max(
      share, executors.MIN_INTER_OP_THREADS) for o in outcomes.values())


def test_inline_runs_on_the_state_given():
  executor = executors.make('inline', make_state, run, state={'pid': -1})
  executor.submit(4)
  assert executor.wait()[0].value['pid'] == -1   # the state given, not a new one


def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
  driver = textwrap.dedent(f'''
      import sys, time
      sys.path.insert(0, {os.getcwd()!r})
      from experiments import executors
      from tests.experiments import test_executors as t
      executor = executors.make(executors.Options('local', 2), t.make_state, t.run)
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
    executors.make(executors.Options('local', 1), lambda: None, run)
  assert e.value.argument == 'executor' and e.value.value == 'local'
  with pytest.raises(config_lib.ConfigError) as e:
    executors.make('threads', make_state, run)
  assert e.value.argument == 'executor'


@pytest.mark.parametrize('changes, argument', [
    (dict(executor='inline', executor_workers=2), 'workers'),
    (dict(executor='local', executor_workers=0), 'workers'),
    (dict(executor='local', ray_address='auto'), 'ray_address'),
    (dict(executor='dask'), 'executor'),
    (dict(executor='local', worker_gpus=0.5), 'worker_gpus'),
    (dict(executor='inline', worker_cpus=2), 'worker_cpus'),
    (dict(executor='ray', worker_cpus=0), 'worker_cpus'),
    (dict(executor='ray', worker_gpus=-1), 'worker_gpus'),
])
def test_executor_settings_are_checked_naming_the_flag(changes, argument):
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.OutputConfig(**changes)
  assert e.value.argument == argument


def _broken_state():
  raise LookupError('no state here')


def test_a_workers_failing_state_is_raised_by_wait():
  with executors.make(executors.Options('local', 1), _broken_state, run) as executor:
    executor.submit(1)
    with pytest.raises(LookupError, match='no state here'):
      executor.wait()


def test_a_ray_address_where_nothing_listens_is_refused_at_once_naming_it():
  pytest.importorskip('ray')
  with pytest.raises(config_lib.ConfigError) as e:
    executors.make(executors.Options('ray', address='127.0.0.1:1'), make_state, run)
  assert e.value.argument == 'ray_address' and '127.0.0.1:1' in e.value.flag_message()
  assert len(e.value.flag_message().splitlines()) == 1


_RAY_GRID = ('--regimes=digits:iid', '--methods=fedavg', '--rounds=2', '--report_seeds=0',
             '--notune', '--epochs=1', '--noprogress', '--executor=ray')


def test_a_benchmark_joining_a_ray_address_where_nothing_listens_ends_in_one_line(tmp_path):
  pytest.importorskip('ray')
  result = conftest.run_binary('experiments.benchmark', *_RAY_GRID, '--ray_address=127.0.0.1:1',
                               f'--output_dir={tmp_path}', token=uuid.uuid4().hex)
  assert result.returncode == 2
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and '--ray_address=127.0.0.1:1: nothing answers at' in lines[0], lines


@contextlib.contextmanager
def _silent_listener():
  """A port of this machine that accepts connections and never answers (not a Ray cluster)."""
  server = socket.create_server(('0.0.0.0', 0))
  accepted = []

  def accept():
    with contextlib.suppress(OSError):
      while True:
        accepted.append(server.accept()[0])
  threading.Thread(target=accept, daemon=True).start()
  try:
    yield server.getsockname()[1], accepted
  finally:
    server.close()
    for connection in accepted:
      connection.close()


def test_sigterm_while_joining_ray_ends_the_benchmark_with_143_and_its_line(tmp_path):
  pytest.importorskip('ray')
  token = uuid.uuid4().hex
  with _silent_listener() as (port, accepted):
    process = subprocess.Popen(
        conftest.binary_command('experiments.benchmark', *_RAY_GRID,
                                f'--ray_address=127.0.0.1:{port}', f'--output_dir={tmp_path}'),
        cwd=conftest.REPO_ROOT, env=conftest.binary_env(token), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
      root_conftest.wait_until(lambda: accepted or process.poll() is not None, timeout=300)
      time.sleep(3)   # the address answered the probe: ray.init is trying to join it
      assert process.poll() is None
      process.send_signal(signal.SIGTERM)
      out, err = process.communicate(timeout=60)
    finally:
      process.kill()
  assert process.returncode == 143, out[-2000:] + err[-2000:]
  # The binary's last line (Ray's C++ client may still log a reconnect warning as it ends).
  last = [l for l in err.splitlines() if l.startswith('benchmark: ')][-1]
  assert last.startswith('benchmark: terminated (SIGTERM): the 0 finished runs'), err
  assert 'Traceback' not in out + err


@pytest.mark.slow
def test_a_ray_address_that_never_answers_ends_the_benchmark_in_one_line_within_the_bound(
    tmp_path):
  pytest.importorskip('ray')
  with _silent_listener() as (port, _):
    result = conftest.run_binary('experiments.benchmark', *_RAY_GRID,
                                 f'--ray_address=127.0.0.1:{port}', f'--output_dir={tmp_path}',
                                 token=uuid.uuid4().hex, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  last = [l for l in result.stderr.splitlines() if l.startswith('benchmark: ')][-1]
  assert last.endswith(f'--ray_address=127.0.0.1:{port}: no Ray cluster answered there within '
                       f'{executors.RAY_JOIN_SECONDS:.0f} s'), result.stderr[-2000:]


def test_ray_caps_workers_to_what_its_cluster_places_and_refuses_what_it_cannot(
    monkeypatch, capsys):
  cluster_utils = pytest.importorskip('ray.cluster_utils')
  from tests.experiments import ray_cluster  # pylint: disable=g-import-not-at-top
  marker = os.urandom(8).hex()
  monkeypatch.setenv(ray_cluster.MARKER_VARIABLE, marker)
  before = {p.pid for p in _children()}
  cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=dict(
      num_cpus=1, num_gpus=0, object_store_memory=ray_cluster.OBJECT_STORE_BYTES))
  try:
    with executors.make(executors.Options('ray', 2, cluster.address), make_state,
                        run) as executor:
      assert executor.workers == 1
      assert executor.submit(1) and executor.wait()[0].value['value'] == 2
    assert 'executor: --workers=2 capped to 1' in capsys.readouterr().err
    with pytest.raises(config_lib.ConfigError) as e:
      executors.make(executors.Options('ray', None, cluster.address, 1, 0.5), make_state, run)
    assert e.value.argument == 'worker_gpus'
  finally:
    cluster.shutdown()
  assert _left_behind('ray', before) == []


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

"""Where independent runs run: `inline` (this process), `local` (worker processes on this machine)
or `ray` (Ray actors on a cluster), each an `Executor`: `submit(job)`, then `wait()` for outcomes.
`make(options, make_state, run)` builds the one `Options` names from `REGISTRY`."""

import collections
import ctypes
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, NamedTuple, Optional, Protocol

from experiments import config as config_lib

_PR_SET_PDEATHSIG = 1
# A worker's state; a job's run on it; what a job's run builds in the state (None: nothing).
MakeState, Run, Affinity = Callable[[], Any], Callable[[Any, Any], Any], Callable[[Any], Any]
# The bound on joining a Ray cluster at --ray_address: its port answering, then `ray.init`.
RAY_JOIN_SECONDS = 30.0


class Outcome(NamedTuple):
  """A finished job: `ticket` (from `submit`), `value` (what `run` returned; None if the worker
  died) and `error` (why the worker died, else None)."""
  ticket: int
  value: Any
  error: Optional[str] = None


class Options(NamedTuple):
  """An executor's settings (`config.OutputConfig`'s --executor, --workers, --ray_address,
  --worker_cpus and --worker_gpus): `kind` (a name of `REGISTRY`); `workers` (None: as many as
  fit, the cores divided by `cpus_per_worker`, or what the Ray cluster can place); `address`
  (the Ray cluster's; None: one of this machine, started and ended here); the CPUs and the
  fraction of a GPU each worker takes (a Ray actor's `num_cpus` and `num_gpus`, as Flower's Ray
  backend sizes its clients; local workers take no GPU)."""
  kind: str = 'inline'
  workers: Optional[int] = None
  address: Optional[str] = None
  cpus_per_worker: float = 1
  gpus_per_worker: float = 0

  @classmethod
  def of(cls, output: config_lib.OutputConfig) -> 'Options':
    return cls(output.executor, output.executor_workers, output.ray_address, output.worker_cpus,
               output.worker_gpus)


class Executor(Protocol):
  """Runs `run(state, job)` on a worker's `state` (made once per worker by `make_state()`, e.g.
  the benchmark's `Engine`, which builds a learning process once per method and reuses it).

  `submit(job)` queues a job and returns its ticket (1, 2, ...); `wait()` blocks until at least
  one job is done and returns their `Outcome`s; `pending` counts the jobs submitted and not yet
  returned; `close()` (also on leaving a `with` block) drops the queue and ends every worker, a
  job in progress lost. `workers` jobs run at once. An exception raised by `run` is raised by
  `wait` (a job's own failures are `run`'s to record and return). A worker that dies mid-job (a
  native crash, the kernel's OOM killer) gives its job an `Outcome` whose `error` names the cause
  and is replaced. Promises of each:
    inline: jobs run in this process, one per `wait`, in submission order; no worker dies alone.
    local: `workers` processes of this machine; outcomes in the order jobs end; a death names the
      signal or the exit code; a worker ends with the process that started it (SIGKILL too).
    ray: `workers` Ray actors; outcomes in the order jobs end; a death names the actor's pid and
      Ray's exit type and detail (Ray does not report the signal); `close` ends a cluster started
      here.
  """
  workers: int

  def submit(self, job: Any) -> int: ...
  def wait(self) -> list[Outcome]: ...
  @property
  def pending(self) -> int: ...
  def close(self) -> None: ...
  def __enter__(self) -> 'Executor': ...
  def __exit__(self, *exc) -> None: ...


def default_workers() -> int:
  """The cores this process may use."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def threads_per_worker(workers: int) -> int:
  """TensorFlow's intra- and inter-op threads for each of `workers` workers: an equal share of
  the cores, at least 1."""
  return max(1, default_workers() // max(1, workers))


def make(options: 'Options | str', make_state: MakeState, run: Run, *, state: Any = None,
         affinity: Affinity = lambda job: None) -> Executor:
  """The executor `options` describe (a name alone: its defaults), from `REGISTRY`. `inline` runs
  on `state` when given (else `make_state()`). A worker is given, when it can, jobs of an
  `affinity(job)` it has run before (what its state built for them serves again)."""
  options = Options(options) if isinstance(options, str) else Options(*options)
  config_lib.check_executor(*options)
  if options.kind != 'inline':
    _check_picklable(options.kind, make_state, run)
  return REGISTRY[options.kind](options, make_state, run, state=state, affinity=affinity)


def _check_picklable(executor: str, *functions: Callable) -> None:
  """`ConfigError` naming --executor when what a worker needs cannot be sent to it (your own data
  or model functions defined where a worker cannot import them)."""
  try:
    if executor == 'ray':
      from ray import cloudpickle  # pylint: disable=g-import-not-at-top
      cloudpickle.dumps(functions)
    else:
      pickle.dumps(functions)
  except Exception as e:  # pylint: disable=broad-except
    raise config_lib.ConfigError('executor', executor, reason=(
        f'what its workers need cannot be sent to them ({type(e).__name__}: {e}); define your '
        'own data and model functions at the top level of an importable module, or use '
        '--executor=inline')) from None


class _Closing:
  """`with executor:` closes it at the end."""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


class InlineExecutor(_Closing):
  """Runs each job in this process, one at a time, when `wait` is called (first in, first out)."""

  workers = 1

  def __init__(self, state: Any, run: Run):
    self._state, self._run = state, run
    self._queue: collections.deque = collections.deque()
    self._tickets = 0

  def submit(self, job: Any) -> int:
    self._tickets += 1
    self._queue.append((self._tickets, job))
    return self._tickets

  @property
  def pending(self) -> int:
    return len(self._queue)

  def wait(self) -> list[Outcome]:
    ticket, job = self._queue.popleft()
    return [Outcome(ticket, self._run(self._state, job))]

  def close(self) -> None:
    self._queue.clear()


# ---- local: worker processes ------------------------------------------------------------------
def _die_with_parent(parent: int) -> None:
  """Ends this worker when `parent` dies, whatever ended it (SIGKILL included): the kernel's
  PR_SET_PDEATHSIG on Linux, and a thread that watches the parent's pid everywhere."""
  if sys.platform.startswith('linux'):
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  if os.getppid() != parent:
    os._exit(1)  # pylint: disable=protected-access

  def watch():
    while True:
      threading.Event().wait(1.0)
      if os.getppid() != parent:
        os._exit(1)  # pylint: disable=protected-access
  threading.Thread(target=watch, daemon=True, name='die-with-parent').start()


def _serve(parent: int, make_state: MakeState, run: Run,
           threads: int, connection: multiprocessing.connection.Connection) -> None:
  """A local worker: ends with its parent, leaves Ctrl-C to it (the parent ends the workers),
  fits TensorFlow's thread pools to its share of the cores, makes its state, then answers each
  job received with (True, value) or (False, exception, traceback) until the pipe closes."""
  _die_with_parent(parent)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  fit_threads(threads)
  state, error = None, None
  try:
    state = make_state()
  except Exception as e:  # pylint: disable=broad-except
    error = e   # raised in the parent by the first job
  while True:
    try:
      job = connection.recv()
    except EOFError:
      return
    try:
      if error is not None:
        raise error
      reply = (True, run(state, job))
    except Exception as e:  # pylint: disable=broad-except
      reply = (False, e, traceback.format_exc())
    try:
      connection.send(reply)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
      connection.send((False, RuntimeError(f'{reply[1]!r} (not picklable: {e})'), ''))


# An inter-op pool of one thread deadlocks the in-process runner's round (a graph op that waits
# for another op of the same graph, seen here); two never did.
MIN_INTER_OP_THREADS = 2


def fit_threads(threads: int) -> None:
  """TensorFlow's thread pools of this process fitted to a share of `threads` cores (before
  TensorFlow runs its first op): `threads` intra-op threads (one op's parallel parts) and as many
  inter-op threads (ops at once), at least `MIN_INTER_OP_THREADS`."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(max(threads, MIN_INTER_OP_THREADS))


class _Slots(_Closing):
  """The queue and the dispatch of executors with `workers` slots, each running one job at a time
  on its own worker: a free slot takes the first queued job of an affinity it ran before, else of
  an affinity no slot ran, else the first job. Subclasses start a slot's job (`_start`, giving a
  handle) and wait for handles (`wait`)."""

  def __init__(self, workers: int, affinity: Affinity):
    self.workers = int(workers)
    self._affinity = affinity
    self._queue: list[tuple[int, Any]] = []
    self._busy: dict[Any, tuple[int, int]] = {}    # handle -> (slot, ticket)
    self._seen: list[set] = [set() for _ in range(self.workers)]   # affinities each slot ran
    self._tickets = 0

  def submit(self, job: Any) -> int:
    self._tickets += 1
    self._queue.append((self._tickets, job))
    self._dispatch()
    return self._tickets

  @property
  def pending(self) -> int:
    return len(self._queue) + len(self._busy)

  def _pick(self, slot: int) -> int:
    """The index in the queue of the job `slot` takes next."""
    keys = [self._affinity(job) for _, job in self._queue]
    anywhere = set().union(*self._seen)
    return next((i for i, k in enumerate(keys) if k is not None and k in self._seen[slot]),
                next((i for i, k in enumerate(keys) if k not in anywhere), 0))

  def _dispatch(self) -> None:
    busy = {slot for slot, _ in self._busy.values()}
    for slot in range(self.workers):
      if not self._queue:
        return
      if slot not in busy:
        ticket, job = self._queue.pop(self._pick(slot))
        self._seen[slot].add(self._affinity(job))
        self._busy[self._start(slot, job)] = (slot, ticket)

  def _forget(self, slot: int) -> None:
    """A slot's worker is gone: what it built is gone with it."""
    self._seen[slot] = set()


def _exit_cause(process: multiprocessing.process.BaseProcess) -> str:
  """How a worker that closed its pipe ended: 'killed by signal 9', 'exit code 1'."""
  process.join(30.0)
  if process.exitcode is None:   # alive with its pipe closed: ended here
    process.kill()
    process.join()
    return 'closed its pipe and was killed'
  code = process.exitcode
  return f'killed by signal {-code}' if code < 0 else f'exit code {code}'


class LocalExecutor(_Slots):
  """`workers` processes of this machine (started with 'spawn': TensorFlow is not fork-safe),
  each a `multiprocessing.Process` with a pipe, so that its death is its own job's failure."""

  def __init__(self, options: Options, make_state: MakeState, run: Run, *, state: Any = None,
               affinity: Affinity = lambda job: None):
    del state   # each worker makes its own
    super().__init__(options.workers or max(1, int(default_workers() // options.cpus_per_worker)),
                     affinity)
    self._make_state, self._run = make_state, run
    self._threads = threads_per_worker(self.workers)
    self._context = multiprocessing.get_context('spawn')
    self._processes: list[Optional[tuple[Any, Any]]] = [None] * self.workers   # (process, pipe)

  def _start(self, slot: int, job: Any) -> int:
    if self._processes[slot] is None:
      pipe, child_end = self._context.Pipe()
      process = self._context.Process(target=_serve, daemon=True, args=(
          os.getpid(), self._make_state, self._run, self._threads, child_end))
      process.start()
      child_end.close()   # the worker holds the only other end: its death is the pipe's end
      self._processes[slot] = (process, pipe)
    try:
      self._processes[slot][1].send(job)
    except OSError:
      pass   # the worker died: `wait` names how
    return slot

  def wait(self) -> list[Outcome]:
    slots = {}   # what `wait` watches of each busy slot: its pipe and its process's end
    for slot in self._busy:
      process, pipe = self._processes[slot]
      slots[pipe] = slots[process.sentinel] = slot
    outcomes = []
    for slot in sorted({slots[r] for r in multiprocessing.connection.wait(list(slots))}):
      process, pipe = self._processes[slot]
      ticket = self._busy.pop(slot)[1]
      try:
        reply = pipe.recv() if pipe.poll() else None
      except (EOFError, OSError):
        reply = None
      if reply is None:
        outcomes.append(Outcome(ticket, None, f'its worker process died ({_exit_cause(process)})'))
        self._end(slot)
      elif not reply[0]:
        if reply[2]:
          reply[1].add_note(f'raised in worker process {process.pid}:\n{reply[2]}')
        raise reply[1]
      else:
        outcomes.append(Outcome(ticket, reply[1]))
    self._dispatch()
    return outcomes

  def _end(self, slot: int) -> None:
    worker, self._processes[slot] = self._processes[slot], None
    self._forget(slot)
    if worker is not None:
      worker[1].close()
      worker[0].kill()
      worker[0].join()

  def close(self) -> None:
    """Ends every worker now (a job in progress is lost, as on an interrupt)."""
    self._queue.clear()
    self._busy.clear()
    for slot in range(self.workers):
      self._end(slot)


# ---- ray: actors on a cluster -----------------------------------------------------------------
class _RayWorker:
  """A Ray actor holding one worker's state."""

  def __init__(self, make_state: MakeState, threads: int):
    fit_threads(threads)
    self._state = make_state()

  def run(self, run: Run, job: Any) -> Any:
    return run(self._state, job)


# Ray's notices that say nothing about the runs: no metrics agent (nothing collects its metrics),
# and no warning that a future Ray changes the visible accelerators of CPU-only tasks.
_RAY_QUIET = {'RAY_enable_metrics_collection': '0', 'RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO': '0'}


def _not_init_thread_note(record) -> bool:
  """Drops Ray's note that `ray.init` off the main thread installs no SIGTERM handler (`_join`
  wants none)."""
  return not record.getMessage().startswith('SIGTERM handler is not set')


def _probe(address: str) -> None:
  """`ConfigError` naming --ray_address unless its HOST:PORT accepts a connection within
  `RAY_JOIN_SECONDS` ('auto' is Ray's to find, and fails fast)."""
  host, _, port = address.removeprefix('ray://').rpartition(':')
  if not port.isdigit():
    return
  try:
    socket.create_connection((host.strip('[]'), int(port)), timeout=RAY_JOIN_SECONDS).close()
  except OSError as e:
    raise config_lib.ConfigError('ray_address', address, reason=(
        f'nothing answers at {host}:{port} ({e.strerror or e}); start the cluster (`ray start '
        '--head`) and give its head\'s address, or leave --ray_address unset for a cluster of '
        'this machine')) from None


def _join(ray: Any, address: Optional[str], **kwargs) -> threading.Event:
  """`ray.init(**kwargs)` in a thread that lives until the returned event is set: the binaries'
  Ctrl-C and SIGTERM handlers stay in place during it (Ray replaces SIGTERM's on the main thread
  only), a cluster started here lives with that thread (its processes die with the thread that
  started them), and joining an `address` is bounded by `RAY_JOIN_SECONDS`."""
  joined, stop, errors = threading.Event(), threading.Event(), []

  def init():
    try:
      ray.init(address=address or 'local', **kwargs)
    except BaseException as e:  # pylint: disable=broad-except
      errors.append(e)
    joined.set()
    stop.wait()

  threading.Thread(target=init, daemon=True, name='ray-init').start()
  deadline = time.monotonic() + (RAY_JOIN_SECONDS if address else math.inf)
  while not joined.wait(0.1):
    if time.monotonic() > deadline:
      raise config_lib.ConfigError('ray_address', address, reason=(
          f'no Ray cluster answered there within {RAY_JOIN_SECONDS:.0f} s'))
  if errors:
    stop.set()
    raise config_lib.ConfigError('ray_address', address, reason=(
        f'no Ray cluster could be joined: {type(errors[0]).__name__}: {errors[0]}'))
  return stop


def _placeable(ray: Any, options: Options) -> int:
  """How many workers of `options`' CPUs and GPUs the cluster's live nodes hold at once."""
  total = 0
  for node in ray.nodes():
    have = node.get('Resources', {}) if node.get('Alive') else {}
    fit = math.floor(have.get('CPU', 0) / options.cpus_per_worker + 1e-6)
    if options.gpus_per_worker:
      fit = min(fit, math.floor(have.get('GPU', 0) / options.gpus_per_worker + 1e-6))
    total += fit
  return total


def _ray_death(error: Exception) -> str:
  """Why a Ray actor died, in Ray's words: its pid, exit type and exit detail."""
  text = ' '.join(str(error).split())
  found = re.search(r'pid: (\d+).*Worker exit type: (\S+) Worker exit detail: (.*?\.)( |$)', text)
  if found is None:
    return f'its Ray worker died ({type(error).__name__}: {text[:200]})'
  return f'its Ray worker (pid {found[1]}) died ({found[2]}: {found[3]})'


class RayExecutor(_Slots):
  """Ray actors, one per worker (`num_cpus=cpus_per_worker`, `num_gpus=gpus_per_worker`), on the
  cluster at `options.address` (None: a cluster of this machine for the workers, started here
  and ended by `close`). `workers` beyond what the cluster can place are capped, with a notice
  on stderr (None: as many as it places). Each actor makes its state once and runs the jobs it
  is given; Ray's messages (its scheduling warnings, the workers' output) reach this process's."""

  def __init__(self, options: Options, make_state: MakeState, run: Run, *, state: Any = None,
               affinity: Affinity = lambda job: None):
    del state   # each actor makes its own
    for name, value in _RAY_QUIET.items():   # read by Ray's processes, which inherit them
      os.environ.setdefault(name, value)
    import ray  # pylint: disable=g-import-not-at-top
    self._ray, self._make_state, self._run = ray, make_state, run
    cpus, gpus = options.cpus_per_worker, options.gpus_per_worker
    here = {} if options.address else dict(num_cpus=math.ceil(
        (options.workers or max(1, int(default_workers() // cpus))) * cpus))
    if options.address:
      _probe(options.address)
    logging.getLogger('ray._private.worker').addFilter(_not_init_thread_note)
    self._stop = _join(ray, options.address, include_dashboard=False, configure_logging=False,
                       **here)
    fit = _placeable(ray, options)
    if fit < 1:
      have = {k: v for k, v in ray.cluster_resources().items() if k in ('CPU', 'GPU')}
      self._end_cluster()
      raise config_lib.ConfigError('worker_gpus' if gpus else 'worker_cpus', gpus or cpus, reason=(
          f'no node of the Ray cluster holds one worker of {cpus} CPUs and {gpus} GPUs '
          f'(the cluster has {have})'))
    if (options.workers or fit) > fit:
      print(f'executor: --workers={options.workers} capped to {fit}: the Ray cluster places '
            f'{fit} workers of {cpus} CPUs and {gpus} GPUs each', file=sys.stderr, flush=True)
    super().__init__(min(options.workers or fit, fit), affinity)
    self._actor = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=0)(_RayWorker)
    self._threads = max(1, int(cpus))
    self._actors: list[Any] = [None] * self.workers

  def _start(self, slot: int, job: Any):
    if self._actors[slot] is None:
      self._actors[slot] = self._actor.remote(self._make_state, self._threads)
    return self._actors[slot].run.remote(self._run, job)

  def wait(self) -> list[Outcome]:
    ray = self._ray
    done, _ = ray.wait(list(self._busy), num_returns=1)
    outcomes = []
    for ref in done:
      slot, ticket = self._busy.pop(ref)
      try:
        outcomes.append(Outcome(ticket, ray.get(ref)))
      except ray.exceptions.RayTaskError as e:
        raise e.as_instanceof_cause() from None
      except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
              ray.exceptions.NodeDiedError) as e:
        outcomes.append(Outcome(ticket, None, _ray_death(e)))
        self._kill(slot)
    self._dispatch()
    return outcomes

  def _kill(self, slot: int) -> None:
    actor, self._actors[slot] = self._actors[slot], None
    self._forget(slot)
    if actor is not None:
      try:
        self._ray.kill(actor)
      except Exception:  # pylint: disable=broad-except
        pass

  def _end_cluster(self) -> None:
    self._ray.shutdown()
    self._stop.set()

  def close(self) -> None:
    """Ends every actor, and the cluster when it was started here."""
    self._queue.clear()
    self._busy.clear()
    for slot in range(len(self._actors)):
      self._kill(slot)
    self._end_cluster()


def _inline(options: Options, make_state: MakeState, run: Run, *, state: Any = None,
            affinity: Affinity = lambda job: None) -> Executor:
  del options, affinity
  return InlineExecutor(make_state() if state is None else state, run)


# The executors by --executor's names: `factory(options, make_state, run, state=, affinity=)`.
REGISTRY: dict[str, Callable[..., Executor]] = {
    'inline': _inline, 'local': LocalExecutor, 'ray': RayExecutor}

"""Where independent runs run: `inline` (this process), `local` (worker processes on this machine)
or `ray` (Ray tasks on a cluster), behind one interface: `submit(job)`, then `wait()` for outcomes.

Each worker makes its state once (`make_state()`: e.g. the benchmark's `Engine`, which builds a
learning process once per method and reuses it) and runs each job it is given with
`run(state, job)`. A worker that dies mid-job (a native crash, the kernel's OOM killer) gives that
job an `Outcome` with `error` set and is replaced; an exception raised by `run` ends the command
(a job's own failures are `run`'s to record and return). No worker outlives the executor: `close()`
ends them, and a worker also ends when the process that started it dies (`_die_with_parent`)."""

import collections
import concurrent.futures
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import threading
from typing import Any, Callable, NamedTuple, Optional

from experiments import config as config_lib

EXECUTORS = config_lib.EXECUTORS
_PR_SET_PDEATHSIG = 1


class Outcome(NamedTuple):
  """A finished job: `ticket` (from `submit`), `value` (what `run` returned; None if the worker
  died) and `error` (why the worker died, else None)."""
  ticket: int
  value: Any
  error: Optional[str] = None


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


def make(executor: str, make_state: Callable[[], Any], run: Callable[[Any, Any], Any], *,
         workers: Optional[int] = None, ray_address: Optional[str] = None, state: Any = None,
         affinity: Callable[[Any], Any] = lambda job: None):
  """The executor named `executor` (`config.OutputConfig`'s --executor, --workers and
  --ray_address): `inline` runs on `state` when given (else `make_state()`); `local` starts
  `workers` processes (default: the cores); `ray` joins the cluster at `ray_address` (None: one
  of this machine with `workers` CPUs) with `workers` actors (default: its CPUs). A worker is
  given, when it can, jobs of an `affinity(job)` it has run before (what its state built for
  them, e.g. a learning process, serves again)."""
  config_lib.one_of(EXECUTORS)('executor', executor)
  if executor == 'inline':
    return InlineExecutor(make_state() if state is None else state, run)
  _check_picklable(executor, make_state, run)
  if executor == 'local':
    return LocalExecutor(make_state, run, workers or default_workers(), affinity)
  return RayExecutor(make_state, run, workers, ray_address, affinity)


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


class InlineExecutor:
  """Runs each job in this process, one at a time, when `wait` is called (first in, first out)."""

  workers = 1

  def __init__(self, state: Any, run: Callable[[Any, Any], Any]):
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

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


# ---- local: worker processes ------------------------------------------------------------------
_WORKER_STATE: Any = None


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


def _start_worker(parent: int, make_state: Callable[[], Any], threads: int) -> None:
  """A worker's start: ends with its parent, leaves Ctrl-C to it (the parent ends the workers),
  fits TensorFlow's thread pools to its share of the cores, then makes its state."""
  global _WORKER_STATE
  _die_with_parent(parent)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  fit_threads(threads)
  _WORKER_STATE = make_state()


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


def _run_in_worker(run: Callable[[Any, Any], Any], job: Any) -> Any:
  return run(_WORKER_STATE, job)


class _Slots:
  """The queue and the dispatch of executors with `workers` slots, each running one job at a time
  on its own worker: a free slot takes the first queued job of an affinity it ran before, else of
  an affinity no slot ran, else the first job. Subclasses start a slot's job (`_start`, giving a
  handle) and wait for handles (`_wait`)."""

  def __init__(self, workers: int, affinity: Callable[[Any], Any]):
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

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


class LocalExecutor(_Slots):
  """`workers` processes of this machine (started with 'spawn': TensorFlow is not fork-safe),
  each with its own one-process pool, so that a worker's death is its own job's failure."""

  def __init__(self, make_state: Callable[[], Any], run: Callable[[Any, Any], Any], workers: int,
               affinity: Callable[[Any], Any] = lambda job: None):
    super().__init__(workers, affinity)
    self._make_state, self._run = make_state, run
    self._threads = threads_per_worker(self.workers)
    self._context = multiprocessing.get_context('spawn')
    self._pools: list[Optional[concurrent.futures.ProcessPoolExecutor]] = [None] * self.workers
    # Each slot's worker process, kept here: a broken pool forgets its processes.
    self._processes: list[list[multiprocessing.process.BaseProcess]] = [
        [] for _ in range(self.workers)]

  def _start(self, slot: int, job: Any) -> concurrent.futures.Future:
    if self._pools[slot] is None:
      self._pools[slot] = concurrent.futures.ProcessPoolExecutor(
          max_workers=1, mp_context=self._context, initializer=_start_worker,
          initargs=(os.getpid(), self._make_state, self._threads))
    future = self._pools[slot].submit(_run_in_worker, self._run, job)
    if not self._processes[slot]:   # started by the first submit
      self._processes[slot] = list((getattr(self._pools[slot], '_processes', None) or {}).values())
    return future

  def wait(self) -> list[Outcome]:
    done, _ = concurrent.futures.wait(list(self._busy),
                                      return_when=concurrent.futures.FIRST_COMPLETED)
    outcomes = []
    for future in done:
      slot, ticket = self._busy.pop(future)
      try:
        outcomes.append(Outcome(ticket, future.result()))
      except concurrent.futures.process.BrokenProcessPool:
        outcomes.append(Outcome(ticket, None, f'its worker process died ({self._exit(slot)})'))
        self._end(slot)
    self._dispatch()
    return outcomes

  def _exit(self, slot: int) -> str:
    """How the slot's worker ended: 'killed by signal 9', 'exit code 1'."""
    codes = []
    for process in self._processes[slot]:
      process.join(5.0)
      codes.append(process.exitcode)
    code = next((c for c in codes if c is not None), None)
    if code is None:
      return 'exit status unknown'
    return f'killed by signal {-code}' if code < 0 else f'exit code {code}'

  def _end(self, slot: int) -> None:
    pool, self._pools[slot] = self._pools[slot], None
    processes, self._processes[slot] = self._processes[slot], []
    self._forget(slot)
    if pool is None:
      return
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
      if process.is_alive():
        process.kill()
    for process in processes:
      process.join(5.0)

  def close(self) -> None:
    """Ends every worker now (a job in progress is lost, as on an interrupt)."""
    self._queue.clear()
    self._busy.clear()
    for slot in range(self.workers):
      self._end(slot)


# ---- ray: tasks on a cluster ------------------------------------------------------------------
class _RayWorker:
  """A Ray actor holding one worker's state (one CPU)."""

  def __init__(self, make_state: Callable[[], Any], threads: int):
    fit_threads(threads)
    self._state = make_state()

  def run(self, run: Callable[[Any, Any], Any], job: Any) -> Any:
    return run(self._state, job)


# Ray's notices that say nothing about the runs: no metrics agent (nothing collects its metrics),
# and no warning that a future Ray changes the visible accelerators of CPU-only tasks.
_RAY_QUIET = {'RAY_enable_metrics_collection': '0', 'RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO': '0'}
# A cluster of this machine stays on the loopback. Ray rewrites 127.0.0.1 to the machine's
# routable address; another loopback address is kept (Linux routes all of 127/8 to lo).
_LOOPBACK = {'_node_ip_address': '127.0.0.2'} if sys.platform.startswith('linux') else {}


class RayExecutor(_Slots):
  """Ray actors, one per worker (`num_cpus=1` each), on the cluster at `address` (None: a cluster
  of this machine with `workers` CPUs, started here and ended by `close`); `workers` None uses
  every CPU of the cluster. Each actor makes its state once and runs the jobs it is given."""

  def __init__(self, make_state: Callable[[], Any], run: Callable[[Any, Any], Any],
               workers: Optional[int], address: Optional[str],
               affinity: Callable[[Any], Any] = lambda job: None):
    for name, value in _RAY_QUIET.items():   # read by Ray's processes, which inherit them
      os.environ.setdefault(name, value)
    import ray  # pylint: disable=g-import-not-at-top
    self._ray = ray
    self._make_state, self._run = make_state, run
    here = {} if address else dict(address='local', num_cpus=workers or default_workers(),
                                   **_LOOPBACK)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
      ray.init(**(here or dict(address=address)), include_dashboard=False, log_to_driver=False,
               configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
      raise config_lib.ConfigError('ray_address', address, reason=(
          f'no Ray cluster could be joined: {type(e).__name__}: {e}')) from None
    finally:   # ray.init replaces SIGTERM's handler with sys.exit: the binaries' own come back
      for signum, handler in handlers.items():
        if handler is not None and threading.current_thread() is threading.main_thread():
          signal.signal(signum, handler)
    super().__init__(workers or max(1, int(ray.cluster_resources().get('CPU', 1))), affinity)
    self._actor = ray.remote(num_cpus=1, max_restarts=0)(_RayWorker)
    self._actors: list[Any] = [None] * self.workers

  def _start(self, slot: int, job: Any):
    if self._actors[slot] is None:
      self._actors[slot] = self._actor.remote(self._make_state, 1)
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
        outcomes.append(Outcome(ticket, None, f'its Ray worker died ({type(e).__name__})'))
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

  def close(self) -> None:
    """Ends every actor, and the cluster when it was started here."""
    self._queue.clear()
    self._busy.clear()
    for slot in range(len(self._actors)):
      self._kill(slot)
    self._ray.shutdown()

"""Where independent runs run: `inline` (this process), `local` (worker processes on this machine)
or `ray` (Ray actors on a cluster), each an `Executor`: `submit(job)`, then `wait()` for outcomes.
`make(options, make_state, run)` builds the one `Options` names from `REGISTRY`."""

import contextlib
import ctypes
import logging
import math
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

# A worker's state; a job's run on it; what a job's run builds in the state (None: nothing).
MakeState, Run, Affinity = Callable[[], Any], Callable[[Any, Any], Any], Callable[[Any], Any]
# The bound on joining a Ray cluster at --ray_address: its port answering, then `ray.init`.
RAY_JOIN_SECONDS = 30.0
# An inter-op pool of one thread deadlocked the in-process runner's round (an op waiting for
# another op of its graph); two never did.
MIN_INTER_OP_THREADS = 2


class Outcome(NamedTuple):
  """A finished job: its `ticket`, `run`'s `value` and `error`, why its worker died (else None)."""
  ticket: int
  value: Any
  error: Optional[str] = None


class Options(NamedTuple):
  """--executor, --workers (None: as many as fit), --ray_address (None: a cluster started here),
  --worker_cpus and --worker_gpus: each worker's CPUs and fraction of a GPU (a Ray actor's
  `num_cpus` and `num_gpus`, as Flower sizes its clients; local workers take no GPU)."""
  kind: str = 'inline'
  workers: Optional[int] = None
  address: Optional[str] = None
  cpus_per_worker: float = 1
  gpus_per_worker: float = 0

  @classmethod
  def of(cls, output: config_lib.OutputConfig) -> 'Options':
    return cls(output.executor, output.executor_workers, output.ray_address, output.worker_cpus,
               output.worker_gpus)

  def local_workers(self) -> int:
    """`workers`, else as many as this machine's cores hold."""
    return self.workers or max(1, int(default_workers() // self.cpus_per_worker))


class Executor(Protocol):
  """Runs `run(state, job)` on a worker's `state` (made once per worker by `make_state()`),
  `workers` jobs at once: `submit(job)` queues a job and returns its ticket (1, 2, ...); `wait()`
  blocks until a job is done and returns the `Outcome`s done (inline, which runs in this process:
  in submission order); `pending` counts the jobs not yet returned; `close()` (or a `with`
  block's end) drops the queue and ends every worker (and a Ray cluster started here). `wait`
  raises `run`'s exception. A worker dying mid-job is replaced, its job's `Outcome.error` naming
  the cause: local, the signal or exit code (its workers end with this process, SIGKILL too);
  ray, the actor's pid and Ray's exit type and detail (Ray gives no signal)."""
  workers: int

  def submit(self, job: Any) -> int: ...
  def wait(self) -> list[Outcome]: ...
  @property
  def pending(self) -> int: ...
  def close(self) -> None: ...

  def __enter__(self) -> 'Executor':
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def default_workers() -> int:
  """The cores this process may use."""
  return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1


def threads_per_worker(workers: int) -> int:
  """TensorFlow's threads of each of `workers` workers: an equal share of the cores, at least 1."""
  return max(1, default_workers() // max(1, workers))


def make(options: 'Options | str', make_state: MakeState, run: Run, *, state: Any = None,
         affinity: Affinity = lambda job: None) -> Executor:
  """The executor of `options` (a name alone: its defaults) from `REGISTRY`; `inline` runs on
  `state` if given. A worker takes, when it can, jobs of an `affinity(job)` it ran before."""
  options = Options(options) if isinstance(options, str) else Options(*options)
  config_lib.check_executor(*options)
  try:   # what a worker needs must reach it
    if options.kind == 'ray':
      from ray import cloudpickle  # pylint: disable=g-import-not-at-top
      cloudpickle.dumps((make_state, run))
    elif options.kind != 'inline':
      pickle.dumps((make_state, run))
  except Exception as e:  # pylint: disable=broad-except
    raise config_lib.ConfigError('executor', options.kind, reason=(
        f'what its workers need cannot be sent to them ({type(e).__name__}: {e}); define your '
        'own data and model functions at the top level of an importable module, or use '
        '--executor=inline')) from None
  return REGISTRY[options.kind](options, make_state, run, state, affinity)


class _Slots(Executor):
  """`workers` slots, each running a job at a time on its worker (`_held`): a free slot takes the
  first queued job of an affinity it ran, else of one no slot ran, else the first. Subclasses
  start a job (`_start` -> a handle), give the ended handles (`_done`), a job's (value, its
  worker's death) or exception (`_result`) and stop a worker (`_stop`)."""

  def __init__(self, workers: int, affinity: Affinity):
    self.workers, self._affinity = int(workers), affinity
    self._queue: list[tuple[int, Any]] = []
    self._busy: dict[Any, tuple[int, int]] = {}    # handle -> (slot, ticket)
    self._seen: list[set] = [set() for _ in range(self.workers)]   # affinities each slot ran
    self._held: list[Any] = [None] * self.workers
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

  def wait(self) -> list[Outcome]:
    outcomes = []
    for handle in self._done():
      slot, ticket = self._busy.pop(handle)
      value, death = self._result(handle)
      if death:
        self._end(slot)
      outcomes.append(Outcome(ticket, value, death))
    self._dispatch()
    return outcomes

  def _end(self, slot: int) -> None:
    """Stops `slot`'s worker, if any; what it built is gone with it."""
    worker, self._held[slot] = self._held[slot], None
    self._seen[slot] = set()
    if worker is not None:
      self._stop(worker)

  def close(self) -> None:
    self._queue.clear()
    self._busy.clear()
    for slot in range(self.workers):
      self._end(slot)


class InlineExecutor(_Slots):
  """One slot, this process: `wait` runs the first job queued on `state`."""

  def __init__(self, state: Any, run: Run):
    super().__init__(1, lambda job: None)
    self._state, self._run = state, run

  def _dispatch(self) -> None:
    pass   # jobs wait in the queue for `wait`

  def wait(self) -> list[Outcome]:
    ticket, job = self._queue.pop(0)
    return [Outcome(ticket, self._run(self._state, job))]


class _Worker:
  """A worker's state (a Ray actor, or a local worker's), made once after fitting TensorFlow to
  `threads` cores: as many intra-op and inter-op threads (at least `MIN_INTER_OP_THREADS`)."""

  def __init__(self, make_state: MakeState, threads: int):
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(threads, MIN_INTER_OP_THREADS))
    self._state = make_state()

  def run(self, run: Run, job: Any) -> Any:
    return run(self._state, job)


def _serve(parent: int, make_state: MakeState, run: Run, threads: int,
           connection: multiprocessing.connection.Connection) -> None:
  """A local worker: ends with `parent` (at once on Linux, PR_SET_PDEATHSIG; elsewhere when its
  job ends and finds the pipe closed), leaves Ctrl-C to it, makes its `_Worker`, then answers each
  job with (value, None) or (None, the exception) until the pipe closes."""
  if sys.platform.startswith('linux'):
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)   # 1: PR_SET_PDEATHSIG
  if os.getppid() != parent:   # it died before prctl took effect
    return
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  try:
    worker, error = _Worker(make_state, threads), None
  except Exception as e:  # pylint: disable=broad-except
    worker, error = None, e   # raised in the parent by the first job
  with contextlib.suppress(EOFError):   # until the pipe closes
    while True:
      job = connection.recv()
      try:
        if error is not None:
          raise error
        reply = (worker.run(run, job), None)
      except Exception as e:  # pylint: disable=broad-except
        e.add_note(f'raised in worker process {os.getpid()}:\n{traceback.format_exc()}')
        reply = (None, e)
      try:
        connection.send(reply)
      except (pickle.PicklingError, TypeError, AttributeError) as e:
        connection.send((None, RuntimeError(f'{reply!r} (not picklable: {e})')))


class LocalExecutor(_Slots):
  """`workers` processes (default: the cores / `cpus_per_worker`), spawned (TensorFlow is not
  fork-safe), each with a pipe so that its death is its own job's failure."""

  def __init__(self, options: Options, make_state: MakeState, run: Run, state: Any,
               affinity: Affinity):
    del state   # each worker makes its own
    super().__init__(options.local_workers(), affinity)
    self._args = (os.getpid(), make_state, run, threads_per_worker(self.workers))
    self._context = multiprocessing.get_context('spawn')

  def _start(self, slot: int, job: Any) -> int:
    if self._held[slot] is None:
      pipe, child_end = self._context.Pipe()
      process = self._context.Process(target=_serve, args=(*self._args, child_end), daemon=True)
      process.start()
      child_end.close()   # the worker holds the only other end: its death is the pipe's end
      self._held[slot] = (process, pipe)
    with contextlib.suppress(OSError):   # the worker died: `_result` names how
      self._held[slot][1].send(job)
    return slot

  def _done(self) -> list[int]:
    watched = {}   # each busy slot's pipe and process's sentinel -> the slot
    for slot in self._busy:
      process, pipe = self._held[slot]
      watched[pipe] = watched[process.sentinel] = slot
    return sorted({watched[r] for r in multiprocessing.connection.wait(list(watched))})

  def _result(self, slot: int) -> tuple[Any, Optional[str]]:
    process, pipe = self._held[slot]
    try:
      if not pipe.poll():
        raise EOFError
      value, error = pipe.recv()
    except (EOFError, OSError):   # the worker ended: 'killed by signal 9', 'exit code 1'
      process.join(30.0)
      code = process.exitcode
      return None, 'its worker process died ({})'.format(
          'closed its pipe and was killed' if code is None else
          f'killed by signal {-code}' if code < 0 else f'exit code {code}')
    if error is not None:
      raise error
    return value, None

  def _stop(self, worker: tuple[Any, Any]) -> None:
    process, pipe = worker
    pipe.close()
    process.kill()
    process.join()


def _join(ray: Any, address: Optional[str], **kwargs) -> threading.Event:
  """`ray.init(**kwargs)` in a thread living until the returned event is set (the binaries' SIGTERM
  handler stays: Ray sets its own on the main thread only; a cluster started here dies with it).
  An `address` (HOST:PORT probed; 'auto' is Ray's to find) is joined within `RAY_JOIN_SECONDS`."""
  host, _, port = (address or '').removeprefix('ray://').rpartition(':')
  try:
    if port.isdigit():
      socket.create_connection((host.strip('[]'), int(port)), timeout=RAY_JOIN_SECONDS).close()
  except OSError as e:
    raise config_lib.ConfigError('ray_address', address, reason=(
        f'nothing answers at {host}:{port} ({e.strerror or e}); start the cluster (`ray start '
        '--head`) and give its head\'s address, or leave --ray_address unset for a cluster of '
        'this machine')) from None
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


class RayExecutor(_Slots):
  """Ray actors (`num_cpus=cpus_per_worker`, `num_gpus=gpus_per_worker`) on the cluster at
  `options.address` (None: one of this machine, started here and ended by `close`); `workers`
  capped, with a notice on stderr, to what the cluster places (None: as many)."""

  def __init__(self, options: Options, make_state: MakeState, run: Run, state: Any,
               affinity: Affinity):
    del state   # each actor makes its own
    for name in ('RAY_enable_metrics_collection', 'RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO'):
      os.environ.setdefault(name, '0')   # for Ray's processes: no metrics agent, no notice
    import ray  # pylint: disable=g-import-not-at-top
    self._ray, self._make_state, self._run = ray, make_state, run
    cpus, gpus = options.cpus_per_worker, options.gpus_per_worker
    # Ray's note that `ray.init` off the main thread sets no SIGTERM handler: `_join` wants none.
    logging.getLogger('ray._private.worker').addFilter(
        lambda record: not record.getMessage().startswith('SIGTERM handler is not set'))
    self._cluster = _join(ray, options.address, include_dashboard=False, configure_logging=False,
                          num_cpus=None if options.address else
                          math.ceil(options.local_workers() * cpus))   # a new cluster's
    needs = [(k, n) for k, n in (('CPU', cpus), ('GPU', gpus)) if n]
    fit = sum(min(math.floor(node['Resources'].get(k, 0) / n + 1e-6) for k, n in needs)
              for node in ray.nodes() if node['Alive'])   # the workers its nodes hold at once
    if fit < 1:
      have = {k: v for k, v in ray.cluster_resources().items() if k in ('CPU', 'GPU')}
      self._ray.shutdown()
      self._cluster.set()
      raise config_lib.ConfigError('worker_gpus' if gpus else 'worker_cpus', gpus or cpus, reason=(
          f'no node of the Ray cluster holds one worker of {cpus} CPUs and {gpus} GPUs '
          f'(the cluster has {have})'))
    if (options.workers or fit) > fit:
      print(f'executor: --workers={options.workers} capped to {fit}: the Ray cluster places '
            f'{fit} workers of {cpus} CPUs and {gpus} GPUs each', file=sys.stderr, flush=True)
    super().__init__(min(options.workers or fit, fit), affinity)
    self._actor = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=0)(_Worker)
    self._threads = max(1, int(cpus))

  def _start(self, slot: int, job: Any):
    if self._held[slot] is None:
      self._held[slot] = self._actor.remote(self._make_state, self._threads)
    return self._held[slot].run.remote(self._run, job)

  def _done(self) -> list[Any]:
    return self._ray.wait(list(self._busy), num_returns=1)[0]

  def _result(self, ref: Any) -> tuple[Any, Optional[str]]:
    exceptions = self._ray.exceptions
    try:
      return self._ray.get(ref), None
    except exceptions.RayTaskError as e:
      raise e.as_instanceof_cause() from None
    except (exceptions.RayActorError, exceptions.WorkerCrashedError,
            exceptions.NodeDiedError) as e:   # in Ray's words: its pid, exit type and detail
      text = ' '.join(str(e).split())
      found = re.search(r'pid: (\d+).*exit type: (\S+) Worker exit detail: (.*?\.)( |$)', text)
      return None, (f'its Ray worker (pid {found[1]}) died ({found[2]}: {found[3]})' if found
                    else f'its Ray worker died ({type(e).__name__}: {text[:200]})')

  def _stop(self, actor: Any) -> None:
    with contextlib.suppress(Exception):
      self._ray.kill(actor)

  def close(self) -> None:
    """Ends every actor, and the cluster when it was started here."""
    super().close()
    self._ray.shutdown()
    self._cluster.set()


# The executors by --executor's names: `factory(options, make_state, run, state, affinity)`.
REGISTRY: dict[str, Callable[..., Executor]] = {
    'inline': lambda options, make_state, run, state, affinity: InlineExecutor(
        make_state() if state is None else state, run),
    'local': LocalExecutor, 'ray': RayExecutor}

"""TFF's local C++ runtime, with every `worker_binary` it starts ended with this Python process
(docs/design.md, "The TFF runtime")."""

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Optional

from tff_conflict import _checks
from tff_conflict.runtime import _errors

_WORKER_NAME = 'worker_binary'
_SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_lock = threading.RLock()
_workers: list[subprocess.Popen] = []
_exit_hooks_installed = False
_previous_handlers: dict[int, object] = {}


# Started in place of `worker_binary ARGS`: asks the kernel to SIGKILL this process when the thread
# that started it ends (PR_SET_PDEATHSIG, kept across exec), exits if that parent is already gone,
# restores SIGINT/SIGTERM to their default action (a parent started in the background ignores
# SIGINT, the worker would inherit that, and TFF's own shutdown -- SIGINT, then an unbounded
# wait -- would hang), then execs the worker with the same PID. A launcher is used instead of
# `preexec_fn`, which forces a plain fork() in a process full of gRPC threads and can deadlock.
_LAUNCHER = (
    'import ctypes, os, signal, sys\n'
    'signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGTERM, signal.SIG_DFL)\n'
    'ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)\n'
    'if os.getppid() != int(sys.argv[1]): sys.exit(1)\n'
    'os.execv(sys.argv[2], sys.argv[2:])\n')


class _TrackedPopen(subprocess.Popen):
  """`subprocess.Popen` that records TFF worker processes so they can be ended at exit.

  On Linux the worker is started through `_LAUNCHER`, so it also ends when this process is killed
  without running any Python code. PR_SET_PDEATHSIG fires when the *thread* that started the child
  ends; TFF starts the worker from its sync context's event-loop thread (`AsyncThreadRunner`),
  which lives as long as the context, so the worker also ends when its context is replaced and
  collected, when nothing can reach it any more.
  """

  def __init__(self, args, *pargs, **kwargs):
    is_worker = bool(args) and os.path.basename(str(args[0])) == _WORKER_NAME
    if is_worker and sys.platform.startswith('linux'):
      args = [sys.executable, '-I', '-S', '-c', _LAUNCHER, str(os.getpid())] + list(args)
    super().__init__(args, *pargs, **kwargs)
    if is_worker:
      with _lock:
        _workers.append(self)


def worker_pids() -> list[int]:
  """PIDs of the `worker_binary` processes started by this process that are still running."""
  with _lock:
    return [p.pid for p in _workers if p.poll() is None]


def workers_with_environment(name: str, value: str) -> list[int]:
  """PIDs of the running `worker_binary` processes, started by any process, whose environment
  holds `name=value`: the workers of a child process given a token in its environment (e.g. to
  check that none outlived it). Processes that cannot be inspected are skipped."""
  import psutil  # pylint: disable=g-import-not-at-top
  found = []
  for proc in psutil.process_iter(['cmdline', 'status']):
    try:
      if (_WORKER_NAME in ' '.join(proc.info['cmdline'] or [])
          and proc.info['status'] != psutil.STATUS_ZOMBIE
          and proc.environ().get(name) == value):
        found.append(proc.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      pass
  return found


def shutdown_workers(timeout: float = 10.0) -> None:
  """Ends every worker this process started: SIGINT (as TFF does), then SIGKILL after `timeout`.

  Safe to call more than once. A later federated computation starts a new worker.
  """
  with _lock:
    workers = list(_workers)
    _workers.clear()
  for proc in workers:
    if proc.poll() is None:
      with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
  for proc in workers:
    try:
      proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      with contextlib.suppress(ProcessLookupError):
        proc.kill()
      proc.wait()


def _disarm_tff() -> None:
  """Ends the worker of every TFF `ServiceManager` still alive (for example the context TFF
  installs when it is imported, or one a test built) and makes its `__del__` a no-op: run during
  interpreter teardown, when `subprocess` is already None, it would print a traceback."""
  import gc  # pylint: disable=g-import-not-at-top
  from tff_conflict import _compat  # pylint: disable=g-import-not-at-top
  gc.collect()
  _compat.disarm_service_managers(_end_process)


def _end_process(process: subprocess.Popen) -> None:
  """SIGINT (as TFF does), then SIGKILL after 10 s."""
  if process.poll() is None:
    with contextlib.suppress(ProcessLookupError):
      process.send_signal(signal.SIGINT)
    try:
      process.wait(timeout=10)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


def _at_exit() -> None:
  _disarm_tff()       # TFF's ServiceManagers' workers first, while modules still exist ...
  shutdown_workers()  # ... and whatever is left is ended here.


def _on_signal(signum, frame) -> None:
  shutdown_workers(timeout=5.0)
  previous = _previous_handlers.get(signum, signal.SIG_DFL)
  if callable(previous):
    previous(signum, frame)
    return
  if previous == signal.SIG_IGN:
    return
  # Restore the default action and re-deliver, so the process ends by this signal as it would
  # have without us (exit status -signum).
  signal.signal(signum, signal.SIG_DFL)
  os.kill(os.getpid(), signum)


def install_exit_hooks() -> None:
  """Ends this process's workers at exit and on SIGTERM/SIGHUP (idempotent)."""
  global _exit_hooks_installed
  with _lock:
    if _exit_hooks_installed:
      return
    atexit.register(_at_exit)
    if threading.current_thread() is threading.main_thread():
      for signum in _SHUTDOWN_SIGNALS:
        previous = signal.getsignal(signum)
        if previous is _on_signal:
          continue
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_signal)
    else:
      logging.warning('tff_conflict.runtime: set_local_context() called outside the main thread; '
                      'SIGTERM/SIGHUP handlers not installed (atexit cleanup still is).')
    _exit_hooks_installed = True


def set_local_context(*, max_concurrent_computation_calls: int = -1) -> None:
  """Installs TFF's local C++ execution context, with its worker ended at process exit.

  Args:
    max_concurrent_computation_calls: passed to
      `tff.backends.native.set_sync_local_cpp_execution_context`; -1 (the default) means no
      limit, otherwise a positive integer.

  Raises:
    ValueError: if `max_concurrent_computation_calls` is not -1 or a positive integer.
  """
  value = max_concurrent_computation_calls
  if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
    raise _checks.ArgumentError.must_be('max_concurrent_computation_calls', value,
                                        '-1 (no limit) or a positive integer')
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import _compat  # pylint: disable=g-import-not-at-top
  _compat.check_versions()
  _compat.route_worker_popen(_TrackedPopen)
  install_exit_hooks()
  tff.backends.native.set_sync_local_cpp_execution_context(
      max_concurrent_computation_calls=value)
  context = tff.framework.get_context_stack().current
  # A failed check on client data (a label out of range) is raised as one `DataError` line, not
  # inside the worker's gRPC error.
  context.invoke = _errors.translating(context.invoke)
  # A replaced context's worker can no longer be reached: let TFF end it, then end what is left.
  import gc  # pylint: disable=g-import-not-at-top
  gc.collect()
  shutdown_workers()  # The new context starts its worker lazily, on its first call.


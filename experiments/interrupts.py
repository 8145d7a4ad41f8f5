"""Ctrl-C and SIGTERM that cannot be lost: a binary ends with 130 / 143 and a saved state
(docs/design.md, "Experiments", signals). Imports only the standard library."""

import atexit
import os
import signal
import sys
import threading
from typing import Optional

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that a run can save
  its last finished round and end cleanly."""


def received() -> Optional[int]:
  """The first Ctrl-C (SIGINT) or SIGTERM received since handlers were installed, or None."""
  return _received[0] if _received else None


def _interrupt_for(signum: int) -> KeyboardInterrupt:
  return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def raise_interrupt(signum, frame) -> None:
  """Records the signal and raises its `KeyboardInterrupt` / `Terminated`; a second signal, while
  the first one's exception unwinds (saving the run), is recorded only."""
  del frame
  first = not _received
  _received.append(signum)
  if first:
    raise _interrupt_for(signum)


def exit_now(signum, frame) -> None:
  """Ends the process with 128 + signum (ending this process's TFF workers first, if TFF's
  runtime is loaded): nothing is running that needs saving."""
  del frame
  _received.append(signum)
  local = sys.modules.get('tff_conflict.runtime.local')   # never imported here: TFF is slow
  if local is not None:
    try:
      local.shutdown_workers(timeout=5.0)
    except Exception:  # pylint: disable=broad-except
      pass   # the workers die with this process anyway (PR_SET_PDEATHSIG)
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except Exception:  # pylint: disable=broad-except
      pass
  os._exit(128 + signum)  # pylint: disable=protected-access


def install(handler) -> None:
  """`handler` for Ctrl-C and SIGTERM, unless the signal is ignored (a background job's SIGINT)
  or handled by someone else; TFF runtime's handler (`tff_conflict.runtime.local`), which ends
  the workers and then calls the handler it replaced, is replaced too. Main thread only."""
  if threading.current_thread() is not threading.main_thread():
    return
  for signum in _SIGNALS:
    current = signal.getsignal(signum)
    if (current in (signal.SIG_DFL, None, signal.default_int_handler)
        or current in (raise_interrupt, exit_now)
        or getattr(current, '__module__', '') == 'tff_conflict.runtime.local'):
      signal.signal(signum, handler)


def exit_on_signals() -> None:
  """Ctrl-C and SIGTERM end the process at once with 130 / 143 (a binary calls it first, before
  TensorFlow loads; `experiments.cli.run` then takes over). Registered first, `_at_teardown`
  runs as the last exit hook."""
  install(exit_now)
  atexit.register(_at_teardown)


def _at_teardown() -> None:
  """The command is over (every other exit hook ran): a signal from now on is ignored, so that
  the process ends with the command's own status. Python resets a Python handler to the
  signal's default action while it tears down, which would end a finished command as killed."""
  if threading.current_thread() is threading.main_thread():
    for signum in _SIGNALS:
      if signal.getsignal(signum) in (raise_interrupt, exit_now):
        signal.signal(signum, signal.SIG_IGN)


def raise_if_interrupted() -> None:
  """Raises the `KeyboardInterrupt` (Ctrl-C) or `Terminated` (SIGTERM) of a signal received, if
  one was: its first exception may have been dropped by Python (it landed in a callback). The
  run loop calls it between rounds; without handlers installed (a library user) it does
  nothing."""
  if _received:
    raise _interrupt_for(_received[0])


def quiet_dropped_interrupts() -> None:
  """Makes `sys.unraisablehook` say nothing of an interrupt Python drops (the record handles it)
  and pass everything else to the hook it replaces (idempotent)."""
  hook = sys.unraisablehook
  if getattr(hook, 'quiets_interrupts', False):
    return

  def unraisable(info):
    if isinstance(info.exc_value, KeyboardInterrupt) and _received:
      return
    hook(info)

  unraisable.quiets_interrupts = True
  sys.unraisablehook = unraisable

"""Ctrl-C and SIGTERM that cannot be lost: a binary ends with 130 / 143 and a saved state
(docs/design.md, "Experiments", signals). Imports only the standard library."""

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import Optional

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that a run saves and ends cleanly."""


class OutputClosed(BrokenPipeError):
  """Standard output's reader went away (`train ... | head -3`): a run stops as on Ctrl-C."""


class _GuardedOutput:
  """A text stream whose writes raise `OutputClosed` where its pipe is broken."""

  def __init__(self, stream):
    self._stream = stream

  def __getattr__(self, name):
    method = getattr(self._stream, name)
    if name not in ('write', 'writelines', 'flush'):
      return method

    def guarded(*args):
      try:
        return method(*args)
      except BrokenPipeError:
        raise OutputClosed('standard output closed') from None
    return guarded


def guard_stdout() -> None:
  """Makes `sys.stdout`'s writes raise `OutputClosed` when its pipe is broken."""
  if sys.stdout is not None and not isinstance(sys.stdout, _GuardedOutput):
    sys.stdout = _GuardedOutput(sys.stdout)


def discard_stdout() -> None:
  """Sends what is left for a closed standard output to /dev/null (no BrokenPipeError at exit)."""
  with contextlib.suppress(OSError, AttributeError, ValueError):
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.__stdout__.fileno())
    os.close(devnull)


def received() -> Optional[int]:
  """The first Ctrl-C (SIGINT) or SIGTERM received since handlers were installed, or None."""
  return _received[0] if _received else None


def _interrupt_for(signum: int) -> KeyboardInterrupt:
  return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def raise_interrupt(signum, frame) -> None:
  """Records the signal; the first raises its `KeyboardInterrupt` / `Terminated`."""
  del frame
  _received.append(signum)
  if len(_received) == 1:
    raise _interrupt_for(signum)


def exit_now(signum, frame) -> None:
  """Ends the process with 128 + signum, ending this process's TFF workers first."""
  del frame
  _received.append(signum)
  local = sys.modules.get('tff_conflict.runtime.local')   # never imported here: TFF is slow
  for end in ((lambda: local.shutdown_workers(timeout=5.0)) if local else (lambda: None),
              lambda: sys.stdout.flush(), lambda: sys.stderr.flush()):
    try:
      end()
    except Exception:  # pylint: disable=broad-except
      pass   # the workers die with this process anyway (PR_SET_PDEATHSIG)
  os._exit(128 + signum)  # pylint: disable=protected-access


def install(handler) -> None:
  """`handler` for Ctrl-C and SIGTERM (main thread), unless ignored or handled by another."""
  if threading.current_thread() is not threading.main_thread():
    return
  for signum in _SIGNALS:
    current = signal.getsignal(signum)
    if (current in (signal.SIG_DFL, None, signal.default_int_handler, raise_interrupt, exit_now)
        or getattr(current, '__module__', '') == 'tff_conflict.runtime.local'):
      signal.signal(signum, handler)


def exit_on_signals() -> None:
  """Ctrl-C and SIGTERM end the process at once with 130 / 143 (before TensorFlow loads)."""
  install(exit_now)
  atexit.register(_at_teardown)   # registered first: the last exit hook to run


def _at_teardown() -> None:
  """Ignores signals once the command is over, so that the process ends with its status."""
  if threading.current_thread() is threading.main_thread():
    for signum in _SIGNALS:
      if signal.getsignal(signum) in (raise_interrupt, exit_now):
        signal.signal(signum, signal.SIG_IGN)


def raise_if_interrupted() -> None:
  """Raises the interrupt of a signal received, if any (Python may have dropped its exception)."""
  if _received:
    raise _interrupt_for(_received[0])


def quiet_dropped_interrupts() -> None:
  """`sys.unraisablehook` is silent on an interrupt Python drops (the record handles it)."""
  hook = sys.unraisablehook
  if getattr(hook, 'quiets_interrupts', False):
    return

  def unraisable(info):
    if not (isinstance(info.exc_value, KeyboardInterrupt) and _received):
      hook(info)

  unraisable.quiets_interrupts = True
  sys.unraisablehook = unraisable

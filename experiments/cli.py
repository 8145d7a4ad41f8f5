"""Runs an absl binary so that every error a user can cause ends in one line naming the flag.

`run(main)` parses the flags like `absl.app.run`, then calls `main`; a flag that does not parse or
fails its validator, an `app.UsageError` or a `config.ConfigError` prints `<binary>: <message>`
and exits 2, a `Failure` (files, machines) exits 1, Ctrl-C and SIGTERM exit 130 and 143 (after the
run saved its last finished round; `exit_on_signals` and `raise_if_interrupted` make sure of it
wherever the signal lands). Anything else is a bug and keeps its traceback.
"""

import os
import re
import signal
import sys
import tempfile
import threading
from typing import Any, Callable, NoReturn, Optional, Sequence

from absl import app
from absl import flags

from experiments import config

FLAGS = flags.FLAGS

USAGE_EXIT = 2
FAILURE_EXIT = 1


class Failure(Exception):
  """An error the user can fix that is not a flag's value (a damaged results file, an unreachable
  worker); printed as one line, exit status 1."""


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that a run can save
  its last finished round and end cleanly."""


def _program() -> str:
  main = sys.modules.get('__main__')
  spec = getattr(main, '__spec__', None)
  if spec is not None and spec.name:
    return spec.name.rpartition('.')[2]
  return os.path.basename(sys.argv[0]) or 'experiment'


def fail(message: str, exit_status: int) -> NoReturn:
  """Prints `<binary>: <message>` on one line to stderr and exits with `exit_status`."""
  sys.stdout.flush()
  text = ' '.join(str(message).split())  # one line
  sys.stderr.write(f'{_program()}: {text}\n')
  sys.stderr.flush()
  sys.exit(exit_status)


def _flag_error_message(error: flags.Error) -> str:
  """absl's message, without its `flag --x=v: ` prefix when the rest names the flag itself
  (the validators' `--x must be ..., got v`)."""
  message = str(error)
  match = re.match(r'flag (--[\w-]+)=.*?: (\1 .*)$', message, re.S)
  return match.group(2) if match else message


def _parse_flags(argv: Sequence[str]) -> list[str]:
  try:
    return FLAGS(argv)
  except flags.Error as e:
    fail(f'{_flag_error_message(e)} (--helpfull lists every flag)', USAGE_EXIT)


def check_no_arguments(argv: Sequence[str]) -> None:
  """Refuses positional arguments (a flag without its `--`, a stray word)."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {list(argv[1:])}: every setting is a --flag '
                         '(--helpfull lists them)')


# Ctrl-C and SIGTERM. Python runs a signal handler in the main thread between two bytecodes,
# wherever they are: an exception raised there can land inside a weakref or garbage-collector
# callback, or an atexit hook, where Python prints "Exception ignored in ..." and drops it. So the
# handler also records the signal (`_received`), and the record decides: `raise_if_interrupted`
# raises it again at the run loop's safe points, `run` ends with 130/143 if one was received at
# all, and before `main` starts (TensorFlow loading) and after it returned (everything is saved)
# a signal ends the process at once with that status (`exit_on_signals`).
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


def _interrupt_for(signum: int) -> KeyboardInterrupt:
  return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _raise_interrupt(signum, frame) -> None:
  del frame
  first = not _received
  _received.append(signum)
  if first:   # a second signal while the first one's exception unwinds (saving) is recorded only
    raise _interrupt_for(signum)


def _exit_now(signum, frame) -> None:
  """Ends the process with 128 + signum: nothing is running that needs saving."""
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


_OURS = (_raise_interrupt, _exit_now)


def _quiet_dropped_interrupts(hook):
  """A `sys.unraisablehook` that says nothing of an interrupt Python drops (the record above
  handles it), and passes everything else to `hook`."""

  def unraisable(info):
    if isinstance(info.exc_value, KeyboardInterrupt) and _received:
      return
    hook(info)

  unraisable.quiets_interrupts = True
  return unraisable


def _install(handler) -> None:
  """`handler` for Ctrl-C and SIGTERM, unless the signal is ignored (a background job's SIGINT)
  or handled by someone else; TFF runtime's handler (`tff_conflict.runtime.local`), which ends
  the workers and then calls the handler it replaced, is replaced too."""
  if threading.current_thread() is not threading.main_thread():
    return
  for signum in _SIGNALS:
    current = signal.getsignal(signum)
    if (current in (signal.SIG_DFL, None, signal.default_int_handler) or current in _OURS
        or getattr(current, '__module__', '') == 'tff_conflict.runtime.local'):
      signal.signal(signum, handler)


def exit_on_signals() -> None:
  """Ctrl-C and SIGTERM end the process at once with 130 / 143 (a binary calls it first, before
  TensorFlow loads; `run` then takes over)."""
  _install(_exit_now)


def raise_if_interrupted() -> None:
  """Raises the `KeyboardInterrupt` (Ctrl-C) or `Terminated` (SIGTERM) of a signal received
  while `run` runs `main`, if one was: its first exception may have been dropped by Python (it
  landed in a callback). The run loop calls it between rounds."""
  if _received:
    raise _interrupt_for(_received[0])


def _end_if_interrupted() -> None:
  """After `main`: no signal handler raises any more (everything is saved: a signal ends the
  process at once), and a signal received, whose exception was dropped or surfaced as another
  error, ends the command with 128 + its number."""
  _install(_exit_now)
  if _received:
    signum = _received[0]
    fail('terminated (SIGTERM)' if signum == signal.SIGTERM else 'interrupted (Ctrl-C)',
         128 + signum)


def run(main: Callable[[list[str]], Any], argv: Optional[Sequence[str]] = None) -> None:
  """`absl.app.run(main)` with the one-line errors of the module docstring."""

  def wrapped(args):
    _install(_raise_interrupt)
    if not getattr(sys.unraisablehook, 'quiets_interrupts', False):
      sys.unraisablehook = _quiet_dropped_interrupts(sys.unraisablehook)
    try:
      result = main(args)
    except KeyboardInterrupt as e:
      _install(_exit_now)
      terminated = isinstance(e, Terminated) or signal.SIGTERM in _received[:1]
      fail(str(e) or ('terminated (SIGTERM)' if terminated else 'interrupted (Ctrl-C)'),
           128 + (signal.SIGTERM if terminated else signal.SIGINT))
    except (app.UsageError, config.ConfigError, Failure) as e:
      _end_if_interrupted()
      message = e.flag_message() if isinstance(e, config.ConfigError) else str(e)
      fail(message, FAILURE_EXIT if isinstance(e, Failure) else USAGE_EXIT)
    except BaseException:
      _end_if_interrupted()   # e.g. an interrupt that surfaced inside TensorFlow as its error
      raise
    _end_if_interrupted()
    return result

  app.run(wrapped, argv=list(argv) if argv is not None else None, flags_parser=_parse_flags)


def prepare_output_dir(path: str, flag: str = 'output_dir') -> str:
  """Creates `path` (and its parents) and checks that files can be written there.

  Returns:
    `path`.

  Raises:
    app.UsageError: naming `--flag` and its value, when the directory cannot be created or
      written (a file in the way, no permission, a read-only file system).
  """
  value = FLAGS[flag].value if flag in FLAGS else path
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix='.write_check_'):
      pass
  except OSError as e:
    reason = e.strerror or type(e).__name__
    where = e.filename if getattr(e, 'filename', None) else path
    raise app.UsageError(f'--{flag}={value}: cannot write the results directory {path} '
                         f'({reason}: {where})') from None
  return path


def install_context(experiment: config.ExperimentConfig) -> None:
  """`experiment_lib.install_context`, with an unreachable worker reported as a `Failure` naming
  `--workers`."""
  from experiments import experiment_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  try:
    experiment_lib.install_context(experiment)
  except (runtime.WorkerError, ValueError) as e:
    raise Failure(f'--workers={",".join(experiment.runtime.workers)}: {e}') from None

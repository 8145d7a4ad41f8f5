"""Runs an absl binary so that every error a user can cause ends in one line naming the flag
(see `run`; docs/design.md, "Experiments")."""

import os
import signal
import sys
import tempfile
import warnings
from typing import Any, Callable, NoReturn, Optional, Sequence

from absl import app
from absl import flags

from experiments import config
from tff_conflict import _files as files
from tff_conflict import _interrupts as interrupts
from tff_conflict import _checks

FLAGS = flags.FLAGS

USAGE_EXIT = 2
FAILURE_EXIT = 1
OUTPUT_CLOSED_EXIT = 128 + signal.SIGPIPE   # as a process that SIGPIPE ended
Failure = files.Failure


def fail(message: str, exit_status: int) -> NoReturn:
  """Prints `<binary>: <message>` on one line to stderr and exits with `exit_status`."""
  spec = getattr(sys.modules.get('__main__'), '__spec__', None)
  program = (spec.name.rpartition('.')[2] if spec is not None and spec.name
             else os.path.basename(sys.argv[0]) or 'experiment')
  sys.stdout.flush()
  sys.stderr.write(f'{program}: {" ".join(str(message).split())}\n')
  sys.stderr.flush()
  sys.exit(exit_status)


def _parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's parser, its errors (and a validator's `ConfigError`) ending in one line."""
  try:
    rest = FLAGS(argv)
  except SystemExit as e:   # absl's --help, --helpshort, --helpfull print and exit 1: a success
    if e.code == 1 and any(a.lstrip('-').split('=')[0] in ('help', 'helpshort', 'helpfull',
                                                           'helpxml', '?', 'h') for a in argv[1:]):
      sys.exit(0)
    raise
  except (flags.Error, config.ConfigError) as e:
    message = e.flag_message() if isinstance(e, config.ConfigError) else e
    fail(f'{message} (--helpfull lists every flag)', USAGE_EXIT)
  if len(rest) > 1:   # a flag without its `--`, a stray word
    fail(f'unexpected arguments {rest[1:]}: every setting is a --flag (--helpfull lists them)',
         USAGE_EXIT)
  return rest


def _interrupted(signum: int, message: str = '') -> NoReturn:
  """Ends with `message` (default: the signal's) as the last line, exit 128 + `signum` (no
  warning of the work the signal cut short after it)."""
  warnings.simplefilter('ignore')
  fail(message or ('terminated (SIGTERM)' if signum == signal.SIGTERM else 'interrupted (Ctrl-C)'),
       128 + signum)


def _end_if_interrupted() -> None:
  """After `main` (all saved): a signal ends the process at once; one received whose exception
  was dropped or surfaced as another error ends the command with 128 + its number."""
  interrupts.install(interrupts.exit_now)
  signum = interrupts.received()
  if signum is not None:
    _interrupted(signum)


def run(main: Callable[[list[str]], Any], argv: Optional[Sequence[str]] = None) -> None:
  """`absl.app.run(main)`, each error a user can cause one line `<binary>: <message>` on stderr:
  bad flags or arguments, a full or read-only disk, a `runtime.DataError` exit 2, a `Failure` 1,
  Ctrl-C, SIGTERM and a closed stdout (`| head`) 130, 143 and 141 after the run saved its last
  finished round. Anything else keeps its traceback."""

  def wrapped(args):
    interrupts.install(interrupts.raise_interrupt)
    interrupts.quiet_dropped_interrupts()
    interrupts.guard_stdout()
    try:
      result = main(args)
    except interrupts.OutputClosed as e:   # e.g. `| head`: the run saved as on Ctrl-C
      interrupts.discard_stdout()
      _end_if_interrupted()
      fail(str(e), OUTPUT_CLOSED_EXIT)
    except KeyboardInterrupt as e:
      interrupts.install(interrupts.exit_now)
      terminated = isinstance(e, interrupts.Terminated) or interrupts.received() == signal.SIGTERM
      _interrupted(signal.SIGTERM if terminated else signal.SIGINT, str(e))
    except BaseException as e:
      _end_if_interrupted()   # e.g. an interrupt that surfaced inside TensorFlow as its error
      runtime = sys.modules.get('tff_conflict.runtime')
      if isinstance(e, (_checks.ArgumentError, Failure) + (   # a DataError: a fault of the data
          (runtime.DataError,) if runtime is not None else ())):
        message = e.flag_message() if isinstance(e, config.ConfigError) else str(e)
        fail(message, FAILURE_EXIT if isinstance(e, Failure) else USAGE_EXIT)
      if isinstance(e, OSError) and e.errno in files.DISK_ERRNOS:   # full, quota, read-only
        where = f' {e.filename}' if e.filename else ''
        output = f' (--output_dir={FLAGS.output_dir})' if 'output_dir' in FLAGS else ''
        fail(f'cannot write{where}: {e.strerror or e}{output}; free space or choose another '
             '--output_dir, then rerun the same command (what was finished is kept)', USAGE_EXIT)
      raise
    _end_if_interrupted()
    return result

  app.run(wrapped, argv=list(argv) if argv is not None else None, flags_parser=_parse_flags)


def prepare_output_dir(path: str, flag: str = 'output_dir') -> str:
  """`path`, created and checked writable; else a `config.ConfigError` naming `--flag`."""
  value = FLAGS[flag].value if flag in FLAGS else path
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix='.write_check_'):
      pass
  except OSError as e:
    raise config.ConfigError(flag, value, reason=f'cannot write the results directory {path} '
                             f'({e.strerror or type(e).__name__}: {e.filename or path})') from None
  return path


def install_context(experiment: config.ExperimentConfig) -> None:
  """Installs TFF's local context, then a remote one for `--tff_workers` (unreachable: a
  `Failure`)."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  workers = list(experiment.output.workers)
  try:
    if workers:
      runtime.set_remote_context(workers)
  except (runtime.WorkerError, ValueError) as e:
    raise Failure(f'--tff_workers={",".join(workers)}: {e}') from None

"""Starts one TFF remote worker (TFF's `worker_binary`, same PID) on this machine; it serves gRPC
without authentication or encryption: run it on a trusted network only. A bad flag ends the
command in one line (exit status 2); a port it cannot serve or a missing binary, exit status 1.
"""

import argparse
import ctypes
import os
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1
_PROG = 'python -m tff_conflict.runtime.worker'


def worker_binary_path() -> str:
  """The `worker_binary` shipped with the installed TFF package."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or not spec.submodule_search_locations:
    raise RuntimeError('tensorflow_federated is not installed in this Python environment')
  path = os.path.join(list(spec.submodule_search_locations)[0], 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise RuntimeError(f'TFF worker binary not found at {path}')
  return path


def worker_command(port: int, max_concurrent_computation_calls: int = -1) -> list[str]:
  """argv that starts `worker_binary` serving on `port`."""
  return [worker_binary_path(), f'--port={port}',
          f'--max_concurrent_computation_calls={max_concurrent_computation_calls}']


class _Parser(argparse.ArgumentParser):
  """Reports a bad command line in one line (`worker: <message>`), exit status 2."""

  def error(self, message):
    self.exit(2, f'{_PROG}: {message} (--help lists the flags)\n')


def _parse(argv):
  parser = _Parser(prog=_PROG, description=__doc__,
                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--port', type=int, required=True, help='TCP port to serve on (1-65535)')
  parser.add_argument('--max_concurrent_computation_calls', type=int, default=-1,
                      help='passed to worker_binary; -1 means no limit, else a positive integer')
  parser.add_argument('--die_with_parent', action='store_true',
                      help='end the worker when the process that started this command dies')
  args = parser.parse_args(argv)
  if not 1 <= args.port <= 65535:
    parser.error(f'--port must be in 1..65535, got {args.port}')
  calls = args.max_concurrent_computation_calls
  if calls != -1 and calls < 1:
    parser.error(f'--max_concurrent_computation_calls must be -1 (no limit) or a positive '
                 f'integer, got {calls}')
  return args


def _fail(message: str) -> None:
  sys.stderr.write(f'{_PROG}: {message}\n')
  sys.exit(1)


def _check_port_free(port: int) -> None:
  """Fails in one line when `port` cannot be bound here (in use, or not allowed)."""
  with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      probe.bind(('', port))
    except OSError as e:
      _fail(f'--port={port} cannot be served: {e.strerror or e}')


def main(argv=None) -> None:
  args = _parse(sys.argv[1:] if argv is None else argv)
  try:
    command = worker_command(args.port, args.max_concurrent_computation_calls)
  except RuntimeError as e:
    _fail(str(e))
  _check_port_free(args.port)
  # A background shell starts us with SIGINT ignored; the worker would inherit that.
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  if args.die_with_parent and sys.platform.startswith('linux'):
    parent = os.getppid()
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
      sys.exit(1)
  sys.stdout.flush()
  os.execv(command[0], command)


if __name__ == '__main__':
  main()

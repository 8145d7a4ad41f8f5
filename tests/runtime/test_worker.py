"""python -m tff_conflict.runtime.worker: a bad command line ends in one line naming the flag."""

import socket
import subprocess
import sys

import pytest


def _worker(*args):
  return subprocess.run([sys.executable, '-m', 'tff_conflict.runtime.worker', *args],
                        capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize('args, message', [
    (['--port=0'], '--port must be in 1..65535, got 0'),
    (['--port=abc'], "argument --port: invalid int value: 'abc'"),
    ([], 'the following arguments are required: --port'),
    (['--port=5', 'extra'], 'unrecognized arguments: extra'),
    (['--port=5', '--max_concurrent_computation_calls=0'],
     '--max_concurrent_computation_calls must be -1 (no limit) or a positive integer, got 0'),
])
def test_bad_flags_end_in_one_line(args, message):
  result = _worker(*args)
  assert result.returncode == 2
  assert result.stderr.splitlines() == [
      f'python -m tff_conflict.runtime.worker: {message} (--help lists the flags)']


def test_a_port_in_use_ends_in_one_line():
  with socket.socket() as taken:
    taken.bind(('', 0))
    taken.listen()
    port = taken.getsockname()[1]
    result = _worker(f'--port={port}')
  assert result.returncode == 1
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      f'python -m tff_conflict.runtime.worker: --port={port} cannot be served: '), lines

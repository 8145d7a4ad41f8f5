"""experiments.cli as a process: Ctrl-C and SIGTERM end with 130 / 143 wherever the signal lands
(a weakref callback, where Python drops the exception; an atexit hook; before `main`)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.experiments import conftest

# A binary whose main sends itself `SIG` from where the test puts it, then returns normally.
_PROGRAM = textwrap.dedent('''
    import atexit, os, signal, sys, time, weakref
    from experiments import cli
    from tff_conflict import _interrupts as interrupts
    SIG = getattr(signal, sys.argv[1])
    WHERE = sys.argv[2]

    def send_and_spin():
      os.kill(os.getpid(), SIG)
      for _ in range(10000):   # the handler runs at the next bytecode, i.e. in here
        pass

    def main(argv):
      if WHERE == 'weakref':
        class Referent:
          pass
        referent = Referent()
        ref = weakref.ref(referent, lambda _: send_and_spin())
        del referent
      elif WHERE == 'atexit':
        atexit.register(send_and_spin)
      elif WHERE == 'main':
        send_and_spin()
      elif WHERE == 'disk_full':
        raise OSError(28, 'No space left on device', '/full/results/runs.csv')
      elif WHERE == 'setting':
        from experiments import config
        config.at_least(1)('client_batch_size', 0)
      elif WHERE == 'library':
        from tff_conflict import _checks
        _checks.check_ratio('selection_ratio', 2)
      print('main returned', flush=True)

    if WHERE == 'before_main':
      interrupts.exit_on_signals()
      send_and_spin()
    cli.run(main, argv=['program'])
''')


@pytest.mark.parametrize('where', ['main', 'weakref', 'atexit', 'before_main'])
@pytest.mark.parametrize('name', ['SIGTERM', 'SIGINT'])
def test_a_signal_ends_the_binary_with_its_status_wherever_it_lands(where, name):
  result = subprocess.run(
      [sys.executable, '-c', _PROGRAM, name, where],
      cwd=conftest.REPO_ROOT, env=dict(os.environ, PYTHONPATH=conftest.REPO_ROOT),
      capture_output=True, text=True, timeout=120,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
  assert result.returncode == 128 + getattr(signal, name), result.stdout + result.stderr
  assert 'main returned' not in result.stdout or where in ('weakref', 'atexit')
  if where in ('main', 'weakref'):   # one line; the dropped exception is not printed
    reason = 'terminated (SIGTERM)' if name == 'SIGTERM' else 'interrupted (Ctrl-C)'
    assert result.stderr.splitlines() == [f'-c: {reason}'], result.stderr
  assert 'Traceback' not in result.stderr and 'Exception ignored' not in result.stderr


def test_a_full_disk_ends_in_one_line_naming_the_file():
  result = subprocess.run([sys.executable, '-c', _PROGRAM, 'SIGTERM', 'disk_full'],
                          cwd=conftest.REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=conftest.REPO_ROOT),
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 2, result.stderr
  assert result.stderr.splitlines() == [
      '-c: cannot write /full/results/runs.csv: No space left on device; free space or choose '
      'another --output_dir, then rerun the same command (what was finished is kept)']


@pytest.mark.parametrize('where, line', [
    ('setting', '--client_batch_size must be an integer >= 1, got 0'),
    ('library', 'selection_ratio must be a number in (0, 1], got 2')])
def test_a_bad_argument_ends_in_one_line_naming_it_and_the_value(where, line):
  result = subprocess.run([sys.executable, '-c', _PROGRAM, 'SIGTERM', where],
                          cwd=conftest.REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=conftest.REPO_ROOT),
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 2, result.stderr
  assert result.stderr.splitlines() == [f'-c: {line}'], result.stderr


def test_a_signal_while_python_tears_down_a_finished_command_keeps_its_status():
  program = textwrap.dedent('''
      import os, signal, time
      from tff_conflict import _interrupts as interrupts
      interrupts.exit_on_signals()
      class Late:
        def __del__(self):   # runs while Python tears down, after the exit hooks
          os.kill(os.getpid(), signal.SIGTERM)
          time.sleep(0.2)
      late = Late()
      print('done', flush=True)
  ''')
  result = subprocess.run([sys.executable, '-c', program], cwd=conftest.REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=conftest.REPO_ROOT),
                          capture_output=True, text=True, timeout=120)
  assert (result.returncode, result.stdout) == (0, 'done\n'), result.stderr

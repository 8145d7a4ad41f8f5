"""One writer per experiment directory (`tff_conflict._files.one_writer`), as the binaries take it:
a second benchmark or train on a directory in use ends in one line naming the holder's pid,
non-zero, having touched nothing; the first one's results are complete."""

import csv
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tff_conflict import _files as files
from tests.experiments import conftest

_GRID = ('--regimes=digits:iid', '--methods=fedavg', '--rounds=2', '--report_seeds=0', '--notune',
         '--epochs=1', '--noprogress', '--experiment_name=grid')
_TIMING = ('seconds_per_round', 'first_round_s', 'run_seconds')


def _rows(path):
  with open(path) as f:
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in csv.DictReader(f)]


def _one_line_naming(result, pid):
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and f'process {pid},' in lines[0], result.stderr
  assert 'Traceback' not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_second_benchmark_on_a_directory_in_use_ends_in_one_line_and_the_first_completes(
    tmp_path):
  token = uuid.uuid4().hex
  first = subprocess.Popen(conftest.binary_command('experiments.benchmark', *_GRID,
                                                   f'--output_dir={tmp_path / "shared"}'),
                           cwd=conftest.REPO_ROOT, env=conftest.binary_env(token),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  lock = tmp_path / 'shared' / 'grid' / files.LOCK_FILE
  try:
    deadline = time.monotonic() + 300
    while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
      time.sleep(0.05)
    first.send_signal(signal.SIGSTOP)   # holds the lock, mid-run, while the second one tries
    before = sorted(str(p) for p in (tmp_path / 'shared').rglob('*'))
    second = conftest.run_binary('experiments.benchmark', *_GRID,
                                 f'--output_dir={tmp_path / "shared"}', token=token)
    assert second.returncode == 1
    _one_line_naming(second, first.pid)
    assert sorted(str(p) for p in (tmp_path / 'shared').rglob('*')) == before
  finally:
    first.send_signal(signal.SIGCONT)
  out, err = first.communicate(timeout=300)
  assert first.returncode == 0, out[-2000:] + err[-2000:]
  assert not lock.exists()
  alone = conftest.run_binary('experiments.benchmark', *_GRID,
                              f'--output_dir={tmp_path / "alone"}', token=token)
  assert alone.returncode == 0, alone.stderr[-2000:]
  shared = _rows(tmp_path / 'shared' / 'grid' / 'runs.csv')
  assert len(shared) == 1 and shared == _rows(tmp_path / 'alone' / 'grid' / 'runs.csv')


def test_train_on_a_directory_another_process_writes_ends_in_one_line_touching_nothing(tmp_path):
  directory = tmp_path / 'fedavg'
  directory.mkdir()
  (directory / 'metrics.csv').write_text('theirs\n')
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time\nfrom tff_conflict import _files as files\n'
       'with files.one_writer(sys.argv[1]):\n  print("held", flush=True)\n  time.sleep(600)\n',
       str(directory)], cwd=conftest.REPO_ROOT, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == 'held\n'
    result = conftest.run_binary(
        'experiments.train', '--algorithm=fedavg', '--dataset=digits', '--rounds=1',
        f'--output_dir={tmp_path}', '--experiment_name=fedavg', '--noprogress',
        token=uuid.uuid4().hex)
    assert result.returncode == 1
    _one_line_naming(result, holder.pid)
    assert sorted(os.listdir(directory)) == [files.LOCK_FILE, 'metrics.csv']
    assert (directory / 'metrics.csv').read_text() == 'theirs\n'
  finally:
    holder.kill()
    holder.wait()

"""The binaries as processes: Ctrl-C (SIGINT) mid-run and a normal finish leave no TFF worker."""

import signal
import subprocess
import time
import uuid

import pytest

from tests.experiments import conftest


def test_train_interrupted_with_ctrl_c_leaves_no_worker(tmp_path):
  token = uuid.uuid4().hex
  proc = subprocess.Popen(
      conftest.binary_command('experiments.train', '--rounds=500', '--num_clients=6',
                              '--clients_per_round=3', '--model=logistic_regression',
                              f'--output_dir={tmp_path}'),
      cwd=conftest.REPO_ROOT, env=conftest.binary_env(token), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)
  try:
    deadline = time.monotonic() + 400
    while not conftest.workers_with_token(token):
      assert proc.poll() is None, proc.stdout.read()[-3000:]
      assert time.monotonic() < deadline, 'no TFF worker started'
      time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert proc.returncode != 0, output[-3000:]
  assert 'KeyboardInterrupt' in output or proc.returncode == -signal.SIGINT, output[-3000:]
  deadline = time.monotonic() + 15
  while conftest.workers_with_token(token) and time.monotonic() < deadline:
    time.sleep(0.5)
  assert conftest.workers_with_token(token) == []


@pytest.mark.slow
def test_compare_finishes_and_leaves_no_worker(tmp_path):
  token = uuid.uuid4().hex
  result = conftest.run_binary(
      'experiments.compare', '--algorithms=fedavg,fedld', '--rounds=2', '--num_clients=6',
      '--clients_per_round=3', '--model=logistic_regression', f'--output_dir={tmp_path}',
      token=token)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '| fedld |' in result.stdout
  assert conftest.workers_with_token(token) == []

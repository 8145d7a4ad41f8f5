"""The binaries as processes: Ctrl-C (SIGINT) mid-run and a normal finish leave no TFF worker."""

import signal
import subprocess
import time
import uuid

import pytest

from tests.data import leaf_fixtures
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


def _train_on_leaf(tmp_path, make, name):
  make(str(tmp_path / 'leaf'))
  token = uuid.uuid4().hex
  result = conftest.run_binary(
      'experiments.train', '--dataset=leaf', f'--leaf_dir={tmp_path / "leaf" / "data" / name}',
      '--rounds=2', '--clients_per_round=2', '--noprogress', f'--output_dir={tmp_path / "out"}',
      token=token)
  assert result.returncode == 0, result.stderr[-3000:]
  assert conftest.workers_with_token(token) == []
  return result.stdout


def test_train_on_leaf_synthetic_finishes_and_leaves_no_worker(tmp_path):
  out = _train_on_leaf(tmp_path, leaf_fixtures.synthetic, 'synthetic')
  assert 'fedavg on leaf (4 clients, 2 per round, model logistic_regression)' in out
  assert 'round 2: test_accuracy' in out


@pytest.mark.slow
@pytest.mark.parametrize('make, name, model', [
    (leaf_fixtures.femnist, 'femnist', 'leaf_femnist_cnn'),
    (leaf_fixtures.celeba, 'celeba', 'leaf_celeba_cnn'),
])
def test_train_on_leaf_images_with_leafs_models(tmp_path, make, name, model):
  out = _train_on_leaf(tmp_path, make, name)
  assert f'model {model})' in out and 'round 2: test_accuracy' in out

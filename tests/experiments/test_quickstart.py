"""The README's main command (experiments.quickstart) runs end to end and leaves no worker."""

import os
import subprocess
import sys
import uuid

import psutil

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _workers_with_token(token):
  """Running worker_binary processes whose environment (inherited from the child) holds `token`."""
  found = []
  for proc in psutil.process_iter(['cmdline', 'status']):
    try:
      if ('worker_binary' in ' '.join(proc.info['cmdline'] or [])
          and proc.info['status'] != psutil.STATUS_ZOMBIE
          and proc.environ().get('TFF_CONFLICT_TEST_TOKEN') == token):
        found.append(proc.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      pass
  return found


def test_quickstart_prints_accuracy_per_round_and_leaves_no_worker():
  token = uuid.uuid4().hex
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', TFF_CONFLICT_TEST_TOKEN=token)
  result = subprocess.run(
      [sys.executable, '-m', 'experiments.quickstart', '--rounds=2', '--num_clients=3'],
      cwd=_REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  rounds = [l for l in result.stdout.splitlines() if l.startswith('round')]
  assert len(rounds) == 2, result.stdout
  accuracy = float(rounds[-1].split('test_accuracy')[1].split()[0])
  assert 0.0 <= accuracy <= 1.0
  assert _workers_with_token(token) == []

"""tff_conflict keeps TensorFlow's and TFF's log noise out of a program unless asked for it."""

import os
import subprocess
import sys

import pytest

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code, **env):
  environ = {k: v for k, v in os.environ.items()
             if k not in ('TF_CPP_MIN_LOG_LEVEL', 'TFF_CONFLICT_VERBOSE')}
  environ.update(env)
  return subprocess.run([sys.executable, '-c', code], cwd=_REPO_ROOT, env=environ,
                        capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize('verbose, level', [(None, '3'), ('1', 'None'), ('0', '3')])
def test_import_sets_tf_log_level_unless_verbose(verbose, level):
  env = {} if verbose is None else {'TFF_CONFLICT_VERBOSE': verbose}
  result = _python('import os, tff_conflict; print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))',
                   **env)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == level


def test_a_level_set_by_the_user_is_kept():
  result = _python('import os, tff_conflict; print(os.environ["TF_CPP_MIN_LOG_LEVEL"])',
                   TF_CPP_MIN_LOG_LEVEL='1')
  assert result.stdout.strip() == '1'


def test_a_program_importing_tff_prints_nothing_at_all():
  # TensorFlow's start-up logs, and TFF's ServiceManager.__del__ traceback at exit, are gone.
  result = _python('import tff_conflict.learning, tensorflow_federated; print("done")')
  assert result.returncode == 0
  assert result.stdout == 'done\n'
  assert result.stderr == ''

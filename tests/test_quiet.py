"""Importing tff_conflict changes nothing in the host program; `tff_conflict.quiet()` is what
keeps TensorFlow's and TFF's log noise out, and only when called."""

import json
import os
import subprocess
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A child snapshots its environment, every logger's level and the warning filters after importing
# TensorFlow and TFF, imports tff_conflict and every subpackage, and prints both snapshots.
_SNAPSHOT_CHILD = r'''
import json, logging, os, pkgutil, importlib, warnings
import tensorflow, tensorflow_federated

def snapshot():
  levels = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)}
  levels['<root>'] = logging.getLogger().level
  return {'environ': dict(os.environ), 'levels': levels,
          'filters': [repr(f) for f in warnings.filters]}

before = snapshot()
import tff_conflict
names = [info.name for info in pkgutil.walk_packages(tff_conflict.__path__, 'tff_conflict.')
         if not info.name.split('.')[-1] in ('worker', '__main__')]
for name in names:
  importlib.import_module(name)
after = snapshot()
after['levels'] = {k: v for k, v in after['levels'].items() if k in before['levels']}
print(json.dumps({'before': before, 'after': after, 'imported': names}))
'''


def _python(code, **env):
  environ = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  environ.update(env)
  return subprocess.run([sys.executable, '-c', code], cwd=_REPO_ROOT, env=environ,
                        capture_output=True, text=True, timeout=600)


def test_import_changes_no_environment_logger_level_or_warning_filter():
  result = _python(_SNAPSHOT_CHILD)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(result.stdout.strip().splitlines()[-1])
  assert len(report['imported']) > 20   # every subpackage and module, not just the package
  before, after = report['before'], report['after']
  assert after['environ'] == before['environ']
  assert after['levels'] == before['levels']
  assert after['filters'] == before['filters']


def test_import_alone_registers_no_exit_hook():
  result = _python('import atexit, tff_conflict.learning, tff_conflict.runtime\n'
                   'print(atexit._ncallbacks())')
  baseline = _python('import atexit, tensorflow, tensorflow_federated\n'
                     'print(atexit._ncallbacks())')
  assert result.returncode == 0 and baseline.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split()[-1] == baseline.stdout.split()[-1]


def test_quiet_sets_tf_log_level_unless_set():
  code = 'import os, tff_conflict; tff_conflict.quiet(); print(os.environ["TF_CPP_MIN_LOG_LEVEL"])'
  assert _python(code).stdout.strip() == '3'
  assert _python(code, TF_CPP_MIN_LOG_LEVEL='1').stdout.strip() == '1'


def test_quiet_lowers_tf_loggers_and_ignores_their_warnings():
  result = _python(
      'import logging, warnings, tff_conflict\n'
      'tff_conflict.quiet(); tff_conflict.quiet()   # idempotent\n'
      'print(logging.getLogger("tensorflow").level, logging.getLogger("tensorflow_federated").level)\n'
      'print(sum(f[0] == "ignore" and f[3] is not None and f[3].pattern == "tensorflow"\n'
      '          for f in warnings.filters))\n'
      'warnings.warn_explicit("shown", UserWarning, "x.py", 1, module="mine")\n'
      'warnings.warn_explicit("hidden", UserWarning, "x.py", 1, module="tensorflow.python")\n')
  assert result.returncode == 0, result.stderr
  lines = result.stdout.split('\n')
  assert lines[0] == f'{40} {40}'   # logging.ERROR
  assert lines[1] == '4'            # one filter per category, not duplicated by a second call
  assert 'shown' in result.stderr and 'hidden' not in result.stderr


def test_a_quiet_program_importing_tff_prints_nothing_at_all():
  # TensorFlow's start-up logs, and TFF's ServiceManager.__del__ traceback at exit, are gone.
  result = _python('import tff_conflict; tff_conflict.quiet()\n'
                   'import tff_conflict.learning, tensorflow_federated; print("done")')
  assert result.returncode == 0
  assert result.stdout == 'done\n'
  assert result.stderr == ''

"""TensorFlow's and TFF's log noise kept out of programs that use tff_conflict.

Unless the environment variable `TFF_CONFLICT_VERBOSE` is set to a non-empty value other than
`0` (the one switch that turns the noise back on), importing `tff_conflict`:

* sets `TF_CPP_MIN_LOG_LEVEL=3` when it is not set already. TensorFlow reads it once, when it
  is first imported, so it quiets this process's C++ logs only when `tff_conflict` is imported
  before `tensorflow` / `tensorflow_federated`; every TFF `worker_binary` started later inherits
  it either way;
* lowers the `tensorflow` and `tensorflow_federated` Python loggers to errors and ignores the
  deprecation and user warnings raised inside TensorFlow, TFF, Keras, JAX and dm-tree;
* ends TFF's context quietly at exit: TFF's `ServiceManager.__del__` otherwise fails during
  interpreter teardown with a traceback (`'NoneType' object has no attribute 'Popen'`) in any
  program that imported `tensorflow_federated`. This is done whatever the switch says.
"""

import atexit
import logging
import os
import sys
import warnings

VERBOSE_ENV = 'TFF_CONFLICT_VERBOSE'
_NOISY_LOGGERS = ('tensorflow', 'tensorflow_federated')
_NOISY_MODULES = ('tensorflow', 'keras', 'jax', 'tree')  # a prefix: also tensorflow_federated
_installed = False


def verbose() -> bool:
  """Whether `TFF_CONFLICT_VERBOSE` asks for TensorFlow's and TFF's logs."""
  return os.environ.get(VERBOSE_ENV, '').strip().lower() not in ('', '0', 'false', 'no')


def quiet_python_logs() -> None:
  """Lowers TF's and TFF's Python loggers to errors and ignores their warnings (unless
  `verbose()`)."""
  if verbose():
    return
  for name in _NOISY_LOGGERS:
    logging.getLogger(name).setLevel(logging.ERROR)
  for module in _NOISY_MODULES:
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning, UserWarning):
      warnings.filterwarnings('ignore', category=category, module=module)


def _end_tff_quietly() -> None:
  if 'tensorflow_federated' not in sys.modules:
    return
  from tff_conflict.runtime import local  # pylint: disable=g-import-not-at-top
  local._at_exit()  # pylint: disable=protected-access


def install() -> None:
  """What importing `tff_conflict` does (idempotent); see the module docstring."""
  global _installed
  if _installed:
    return
  _installed = True
  atexit.register(_end_tff_quietly)
  if not verbose():
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  quiet_python_logs()

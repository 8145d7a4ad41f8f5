"""`tff_conflict.quiet()`: keeps TensorFlow's and TFF's log noise out of a program, on request."""

import atexit
import logging
import os
import sys
import warnings

_NOISY_LOGGERS = ('tensorflow', 'tensorflow_federated')
_NOISY_MODULES = ('tensorflow', 'keras', 'jax', 'tree')  # a prefix: also tensorflow_federated
_WARNING_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, UserWarning)
_exit_hook_registered = False


def _end_tff_quietly() -> None:
  if 'tensorflow_federated' not in sys.modules:
    return
  from tff_conflict.runtime import local  # pylint: disable=g-import-not-at-top
  local._at_exit()  # pylint: disable=protected-access


def quiet() -> None:
  """Keeps TensorFlow's and TFF's logs and warnings out of this program's output (idempotent).

  * sets `TF_CPP_MIN_LOG_LEVEL=3` unless it is set already. TensorFlow reads it when it is first
    imported, so call `quiet()` before importing TensorFlow to silence this process's C++ logs;
    TFF `worker_binary` processes started later inherit it either way;
  * lowers the `tensorflow` and `tensorflow_federated` loggers to `ERROR` and ignores the
    deprecation, future and user warnings raised inside TensorFlow, TFF, Keras, JAX and dm-tree;
  * at exit, ends TFF's context before interpreter teardown, where TFF 0.87's
    `ServiceManager.__del__` otherwise prints a traceback in any program that imported TFF.

  To keep TensorFlow's C++ logs, set `TF_CPP_MIN_LOG_LEVEL` yourself (or do not call `quiet()`).
  """
  global _exit_hook_registered
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  for name in _NOISY_LOGGERS:
    logging.getLogger(name).setLevel(logging.ERROR)
  for module in _NOISY_MODULES:
    for category in _WARNING_CATEGORIES:
      warnings.filterwarnings('ignore', category=category, module=module)
  if not _exit_hook_registered:
    _exit_hook_registered = True
    atexit.register(_end_tff_quietly)

"""tff_conflict: gradient-conflict methods for federated learning on TensorFlow Federated.

Submodules (imported lazily, so `import tff_conflict` stays cheap):
  runtime      TFF execution contexts that leave no `worker_binary` behind.
  hparams      every method hyperparameter: default (the papers'), valid range, description.

TensorFlow's and TFF's log noise is off by default: import `tff_conflict` before TensorFlow and
the program prints only its own output. Set the environment variable `TFF_CONFLICT_VERBOSE=1` to
turn those logs back on (`tff_conflict/_quiet.py` says exactly what is changed).
"""

import importlib

from tff_conflict import _quiet

_quiet.install()

__version__ = '0.1.0'

_SUBMODULES = ('runtime', 'conflict', 'aggregators', 'losses', 'learning', 'data', 'evaluation',
               'hparams')


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f'{__name__}.{name}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_SUBMODULES))

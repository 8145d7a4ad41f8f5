"""tff_conflict: gradient-conflict methods for federated learning on TensorFlow Federated.

Submodules (imported lazily, so `import tff_conflict` stays cheap):
  runtime      TFF execution contexts that leave no `worker_binary` behind.
  hparams      every method hyperparameter: default (the papers'), valid range, description.
"""

import importlib

__version__ = '0.1.0'

_SUBMODULES = ('runtime', 'conflict', 'aggregators', 'losses', 'learning', 'data', 'evaluation',
               'hparams')


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f'{__name__}.{name}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_SUBMODULES))

"""tff_conflict: gradient-conflict methods for federated learning on TensorFlow Federated.
Submodules load lazily; importing the package changes nothing in the host program."""

import importlib

from tff_conflict._quiet import quiet

__version__ = '0.1.0'

_SUBMODULES = ('runtime', 'conflict', 'aggregators', 'losses', 'learning', 'data', 'evaluation',
               'hparams')

__all__ = ['quiet', *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f'{__name__}.{name}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_SUBMODULES))

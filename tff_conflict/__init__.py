"""tff_conflict: gradient-conflict methods for federated learning on TensorFlow Federated.
Submodules load lazily; importing the package changes nothing in the host program."""

import importlib

from tff_conflict._quiet import quiet

__version__ = '0.1.0'

_SUBMODULES = ('runtime', 'conflict', 'aggregators', 'losses', 'learning', 'data', 'evaluation',
               'hparams', 'models', 'simulation')

# The one error of bad arguments (naming the argument and the value) and its TypeError form.
_ERRORS = ('ArgumentError', 'ArgumentTypeError')

__all__ = ['quiet', *_ERRORS, *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f'{__name__}.{name}')
  if name in _ERRORS:
    return getattr(importlib.import_module(f'{__name__}._checks'), name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_ERRORS) + list(_SUBMODULES))

"""tff_conflict: gradient-conflict methods for federated learning on TensorFlow Federated.

Submodules are imported lazily: `conflict` (the server math on a stack of client updates),
`aggregators`, `losses`, `learning`, `data`, `evaluation`, `hparams`, `runtime`. Importing the
package changes nothing in the host program; `quiet()` turns TensorFlow's and TFF's log noise off.
See README.md and docs/.
"""

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

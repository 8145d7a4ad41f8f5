"""Execution backends: where a TFF learning process's rounds run, with no worker left behind
(docs/design.md, "Execution backends")."""

import importlib

from tff_conflict.runtime._errors import DataError
from tff_conflict.runtime.local import set_local_context
from tff_conflict.runtime.local import shutdown_workers
from tff_conflict.runtime.local import worker_pids
from tff_conflict.runtime.local import workers_with_environment
from tff_conflict.runtime.remote import parse_worker_addresses
from tff_conflict.runtime.remote import set_remote_context
from tff_conflict.runtime.remote import WorkerError

_LAZY = {'InProcessRunner': 'inprocess', 'make_runner': 'inprocess'}

__all__ = [
    'DataError',
    'InProcessRunner',
    'WorkerError',
    'make_runner',
    'parse_worker_addresses',
    'set_local_context',
    'set_remote_context',
    'shutdown_workers',
    'worker_pids',
    'workers_with_environment',
]


def __getattr__(name):
  if name in _LAZY:
    module = importlib.import_module(f'{__name__}.{_LAZY[name]}')
    return getattr(module, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(__all__)

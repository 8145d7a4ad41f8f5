"""Execution backends: where a TFF learning process's rounds run, with no worker left behind.

Public surface (the documented entry point for every binary, test and benchmark):

  set_local_context()        TFF's local C++ runtime (`worker_binary`), whose workers end with this
                             Python process however it ends (`local`). Call it first thing.
  shutdown_workers()         end this process's workers now (a later call starts a new one).
  worker_pids(), current_worker_pid()
                             the workers this process started that are still running.
  workers_with_environment(name, value)
                             running workers of any process whose environment holds name=value
                             (a child's workers, found by a token given in its environment).
  set_remote_context(addresses, *, rpc_timeout_s=600, connect_timeout_s=30)
                             TFF workers on other machines (`remote`), each started with
                             `python -m tff_conflict.runtime.worker --port=P`; several workers
                             split each round's clients. Their failures raise `WorkerError`.
  parse_worker_addresses(addresses)
                             validates `'host:port,...'`.
  InProcessRunner(process, *, num_threads=1, accumulation='buffered')
                             runs a learning process's rounds in this Python process from its
                             MapReduceForm graphs with TensorFlow: no `worker_binary`, and the
                             only backend that can use a GPU (`inprocess`).
  make_runner(process, kind) 'cpp' -> the process itself (the installed TFF context), 'inprocess'
                             -> an `InProcessRunner`. Both give `initialize()`,
                             `next(state, client_datasets)` and `get_model_weights(state)` with the
                             same result structures and types.

`InProcessRunner` and `make_runner` import TensorFlow Federated; they are loaded on first use so
that `import tff_conflict.runtime` stays cheap.
"""

import importlib

from tff_conflict.runtime.local import current_worker_pid
from tff_conflict.runtime.local import set_local_context
from tff_conflict.runtime.local import shutdown_workers
from tff_conflict.runtime.local import worker_pids
from tff_conflict.runtime.local import workers_with_environment
from tff_conflict.runtime.remote import parse_worker_addresses
from tff_conflict.runtime.remote import set_remote_context
from tff_conflict.runtime.remote import WorkerError

_LAZY = {'InProcessRunner': 'inprocess', 'make_runner': 'inprocess'}

__all__ = [
    'InProcessRunner',
    'WorkerError',
    'current_worker_pid',
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

"""TFF execution context on remote `worker_binary` processes (several machines), split by clients
(docs/design.md, "Execution backends").
"""

import logging
import re
from collections.abc import Sequence
from typing import Union

import grpc

from tff_conflict import _checks
from tff_conflict.runtime import local

_ADDRESS = re.compile(r'^(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$')
_GRPC_OPTIONS = [('grpc.max_message_length', -1), ('grpc.max_receive_message_length', -1),
                 ('grpc.max_send_message_length', -1)]


class WorkerError(RuntimeError):
  """A remote TFF worker failed, died, or did not answer in time."""


def parse_worker_addresses(addresses: Union[str, Sequence[str]]) -> list[str]:
  """`'h1:p1,h2:p2'` or a list of `'host:port'` -> a validated list of addresses.

  Raises:
    ValueError: naming the bad value, if empty, malformed, a port outside 1..65535 or repeated.
  """
  if isinstance(addresses, str):
    items = [a.strip() for a in addresses.split(',') if a.strip()]
  elif isinstance(addresses, Sequence):
    items = list(addresses)
  else:
    raise _checks.ArgumentError(argument='addresses', value=addresses, message=(
        f'addresses must be "host:port,..." or a list of "host:port", got '
        f'{addresses!r}'))
  if not items:
    raise _checks.ArgumentError(argument='addresses', value=addresses, message=(
        f'addresses must name at least one worker, got {addresses!r}'))
  for item in items:
    match = _ADDRESS.match(item) if isinstance(item, str) else None
    if match is None or not 1 <= int(match.group('port')) <= 65535:
      raise _checks.ArgumentError(argument='addresses', value=addresses, message=(
          f'addresses: each worker must be "host:port" with port 1..65535, got '
          f'{item!r}'))
  if len(set(items)) != len(items):
    raise _checks.ArgumentError(argument='addresses', value=addresses, message=(
        f'addresses: a worker is listed twice in {items!r}'))
  return items


def _make_stub_class():
  """`RemoteExecutorGrpcStub` whose RPCs have a deadline and fail with `WorkerError`."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import _compat  # pylint: disable=g-import-not-at-top

  class DeadlineStub(tff.framework.RemoteExecutorGrpcStub):
    """One worker's stub: bounded RPCs, errors named after the worker and not retried."""

    def __init__(self, channel, address, rpc_timeout_s):
      super().__init__(channel)
      self._address = address
      self._timeout = rpc_timeout_s

    def _call(self, method, request, quiet=False):
      try:
        return _compat.grpc_stub_method(self, method)(request, timeout=self._timeout)
      except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        details = e.details() if isinstance(e, grpc.Call) else str(e)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
          why = f'did not answer {method} within rpc_timeout_s={self._timeout} s'
        elif code == grpc.StatusCode.UNAVAILABLE:
          why = f'is unreachable or died during {method}'
        else:
          why = f'failed in {method}'
        message = (f'TFF worker {self._address} {why} '
                   f'({code.name if code else "error"}: {details})')
        if quiet:
          logging.debug('%s', message)
          return None
        raise WorkerError(message) from None

    def get_executor(self, request):
      return self._call('GetExecutor', request)

    def create_value(self, request):
      return self._call('CreateValue', request)

    def create_struct(self, request):
      return self._call('CreateStruct', request)

    def create_call(self, request):
      return self._call('CreateCall', request)

    def create_selection(self, request):
      return self._call('CreateSelection', request)

    def compute(self, request):
      return self._call('Compute', request)

    def dispose(self, request):
      return self._call('Dispose', request, quiet=True)

    def dispose_executor(self, request):
      return self._call('DisposeExecutor', request, quiet=True)

  return DeadlineStub


def _executor_factory(stub):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def stack_fn(cardinalities):
    if cardinalities.get(tff.CLIENTS) is None:  # as TFF's local factory: e.g. `initialize`
      cardinalities[tff.CLIENTS] = 0
    executor = tff.framework.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.ResourceManagingExecutorFactory(executor_stack_fn=stack_fn)


def create_remote_context(addresses: Union[str, Sequence[str]], *, rpc_timeout_s: float = 600.0,
                          connect_timeout_s: float = 30.0):
  """The TFF execution context for `addresses`; installs nothing.

  Several workers split each round's clients into contiguous shares and their partial aggregates
  are merged here in the order the workers finish. Every RPC has a deadline (`rpc_timeout_s`); a
  worker that dies, refuses or times out raises `WorkerError` naming it.

  Args:
    addresses: `'host:port,...'` or a list of `'host:port'`, one per running worker.
    rpc_timeout_s: deadline of every RPC (a round's `compute` on a worker included), seconds.
    connect_timeout_s: how long to wait for every worker to accept a connection, seconds.

  Raises:
    ValueError: for a bad argument.
    WorkerError: if a worker is not reachable within `connect_timeout_s`.
  """
  workers = parse_worker_addresses(addresses)
  _checks.check_positive('rpc_timeout_s', rpc_timeout_s)
  _checks.check_positive('connect_timeout_s', connect_timeout_s)
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import _compat  # pylint: disable=g-import-not-at-top
  _compat.check_versions()
  stub_class = _make_stub_class()
  stubs = []
  for address in workers:
    channel = grpc.insecure_channel(address, _GRPC_OPTIONS)
    try:
      grpc.channel_ready_future(channel).result(timeout=connect_timeout_s)
    except grpc.FutureTimeoutError:
      channel.close()
      raise WorkerError(f'TFF worker {address} is not reachable within connect_timeout_s='
                        f'{connect_timeout_s} s (start it with `python -m tff_conflict.runtime.worker '
                        f'--port=PORT` on that machine)') from None
    stubs.append(stub_class(channel, address, rpc_timeout_s))
  context_args = dict(compiler_fn=tff.backends.native.desugar_and_transform_to_native,
                      transform_args=tff.tensorflow.transform_args,
                      transform_result=tff.tensorflow.transform_result)
  if len(stubs) == 1:
    return tff.framework.SyncExecutionContext(executor_fn=_executor_factory(stubs[0]),
                                              **context_args)
  async_contexts = [tff.framework.AsyncExecutionContext(executor_fn=_executor_factory(s),
                                                        **context_args) for s in stubs]
  return tff.backends.native.create_mergeable_comp_execution_context(async_contexts)


def set_remote_context(addresses: Union[str, Sequence[str]], *, rpc_timeout_s: float = 600.0,
                       connect_timeout_s: float = 30.0) -> None:
  """Installs a TFF context on remote workers (`create_remote_context`) as TFF's default context.

  Any local `worker_binary` started by an earlier context is ended (it can no longer be reached);
  `tff_conflict.runtime.set_local_context()` switches back.

  Args:
    addresses: `'host:port,...'` or a list of `'host:port'`, one per running worker
      (`python -m tff_conflict.runtime.worker --port=P`); several workers split each round's
      clients.
    rpc_timeout_s: deadline of every RPC to a worker, seconds.
    connect_timeout_s: how long to wait for the workers to be reachable, seconds.

  Raises:
    ValueError: for a bad argument.
    WorkerError: if a worker is unreachable (also raised later, by a federated call, when a
      worker dies or does not answer in time).
  """
  context = create_remote_context(addresses, rpc_timeout_s=rpc_timeout_s,
                                  connect_timeout_s=connect_timeout_s)
  local.install_exit_hooks()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.framework.set_default_context(context)
  import gc  # pylint: disable=g-import-not-at-top
  gc.collect()
  local.shutdown_workers()

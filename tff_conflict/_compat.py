"""The TensorFlow, TFF and Keras internals this library needs that have no public name, in one
place (tested with TF 2.14.1 and TFF 0.87.0); every other module uses public names only."""

import gc
import subprocess
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

# TF's eager context: no public call registers a FunctionDef or a C function with it, removes one,
# or reads the function call options (Grappler's config) of the calls a thread makes.
from tensorflow.python.eager import context
# Op definitions by op type (is an op stateful, its output types): no public registry.
from tensorflow.python.framework import op_def_registry
# TF's C API: imports a GraphDef and turns it into a function without re-creating each op in
# Python (the public `tf.compat.v1.wrap_function` + `prune` lift the graph op by op).
from tensorflow.python.client import pywrap_tf_session as c_api
from tensorflow.python.framework import c_api_util
# TFF's local C++ runtime starts `worker_binary` with this module's `subprocess.Popen` and offers
# no hook to record or supervise the process it starts.
from tensorflow_federated.python.core.impl.executor_stacks import executor_factory

TESTED_VERSIONS = {'tensorflow': '2.14.1', 'tensorflow_federated': '0.87.0'}

_checked = False
_check_lock = threading.Lock()


def check_versions() -> None:
  """Warns once per process, in one line, if TF/TFF differ from the versions tested here."""
  global _checked
  with _check_lock:
    if _checked:
      return
    _checked = True
  installed = {'tensorflow': tf.__version__, 'tensorflow_federated': tff.__version__}
  if installed != TESTED_VERSIONS:
    warnings.warn(
        f'tff_conflict was tested with TF {TESTED_VERSIONS["tensorflow"]} and TFF '
        f'{TESTED_VERSIONS["tensorflow_federated"]}; installed are TF '
        f'{installed["tensorflow"]} and TFF {installed["tensorflow_federated"]}: its runtime uses '
        'TF/TFF internals (tff_conflict/_compat.py) that may have changed.', RuntimeWarning,
        stacklevel=3)


# TensorFlow: functions of the eager context.


def op_def(op_type: str) -> Any:
  """The `OpDef` of a registered op type, or None."""
  return op_def_registry.get(op_type)


def has_function(name: str) -> bool:
  return context.context().has_function(name)


def add_function_def(function_def: Any) -> None:
  context.context().add_function_def(function_def)


def remove_functions(names: list[str]) -> None:
  """Removes the named functions from the eager context (quietly at interpreter shutdown)."""
  try:
    ctx = context.context()
    for name in names:
      if ctx.has_function(name):
        ctx.remove_function(name)
  except Exception:  # pylint: disable=broad-except
    pass


def register_graph_function(graph_def: Any, name: str, inputs: list[tuple[str, int]],
                            outputs: list[tuple[str, int]], effect: str | None) -> None:
  """Registers `graph_def`'s nodes as one function `name` of the eager context.

  `inputs`/`outputs` are (node name, output index) pairs; `effect` names an op that the function
  runs for its effect (a control output). The graph's library functions must be registered first.
  """
  graph = tf.Graph()
  options = c_api.TF_NewImportGraphDefOptions()
  try:
    c_api.TF_ImportGraphDefOptionsSetPrefix(options, '')
    for node, index in inputs + outputs:
      c_api.TF_ImportGraphDefOptionsAddReturnOutput(options, node, index)
    if effect:
      c_api.TF_ImportGraphDefOptionsAddReturnOperation(options, effect)
    with c_api_util.tf_buffer(graph_def.SerializeToString()) as serialized:
      with graph._c_graph.get() as c_graph:  # pylint: disable=protected-access
        results = c_api.TF_GraphImportGraphDefWithResults(c_graph, serialized, options)
    try:
      tensors = c_api.TF_ImportGraphDefResultsReturnOutputs(results)
      effects = c_api.TF_ImportGraphDefResultsReturnOperations(results)
    finally:
      c_api.TF_DeleteImportGraphDefResults(results)
  finally:
    c_api.TF_DeleteImportGraphDefOptions(options)
  with graph._c_graph.get() as c_graph:  # pylint: disable=protected-access
    function = c_api.TF_GraphToFunction_wrapper(
        c_graph, name, False, None, tensors[:len(inputs)], tensors[len(inputs):], [],
        list(effects), [f'effect_{i}'.encode() for i in range(len(effects))], None, '')
  try:
    context.context().add_c_function(function)
  finally:
    c_api.TF_DeleteFunction(function)


def function_call_config() -> bytes:
  """The serialized `ConfigProto` of this thread's eager function calls (TF's session options)."""
  return context.context().function_call_options.config_proto_serialized


# TFF's local C++ runtime: its `worker_binary` processes.


def route_worker_popen(popen_class: type) -> None:
  """TFF's local runtime starts `worker_binary` with `popen_class` (idempotent). Needed because
  TFF ends its worker only from `ServiceManager.__del__`, which fails at interpreter exit."""
  current = getattr(executor_factory, 'subprocess', None)
  if isinstance(current, types.SimpleNamespace) and current.Popen is popen_class:
    return
  shim = types.SimpleNamespace(**{k: getattr(subprocess, k) for k in dir(subprocess)
                                  if not k.startswith('__')})
  shim.Popen = popen_class
  executor_factory.subprocess = shim


def disarm_service_managers(end_process: Callable[[subprocess.Popen], None]) -> None:
  """For each live `ServiceManager` of TFF's local runtime: `end_process(its worker)`, then its
  `__del__` made a no-op (run during interpreter teardown, when `subprocess` is None, it prints a
  traceback). TFF exposes neither the managers nor their processes."""
  for obj in gc.get_objects():
    cls = type(obj)
    if (cls.__name__ == 'ServiceManager' and cls.__module__ == executor_factory.__name__
        and '__del__' in cls.__dict__):
      process = getattr(obj, '_process', None)
      if isinstance(process, subprocess.Popen):
        end_process(process)
      cls.__del__ = lambda self: None


# TFF's remote executor stub: no public call takes a per-RPC deadline.


def grpc_stub_method(stub: Any, method: str) -> Callable[..., Any]:
  """The raw gRPC method `method` of a `tff.framework.RemoteExecutorGrpcStub` (its `_stub`),
  which takes a `timeout=`; the public methods retry without a deadline."""
  return getattr(stub._stub, method)  # pylint: disable=protected-access


# Keras: no public predicate for a functional model or a compiled one.


def keras_is_functional(model: Any) -> bool:
  """Whether a `tf.keras.Model` is a graph network (functional or Sequential)."""
  return bool(getattr(model, '_is_graph_network', False))


def keras_is_compiled(model: Any) -> bool:
  """Whether `model.compile` was called (also for a compile without an optimizer)."""
  return bool(getattr(model, '_is_compiled', False))

"""TensorFlow's one-time instantiation of stamped functions, done ahead on a background thread.

TensorFlow prepares an eager function (placement, graph passes, Grappler where enabled, kernels)
the first time it is called, not when it is registered. For the components of a round that is a
fixed cost of tens to hundreds of milliseconds each (BENCHMARKS.md, "Cold start"), paid one after
the other on the first round. `Warmup` calls such functions once, in order, on a thread of its
own, while the caller goes on with other work (the runner's construction and its own first calls);
TensorFlow releases the GIL while it instantiates and runs a function, so on a machine with a
spare core the two overlap. `wait(name)` blocks until the call named `name` has finished (or
failed), so that no function is ever run by the warm-up and by its owner at the same time.

A warm-up call runs the function for real, on placeholder inputs (a round without clients, a
client with one empty batch), and its outputs are dropped. It is therefore only made for
functions whose calls cannot change what later calls compute (`replayable`): every stateful op in
the graph and in its function library is one whose effect does not outlast the call. Variables
qualify because a stamped computation initializes all of its variables at every call
(`_tf_stamp`), iterators because each call creates its own. A random op does not (its kernel keeps
its generator state between calls, so an extra call would shift every later draw), nor does a
print (an extra line), a queue, a table or a mutex. Failures of a warm-up call are recorded, not
raised: the owner's own call instantiates the function again and reports any error itself.
"""

import atexit
import itertools
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tensorflow.python.eager import context
from tensorflow.python.framework import op_def_registry

from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.types import computation_types
from tensorflow_federated.python.core.impl.utils import tensorflow_utils

# Stateful op types whose effects end with the call that runs them (module docstring): variables
# (re-initialized by every call of a stamped computation), the optimizers' in-place updates of
# them, in-memory datasets and iterators over the call's own datasets, assertions, and calls and
# control flow (their bodies are checked as functions of the library). Not: random ops, shuffles,
# datasets that read files or call Python, prints, queues, tables, mutexes.
_REPLAYABLE_STATEFUL_OPS = frozenset({
    'VarHandleOp', 'ReadVariableOp', 'AssignVariableOp', 'AssignAddVariableOp',
    'AssignSubVariableOp', 'VarIsInitializedOp', 'VariableShape', 'DestroyResourceOp',
    'ResourceGather', 'ResourceGatherNd', 'ResourceStridedSliceAssign',
    'AnonymousIterator', 'AnonymousIteratorV2', 'AnonymousIteratorV3', 'MakeIterator',
    'IteratorGetNext', 'IteratorGetNextSync', 'IteratorGetNextAsOptional', 'DeleteIterator',
    'ReduceDataset', 'DatasetToSingleElement',
    # Datasets from in-memory values (TensorFlow marks them stateful; they read nothing else).
    'TensorDataset', 'TensorSliceDataset', 'SparseTensorSliceDataset', 'RangeDataset',
    'ListDataset',
    'Assert',
    'StatefulPartitionedCall', 'PartitionedCall', 'If', 'While', 'Case',
})
_REPLAYABLE_PREFIXES = ('ResourceApply', 'ResourceSparseApply', 'ResourceScatter')


def _replayable_op(op_type: str) -> bool:
  if op_type in _REPLAYABLE_STATEFUL_OPS or op_type.startswith(_REPLAYABLE_PREFIXES):
    return True
  op_def = op_def_registry.get(op_type)
  return op_def is not None and not op_def.is_stateful


def replayable(graph_def: Any) -> bool:
  """Whether an extra call of a stamped computation of `graph_def` leaves later calls' results
  unchanged: every op of the graph and of its library is stateless, a call of a library function,
  or in the list of stateful ops whose effect ends with the call (module docstring)."""
  functions = {f.signature.name for f in graph_def.library.function}
  nodes = itertools.chain(graph_def.node,
                          *(f.node_def for f in graph_def.library.function))
  return all(node.op in functions or _replayable_op(node.op) for node in nodes)


def zeros(specs: Sequence[tf.TensorSpec]) -> list[tf.Tensor]:
  """Zero tensors of `specs` (an unknown dimension becomes 0)."""
  out = []
  for spec in specs:
    if spec.dtype == tf.variant or spec.shape.rank is None:
      raise ValueError(f'no placeholder value for {spec}')
    out.append(tf.zeros([d if d is not None else 0 for d in spec.shape.as_list()], spec.dtype))
  return out


def placeholder_client_data(type_spec: Any) -> list[tf.Tensor]:
  """Flat leaves of a client's data of TFF type `type_spec` without examples: for each sequence
  a dataset of one element whose unknown dimensions are 0 (an empty batch, so that the body of
  the client's training loop runs once and TensorFlow creates its kernels), as a variant tensor;
  zeros for each tensor."""
  if isinstance(type_spec, computation_types.SequenceType):
    element = tensorflow_utils._make_whimsy_element_for_type_spec(type_spec.element)  # pylint: disable=protected-access
    dataset = tensorflow_utils.make_data_set_from_elements(None, [element], type_spec.element)
    return [tf.data.experimental.to_variant(dataset)]
  if isinstance(type_spec, computation_types.TensorType):
    return zeros([tf.TensorSpec(type_spec.shape, tf.dtypes.as_dtype(type_spec.dtype))])
  if isinstance(type_spec, computation_types.StructType):
    return [leaf for _, element in structure.iter_elements(type_spec)
            for leaf in placeholder_client_data(element)]
  raise ValueError(f'no placeholder client data for {type_spec}')


# Warm-ups whose thread may still run: joined at exit, so that no TensorFlow call is still running
# on a daemon thread while the interpreter and TensorFlow shut down.
_live: 'weakref.WeakSet[Warmup]' = weakref.WeakSet()
_EXIT_JOIN_SECONDS = 60.0


@atexit.register
def _join_live_warmups() -> None:
  for warmup in list(_live):
    warmup.close()
    warmup.join(_EXIT_JOIN_SECONDS)


class Warmup:
  """Runs the calls given to `add(name, fn)`, in that order, on a daemon thread of its own.

  The thread runs with the device scope and function call options of the thread that built this
  object, so that the functions it prepares are the ones that thread's calls will use. It ends
  once `close()` has been called and every call added before has run. `errors` maps the name of
  each call that raised to its exception.
  """

  def __init__(self):
    self._done: dict[str, threading.Event] = {}
    self._queue: 'queue.SimpleQueue[tuple[str, Callable[[], Any]] | None]' = queue.SimpleQueue()
    self.errors: dict[str, BaseException] = {}
    self._closed = False
    ctx = context.context()
    self._device_name = ctx.device_name
    self._call_options = ctx.function_call_options
    self._thread = threading.Thread(target=self._run, name='tff_conflict_warmup', daemon=True)
    self._thread.start()
    _live.add(self)

  def add(self, name: str, fn: Callable[[], Any]) -> None:
    """Queues `fn()` under `name` (a name is used once)."""
    if self._closed:
      raise ValueError(f'warm-up call {name!r} added after close()')
    if name in self._done:
      raise ValueError(f'warm-up call {name!r} was already added')
    self._done[name] = threading.Event()
    self._queue.put((name, fn))

  def close(self) -> None:
    """No more calls: the thread ends after the queued ones."""
    if not self._closed:
      self._closed = True
      self._queue.put(None)

  def _run(self) -> None:
    ctx = context.context()
    ctx.function_call_options = self._call_options
    with tf.device(self._device_name or None):
      while (item := self._queue.get()) is not None:
        name, fn = item
        try:
          fn()
        except Exception as e:  # pylint: disable=broad-except
          self.errors[name] = e
        finally:
          del fn, item
          self._done[name].set()

  @property
  def names(self) -> tuple[str, ...]:
    """The names of the calls added, in order."""
    return tuple(self._done)

  def wait(self, name: str) -> None:
    """Returns once the call `name` has finished (at once if no call has that name)."""
    event = self._done.get(name)
    if event is None:
      return
    while not event.wait(0.05):
      if not self._thread.is_alive():  # ended without running it (e.g. interpreter shutdown)
        return

  def join(self, timeout: float | None = None) -> None:
    """Returns once the thread has ended (after `close()`), or after `timeout` seconds."""
    self._thread.join(timeout)

"""Runs a TFF learning process's rounds in this Python process from its MapReduceForm (no
`worker_binary`, GPU-capable; docs/design.md, "The in-process runner")."""
import collections
import concurrent.futures
import functools
import queue
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import _compat
from tff_conflict.runtime import _errors
from tff_conflict.runtime import _merge_blocks
from tff_conflict.runtime import _row_buffer
from tff_conflict.runtime import _tf_stamp

_ACCUMULATIONS = ('buffered', 'tree', 'sequential')


def _compile_options() -> tf.compat.v1.ConfigProto:
  """TFF's MapReduceForm compiler with Grappler bypassed: TensorFlow optimizes each stamped
  function when it first runs, so TFF's pass would only add build time."""
  config = tf.compat.v1.ConfigProto()
  config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


def _plain_options() -> tf.data.Options:
  options = tf.data.Options()
  options.experimental_optimization.apply_default_optimizations = False
  options.autotune.enabled = False
  return options


_PLAIN_OPTIONS = _plain_options()


def _without_autotuning(value: Any) -> Any:
  """A client's dataset with tf.data's default static optimizations and autotuning off (other
  leaves as they are). Both leave a dataset's elements unchanged; for a client's short pipeline
  they cost more than they save: rewriting a new dataset's graph when its first iterator is made
  (about 1.5 ms a client) and an autotuning thread per iterator."""
  if isinstance(value, tf.data.Dataset):
    return value.with_options(_PLAIN_OPTIONS)
  return value


class _ClientStep:
  """`work` for one client, or `work` followed by `accumulate`, as one TensorFlow call.

  `work_only(data + client_input)` gives `work`'s flat outputs (update, then the secure parts);
  `accumulated(data + client_input + accumulator, accumulate)` gives `accumulate(accumulator,
  update)` followed by the secure parts, without the update leaving the graph (traced at its
  first call, always with the runner's stamped `accumulate`). Each step holds its own stamped copy
  of `work` (its own variables), so that steps can run in parallel threads.
  """

  def __init__(self, work_comp: Any, num_update: int):
    self._work = _tf_stamp.StampedComputation(work_comp, 'work')
    self._num_update = num_update
    self._fused = None

  @property
  def input_specs(self) -> list[tf.TensorSpec]:
    return self._work.input_specs

  def work_only(self, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
    return self._work.call_tensors(tensors)

  def accumulated(self, tensors: list[tf.Tensor],
                  accumulate: _tf_stamp.StampedComputation) -> list[tf.Tensor]:
    if self._fused is None:
      self._fused = self._trace_fused(accumulate)
    return self._fused(tensors)

  def _trace_fused(self, accumulate: _tf_stamp.StampedComputation) -> _tf_stamp.TracedFunction:
    num_work = len(self._work.input_specs)
    num_acc = len(accumulate.input_specs) - self._num_update

    def step(*tensors):
      outputs = self._work.call_tensors(list(tensors[:num_work]))
      update, secure = outputs[:self._num_update], outputs[self._num_update:]
      accumulator = accumulate.call_tensors(list(tensors[num_work:]) + update)
      return accumulator + secure

    specs = self._work.input_specs + accumulate.input_specs[:num_acc]
    return _tf_stamp.TracedFunction(step, specs, optimize=True)


class InProcessRunner:
  """A learning process's `initialize`/`next` run in-process from its `MapReduceForm`.

  Usage (a drop-in replacement for the process in a training loop):

      runner = InProcessRunner(tff.learning.algorithms.build_weighted_fed_avg(...))
      state = runner.initialize()
      for _ in range(rounds):
        output = runner.next(state, client_datasets)   # LearningProcessOutput(state, metrics)
        state = output.state
      weights = runner.get_model_weights(state)

  Results equal TFF's C++ runtime's to float round-off (tests/runtime/test_inprocess.py).
  """

  def __init__(self, learning_process: Any, *, num_threads: int = 1,
               accumulation: str = 'buffered'):
    """Compiles `learning_process.next` to MapReduceForm and stamps its components.

    Args:
      learning_process: a `tff.learning.templates.LearningProcess` or any
        `tff.templates.IterativeProcess` whose `next` takes `(state@SERVER, data@CLIENTS)` and
        returns `(state@SERVER, output@SERVER)`.
      num_threads: how many clients' `work` run at once (>= 1).
      accumulation: 'buffered' (default), 'tree' or 'sequential' (TFF's order); docs/design.md,
        "Aggregation order".

    Raises:
      ValueError: for a bad argument, or if `next`/`initialize` cannot be compiled to
        MapReduceForm (the message says why).
    """
    num_threads = _checks.check_int('num_threads', num_threads, minimum=1)
    _checks.check_choice('accumulation', accumulation, _ACCUMULATIONS)
    for attr in ('initialize', 'next'):
      if not hasattr(learning_process, attr):
        raise _checks.ArgumentError(argument='learning_process', value=learning_process, message=(
            f'learning_process must have `initialize` and `next`, got '
            f'{type(learning_process).__name__} without `{attr}`'))
    parameter = getattr(getattr(learning_process.next, 'type_signature', None), 'parameter', None)
    if isinstance(parameter, tff.types.StructType) and len(parameter) == 2:
      data_type = parameter[1]
      if (not isinstance(data_type, tff.types.FederatedType)
          or data_type.placement is not tff.CLIENTS):
        raise _checks.ArgumentError(argument='learning_process', value=learning_process, message=(
            f'learning_process.next must take client data placed at CLIENTS, got '
            f'{data_type}'))
    _compat.check_versions()
    self._process = learning_process
    self._num_threads = num_threads
    try:
      mrf = tff.backends.mapreduce.get_map_reduce_form_for_computation(
          learning_process.next, _compile_options())
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError('InProcessRunner: learning_process.next cannot be compiled to '
                       f'MapReduceForm ({type(e).__name__}: {e})') from e
    try:
      init_comp = tff.backends.mapreduce.get_state_initialization_computation(
          learning_process.initialize, _compile_options())
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError('InProcessRunner: learning_process.initialize cannot be compiled to a '
                       f'TensorFlow computation ({type(e).__name__}: {e})') from e
    self._mrf = mrf
    next_parameter = learning_process.next.type_signature.parameter
    self._state_type, self._data_type = next_parameter[0], next_parameter[1]
    self._initialize_type = learning_process.initialize.type_signature.result
    self._result_type = learning_process.next.type_signature.result

    # The accumulator's declared type (`merge`'s, with `[None, ...]` for gathered stacks). A chain
    # accumulate(acc, update_k) over the clients (TFF's order) where nothing can grow with the
    # number of clients; else single-client accumulators combined by `merge` (docs/design.md, "Aggregation order").
    self._accumulator_specs = _tf_stamp.flat_specs(mrf.merge.type_signature.parameter[0])
    growing = any(not s.shape.is_fully_defined() for s in self._accumulator_specs)
    self._chain = accumulation == 'sequential' or (accumulation == 'buffered' and not growing)

    # Grappler (when a function first runs) only for `work`, where the model trains; the
    # server-side computations run as TFF built them.
    self._work_comp = mrf.work
    self._data_specs = _tf_stamp.flat_specs(mrf.work.type_signature.parameter[0])
    self._work_sizes = [len(_tf_stamp.flat_specs(mrf.work.type_signature.result[i]))
                        for i in range(4)]
    self._steps: 'queue.SimpleQueue[_ClientStep]' = queue.SimpleQueue()
    self._steps.put(self._new_step())
    stamp = functools.partial(_tf_stamp.StampedComputation, optimize=False)
    self._zero = stamp(mrf.zero, 'zero')
    self._accumulate = stamp(mrf.accumulate, 'accumulate')
    self._update = stamp(mrf.update, 'update')
    self._prepare = stamp(mrf.prepare, 'prepare')
    self._merge = None if self._chain else stamp(mrf.merge, 'merge')
    self._report = stamp(mrf.report, 'report')
    self._init = stamp(init_comp, 'initialize')
    self._secure = mrf.securely_aggregates_tensors
    if self._secure:
      self._modulus = [np.asarray(t) for t in stamp(
          mrf.secure_modular_sum_modulus, 'secure_modular_sum_modulus')([])]
    self._buffered_leaves: list[int] = []
    self._buffer_row_shapes: dict[int, tuple[int, ...]] = {}
    if accumulation == 'buffered' and growing:
      self._buffered_leaves, self._buffer_row_shapes = self._find_buffered_leaves()
    self._merge_block = (None if self._chain
                         else _merge_blocks.MergeBlocks(self._merge, self._accumulator_specs))
    self._model_weight_fns: dict[str, _tf_stamp.StampedComputation] = {}
    self._cached_state: tuple[list[Any], list[tf.Tensor]] | None = None
    self._num_state_leaves = len(_tf_stamp.flat_specs(self._state_type.member))

  def _new_step(self) -> _ClientStep:
    return _ClientStep(self._work_comp, self._work_sizes[0])

  def _find_buffered_leaves(self) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    """`_row_buffer.concatenated_leaves` on three made-up single-client accumulators, and the
    row shape of each buffered leaf. Not made (no buffering: 'tree') when an extra call of
    `zero`, `accumulate` or `merge` could change later results (`replayable`)."""
    if not (self._zero.replayable and self._accumulate.replayable and self._merge.replayable):
      return [], {}
    zero = self._zero([])
    update_specs = self._accumulate.input_specs[len(self._accumulator_specs):]
    rng = np.random.default_rng(0)
    try:
      singles = [self._accumulate(zero + _row_buffer.sample_update(update_specs, rng))
                 for _ in range(3)]
    except Exception:  # pylint: disable=broad-except
      return [], {}  # e.g. an update leaf of unknown shape: no buffering ('tree')
    leaves = _row_buffer.concatenated_leaves(self._accumulator_specs, zero, self._merge, singles)
    return leaves, _row_buffer.row_shapes(leaves, singles)

  @property
  def map_reduce_form(self) -> Any:
    """The `tff.backends.mapreduce.MapReduceForm` this runner executes."""
    return self._mrf

  @property
  def buffered_leaves(self) -> tuple[int, ...]:
    """Flat indices of the accumulator leaves gathered in one buffer ('buffered'; else empty)."""
    return tuple(self._buffered_leaves)

  def initialize(self) -> Any:
    """The initial server state, as `learning_process.initialize()` returns it."""
    flat = self._init([])
    return self._to_python(flat, self._initialize_type, remember_state=True)

  def next(self, state: Any, client_data: Sequence[Any]) -> Any:
    """One round: `learning_process.next(state, client_data)`, run in this process.

    Raises `tff_conflict.runtime.DataError` (one line) when a check on a client's data fails,
    e.g. a label outside `[0, num_classes)`; see `_next` for the rest.
    """
    return _errors.translating(self._next)(state, client_data)

  def _next(self, state: Any, client_data: Sequence[Any]) -> Any:
    """One round: `learning_process.next(state, client_data)`, run in this process.

    Args:
      state: the server state (as returned by `initialize` or a previous `next`, from this runner
        or from TFF's runtime).
      client_data: one `tf.data.Dataset` per participating client.

    Returns:
      What `learning_process.next` returns (e.g. `LearningProcessOutput(state, metrics)`), with
      numpy leaves.
    """
    if isinstance(client_data, (str, bytes, tf.data.Dataset)) or not isinstance(
        client_data, Sequence):
      raise _checks.ArgumentError(argument='client_data', value=client_data, message=(
          'client_data must be a list of tf.data.Dataset (one per client), got '
          f'{type(client_data).__name__}'))
    member_type = self._data_type.member
    data_specs = self._data_specs
    flat_clients = []
    for k, data in enumerate(client_data):
      leaves = _tf_stamp.flatten_value(data, member_type)
      for leaf in leaves:
        if not isinstance(leaf, tf.data.Dataset) and isinstance(
            member_type, tff.types.SequenceType):
          raise _checks.ArgumentError(argument=f'client_data[{k}]', value=data, message=(
              f'client_data[{k}] must be a tf.data.Dataset, got '
              f'{type(leaf).__name__}'))
      flat_clients.append([_tf_stamp.to_tensor(_without_autotuning(v), s)
                           for v, s in zip(leaves, data_specs)])
    state_tensors = self._state_tensors(state)
    client_input = self._prepare.call_tensors(state_tensors)
    aggregate, secure_sums = self._aggregate(flat_clients, client_input)
    report = self._report.call_tensors(aggregate)
    outputs = self._update.call_tensors(state_tensors + report + secure_sums)
    return self._to_python(outputs, self._result_type, remember_state=True)

  def get_model_weights(self, state: Any) -> Any:
    """`learning_process.get_model_weights(state)`, run in this process."""
    return self._call_tf('get_model_weights', state)

  def set_model_weights(self, state: Any, model_weights: Any) -> Any:
    """`learning_process.set_model_weights(state, model_weights)`, run in this process."""
    return self._call_tf('set_model_weights', state, model_weights)

  def get_hparams(self, state: Any) -> Any:
    """`learning_process.get_hparams(state)`, run in this process."""
    return self._call_tf('get_hparams', state)

  def set_hparams(self, state: Any, hparams: Any) -> Any:
    """`learning_process.set_hparams(state, hparams)`, run in this process."""
    return self._call_tf('set_hparams', state, hparams)

  # Internals.

  def _call_tf(self, name: str, *args: Any) -> Any:
    fn = getattr(self._process, name, None)
    if fn is None:
      raise ValueError(f'learning_process has no `{name}`')
    if name not in self._model_weight_fns:
      self._model_weight_fns[name] = _tf_stamp.StampedComputation(fn, name)
    stamped = self._model_weight_fns[name]
    value = args[0] if len(args) == 1 else args
    flat = _tf_stamp.flatten_value(value, fn.type_signature.parameter)
    return _tf_stamp.pack_value([_tf_stamp.to_numpy(t) for t in stamped(flat)],
                                fn.type_signature.result)

  def _state_tensors(self, state: Any) -> list[tf.Tensor]:
    leaves = _tf_stamp.flatten_value(state, self._state_type.member)
    cached = self._cached_state
    if cached is not None and len(cached[0]) == len(leaves) and all(
        a is b for a, b in zip(cached[0], leaves)):
      return cached[1]
    specs = self._prepare.input_specs
    return [_tf_stamp.to_tensor(v, s) for v, s in zip(leaves, specs)]

  def _to_python(self, flat: list[tf.Tensor], type_spec: Any, remember_state: bool) -> Any:
    leaves = [_tf_stamp.to_numpy(t) for t in flat]
    if remember_state:
      n = self._num_state_leaves
      self._cached_state = (leaves[:n], list(flat[:n]))
    return _tf_stamp.pack_value(leaves, type_spec)

  def _with_step(self, method: str, tensors: list[tf.Tensor], *args: Any) -> list[tf.Tensor]:
    try:
      step = self._steps.get_nowait()
    except queue.Empty:  # another thread holds every step: stamp one more copy of `work`
      step = self._new_step()
    try:
      return getattr(step, method)(tensors, *args)
    finally:
      self._steps.put(step)

  def _client_results(self, flat_clients, client_input):
    """Yields each client's `work` outputs in client order (in parallel if num_threads > 1)."""
    run = lambda data: self._with_step('work_only', data + client_input)
    if self._num_threads == 1 or len(flat_clients) <= 1:
      for flat_data in flat_clients:
        yield run(flat_data)
      return
    window = 2 * self._num_threads  # bounds how many client updates are alive at once
    with concurrent.futures.ThreadPoolExecutor(self._num_threads) as pool:
      pending = collections.deque()
      clients = iter(flat_clients)
      for flat_data in clients:
        pending.append(pool.submit(run, flat_data))
        if len(pending) >= window:
          break
      while pending:
        result = pending.popleft().result()
        next_data = next(clients, None)
        if next_data is not None:
          pending.append(pool.submit(run, next_data))
        yield result
        del result

  def _chain_results(self, flat_clients, client_input, zero):
    """The chain `acc = accumulate(acc, update_k)` (TFF's order); yields each client's secure
    parts and finally returns the accumulator. One TensorFlow call per client (fused `work` and
    `accumulate`) with one thread; with more, `work` runs in parallel and `accumulate` here."""
    acc = zero
    n_update = self._work_sizes[0]
    n_acc = len(self._accumulator_specs)
    if self._num_threads == 1:
      for flat_data in flat_clients:
        outputs = self._with_step('accumulated', flat_data + client_input + acc,
                                  self._accumulate)
        acc = outputs[:n_acc]
        yield outputs[n_acc:]
      return acc
    for outputs in self._client_results(flat_clients, client_input):
      acc = self._accumulate.call_tensors(acc + outputs[:n_update])
      yield outputs[n_update:]
    return acc

  def _single_results(self, flat_clients, client_input, zero):
    """Yields each client's `accumulate(zero, update_k)` and secure parts, in client order: one
    TensorFlow call per client (fused `work` and `accumulate`) with one thread; with more,
    `work` runs in parallel and `accumulate` here."""
    n_update = self._work_sizes[0]
    n_acc = len(self._accumulator_specs)
    if self._num_threads == 1:
      for flat_data in flat_clients:
        outputs = self._with_step('accumulated', flat_data + client_input + zero,
                                  self._accumulate)
        yield outputs[:n_acc], outputs[n_acc:]
      return
    for outputs in self._client_results(flat_clients, client_input):
      yield self._accumulate.call_tensors(zero + outputs[:n_update]), outputs[n_update:]

  def _aggregate(self, flat_clients, client_input):
    """federated_aggregate (and the secure sums) over the clients' `work` outputs."""
    n_update, n_bits, n_max, n_mod = self._work_sizes
    zero = self._zero.call_tensors([])
    secure_totals = None
    if self._chain:
      chain = self._chain_results(flat_clients, client_input, zero)
      while True:
        try:
          secure = next(chain)
        except StopIteration as done:
          acc = done.value
          break
        if self._secure:
          secure_totals = self._add_secure(secure_totals, secure)
    else:
      buffers = {}
      if self._buffered_leaves:
        specs = self._accumulator_specs
        buffers = {i: _row_buffer.RowBuffer(self._buffer_row_shapes[i], specs[i].dtype,
                                            len(flat_clients))
                   for i in self._buffered_leaves}
      stack: list[tuple[int, list[tf.Tensor]]] = []  # (number of clients, accumulator)
      block: list[list[tf.Tensor]] = []  # singles not yet merged (buffered: their rows are out)
      for single, secure in self._single_results(flat_clients, client_input, zero):
        if self._secure:
          secure_totals = self._add_secure(secure_totals, secure)
        for i, buffer in buffers.items():  # rows go to the buffer; the merges see no rows
          buffer.append(single[i])
          single[i] = zero[i]
        if not buffers:
          _merge_blocks.push(stack, 1, single, self._merge)
          continue
        block.append(single)
        del single
        if len(block) == _merge_blocks.BLOCK:
          for count, item in self._merge_block(block):
            _merge_blocks.push(stack, count, item, self._merge)
          block = []
      if block:
        for count, item in self._merge_block(block):
          _merge_blocks.push(stack, count, item, self._merge)
      acc = zero
      if stack:
        _, acc = stack.pop()
        while stack:
          _, prev = stack.pop()
          acc = self._merge.call_tensors(prev + acc)
      if buffers:
        acc = list(acc)
        for i, buffer in buffers.items():
          acc[i] = buffer.to_tensor() if buffer.size else zero[i]
    secure_sums = self._finish_secure(secure_totals, (n_bits, n_max, n_mod))
    return acc, secure_sums

  def _add_secure(self, totals, secure):
    values = [np.asarray(t) for t in secure]
    if totals is None:
      return [v.astype(np.int64) if np.issubdtype(v.dtype, np.integer) else v for v in values]
    return [a + b for a, b in zip(totals, values)]

  def _finish_secure(self, totals, sizes):
    n_bits, n_max, n_mod = sizes
    if not self._secure:
      return []  # all three secure parts are empty structures
    work_result = self._mrf.work.type_signature.result
    specs = [s for i in (1, 2, 3) for s in _tf_stamp.flat_specs(work_result[i])]
    if totals is None:  # no clients: sums are zeros
      totals = [np.zeros(s.shape, s.dtype.as_numpy_dtype) for s in specs]
    mod_start = n_bits + n_max
    out = []
    for i, (total, spec) in enumerate(zip(totals, specs)):
      if i >= mod_start:
        total = np.mod(total, self._modulus[i - mod_start])
      out.append(tf.convert_to_tensor(np.asarray(total).astype(spec.dtype.as_numpy_dtype)))
    assert len(out) == n_bits + n_max + n_mod
    return out


def make_runner(learning_process: Any, kind: str = 'cpp', **kwargs: Any) -> Any:
  """Returns an object with `initialize()`, `next(state, data)`, `get_model_weights(state)`,
  `set_model_weights(state, weights)`, `get_hparams(state)` and `set_hparams(state, hparams)`.

  Args:
    learning_process: a TFF learning process.
    kind: 'cpp' -> the process itself (TFF's installed context, e.g. the local C++ runtime or
      `set_remote_context`); 'inprocess' -> `InProcessRunner(learning_process, **kwargs)`.
    **kwargs: passed to `InProcessRunner` (only for 'inprocess').

  Raises:
    ValueError: for an unknown `kind`, or kwargs given with 'cpp'.
  """
  if _checks.check_choice('kind', kind, ('cpp', 'inprocess')) == 'cpp':
    if kwargs:
      raise _checks.ArgumentError(argument='kwargs', value=kwargs, message=(
          f"make_runner: options {sorted(kwargs)} apply only to kind='inprocess'"))
    return learning_process
  return InProcessRunner(learning_process, **kwargs)

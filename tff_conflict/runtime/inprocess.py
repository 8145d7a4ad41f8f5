"""Runs a TFF learning process's rounds in this Python process with TensorFlow (GPU-capable).

TFF 0.87's `worker_binary` is built without CUDA (docs/design.md, "The TFF runtime"). TFF's own
compiler turns a round (`process.next`) into `MapReduceForm`
(`tff.backends.mapreduce.get_map_reduce_form_for_computation`): plain TensorFlow computations

    client_input = prepare(state)                                   # at the server
    update_k, s1_k, s2_k, s3_k = work(data_k, client_input)         # at each client k
    aggregate = report(merge/accumulate over k, starting at zero)   # federated_aggregate
    state', metrics = update(state, (aggregate, sum_k s1_k, sum_k s2_k, sum_k s3_k mod m))

(see `form_utils.get_computation_for_map_reduce_form`, which states these semantics in TFF). Each
component is stamped once into a TF concrete function (`_tf_stamp.StampedComputation`) and the
round is driven from Python, so TF places the graphs on a GPU when one is visible (nothing here pins
the CPU). `initialize` is compiled the same way (`get_state_initialization_computation`); no
`worker_binary` is started by the runner. TFF's compiler is run with Grappler bypassed: TensorFlow
optimizes `work` (where the model trains) with Grappler when it first runs it, and runs the
server-side components as TFF built them.

Per call, a stamped computation is one TensorFlow call (its variables' initializer ordered before
its results inside the graph), and a client's `tf.data.Dataset.reduce` is an in-graph loop whose
reduce function is instantiated once, not on every call (`_reduce_loop`). The functions stay warm
across rounds: client datasets enter as variant tensors, so nothing is traced again when their
sizes or shapes change.

Aggregation: `federated_aggregate` allows any tree of `accumulate` chains joined by `merge`.
`accumulation='sequential'` follows TFF's C++ runtime's order exactly
(`acc = accumulate(acc, update_k)` for k = 1..K); with one thread each client is then a single
call of `work` fused with `accumulate`, so the update never leaves the graph. The
`accumulation='tree'` order accumulates each client update into its own accumulator and merges
neighbours as soon as two of equal size exist (a binary counter), keeping client order. A
concatenating accumulator (all client updates gathered, as the conflict aggregators do) then copies
O(K d log K) values instead of O(K^2 d), and at most O(log K) partial accumulators plus the
in-flight client updates are alive at once; each client update is dropped right after it has been
accumulated. Its last merge still holds two halves and their concatenation: about two K x d
stacks. The default `accumulation='buffered'` is 'sequential' when every accumulator leaf has a
fully defined shape (nothing can grow with K, e.g. FedAvg's weighted sums), and otherwise 'tree'
except for gathered stacks: accumulator leaves of shape `[None, ...]` that a single client's
`accumulate(zero, update)` fills and that `merge` is checked to concatenate are written row by row
into one preallocated buffer of K rows. The check runs when the runner is built, on three made-up
single-client accumulators (`_row_buffer.concatenated_leaves`). The finished stack reaches
`report` without a copy, so a gathering round holds about one K x d stack per gathered leaf
(`tff_conflict.aggregators._gather` puts a lone client's row in one such leaf and forwards it from
`report`). When no leaf passes the check it is exactly 'tree'. The buffer is in host memory: on a
GPU each row is copied to the host and the stack back to the device once per round ('tree' keeps
everything on the device). For floating-point sums the orders agree to round-off; gathered stacks
are identical in all three.

Parallel clients: with `num_threads > 1` up to `num_threads` clients' `work` run at once (TF
releases the GIL), each thread on its own stamped copy of `work` (distinct variable resources);
`accumulate` and `merge` then run in the calling thread.

First round: TFF's compiler hands over each component as soon as it is compiled
(`_staged_compile`: a client's `work`, `zero` and `accumulate` first, then `update`), and the
runner stamps it at once; with
`warm_start=True` (default) a background thread (`_warmup`) then has TensorFlow instantiate it by
calling it on placeholder inputs (a client with one empty batch, a round without clients) while
the rest of the form is still being compiled. The gathered-stack check runs on that thread too.
`next` waits for each of these before its own first call of the same function. Only functions
whose calls cannot change later results (no random, print, queue or table ops) are called early,
so results are those of a runner without the warm-up (tested). A form from the compile cache is
stamped and warmed the same way, all at once.

Server state stays on the device between rounds: `next` returns numpy values (read-only arrays, the
same structures and types as TFF's runtime returns) and remembers the device tensors behind the
state it returned; when that same state object is passed back, its tensors are reused instead of
being copied in again.
"""
import collections
import concurrent.futures
import functools
import os
import queue
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_federated.python.core.impl.types import computation_types

from tff_conflict.runtime import _form_cache
from tff_conflict.runtime import _row_buffer
from tff_conflict.runtime import _staged_compile
from tff_conflict.runtime import _tf_stamp
from tff_conflict.runtime import _warmup

_ACCUMULATIONS = ('buffered', 'tree', 'sequential')


def _compile_options() -> tf.compat.v1.ConfigProto:
  """TFF's MapReduceForm compiler with Grappler bypassed: TensorFlow optimizes each stamped
  function when it first runs, so TFF's pass would only add build time."""
  config = tf.compat.v1.ConfigProto()
  config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


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

  @property
  def replayable(self) -> bool:
    return self._work.replayable

  def work_only(self, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
    return self._work.call_tensors(tensors)

  def accumulated(self, tensors: list[tf.Tensor],
                  accumulate: _tf_stamp.StampedComputation) -> list[tf.Tensor]:
    if self._fused is None:
      self._fused = self._trace_fused(accumulate)
    with _tf_stamp.call_options(optimize=True):
      return _tf_stamp.call_concrete(self._fused, tensors)

  def _trace_fused(self, accumulate: _tf_stamp.StampedComputation) -> Any:
    num_work = len(self._work.input_specs)
    num_acc = len(accumulate.input_specs) - self._num_update

    def step(*tensors):
      outputs = self._work.call_tensors(list(tensors[:num_work]))
      update, secure = outputs[:self._num_update], outputs[self._num_update:]
      accumulator = accumulate.call_tensors(list(tensors[num_work:]) + update)
      return accumulator + secure

    specs = self._work.input_specs + accumulate.input_specs[:num_acc]
    return tf.function(step, input_signature=specs, autograph=False).get_concrete_function()


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
               accumulation: str = 'buffered', compile_cache: bool | str | os.PathLike = True,
               warm_start: bool = True):
    """Compiles `learning_process.next` to MapReduceForm and stamps its components.

    Args:
      learning_process: a `tff.learning.templates.LearningProcess` or any
        `tff.templates.IterativeProcess` whose `next` takes `(state@SERVER, data@CLIENTS)` and
        returns `(state@SERVER, output@SERVER)`.
      num_threads: how many clients' `work` run at once (>= 1).
      accumulation: 'buffered' (default), 'tree' or 'sequential' (TFF's order); see the module
        docstring.
      compile_cache: where the compiled MapReduceForm of `next` is looked up and kept
        (`_form_cache`): True (default) in this process and in the directory that
        `TFF_CONFLICT_COMPILE_CACHE` names (`off` there: no disk cache), by default
        `~/.cache/tff_conflict/mapreduce`; a path: in this process and in that directory;
        False: compiled every time, nothing kept.
      warm_start: whether a background thread has TensorFlow prepare the round's functions
        (a client's `work`, `update`, `prepare`, `zero`, `report`; and the gathered-stack check)
        while TFF's compiler and the runner's construction go on, by calling each once on
        placeholder inputs: a client with one empty batch, a round without clients (`_warmup`;
        only functions whose calls cannot change later results, see `warmed_functions`). It
        shortens the first round on a machine with a spare core and changes no result.

    Raises:
      ValueError: for a bad argument, or if `next`/`initialize` cannot be compiled to
        MapReduceForm (the message says why).
    """
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
      raise ValueError(f'num_threads must be a positive integer, got {num_threads!r}')
    if accumulation not in _ACCUMULATIONS:
      raise ValueError(f'accumulation must be one of {_ACCUMULATIONS}, got {accumulation!r}')
    if not isinstance(warm_start, bool):
      raise ValueError(f'warm_start must be True or False, got {warm_start!r}')
    if isinstance(compile_cache, bool):
      cache_directory = _form_cache.default_directory() if compile_cache else None
    elif isinstance(compile_cache, (str, os.PathLike)) and os.fspath(compile_cache):
      cache_directory = os.path.abspath(os.path.expanduser(os.fspath(compile_cache)))
    else:
      raise ValueError('compile_cache must be True, False or a directory path, got '
                       f'{compile_cache!r}')
    for attr in ('initialize', 'next'):
      if not hasattr(learning_process, attr):
        raise ValueError(f'learning_process must have `initialize` and `next`, got '
                         f'{type(learning_process).__name__} without `{attr}`')
    parameter = getattr(getattr(learning_process.next, 'type_signature', None), 'parameter', None)
    if isinstance(parameter, computation_types.StructType) and len(parameter) == 2:
      data_type = parameter[1]
      if (not isinstance(data_type, computation_types.FederatedType)
          or data_type.placement is not tff.CLIENTS):
        raise ValueError(f'learning_process.next must take client data placed at CLIENTS, got '
                         f'{data_type}')
    self._process = learning_process
    self._num_threads = num_threads
    self._accumulation = accumulation
    self._secure = False
    self._merge_stamped: _tf_stamp.StampedComputation | None = None
    self._steps: 'queue.SimpleQueue[_ClientStep]' = queue.SimpleQueue()
    self._zero_values: list[tf.Tensor] | None = None
    self._buffered_leaves: list[int] = []
    self._buffer_row_shapes: dict[int, tuple[int, ...]] = {}
    # Started first: it prepares each component while the next ones are being compiled.
    self._warmup = _warmup.Warmup() if warm_start else None
    options = _compile_options()
    try:
      try:
        mrf, self._form_source = _form_cache.compile_map_reduce_form(
            learning_process.next, options,
            lambda: _staged_compile.map_reduce_form(learning_process.next, options,
                                                    self._receive),
            cache_directory, use_memory=compile_cache is not False)
      except Exception as e:  # pylint: disable=broad-except
        raise ValueError('InProcessRunner: learning_process.next cannot be compiled to '
                         f'MapReduceForm ({type(e).__name__}: {e})') from e
      self._mrf = mrf
      if self._form_source != 'compiled':  # from the cache: every component at once
        self._receive('accumulator', mrf.merge.type_signature.parameter[0])
        for name in _staged_compile.ORDER:
          self._receive(name, getattr(mrf, name))
    finally:
      if self._warmup is not None:
        self._warmup.close()  # nothing more to prepare: the thread ends when it is done
    try:
      init_comp = tff.backends.mapreduce.get_state_initialization_computation(
          learning_process.initialize, _compile_options())
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError('InProcessRunner: learning_process.initialize cannot be compiled to a '
                       f'TensorFlow computation ({type(e).__name__}: {e})') from e
    self._initialize_type = learning_process.initialize.type_signature.result
    self._result_type = learning_process.next.type_signature.result
    self._init = _tf_stamp.StampedComputation(init_comp, 'initialize', optimize=False)
    self._secure = mrf.securely_aggregates_tensors
    if self._secure:
      self._modulus = [np.asarray(t) for t in _tf_stamp.StampedComputation(
          mrf.secure_modular_sum_modulus, 'secure_modular_sum_modulus', optimize=False)([])]
    if self._checks_buffer and self._warmup is None:
      self._check_buffered_leaves()
    self._model_weight_fns: dict[str, _tf_stamp.StampedComputation] = {}
    self._cached_state: tuple[list[Any], list[tf.Tensor]] | None = None
    self._num_state_leaves = len(_tf_stamp.flat_specs(self._state_type.member))

  def _receive(self, name: str, value: Any) -> None:
    """Takes one compiled part of the form (`_staged_compile`, in its `ORDER`, after the
    accumulator's type): stamps it and, where the warm-up applies, queues its first call there.

    Grappler (when a function first runs) only for `work`, where the model trains; the
    server-side computations run as TFF built them.
    """
    stamp = functools.partial(_tf_stamp.StampedComputation, optimize=False)
    warm = self._warmup.add if self._warmup is not None else lambda name, fn: None
    if name == 'accumulator':
      # The accumulator's declared type (`merge`'s, with `[None, ...]` for gathered stacks).
      self._accumulator_specs = _tf_stamp.flat_specs(value)
      self._growing = any(not s.shape.is_fully_defined() for s in self._accumulator_specs)
      # A chain accumulate(acc, update_k) over the clients (TFF's order) where nothing can grow
      # with the number of clients; else single-client accumulators combined by `merge`
      # (module docstring). With one thread, a chain's `work` and `accumulate` are one call.
      self._chain = self._accumulation == 'sequential' or (
          self._accumulation == 'buffered' and not self._growing)
      self._fused = self._chain and self._num_threads == 1
      # Whether the gathered-stack check runs (`_find_buffered_leaves`): on the warm-up's
      # thread, after `merge` is compiled, when there is one.
      self._checks_buffer = self._accumulation == 'buffered' and self._growing
    elif name == 'work':
      self._work_comp = value
      parameter = value.type_signature.parameter
      next_parameter = self._process.next.type_signature.parameter
      self._state_type, self._data_type = next_parameter[0], next_parameter[1]
      self._data_specs = _tf_stamp.flat_specs(parameter[0])
      self._work_sizes = [len(_tf_stamp.flat_specs(value.type_signature.result[i]))
                          for i in range(4)]
      step = self._first_step = self._new_step()
      self._steps.put(step)
      if not self._fused and step.replayable:
        warm('work', lambda: step.work_only(self._placeholder_client(step)))
    elif name == 'update':
      self._update = stamp(value, 'update')
      if self._update.replayable:
        warm('update', lambda: self._update.call_tensors(
            _warmup.zeros(self._update.input_specs)))
    elif name == 'prepare':
      self._prepare = stamp(value, 'prepare')
      if self._prepare.replayable:
        warm('prepare', lambda: self._prepare.call_tensors(
            _warmup.zeros(self._prepare.input_specs)))
    elif name == 'zero':
      self._zero = stamp(value, 'zero')
      if self._zero.replayable:
        warm('zero', lambda: setattr(self, '_zero_values', self._zero.call_tensors([])))
    elif name == 'accumulate':
      self._accumulate = stamp(value, 'accumulate')
      step = self._first_step
      if (self._fused and step.replayable and self._accumulate.replayable
          and self._zero.replayable):
        warm('work', lambda: step.accumulated(
            self._placeholder_client(step) + self._zero_values, self._accumulate))
    elif name == 'merge':
      self._merge_comp = value
      if self._checks_buffer and self._warmup is not None:
        _ = self._merge  # stamped here, on the caller's thread
        warm('check', self._check_buffered_leaves)
    elif name == 'report':
      self._report = stamp(value, 'report')
      if self._report.replayable and self._zero.replayable:
        warm('report', lambda: self._report.call_tensors(self._zero_values))

  def _placeholder_client(self, step: '_ClientStep') -> list[tf.Tensor]:
    """A client whose dataset is one empty batch, with zero client input: `work`'s inputs."""
    data = _warmup.placeholder_client_data(self._data_type.member)
    return data + _warmup.zeros(step.input_specs[len(data):])

  def _new_step(self) -> _ClientStep:
    return _ClientStep(self._work_comp, self._work_sizes[0])

  @property
  def _merge(self) -> _tf_stamp.StampedComputation:
    if self._merge_stamped is None:  # only 'tree' and 'buffered' merge
      self._merge_stamped = _tf_stamp.StampedComputation(self._merge_comp, 'merge',
                                                         optimize=False)
    return self._merge_stamped

  def _wait_warm(self, name: str) -> None:
    """Waits until the warm-up (if any) is done with `name`'s function."""
    if self._warmup is not None:
      self._warmup.wait(name)

  def _check_buffered_leaves(self) -> None:
    self._buffered_leaves, self._buffer_row_shapes = self._find_buffered_leaves()

  def _find_buffered_leaves(self) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    """`_row_buffer.concatenated_leaves` on three made-up single-client accumulators, and the
    row shape of each buffered leaf. Not made (no buffering: 'tree') when an extra call of
    `zero`, `accumulate` or `merge` could change later results (`_warmup.replayable`)."""
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
  def form_source(self) -> str:
    """Where the MapReduceForm came from: 'compiled', or the compile cache's 'memory' or 'disk'."""
    return self._form_source

  @property
  def buffered_leaves(self) -> tuple[int, ...]:
    """Flat indices of the accumulator leaves gathered in one buffer ('buffered'; else empty)."""
    self._wait_warm('check')
    return tuple(self._buffered_leaves)

  @property
  def warmed_functions(self) -> tuple[str, ...]:
    """The round's functions that the warm-up prepared ahead (`warm_start`), once it has finished:
    some of 'prepare', 'zero', 'work', 'check' (the gathered-stack check), 'update' and 'report'.
    A function left out (not replayable, or its placeholder call failed) is prepared at its first
    call instead."""
    if self._warmup is None:
      return ()
    self._warmup.join()
    return tuple(name for name in self._warmup.names if name not in self._warmup.errors)

  def initialize(self) -> Any:
    """The initial server state, as `learning_process.initialize()` returns it."""
    flat = self._init([])
    return self._to_python(flat, self._initialize_type, remember_state=True)

  def next(self, state: Any, client_data: Sequence[Any]) -> Any:
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
      raise ValueError('client_data must be a list of tf.data.Dataset (one per client), got '
                       f'{type(client_data).__name__}')
    member_type = self._data_type.member
    data_specs = self._data_specs
    flat_clients = []
    for k, data in enumerate(client_data):
      leaves = _tf_stamp.flatten_value(data, member_type)
      for leaf in leaves:
        if not isinstance(leaf, tf.data.Dataset) and isinstance(
            member_type, computation_types.SequenceType):
          raise ValueError(f'client_data[{k}] must be a tf.data.Dataset, got '
                           f'{type(leaf).__name__}')
      flat_clients.append([_tf_stamp.to_tensor(v, s) for v, s in zip(leaves, data_specs)])
    state_tensors = self._state_tensors(state)
    for name in ('prepare', 'zero', 'work', 'check'):
      self._wait_warm(name)
    client_input = self._prepare.call_tensors(state_tensors)
    aggregate, secure_sums = self._aggregate(flat_clients, client_input)
    self._wait_warm('report')
    report = self._report.call_tensors(aggregate)
    self._wait_warm('update')
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
      for outputs in self._client_results(flat_clients, client_input):
        update, secure = outputs[:n_update], outputs[n_update:]
        del outputs
        if self._secure:
          secure_totals = self._add_secure(secure_totals, secure)
        single = self._accumulate.call_tensors(zero + update)
        del update
        for i, buffer in buffers.items():  # rows go to the buffer; the merges see no rows
          buffer.append(single[i])
          single[i] = zero[i]
        count = 1
        while stack and stack[-1][0] == count:
          prev_count, prev = stack.pop()
          single = self._merge.call_tensors(prev + single)
          count += prev_count
        stack.append((count, single))
        del single
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
  if kind == 'cpp':
    if kwargs:
      raise ValueError(f'make_runner: options {sorted(kwargs)} apply only to kind="inprocess"')
    return learning_process
  if kind == 'inprocess':
    return InProcessRunner(learning_process, **kwargs)
  raise ValueError(f"kind must be 'cpp' or 'inprocess', got {kind!r}")

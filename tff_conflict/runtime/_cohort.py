"""Several clients' `work`, `accumulate` and `merge` as one TensorFlow call, for the in-process runner.

`CohortCalls` traces, per number of clients n (at most `clients_per_call`), one function that runs
n clients' `work` one after the other and combines their updates exactly as the runner's
per-client loop would: the chain `acc = accumulate(acc, update_k)`, or (gathered stacks) each
client's `accumulate(zero, update_k)`, its rows concatenated and the rest merged by the runner's
binary counter. Design: docs/design.md, "The in-process runner".
"""

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tff_conflict.runtime import _tf_stamp


class CannotFuse(Exception):
  """The clients' computations could not be traced into one function (the caller falls back to
  one call per client)."""


def counter_sizes(n: int) -> list[int]:
  """The sizes of the binary counter's items after n single-client pushes (largest first)."""
  return [1 << b for b in reversed(range(n.bit_length())) if n >> b & 1]


class CohortCalls:
  """n clients' work and aggregation in one call (module docstring).

  Each client position k of a call has its own stamped copy of `work`: two calls of one copy
  within one TensorFlow function share its variables in one step, and their results were wrong.

  Args:
    new_work: returns a new stamped copy of `work` (made as needed, at most one per position).
    accumulate: the stamped `accumulate`.
    merge: the stamped `merge` (None for the chain).
    accumulator_specs: the accumulator's flat specs.
    num_data: flat leaves of one client's data.
    num_update: flat leaves of `work`'s update (its only output that is used).
    buffered: the accumulator leaves gathered row by row (None: the chain).
  """

  def __init__(self, new_work: Callable[[], _tf_stamp.StampedComputation],
               accumulate: _tf_stamp.StampedComputation,
               merge: _tf_stamp.StampedComputation | None,
               accumulator_specs: Sequence[tf.TensorSpec], num_data: int, num_update: int,
               buffered: Sequence[int] | None):
    self._new_work = new_work
    self._works: list[_tf_stamp.StampedComputation] = []
    self._accumulate = accumulate
    self._merge = merge
    self._num_acc = len(accumulator_specs)
    self._num_data = num_data
    self._num_update = num_update
    self._buffered = None if buffered is None else list(buffered)
    specs = self._work_copy(0).input_specs
    self._specs_data = specs[:num_data]
    self._specs_input = specs[num_data:]
    self._specs_acc = list(accumulator_specs)
    self._traced: dict[int, _tf_stamp.TracedFunction] = {}

  def _work_copy(self, k: int) -> _tf_stamp.StampedComputation:
    while len(self._works) <= k:
      self._works.append(self._new_work())
    return self._works[k]

  def _updates(self, datas, client_input):
    """Each client's update; client k + 1's `work` runs after client k's (one client's
    intermediates alive at a time)."""
    previous: list[tf.Tensor] = []
    for k, data in enumerate(datas):
      work = self._work_copy(k)
      with tf.control_dependencies(previous):
        outputs = work.call_tensors(list(data) + list(client_input))
      previous = outputs
      yield outputs[:self._num_update]

  def _trace(self, n: int) -> _tf_stamp.TracedFunction:
    num_data, num_input = self._num_data, len(self._specs_input)

    def split(tensors):
      datas = [tensors[k * num_data:(k + 1) * num_data] for k in range(n)]
      rest = tensors[n * num_data:]
      return datas, list(rest[:num_input]), list(rest[num_input:])

    if self._buffered is None:
      def chain(*tensors):
        datas, client_input, acc = split(tensors)
        for update in self._updates(datas, client_input):
          acc = self._accumulate.call_tensors(acc + update)
        return acc

      fn = chain
    else:
      buffered = self._buffered

      def gather(*tensors):
        datas, client_input, zero = split(tensors)
        rows = {i: [] for i in buffered}
        stack: list[tuple[int, list[tf.Tensor]]] = []
        for update in self._updates(datas, client_input):
          single = self._accumulate.call_tensors(zero + update)
          for i in buffered:
            rows[i].append(single[i])
            single[i] = zero[i]
          count = 1
          while stack and stack[-1][0] == count:
            prev_count, prev = stack.pop()
            single = self._merge.call_tensors(prev + single)
            count += prev_count
          stack.append((count, single))
        assert [c for c, _ in stack] == counter_sizes(n)
        return ([tf.concat(rows[i], axis=0) for i in buffered]
                + [t for _, item in stack for t in item])

      fn = gather
    specs = self._specs_data * n + self._specs_input + self._specs_acc
    return _tf_stamp.TracedFunction(fn, specs, optimize=True)

  def _call(self, flat_clients, client_input, acc):
    n = len(flat_clients)
    if n not in self._traced:
      try:
        self._traced[n] = self._trace(n)
      except Exception as e:  # pylint: disable=broad-except
        raise CannotFuse(f'{type(e).__name__}: {e}') from e
    flat = [t for data in flat_clients for t in data]
    return self._traced[n](flat + list(client_input) + list(acc))

  def chain(self, flat_clients: Sequence[list[tf.Tensor]], client_input: list[tf.Tensor],
            acc: list[tf.Tensor]) -> list[tf.Tensor]:
    """`acc` after `accumulate(acc, update_k)` for these clients in order."""
    return self._call(flat_clients, client_input, acc)

  def gather(self, flat_clients: Sequence[list[tf.Tensor]], client_input: list[tf.Tensor],
             zero: list[tf.Tensor]) -> tuple[list[tf.Tensor], list[tuple[int, list[Any]]]]:
    """These clients' rows of each buffered leaf (concatenated in client order), and the binary
    counter's items (count, accumulator with the buffered leaves empty) over them, largest
    first."""
    out = self._call(flat_clients, client_input, zero)
    nb = len(self._buffered)
    rows, rest = out[:nb], out[nb:]
    items = []
    for k, size in enumerate(counter_sizes(len(flat_clients))):
      items.append((size, rest[k * self._num_acc:(k + 1) * self._num_acc]))
    return rows, items

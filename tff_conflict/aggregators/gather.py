"""One mechanism that brings every client's row (vectors, weight, extras) to the server as stacks.

The conflict aggregators need all K client updates at once (SPEC "Notation": a Gram matrix of the
updates, then one weighted sum). `federated_gather` brings them to the server with one
`tff.federated_aggregate` whose accumulator has an unknown leading dimension (the pattern of TFF's
`aggregators/sampling.py`, `[None, ...]` types declared on `accumulate`, `merge` and `report`;
`../shared/TFF_NOTES.md`). Unlike `tff.aggregators.federated_sample`, which silently keeps at most
100 values, nothing is capped: every client is either stacked or counted.

Each client sends a row: an `OrderedDict` of fixed-shape tensors plus an int32 `status`
(`row_status`): `INCLUDED` rows are appended to the stacks; `ZERO_WEIGHT` rows (TFF's client work
gives weight 0 to a client whose delta was non-finite, and zeroes that delta) and `NON_FINITE` rows
(a NaN or Inf in any vector or in the weight) are left out of the stacks and counted. The stacks
therefore hold only the clients that take part, in client order, and nothing non-finite reaches
the kernels.

Memory in TFF's C++ runtime (`worker_binary`). Its federating executor runs
`federated_aggregate` as a chain of `accumulate` calls whose results stay alive until the chain
ends, so a concatenating accumulator keeps every intermediate stack: after K included clients of
row size r bytes it holds `r * K (K + 1) / 2` for the stacks alone (measured: d = 1.2M float32,
80 clients, 20 GB; BENCHMARKS.md "## Aggregators"). No accumulator of fixed size can hold K rows
for an unknown K, so the growth is inherent to gathering in that runtime. The worker's measured
peak above a `MeanFactory` round is up to about 1.5 times that (FedGH 7.9 GB at K = 50, d = 1.2M;
the corrective factory's two-field rows 18.8 GB where `r K (K + 1) / 2` gives 12.3 GB), so the
estimate used is `estimated_gather_bytes(r, K) = 1.6 * r * K (K + 1) / 2`. `accumulate` refuses,
before memory runs out, the first row that would push that estimate over a limit, with an
`InvalidArgumentError` that names K, d and the limit. The limit is fixed when an aggregation
process is built: `max_gather_bytes()` (default: half of this machine's physical memory), set with
`set_max_gather_bytes(n)` or the environment variable `TFF_CONFLICT_MAX_GATHER_BYTES`; `None`
(or `0` in the variable) builds processes without the check, for runners that free intermediate
accumulators. `tff_conflict.inprocess.InProcessRunner` needs no limit: it calls `accumulate` only
on an empty accumulator, and by default writes the gathered rows into one preallocated buffer
(about one K x d stack in all; BENCHMARKS.md).
"""

import collections
import contextlib
import math
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

INCLUDED = 0
ZERO_WEIGHT = 1
NON_FINITE = 2
_NUM_STATUSES = 3

_ENV_LIMIT = 'TFF_CONFLICT_MAX_GATHER_BYTES'
_UNSET = object()
_limit_override = _UNSET


def _default_limit() -> int:
  try:
    import psutil  # pylint: disable=g-import-not-at-top
    total = psutil.virtual_memory().total
  except Exception:  # pylint: disable=broad-except
    total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  return int(total) // 2


def max_gather_bytes() -> Optional[int]:
  """The memory limit (bytes) baked into gathering processes built now; None means no check."""
  if _limit_override is not _UNSET:
    return _limit_override
  env = os.environ.get(_ENV_LIMIT)
  if env is not None:
    try:
      value = int(env)
    except ValueError as e:
      raise ValueError(f'{_ENV_LIMIT} must be a non-negative integer (bytes), got {env!r}') from e
    if value < 0:
      raise ValueError(f'{_ENV_LIMIT} must be a non-negative integer (bytes), got {env!r}')
    return value or None
  return _default_limit()


def _check_limit(num_bytes):
  if num_bytes is not None and (isinstance(num_bytes, bool) or not isinstance(num_bytes, int)
                                or num_bytes <= 0):
    raise ValueError(f'max_gather_bytes must be a positive int or None, got {num_bytes!r}')


def set_max_gather_bytes(num_bytes: Optional[int]) -> None:
  """Sets the limit for processes built from now on (None: no check); see the module docstring."""
  global _limit_override
  _check_limit(num_bytes)
  _limit_override = num_bytes


@contextlib.contextmanager
def gather_memory_limit(num_bytes: Optional[int]):
  """Context manager: processes built inside it use `num_bytes` (None: no check)."""
  global _limit_override
  _check_limit(num_bytes)
  previous = _limit_override
  _limit_override = num_bytes
  try:
    yield
  finally:
    _limit_override = previous


# Worker peak / (r K (K + 1) / 2), rounded up from the largest measured ratio (1.53): 8 / 5.
_OVERHEAD_NUM, _OVERHEAD_DEN = 8, 5


def estimated_gather_bytes(row_bytes: int, num_clients: int) -> int:
  """Estimated C++-runtime worker memory for gathering K rows: `1.6 * r * K (K + 1) / 2` bytes."""
  k = int(num_clients)
  return -(-_OVERHEAD_NUM * int(row_bytes) * (k * (k + 1) // 2) // _OVERHEAD_DEN)


def max_clients_for(row_bytes: int, limit_bytes: Optional[int]) -> Optional[int]:
  """Largest K with `estimated_gather_bytes(row_bytes, K) <= limit_bytes` (None: no limit)."""
  if limit_bytes is None:
    return None
  # 1.6 r K (K + 1) / 2 <= L  <=>  K (K + 1) / 2 <= floor(5 L / (8 r)) (K (K + 1) / 2 is whole).
  units = (_OVERHEAD_DEN * int(limit_bytes)) // (_OVERHEAD_NUM * max(int(row_bytes), 1))
  k = int((math.isqrt(8 * units + 1) - 1) // 2)
  while (k + 1) * (k + 2) // 2 <= units:
    k += 1
  while k > 0 and k * (k + 1) // 2 > units:
    k -= 1
  return k


def row_status(weight, *tensors) -> tf.Tensor:
  """int32 status of one client's row: NON_FINITE, else ZERO_WEIGHT if weight <= 0, else INCLUDED.

  A negative weight is treated like 0 (no part in the round); TFF never produces one.
  """
  finite = tf.reduce_all(tf.math.is_finite(weight))
  for t in tensors:
    finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(t)))
  status = tf.where(weight > 0, INCLUDED, ZERO_WEIGHT)
  return tf.cast(tf.where(finite, status, NON_FINITE), tf.int32)


def row_with_status_type(row_type: collections.OrderedDict) -> tff.StructWithPythonType:
  """The client-side type: `row_type`'s fields plus `status` (int32)."""
  fields = collections.OrderedDict(row_type)
  if 'status' in fields:
    raise ValueError('row_type must not have a field named "status"')
  fields['status'] = tff.TensorType(np.int32)
  return tff.StructWithPythonType(fields, collections.OrderedDict)


def gathered_type(row_type: collections.OrderedDict) -> tff.StructWithPythonType:
  """Server-side type: `OrderedDict(stacks=<each field with a leading None>, counts=int32[3])`."""
  stacks = collections.OrderedDict(
      (name, tff.TensorType(t.dtype, (None,) + tuple(t.shape))) for name, t in row_type.items())
  return tff.StructWithPythonType(
      collections.OrderedDict(
          stacks=tff.StructWithPythonType(stacks, collections.OrderedDict),
          counts=tff.TensorType(np.int32, [_NUM_STATUSES])),
      collections.OrderedDict)


def _row_bytes(row_type) -> int:
  return sum(int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
             for t in row_type.values())


def build_gather_computations(row_type: collections.OrderedDict, *,
                              limit_bytes: Optional[int], vector_size: int):
  """zero, accumulate, merge and report for `federated_gather` (exposed for runners and tests)."""
  acc_type = gathered_type(row_type)
  in_type = row_with_status_type(row_type)
  row_bytes = _row_bytes(row_type)
  max_clients = max_clients_for(row_bytes, limit_bytes)

  @tff.tensorflow.computation
  def zero():
    stacks = collections.OrderedDict(
        (name, tf.zeros((0,) + tuple(t.shape), dtype=t.dtype)) for name, t in row_type.items())
    return collections.OrderedDict(stacks=stacks, counts=tf.zeros([_NUM_STATUSES], tf.int32))

  def _append(stacks, row):
    return collections.OrderedDict(
        (name, tf.concat([stacks[name], tf.expand_dims(row[name], 0)], axis=0))
        for name in row_type)

  @tff.tensorflow.computation(acc_type, in_type)
  def accumulate(acc, row):
    stacks, counts = acc['stacks'], acc['counts']
    include = tf.equal(row['status'], INCLUDED)
    checks = []
    if max_clients is not None:
      num_rows = tf.shape(stacks[next(iter(row_type))])[0]
      needed = num_rows + tf.cast(include, tf.int32)
      checks.append(tf.debugging.assert_less_equal(
          needed, tf.constant(max_clients, tf.int32),
          message=(
              f'tff_conflict.aggregators: refusing to gather this round in TFF\'s C++ runtime: '
              f'K (clients taking part, counted so far, first value below) would exceed the '
              f'limit K_max = {max_clients} for d = {vector_size} ({row_bytes} bytes per '
              f'client); the runtime keeps every intermediate stack, '
              f'about 1.6 * {row_bytes} * K (K + 1) / 2 bytes, and the limit is {limit_bytes} bytes '
              f'(tff_conflict.aggregators.gather.set_max_gather_bytes / '
              f'{_ENV_LIMIT}). Use fewer clients per round or the in-process runner.')))
    with tf.control_dependencies(checks):
      new_stacks = tf.cond(include, lambda: _append(stacks, row),
                           lambda: collections.OrderedDict(
                               (name, tf.identity(stacks[name])) for name in row_type))
      new_counts = counts + tf.one_hot(row['status'], _NUM_STATUSES, dtype=tf.int32)
    return collections.OrderedDict(stacks=new_stacks, counts=new_counts)

  @tff.tensorflow.computation(acc_type, acc_type)
  def merge(a, b):
    stacks = collections.OrderedDict(
        (name, tf.concat([a['stacks'][name], b['stacks'][name]], axis=0)) for name in row_type)
    return collections.OrderedDict(stacks=stacks, counts=a['counts'] + b['counts'])

  @tff.tensorflow.computation(acc_type)
  def report(acc):
    return acc

  return zero, accumulate, merge, report


def federated_gather(rows, row_type: collections.OrderedDict, *, vector_size: int,
                     limit_bytes=_UNSET):
  """Stacks every INCLUDED client row at the server; counts every row by status.

  Must be called inside a `tff.federated_computation`.

  Args:
    rows: a CLIENTS-placed value of `row_with_status_type(row_type)`.
    row_type: `OrderedDict` of field name -> `tff.TensorType` with fully defined shape.
    vector_size: d, reported in the memory-limit error.
    limit_bytes: memory limit for the C++ runtime check; default `max_gather_bytes()`.

  Returns:
    A SERVER-placed value of `gathered_type(row_type)`: `stacks[name]` is `[K_in, ...]` with the
    included rows in client order, `counts[s]` the number of clients with status `s`
    (`INCLUDED`, `ZERO_WEIGHT`, `NON_FINITE`), so `sum(counts)` is every client of the round.
  """
  if limit_bytes is _UNSET:
    limit_bytes = max_gather_bytes()
  zero, accumulate, merge, report = build_gather_computations(
      row_type, limit_bytes=limit_bytes, vector_size=vector_size)
  return tff.federated_aggregate(rows, zero(), accumulate, merge, report)

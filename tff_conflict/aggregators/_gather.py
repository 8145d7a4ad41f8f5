"""`federated_gather`: every client's row (vectors, weight, extras) brought to the server as stacks,
in client order, under a memory limit (docs/design.md, "The gather")."""

import collections
import contextlib
import math
import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks

INCLUDED = 0
ZERO_WEIGHT = 1
NON_FINITE = 2
_NUM_STATUSES = 3

# Radix of each level of the accumulator's counter (docs/design.md, "The gather").
RADICES = (16, 16, 16)
# Row fields of at most this many bytes are stacked by plain concatenation, not in pieces.
SMALL_ROW_BYTES = 64

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
      raise _checks.ArgumentError(argument=_ENV_LIMIT, value=env, message=(
          f'{_ENV_LIMIT} must be a non-negative integer (bytes), got {env!r}')) from e
    if value < 0:
      raise _checks.ArgumentError(argument=_ENV_LIMIT, value=env, message=(
          f'{_ENV_LIMIT} must be a non-negative integer (bytes), got {env!r}'))
    return value or None
  return _default_limit()


def _check_limit(num_bytes):
  return _checks.check_optional_int('max_gather_bytes', num_bytes, minimum=1)


def set_max_gather_bytes(num_bytes: Optional[int]) -> None:
  """Sets the limit for processes built from now on (None: no check; docs/design.md)."""
  global _limit_override
  _limit_override = _check_limit(num_bytes)


@contextlib.contextmanager
def gather_memory_limit(num_bytes: Optional[int]):
  """Context manager: processes built inside it use `num_bytes` (None: no check)."""
  global _limit_override
  num_bytes = _check_limit(num_bytes)
  previous = _limit_override
  _limit_override = num_bytes
  try:
    yield
  finally:
    _limit_override = previous


def check_factory_limit(num_bytes) -> Optional[int]:
  """A factory's `max_gather_bytes` argument: None, 0 or an integer >= 1; ValueError otherwise."""
  return _checks.check_optional_int('max_gather_bytes', num_bytes, minimum=0)


def resolve_factory_limit(num_bytes: Optional[int]) -> Optional[int]:
  """The limit a factory builds with: None -> `max_gather_bytes()` (read now), 0 -> no check."""
  if num_bytes is None:
    return max_gather_bytes()
  return num_bytes or None


# The memory estimate.

# Copies of the K gathered rows that TFF's C++ runtime holds besides the counter's own: the client
# rows themselves, the final accumulator materialized to a proto and created again at the server,
# and `report`'s concatenation: 4 by count, 5 with a margin, which bounds the measured one-round
# peaks (BENCHMARKS.md, "Aggregators").
_RUNTIME_COPIES = 5


def _check_radices(radices: Sequence[int]) -> tuple:
  radices = tuple(radices)
  if not radices or any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 2
                        for r in radices):
    raise _checks.ArgumentError(argument='radices', value=radices, message=(
        f'radices must be a non-empty sequence of ints >= 2, got {radices!r}'))
  return tuple(int(r) for r in radices)


def counter_copied_rows(num_rows: int, radices: Sequence[int] = RADICES) -> int:
  """Rows copied by the counter while `num_rows` rows are accumulated one by one from `zero`.

  A row placed in a level-0 slot is not copied; a carry into level c copies the `P_c` rows of the
  block it forms (`P_c = prod(radices[:c])`); an overflow appends the `P_L` rows of the full
  counter to `head`, which copies `head` too (so overflows alone grow quadratically). Of rows
  0..K-1, `floor(K / P_c) - floor(K / P_{c+1})` carry into level c (1 <= c < L) and
  `m = floor(K / P_L)` overflow: `sum_c (floor(K / P_c) - floor(K / P_{c+1})) P_c +
  P_L m (m + 1) / 2`. Each copy stays alive in TFF's C++ runtime.
  """
  radices = _check_radices(radices)
  k = int(num_rows)
  sizes = [math.prod(radices[:c]) for c in range(len(radices) + 1)]  # P_0 .. P_L
  copied = sum((k // sizes[c] - k // sizes[c + 1]) * sizes[c] for c in range(1, len(radices)))
  overflows = k // sizes[-1]
  return copied + sizes[-1] * overflows * (overflows + 1) // 2


def estimated_gather_bytes(row_bytes: int, num_clients: int, *, small_row_bytes: int = 0,
                           radices: Sequence[int] = RADICES) -> int:
  """Estimated C++-runtime worker memory to gather K rows (docs/design.md, "The gather").

  `row_bytes` is the size of one row's large fields (held in pieces), `small_row_bytes` that of its
  small fields (concatenated):
  `row_bytes * (copied + c K) + small_row_bytes * (K (K + 1) / 2 + c K)`, with
  `copied = counter_copied_rows(K)` and c = 5 copies held by the runtime.
  """
  k = int(num_clients)
  big = int(row_bytes) * (counter_copied_rows(k, radices) + _RUNTIME_COPIES * k)
  small = int(small_row_bytes) * (k * (k + 1) // 2 + _RUNTIME_COPIES * k)
  return big + small


def max_clients_for(row_bytes: int, limit_bytes: Optional[int], *, small_row_bytes: int = 0,
                    radices: Sequence[int] = RADICES) -> Optional[int]:
  """Largest K with `estimated_gather_bytes(...) <= limit_bytes` (None: no limit)."""
  if limit_bytes is None:
    return None

  def fits(k):
    return estimated_gather_bytes(row_bytes, k, small_row_bytes=small_row_bytes,
                                  radices=radices) <= limit_bytes

  if not fits(1):
    return 0
  hi = 1
  while fits(2 * hi):
    hi *= 2
    if hi > 2**31:
      return hi
  lo, hi = hi, 2 * hi  # fits(lo), not fits(hi); the estimate grows with K
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits(mid) else (lo, mid)
  return lo


# Rows and types.


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


def _stack_type(tensor_type) -> tff.TensorType:
  return tff.TensorType(tensor_type.dtype, (None,) + tuple(tensor_type.shape))


def _piece_type(tensor_type) -> tff.TensorType:
  """A piece: rows of `tensor_type`, every dimension left unknown (see `_unshaped`)."""
  return tff.TensorType(tensor_type.dtype, (None,) * (1 + len(tensor_type.shape)))


def _struct(fields) -> tff.StructWithPythonType:
  return tff.StructWithPythonType(collections.OrderedDict(fields), collections.OrderedDict)


def gathered_type(row_type: collections.OrderedDict) -> tff.StructWithPythonType:
  """Server-side type: `OrderedDict(stacks=<each field with a leading None>, counts=int32[3])`."""
  stacks = _struct((name, _stack_type(t)) for name, t in row_type.items())
  return _struct([('stacks', stacks), ('counts', tff.TensorType(np.int32, [_NUM_STATUSES]))])


def _field_bytes(tensor_type) -> int:
  return int(np.prod(tensor_type.shape, dtype=np.int64)) * np.dtype(tensor_type.dtype).itemsize


def _relaxed(stack: tf.Tensor) -> tf.Tensor:
  """`stack` with the static shape `[None, ...]` that the declared types have (no copy)."""
  return tf.compat.v1.placeholder_with_default(stack, [None] + stack.shape.as_list()[1:])


def _unshaped(piece: tf.Tensor) -> tf.Tensor:
  """`piece` with every dimension of its static shape unknown, as pieces are declared (no copy).

  TFF's compiler runs Grappler on each TensorFlow computation, and Grappler allocates a feed
  tensor for every placeholder, with unknown dimensions set to 1: a `[None, d]` piece would cost
  d values of compile memory per piece and computation. `[None, None]` costs one value.
  """
  return tf.compat.v1.placeholder_with_default(piece, [None] * piece.shape.rank)


class _Layout:
  """The accumulator of one row type: its TFF type and its pure-TF zero/accumulate/merge/report.

  Accumulator: `OrderedDict(pieces=<piece name -> <large field -> [None, None, ...]>>` (in
  logical order: `head`, `l{L-1}s0` ... `l0s{r-2}`, `tail`), `small=<small field -> [None, ...]>`,
  `counts=int32[3]`, `merged=int32`); `pieces` or `small` is left out when it has no field.
  """

  def __init__(self, row_type: collections.OrderedDict, radices: Sequence[int],
               small_row_bytes: int):
    self.row_type = collections.OrderedDict(row_type)
    self.radices = _check_radices(radices)
    self.big = [n for n, t in self.row_type.items() if _field_bytes(t) > small_row_bytes]
    self.small = [n for n, t in self.row_type.items() if _field_bytes(t) <= small_row_bytes]
    self.big_row_bytes = sum(_field_bytes(self.row_type[n]) for n in self.big)
    self.small_row_bytes = sum(_field_bytes(self.row_type[n]) for n in self.small)
    self.levels = [[f'l{level}s{j}' for j in range(r - 1)] for level, r in enumerate(self.radices)]
    self.pieces = ['head'] + [p for level in reversed(self.levels) for p in level] + ['tail']

  # Types.

  def accumulator_type(self) -> tff.StructWithPythonType:
    fields = []
    if self.big:
      piece = _struct((n, _piece_type(self.row_type[n])) for n in self.big)
      fields.append(('pieces', _struct((p, piece) for p in self.pieces)))
    if self.small:
      fields.append(('small', _struct((n, _stack_type(self.row_type[n])) for n in self.small)))
    fields.append(('counts', tff.TensorType(np.int32, [_NUM_STATUSES])))
    fields.append(('merged', tff.TensorType(np.int32)))
    return _struct(fields)

  # Pure TensorFlow.

  def _zeros(self, name):
    t = self.row_type[name]
    empty = tf.zeros((0,) + tuple(t.shape), dtype=t.dtype)
    return _unshaped(empty) if name in self.big else _relaxed(empty)

  @staticmethod
  def _empty_like(piece):
    """An empty piece sliced from `piece`. Not `tf.zeros`: TFF's compiler runs Grappler's
    aggressive constant folding, which costs about d floats of compile memory per folded empty
    constant."""
    return collections.OrderedDict((n, _unshaped(t[:0])) for n, t in piece.items())

  def zero(self):
    out = collections.OrderedDict()
    if self.big:
      out['pieces'] = collections.OrderedDict(
          (p, collections.OrderedDict((n, self._zeros(n)) for n in self.big))
          for p in self.pieces)
    if self.small:
      out['small'] = collections.OrderedDict((n, self._zeros(n)) for n in self.small)
    out['counts'] = tf.zeros([_NUM_STATUSES], tf.int32)
    out['merged'] = tf.constant(0, tf.int32)
    return out

  def _concat(self, pieces, name):
    parts = [p[name] for p in pieces]
    return _unshaped(tf.concat(parts, axis=0) if len(parts) > 1 else parts[0])

  def _carry(self, n):
    """(c, digits): row n completes levels 0..c-1 and lands in level c (c == L: overflow)."""
    digits, rem = [], n
    for r in self.radices:
      digits.append(tf.math.floormod(rem, r))
      rem = tf.math.floordiv(rem, r)
    carry = tf.constant(0, tf.int32)
    lower_full = tf.constant(True)
    for level, r in enumerate(self.radices):
      lower_full = tf.logical_and(lower_full, tf.equal(digits[level], r - 1))
      carry += tf.cast(lower_full, tf.int32)
    return carry, digits

  def _block(self, pieces, new_row, branch):
    """The block that row n forms: `branch` c < L: levels c-1..0 and the row (c = 0: the row
    itself, not copied); c == L: the whole counter and the row (appended to head); L + 1: none."""

    def make(level):
      def fn():
        lower = [pieces[p] for lower_level in reversed(range(level))
                 for p in self.levels[lower_level]]
        return [self._concat(lower + [new_row], n) for n in self.big]
      return fn

    def none():
      return list(self._empty_like(new_row).values())

    branches = [make(level) for level in range(len(self.radices) + 1)] + [none]
    values = tf.switch_case(branch, branches)
    return collections.OrderedDict(zip(self.big, [_unshaped(v) for v in values]))

  def accumulate(self, acc, row, checks=()):
    """Adds one client's row (with its `status`) to `acc`.

    Each piece is chosen by a small `tf.switch_case` (kept, emptied, or set to the new block),
    so only the one block a row forms is computed and every other piece is forwarded.
    """
    include = tf.equal(row['status'], INCLUDED)
    counts = acc['counts']
    with tf.control_dependencies(list(checks)):
      out = collections.OrderedDict()
      if self.big:
        pieces = acc['pieces']
        new_row = collections.OrderedDict((n, tf.expand_dims(row[n], 0)) for n in self.big)
        canonical = tf.logical_and(include, tf.equal(acc['merged'], 0))
        num_levels = len(self.radices)
        carry, digits = self._carry(counts[INCLUDED])
        block = self._block(pieces, new_row, tf.where(canonical, carry, num_levels + 1))
        new_pieces = collections.OrderedDict()
        new_pieces['head'] = self._choose(
            pieces['head'], tf.logical_and(canonical, tf.equal(carry, num_levels)),
            lambda: collections.OrderedDict(
                (n, self._concat([pieces['head'], block], n)) for n in self.big))
        for level in reversed(range(num_levels)):
          emptied = tf.logical_and(canonical, level < carry)
          for slot, p in enumerate(self.levels[level]):
            takes_block = tf.logical_and(
                canonical, tf.logical_and(tf.equal(carry, level), tf.equal(digits[level], slot)))
            action = tf.where(emptied, 1, tf.where(takes_block, 2, 0))
            new_pieces[p] = self._switch_piece(pieces[p], action, block)
        new_pieces['tail'] = self._choose(
            pieces['tail'], tf.logical_and(include, tf.equal(acc['merged'], 1)),
            lambda: collections.OrderedDict(
                (n, self._concat([pieces['tail'], new_row], n)) for n in self.big))
        out['pieces'] = new_pieces
      if self.small:
        out['small'] = collections.OrderedDict(
            (n, tf.cond(include,
                        lambda n=n: _relaxed(
                            tf.concat([acc['small'][n], tf.expand_dims(row[n], 0)], 0)),
                        lambda n=n: _relaxed(acc['small'][n])))
            for n in self.small)
      out['counts'] = counts + tf.one_hot(row['status'], _NUM_STATUSES, dtype=tf.int32)
      out['merged'] = tf.identity(acc['merged'])
    return out

  def _choose(self, piece, pred, changed):
    values = tf.cond(pred, lambda: list(changed().values()), lambda: list(piece.values()))
    return collections.OrderedDict(zip(self.big, [_unshaped(v) for v in values]))

  def _switch_piece(self, piece, action, block):
    """action 0: `piece` unchanged, 1: emptied, 2: `block`."""
    values = tf.switch_case(action, [lambda: list(piece.values()),
                                     lambda: list(self._empty_like(piece).values()),
                                     lambda: list(block.values())])
    return collections.OrderedDict(zip(self.big, [_unshaped(v) for v in values]))

  def merge(self, a, b):
    """a's rows, then b's, in slot 0 of level 0 of a `merged` accumulator."""
    out = collections.OrderedDict()
    if self.big:
      logical = [a['pieces'][p] for p in self.pieces] + [b['pieces'][p] for p in self.pieces]
      joined = collections.OrderedDict((n, self._concat(logical, n)) for n in self.big)
      out['pieces'] = collections.OrderedDict(
          (p, joined if p == self.levels[0][0] else self._empty_like(a['pieces'][p]))
          for p in self.pieces)
    if self.small:
      out['small'] = collections.OrderedDict(
          (n, _relaxed(tf.concat([a['small'][n], b['small'][n]], 0))) for n in self.small)
    out['counts'] = a['counts'] + b['counts']
    out['merged'] = tf.constant(1, tf.int32)
    return out

  def _stack(self, acc, name):
    """The pieces of one large field in logical order, `[K, ...]`: the one piece with rows is
    forwarded without a copy, several are concatenated."""
    parts = [acc['pieces'][p][name] for p in self.pieces]
    sizes = tf.stack([tf.shape(t)[0] for t in parts])
    nonempty = sizes > 0
    only = tf.cast(tf.argmax(tf.cast(nonempty, tf.int32)), tf.int32)
    forward = lambda: tf.switch_case(only, [lambda t=t: tf.identity(t) for t in parts])
    stack = tf.cond(tf.reduce_sum(tf.cast(nonempty, tf.int32)) <= 1, forward,
                    lambda: tf.concat(parts, axis=0))
    return tf.reshape(stack, [-1] + list(self.row_type[name].shape))

  def report(self, acc):
    stacks = collections.OrderedDict()
    for name in self.row_type:
      stacks[name] = (self._stack(acc, name) if name in self.big
                      else tf.identity(acc['small'][name]))
    return collections.OrderedDict(stacks=stacks, counts=tf.identity(acc['counts']))


def build_gather_computations(row_type: collections.OrderedDict, *,
                              limit_bytes: Optional[int], vector_size: int,
                              radices: Sequence[int] = RADICES,
                              small_row_bytes: int = SMALL_ROW_BYTES):
  """zero, accumulate, merge and report for `federated_gather` (exposed for runners and tests)."""
  layout = _Layout(row_type, radices, small_row_bytes)
  acc_type = layout.accumulator_type()
  in_type = row_with_status_type(row_type)
  max_clients = max_clients_for(layout.big_row_bytes, limit_bytes,
                                small_row_bytes=layout.small_row_bytes, radices=layout.radices)
  row_bytes = layout.big_row_bytes + layout.small_row_bytes
  if max_clients == 0:
    one = estimated_gather_bytes(layout.big_row_bytes, 1, small_row_bytes=layout.small_row_bytes,
                                 radices=layout.radices)
    raise _checks.ArgumentError(argument='max_gather_bytes', value=limit_bytes, message=(
        f'max_gather_bytes = {limit_bytes} admits no client: gathering one client of d = '
        f'{vector_size} ({row_bytes} bytes per client) needs an estimated {one} bytes in TFF\'s '
        f'C++ runtime. Raise the limit (the factory argument max_gather_bytes, '
        f'tff_conflict.aggregators.set_max_gather_bytes or {_ENV_LIMIT}; 0 or None: no check).'))

  @tff.tensorflow.computation
  def zero():
    return layout.zero()

  @tff.tensorflow.computation(acc_type, in_type)
  def accumulate(acc, row):
    checks = []
    if max_clients is not None:
      needed = acc['counts'][INCLUDED] + tf.cast(tf.equal(row['status'], INCLUDED), tf.int32)
      checks.append(tf.debugging.assert_less_equal(
          needed, tf.constant(max_clients, tf.int32),
          message=(
              f'tff_conflict.aggregators: refusing to gather this round in TFF\'s C++ runtime: '
              f'K (clients taking part, counted so far, first value below) would exceed the '
              f'limit K_max = {max_clients} for d = {vector_size} ({row_bytes} bytes per '
              f'client); the runtime holds an estimated '
              f'gather.estimated_gather_bytes({layout.big_row_bytes}, K, small_row_bytes='
              f'{layout.small_row_bytes}) bytes, and the limit is {limit_bytes} bytes '
              f'(the factory argument max_gather_bytes, '
              f'tff_conflict.aggregators.set_max_gather_bytes or {_ENV_LIMIT}). Use fewer '
              f'clients per round or the in-process runner.')))
    return layout.accumulate(acc, row, checks)

  @tff.tensorflow.computation(acc_type, acc_type)
  def merge(a, b):
    return layout.merge(a, b)

  @tff.tensorflow.computation(acc_type)
  def report(acc):
    return layout.report(acc)

  return zero, accumulate, merge, report


def federated_gather(rows, row_type: collections.OrderedDict, *, vector_size: int,
                     limit_bytes=_UNSET, radices: Sequence[int] = RADICES,
                     small_row_bytes: int = SMALL_ROW_BYTES):
  """Stacks every INCLUDED client row at the server; counts every row by status.

  Must be called inside a `tff.federated_computation`.

  Args:
    rows: a CLIENTS-placed value of `row_with_status_type(row_type)`.
    row_type: `OrderedDict` of field name -> `tff.TensorType` with fully defined shape.
    vector_size: d, reported in the memory-limit error.
    limit_bytes: memory limit for the C++ runtime check; default `max_gather_bytes()`.
    radices, small_row_bytes: the accumulator's layout (docs/design.md, "The gather"); the
      defaults are what the aggregators use, other values serve tests.

  Returns:
    A SERVER-placed value of `gathered_type(row_type)`: `stacks[name]` is `[K_in, ...]` with the
    included rows in client order (with several workers, in order within each worker's part; module
    docstring, "Order"), `counts[s]` the number of clients with status `s`
    (`INCLUDED`, `ZERO_WEIGHT`, `NON_FINITE`), so `sum(counts)` is every client of the round.
  """
  if limit_bytes is _UNSET:
    limit_bytes = max_gather_bytes()
  zero, accumulate, merge, report = build_gather_computations(
      row_type, limit_bytes=limit_bytes, vector_size=vector_size, radices=radices,
      small_row_bytes=small_row_bytes)
  return tff.federated_aggregate(rows, zero(), accumulate, merge, report)

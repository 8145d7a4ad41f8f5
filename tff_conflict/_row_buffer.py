"""Gathered stacks built in one preallocated buffer, for the in-process runner.

A gathering `federated_aggregate` (e.g. `tff_conflict.aggregators.gather`) has accumulator leaves
of shape `[None, ...]` that `merge` concatenates along axis 0. Merging such leaves pairwise copies
rows again and again, and the last merge holds its two inputs and its output at once: about two
`K x d` stacks plus partial stacks. Here those leaves are instead written row by row into one
buffer of `capacity` rows (the number of clients of the round), and the finished stack is handed
to TensorFlow without a copy (DLPack), so gathering K rows costs about one `K x d` stack.

`concatenated_leaves` finds the leaves for which that is exact: it checks, on small random
accumulators, that `merge` concatenates them and that `merge`'s other leaves do not depend on them.
"""

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

_ALIGN = 64  # bytes; TensorFlow's CPU kernels expect (at most) 64-byte aligned buffers


def _aligned_empty(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + _ALIGN, np.uint8)
  offset = (-raw.ctypes.data) % _ALIGN
  return raw[offset:offset + nbytes].view(dtype).reshape(tuple(shape))


def _to_tensor(array: np.ndarray) -> tf.Tensor:
  """A CPU tensor sharing `array`'s memory (DLPack) where possible, else a copy."""
  if array.size and array.dtype != np.bool_:
    try:
      return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    except Exception:  # pylint: disable=broad-except
      pass  # e.g. a dtype DLPack does not carry: fall back to a copy
  return tf.convert_to_tensor(array)


class RowBuffer:
  """Rows of one `[None, ...]` accumulator leaf, appended in order into one buffer."""

  def __init__(self, row_shape: Sequence[int], dtype: tf.DType, capacity: int):
    self._row_shape = tuple(int(n) for n in row_shape)
    self._dtype = tf.dtypes.as_dtype(dtype)
    self._array = _aligned_empty((max(int(capacity), 1),) + self._row_shape,
                                 self._dtype.as_numpy_dtype)
    self._size = 0

  @property
  def size(self) -> int:
    return self._size

  def append(self, rows: tf.Tensor) -> None:
    """Copies `rows` (`[n, *row_shape]`, n >= 0) after the rows already held."""
    rows = rows.numpy() if hasattr(rows, 'numpy') else np.asarray(rows)
    n = rows.shape[0]
    if not n:
      return
    end = self._size + n
    if end > self._array.shape[0]:  # more rows than clients: grow (not the gather's case)
      grown = _aligned_empty((max(end, 2 * self._array.shape[0]),) + self._row_shape,
                             self._array.dtype)
      grown[:self._size] = self._array[:self._size]
      self._array = grown
    self._array[self._size:end] = rows
    self._size = end

  def to_tensor(self) -> tf.Tensor:
    """The `[size, *row_shape]` stack; the buffer is released once the tensor is."""
    array, self._array = self._array[:self._size], None
    return _to_tensor(array)


def _random_leaf(spec: tf.TensorSpec, rows: int | None, rng: np.random.Generator) -> tf.Tensor:
  shape = tuple(spec.shape)
  if rows is not None:
    shape = (rows,) + shape[1:]
  dtype = spec.dtype
  if dtype.is_bool:
    value = rng.random(shape) < 0.5
  elif dtype.is_integer:
    value = rng.integers(0, 3, size=shape)
  else:
    value = rng.normal(size=shape)
  return tf.constant(value, dtype=dtype)


def _same(a: tf.Tensor, b: tf.Tensor) -> bool:
  a, b = np.asarray(a), np.asarray(b)
  return a.shape == b.shape and a.dtype == b.dtype and bool(
      np.all((a == b) | ((a != a) & (b != b))))


def concatenated_leaves(specs: Sequence[tf.TensorSpec], zero: Sequence[tf.Tensor],
                        merge: Callable[[list[tf.Tensor]], list[tf.Tensor]]) -> list[int]:
  """Indices of the accumulator leaves that can be gathered in a `RowBuffer`.

  A leaf qualifies if its shape is `[None, ...]` with the rest known, `zero` gives it no rows, and,
  on random accumulators `a` (1 row) and `b` (2 rows), `merge(a, b)` gives `concat(a, b)` for it
  while every other leaf of `merge(a, b)` equals that of `merge` on `a` and `b` with these leaves
  emptied. Returns [] when no leaf qualifies or the check cannot run.
  """
  candidates = [
      i for i, s in enumerate(specs)
      if s.shape.rank and s.shape[0] is None and s.shape[1:].is_fully_defined()
      and (s.dtype.is_floating or s.dtype.is_integer or s.dtype.is_bool)
      and int(tf.shape(zero[i])[0]) == 0]
  others = [i for i in range(len(specs)) if i not in candidates]
  if not candidates or any(not specs[i].shape.is_fully_defined() for i in others):
    return []
  if any(not (specs[i].dtype.is_floating or specs[i].dtype.is_integer or specs[i].dtype.is_bool)
         for i in others):
    return []
  rng = np.random.default_rng(0)
  a = [_random_leaf(s, 1 if i in candidates else None, rng) for i, s in enumerate(specs)]
  b = [_random_leaf(s, 2 if i in candidates else None, rng) for i, s in enumerate(specs)]
  a_empty = [zero[i] if i in candidates else a[i] for i in range(len(specs))]
  b_empty = [zero[i] if i in candidates else b[i] for i in range(len(specs))]
  try:
    merged = merge(a + b)
    merged_empty = merge(a_empty + b_empty)
  except Exception:  # pylint: disable=broad-except
    return []
  for i in candidates:
    if not _same(merged[i], tf.concat([a[i], b[i]], axis=0)):
      return []
  for i in others:
    if not _same(merged[i], merged_empty[i]):
      return []
  return candidates

"""Gathered stacks built in one preallocated buffer, for the in-process runner (docs/design.md, "The
in-process runner").
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
  """Rows of one `[None, ...]` accumulator leaf, appended in order into one buffer.

  Takes a round's rows one by one into a buffer of K rows and hands the stack to TensorFlow
  without a copy (DLPack).
  """

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
    if tuple(rows.shape[1:]) != self._row_shape:
      raise ValueError(f'RowBuffer: rows of shape {tuple(rows.shape[1:])} in a buffer of rows of '
                       f'shape {self._row_shape}')
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


def sample_update(specs: Sequence[tf.TensorSpec], rng: np.random.Generator) -> list[tf.Tensor]:
  """A made-up client update for `accumulate`: floats in [0.5, 1.5), integers 0, booleans True.

  Positive finite floats and zero integers are what a client that takes part typically sends
  (weights > 0; statuses and counts 0), so the rows it gives are stacked, not left out.
  """
  out = []
  for spec in specs:
    shape = tuple(spec.shape)
    if not spec.shape.is_fully_defined():
      raise ValueError(f'update leaf of unknown shape {spec}')
    if spec.dtype.is_floating:  # drawn in float32 (or float64): no float64 copy of a float32 leaf
      kind = np.float64 if spec.dtype == tf.float64 else np.float32
      value = rng.random(shape, dtype=kind) + kind(0.5)
    elif spec.dtype.is_bool:
      value = np.ones(shape, np.bool_)
    else:
      value = np.zeros(shape)
    out.append(tf.constant(value, dtype=spec.dtype))
  return out


def _same(a: tf.Tensor, b: tf.Tensor) -> bool:
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape or a.dtype != b.dtype:
    return False
  return bool(np.array_equal(a, b, equal_nan=np.issubdtype(a.dtype, np.inexact)))


def _concatenates(merged: tf.Tensor, parts: Sequence[tf.Tensor]) -> bool:
  """Whether `merged` is `parts` concatenated along axis 0 (compared in place, no copy)."""
  merged = np.asarray(merged)
  start = 0
  for part in parts:
    part = np.asarray(part)
    end = start + part.shape[0]
    if end > merged.shape[0] or not _same(merged[start:end], part):
      return False
    start = end
  return start == merged.shape[0]


def _rows(t) -> int:
  return int(t.shape[0])  # eager tensors have static shapes


def concatenated_leaves(specs: Sequence[tf.TensorSpec], zero: Sequence[tf.Tensor],
                        merge: Callable[[list[tf.Tensor]], list[tf.Tensor]],
                        singles: Sequence[Sequence[tf.Tensor]]) -> list[int]:
  """Indices of the accumulator leaves that can be gathered in a `RowBuffer`.

  `singles` are accumulators of one client each, `accumulate(zero, update_k)` (at least three).
  The runner only ever merges such accumulators, with the buffered leaves emptied. A leaf
  qualifies if its shape is `[None, ...]` (the rest may be unknown in the spec: a single's rows
  fix it, and every single's rows must agree), `zero` gives it no rows, a single gives it rows,
  and, for singles s1, s2, s3, `merge(s1, s2)` and `merge(merge(s1, s2), s3)` give
  the concatenation of theirs for it. Every other leaf of those merges must also equal the same
  merges with the qualifying leaves emptied. Returns [] when no leaf qualifies or the check cannot
  run. The check is made on a few rows: a merge that stops concatenating beyond some size (e.g. a
  capped sample) is not caught.
  """
  singles = [list(s) for s in singles]
  if len(singles) < 3:
    raise ValueError(f'concatenated_leaves needs at least 3 single-client accumulators, got '
                     f'{len(singles)}')
  def same_row_shape(i):
    shapes = {tuple(single[i].shape[1:]) for single in singles if _rows(single[i])}
    return len(shapes) == 1 and specs[i].shape[1:].is_compatible_with(next(iter(shapes)))

  candidates = [
      i for i, s in enumerate(specs)
      if s.shape.rank and s.shape[0] is None
      and (s.dtype.is_floating or s.dtype.is_integer or s.dtype.is_bool)
      and _rows(zero[i]) == 0 and any(_rows(single[i]) > 0 for single in singles)
      and same_row_shape(i)]
  if not candidates:
    return []
  others = [i for i in range(len(specs)) if i not in candidates]
  emptied = [[zero[i] if i in candidates else single[i] for i in range(len(specs))]
             for single in singles]
  s1, s2, s3 = singles[:3]
  e1, e2, e3 = emptied[:3]
  try:
    m12 = list(merge(s1 + s2))
    m123 = list(merge(m12 + s3))
    n12 = list(merge(e1 + e2))
    n123 = list(merge(n12 + e3))
  except Exception:  # pylint: disable=broad-except
    return []
  for i in candidates:
    if not (_concatenates(m12[i], [s1[i], s2[i]])
            and _concatenates(m123[i], [s1[i], s2[i], s3[i]])):
      return []
  for i in others:
    if not (_same(m12[i], n12[i]) and _same(m123[i], n123[i])):
      return []
  return candidates


def row_shapes(indices: Sequence[int],
               singles: Sequence[Sequence[tf.Tensor]]) -> dict[int, tuple[int, ...]]:
  """The row shape of each leaf in `indices`, read off the first single that gives it rows."""
  out = {}
  for i in indices:
    rows = next(single[i] for single in singles if _rows(single[i]))
    out[i] = tuple(int(n) for n in rows.shape[1:])
  return out

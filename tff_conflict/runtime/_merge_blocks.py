"""Single-client accumulators merged in blocks, one TensorFlow call per block, for the in-process
runner (docs/design.md, "The in-process runner").
"""

from collections.abc import Sequence

import tensorflow as tf

from tff_conflict.runtime import _tf_stamp

BLOCK = 16  # single-client accumulators merged per call (a power of two)


def counter_sizes(n: int) -> list[int]:
  """The sizes of the binary counter's items after n single-client pushes (largest first)."""
  return [1 << b for b in reversed(range(n.bit_length())) if n >> b & 1]


def push(stack: list[tuple[int, list[tf.Tensor]]], count: int, item: list[tf.Tensor],
         merge: _tf_stamp.StampedComputation) -> None:
  """Pushes an accumulator of `count` clients on the binary counter `stack`, merging equal
  counts: `merge(older, newer)`."""
  while stack and stack[-1][0] == count:
    prev_count, prev = stack.pop()
    item = merge.call_tensors(prev + item)
    count += prev_count
  stack.append((count, item))


class MergeBlocks:
  """Merges a block of single-client accumulators in one call.

  `MergeBlocks(merge, specs)(singles)` merges up to `BLOCK` consecutive single-client
  accumulators by the runner's binary counter in one call (traced once per block size, run as
  built) and returns the counter's items. Blocks start at multiples of `BLOCK` (a power of two),
  so a full block is one complete subtree of the counter and the items pushed block by block give
  the tree, and the results, of merging client by client.
  """

  def __init__(self, merge: _tf_stamp.StampedComputation, specs: Sequence[tf.TensorSpec]):
    self._merge = merge
    self._specs = list(specs)
    self._traced: dict[int, _tf_stamp.TracedFunction] = {}

  def _trace(self, n: int) -> _tf_stamp.TracedFunction:
    num = len(self._specs)

    def merge_block(*tensors):
      stack: list[tuple[int, list[tf.Tensor]]] = []
      for k in range(n):
        push(stack, 1, list(tensors[k * num:(k + 1) * num]), self._merge)
      return [t for _, item in stack for t in item]

    return _tf_stamp.TracedFunction(merge_block, self._specs * n, optimize=False)

  def __call__(self, singles: Sequence[list[tf.Tensor]]) -> list[tuple[int, list[tf.Tensor]]]:
    """The counter's items (count, accumulator), largest first, after pushing `singles`."""
    n = len(singles)
    if not 1 <= n <= BLOCK:
      raise ValueError(f'a block holds 1 to {BLOCK} accumulators, got {n}')
    if n not in self._traced:
      self._traced[n] = self._trace(n)
    out = self._traced[n]([t for single in singles for t in single])
    num = len(self._specs)
    return [(size, out[k * num:(k + 1) * num]) for k, size in enumerate(counter_sizes(n))]

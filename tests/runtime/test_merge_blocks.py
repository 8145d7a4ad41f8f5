"""tff_conflict.runtime._merge_blocks: blocks of single-client accumulators merged in one call give
the binary counter's tree of one merge per client."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.runtime import _merge_blocks
from tff_conflict.runtime import _tf_stamp


def test_counter_sizes():
  assert _merge_blocks.counter_sizes(0) == []
  assert _merge_blocks.counter_sizes(1) == [1]
  assert _merge_blocks.counter_sizes(13) == [8, 4, 1]
  assert _merge_blocks.counter_sizes(16) == [16]


def _merge():
  """merge(a, b) = (a's label string + '(' + b's + ')', a's sum + b's): records the tree."""
  spec = (tff.TensorType(np.str_), tff.TensorType(np.float32))

  @tff.tensorflow.computation(spec, spec)
  def merge(a, b):
    return (tf.strings.join([a[0], '(', b[0], ')']), a[1] + b[1])

  return _tf_stamp.StampedComputation(merge, 'merge')


@pytest.mark.parametrize('num_clients', [1, 5, 16, 17, 37])
def test_blocks_give_the_tree_of_one_merge_per_client(num_clients):
  merge = _merge()
  singles = [[tf.constant(str(k)), tf.constant(float(k), tf.float32)]
             for k in range(num_clients)]
  expected: list = []
  for single in singles:
    _merge_blocks.push(expected, 1, list(single), merge)
  blocks = _merge_blocks.MergeBlocks(merge, [tf.TensorSpec([], tf.string),
                                             tf.TensorSpec([], tf.float32)])
  stack: list = []
  for start in range(0, num_clients, _merge_blocks.BLOCK):
    for count, item in blocks(singles[start:start + _merge_blocks.BLOCK]):
      _merge_blocks.push(stack, count, item, merge)
  assert [c for c, _ in stack] == [c for c, _ in expected]
  for (_, item), (_, want) in zip(stack, expected):
    assert item[0].numpy() == want[0].numpy()
    assert item[1].numpy() == want[1].numpy()
  with pytest.raises(ValueError, match='block'):
    blocks(singles * 17)

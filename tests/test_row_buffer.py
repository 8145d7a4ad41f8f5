"""tff_conflict._row_buffer: gathered stacks in one buffer, and the check that allows it."""

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import _row_buffer


def test_rows_arrive_in_order_and_the_stack_is_exact():
  rng = np.random.default_rng(0)
  buffer = _row_buffer.RowBuffer([3, 2], tf.float32, capacity=4)
  chunks = [rng.normal(size=(n, 3, 2)).astype(np.float32) for n in (1, 0, 2, 1)]
  for chunk in chunks:
    buffer.append(tf.constant(chunk))
  assert buffer.size == 4
  stack = buffer.to_tensor()
  assert stack.dtype == tf.float32 and stack.shape == (4, 3, 2)
  np.testing.assert_array_equal(stack.numpy(), np.concatenate(chunks))


def test_more_rows_than_capacity_grow_the_buffer():
  buffer = _row_buffer.RowBuffer([2], tf.int32, capacity=2)
  values = np.arange(14, dtype=np.int32).reshape(7, 2)
  for row in values:
    buffer.append(tf.constant(row[np.newaxis]))
  np.testing.assert_array_equal(buffer.to_tensor().numpy(), values)


def test_fewer_rows_than_capacity_and_bool_rows():
  buffer = _row_buffer.RowBuffer([], tf.bool, capacity=5)
  buffer.append(tf.constant([True, False]))
  np.testing.assert_array_equal(buffer.to_tensor().numpy(), [True, False])


def test_stack_is_aligned_and_usable_in_tf_function():
  buffer = _row_buffer.RowBuffer([1001], tf.float32, capacity=3)
  for k in range(3):
    buffer.append(tf.fill([1, 1001], float(k)))
  stack = buffer.to_tensor()
  total = tf.function(lambda x: tf.reduce_sum(x, axis=1))(stack)
  np.testing.assert_array_equal(total.numpy(), [0.0, 1001.0, 2002.0])


def _specs_zero(merge_fn):
  specs = [tf.TensorSpec([], tf.float32), tf.TensorSpec([None, 3], tf.float32),
           tf.TensorSpec([None], tf.int32), tf.TensorSpec([2], tf.int64)]
  zero = [tf.constant(0.0), tf.zeros([0, 3]), tf.zeros([0], tf.int32), tf.zeros([2], tf.int64)]
  return specs, zero, lambda flat: merge_fn(flat[:4], flat[4:])


def test_concatenating_merge_is_recognized():
  specs, zero, merge = _specs_zero(lambda a, b: [
      a[0] + b[0], tf.concat([a[1], b[1]], 0), tf.concat([a[2], b[2]], 0), a[3] + b[3]])
  assert _row_buffer.concatenated_leaves(specs, zero, merge) == [1, 2]


@pytest.mark.parametrize('merge_fn', [
    # b before a: a different order.
    lambda a, b: [a[0] + b[0], tf.concat([b[1], a[1]], 0), tf.concat([a[2], b[2]], 0), a[3]],
    # rows combined, not stacked.
    lambda a, b: [a[0] + b[0], a[1][:1] + b[1][:1], tf.concat([a[2], b[2]], 0), a[3]],
    # another leaf depends on the rows (their count).
    lambda a, b: [a[0] + tf.cast(tf.shape(a[1])[0] + tf.shape(b[1])[0], tf.float32),
                  tf.concat([a[1], b[1]], 0), tf.concat([a[2], b[2]], 0), a[3]],
    # another leaf depends on the rows (their values).
    lambda a, b: [a[0] + tf.reduce_sum(b[1]), tf.concat([a[1], b[1]], 0),
                  tf.concat([a[2], b[2]], 0), a[3]],
])
def test_other_merges_are_not_buffered(merge_fn):
  specs, zero, merge = _specs_zero(merge_fn)
  assert _row_buffer.concatenated_leaves(specs, zero, merge) == []


def test_no_candidate_or_failing_merge_gives_no_leaves():
  specs = [tf.TensorSpec([2], tf.float32)]
  assert _row_buffer.concatenated_leaves(specs, [tf.zeros([2])], lambda flat: [flat[0]]) == []

  def failing(flat):
    raise tf.errors.InvalidArgumentError(None, None, 'no')

  specs, zero, _ = _specs_zero(None)
  assert _row_buffer.concatenated_leaves(specs, zero, failing) == []

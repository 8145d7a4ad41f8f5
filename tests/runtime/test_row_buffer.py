"""tff_conflict.runtime._row_buffer: gathered stacks in one buffer, and the check that allows it."""

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict.runtime import _row_buffer


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


# A toy accumulator: [float sum, [None, 3] rows, [None] int ids, int64[2] counter]; a client's
# update is (row [3], id).
LEAF_SIGNATURES = [tf.TensorSpec([], tf.float32), tf.TensorSpec([None, 3], tf.float32),
         tf.TensorSpec([None], tf.int32), tf.TensorSpec([2], tf.int64)]
ZERO = [tf.constant(0.0), tf.zeros([0, 3]), tf.zeros([0], tf.int32), tf.zeros([2], tf.int64)]


def _singles(n=3):
  rng = np.random.default_rng(1)
  out = []
  for k in range(n):
    row = tf.constant(rng.normal(size=(1, 3)), tf.float32)
    out.append([tf.reduce_sum(row), row, tf.constant([k], tf.int32), tf.constant([1, 0], tf.int64)])
  return out


def _check(merge_fn, singles=None):
  merge = lambda flat: merge_fn(flat[:4], flat[4:])
  return _row_buffer.concatenated_leaves(LEAF_SIGNATURES, ZERO, merge, singles or _singles())


def test_concatenating_merge_is_recognized():
  assert _check(lambda a, b: [
      a[0] + b[0], tf.concat([a[1], b[1]], 0), tf.concat([a[2], b[2]], 0), a[3] + b[3]]) == [1, 2]


def test_leaf_no_single_fills_is_not_buffered():
  singles = _singles()
  for single in singles:
    single[2] = tf.zeros([0], tf.int32)
  assert _check(lambda a, b: [
      a[0] + b[0], tf.concat([a[1], b[1]], 0), tf.concat([a[2], b[2]], 0), a[3] + b[3]],
                singles) == [1]


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
    # concatenates two singles, but not a merged accumulator and a single (keeps the last 2 rows).
    lambda a, b: [a[0] + b[0], tf.concat([a[1], b[1]], 0)[-2:], tf.concat([a[2], b[2]], 0), a[3]],
])
def test_other_merges_are_not_buffered(merge_fn):
  assert _check(merge_fn) == []


def test_no_candidate_or_failing_merge_gives_no_leaves():
  specs = [tf.TensorSpec([2], tf.float32)]
  single = [tf.ones([2])]
  assert _row_buffer.concatenated_leaves(specs, [tf.zeros([2])], lambda flat: [flat[0]],
                                         [single] * 3) == []

  def failing(a, b):
    raise tf.errors.InvalidArgumentError(None, None, 'no')

  assert _check(failing) == []
  with pytest.raises(ValueError, match='at least 3'):
    _row_buffer.concatenated_leaves(LEAF_SIGNATURES, ZERO, lambda flat: flat[:4], _singles(2))


def test_sample_update_is_a_taking_part_client():
  specs = [tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([], tf.int32),
           tf.TensorSpec([4], tf.bool), tf.TensorSpec([], tf.float64)]
  values = _row_buffer.sample_update(specs, np.random.default_rng(0))
  assert [v.dtype for v in values] == [s.dtype for s in specs]
  assert [tuple(v.shape) for v in values] == [(2, 3), (), (4,), ()]
  assert np.all((values[0].numpy() >= 0.5) & (values[0].numpy() < 1.5))
  assert int(values[1]) == 0 and bool(np.all(values[2].numpy()))
  with pytest.raises(ValueError, match='unknown shape'):
    _row_buffer.sample_update([tf.TensorSpec([None], tf.float32)], np.random.default_rng(0))


def test_row_shape_unknown_in_the_spec_is_read_off_the_singles():
  specs = list(LEAF_SIGNATURES)
  specs[1] = tf.TensorSpec([None, None], tf.float32)   # as gather declares its pieces
  merge = lambda flat: [flat[0] + flat[4], tf.concat([flat[1], flat[5]], 0),
                        tf.concat([flat[2], flat[6]], 0), flat[3] + flat[7]]
  singles = _singles()
  leaves = _row_buffer.concatenated_leaves(specs, ZERO, merge, singles)
  assert leaves == [1, 2]
  assert _row_buffer.row_shapes(leaves, singles) == {1: (3,), 2: ()}
  # Singles whose rows disagree on their shape: that leaf is not buffered (and here the merges
  # that check the other leaves cannot even run, so nothing is).
  singles[2][1] = tf.zeros([1, 4])
  assert _row_buffer.concatenated_leaves(specs, ZERO, merge, singles) == []


def test_rows_of_another_shape_are_refused():
  buffer = _row_buffer.RowBuffer([3], tf.float32, capacity=2)
  with pytest.raises(ValueError, match=r'shape \(4,\)'):
    buffer.append(tf.zeros([1, 4]))

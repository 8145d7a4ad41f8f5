"""Tests of `partition_to_client_data` / `ArrayClientData`."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import data
from tff_conflict.data import client_data as client_data_lib


def _arrays(n=30, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, 3, 2)), rng.integers(0, 4, size=n)


def _elements(dataset):
  return [(e['x'].numpy(), int(e['y'].numpy())) for e in dataset]


def test_clients_hold_their_rows_in_order():
  x, y = _arrays()
  partition = [np.array([4, 0, 7]), np.array([1]), np.arange(10, 30)]
  cd = data.partition_to_client_data(x, y, partition)
  assert cd.client_ids == ['0', '1', '2']
  assert cd.element_type_structure == collections.OrderedDict(
      x=tf.TensorSpec([3, 2], tf.float32), y=tf.TensorSpec([], tf.int32))
  for cid, rows in zip(cd.client_ids, partition):
    got = _elements(cd.create_tf_dataset_for_client(cid))
    assert len(got) == len(rows)
    for (gx, gy), i in zip(got, rows):
      np.testing.assert_array_equal(gx, x[i].astype(np.float32))
      assert gy == y[i]
  np.testing.assert_array_equal(cd.client_sizes, [3, 1, 20])
  expected_counts = np.zeros((3, 4), np.int64)
  for k, rows in enumerate(partition):
    for i in rows:
      expected_counts[k, y[i]] += 1
  np.testing.assert_array_equal(cd.label_counts, expected_counts)


def test_ids_are_zero_padded_in_numeric_order():
  x, y = _arrays(12)
  cd = data.partition_to_client_data(x, y, [np.array([i]) for i in range(12)])
  assert cd.client_ids == [f'{i:02d}' for i in range(12)]
  assert cd.client_ids == sorted(cd.client_ids)
  assert _elements(cd.create_tf_dataset_for_client('11'))[0][1] == y[11]


def test_all_clients_and_dataset_computation():
  x, y = _arrays()
  partition = data.dirichlet_partition(y, 4, 1.0, seed=0)
  cd = data.partition_to_client_data(x, y, partition)
  pooled = _elements(cd.create_tf_dataset_from_all_clients())
  assert sorted(v for _, v in pooled) == sorted(y.tolist())
  # Again: the arrays' tensors first made inside the first call's trace must not be reused.
  again = _elements(cd.create_tf_dataset_from_all_clients())
  assert sorted(v for _, v in again) == sorted(y.tolist())
  # TFF traces the dataset function in a tf.Graph (no eager tensors there).
  through_tff = cd.dataset_computation(cd.client_ids[2])
  assert [v for _, v in _elements(through_tff)] == y[partition[2]].tolist()


def test_empty_client_is_allowed():
  x, y = _arrays()
  cd = data.partition_to_client_data(x, y, [np.arange(5), np.zeros(0, np.int64)])
  assert _elements(cd.create_tf_dataset_for_client('1')) == []
  assert cd.label_counts[1].sum() == 0


def test_transform_is_applied():
  x = np.arange(2 * 4, dtype=np.uint8).reshape(2, 2, 2, 1) * 30
  cd = client_data_lib.ArrayClientData(x, np.array([0, 1]), [np.array([1, 0])],
                                       transform=lambda v: tf.cast(v, tf.float32) / 255.0)
  got = _elements(cd.create_tf_dataset_for_client('0'))
  np.testing.assert_allclose(got[0][0], x[1] / 255.0, rtol=1e-6)


def test_eager_and_graph_creation_give_the_same_elements():
  # Eagerly a client's rows are indexed in numpy; in a graph with TF ops: the same examples.
  x = np.arange(5 * 4, dtype=np.uint8).reshape(5, 2, 2, 1) * 12
  y = np.array([3, 0, 2, 1, 2])
  cd = client_data_lib.ArrayClientData(
      x, y, [np.array([3, 1, 4]), np.zeros(0, np.int64), np.array([0, 2])],
      transform=lambda v: tf.cast(v, tf.float32) / 255.0)
  for cid in cd.client_ids:
    eager = cd.create_tf_dataset_for_client(cid)
    graph = cd.dataset_computation(cid)
    assert eager.element_spec == graph.element_spec == cd.element_type_structure
    for (ex, ey), (gx, gy) in zip(_elements(eager), _elements(graph), strict=True):
      # (1 ulp apart at most: a graph may run the division as a multiplication by 1 / 255)
      np.testing.assert_allclose(ex, gx, rtol=1e-6)
      assert ey == gy
  np.testing.assert_allclose(_elements(cd.create_tf_dataset_for_client('0'))[2][0], x[4] / 255.0,
                             rtol=1e-6)


@pytest.mark.parametrize('x,y,partition,match', [
    (np.zeros((3, 2)), np.zeros(4, int), [np.arange(3)], 'same N'),
    (np.zeros((3, 2)), np.array([0.5, 1, 1]), [np.arange(3)], 'y must'),
    (np.zeros((3, 2)), np.array([0, -1, 1]), [np.arange(3)], 'y must'),
    (np.zeros((3, 2)), np.zeros(3, int), [np.array([0, 3])], r'partition\[0\].*outside'),
    (np.zeros((3, 2)), np.zeros(3, int), [np.array([0.0, 1.0])], r'partition\[0\].*integer'),
    (np.zeros((3, 2)), np.zeros(3, int), [], 'at least one client'),
    (np.array([['a'], ['b']]), np.zeros(2, int), [np.arange(2)], 'x must be numeric'),
])
def test_bad_input(x, y, partition, match):
  with pytest.raises(ValueError, match=match):
    data.partition_to_client_data(x, y, partition)


def test_non_finite_inputs_and_labels_out_of_range_are_refused_at_load():
  x = np.zeros((4, 2), np.float32)
  y = np.array([0, 1, 2, 1])
  parts = [np.array([0, 1]), np.array([2, 3])]
  x[2, 1] = np.nan
  with pytest.raises(ValueError, match=r'x must be finite: 1 examples hold NaN or inf \(the '
                     r'first is example 2\)'):
    client_data_lib.ArrayClientData(x, y, parts)
  x[2, 1] = 0.0
  with pytest.raises(ValueError, match=r'y must hold class indices in \[0, 2\), got label 2 '
                     r'\(example 2\)'):
    client_data_lib.ArrayClientData(x, y, parts, num_classes=2)
  client_data_lib.ArrayClientData(x, y, parts, num_classes=3)

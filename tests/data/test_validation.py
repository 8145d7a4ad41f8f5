"""`split_validation`: every training example in exactly one of (fit, validation), seeded."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.data import leaf_fixtures
from tff_conflict import data
from tff_conflict.data import validation


def _values(client_data, client_id):
  return sorted(float(e['x'].numpy()[0]) for e in
                client_data.create_tf_dataset_for_client(client_id))


def test_array_client_data_split_is_exact_per_client():
  train, _ = data.digits(num_clients=10, alpha=0.5, seed=0)
  fit, validation = data.split_validation(train, 0.2, seed=3)
  assert fit.client_ids == validation.client_ids == train.client_ids
  for k, (whole, f, v) in enumerate(zip(train.partition, fit.partition, validation.partition)):
    n = whole.size
    assert v.size == min(int(round(0.2 * n)), n - 1), k
    assert f.size >= 1
    np.testing.assert_array_equal(np.sort(np.concatenate([f, v])), np.sort(whole))
    assert not set(f.tolist()) & set(v.tolist())
    chosen = np.random.default_rng([3, k]).choice(n, size=v.size, replace=False)
    np.testing.assert_array_equal(np.sort(v), np.sort(whole[chosen]))
    np.testing.assert_array_equal(f, np.delete(whole, chosen))  # training order kept
  np.testing.assert_array_equal(fit.label_counts + validation.label_counts, train.label_counts)


def test_array_split_is_seeded():
  train, _ = data.digits(num_clients=5, seed=0)
  a = data.split_validation(train, 0.25, seed=1)[1].partition
  b = data.split_validation(train, 0.25, seed=1)[1].partition
  c = data.split_validation(train, 0.25, seed=2)[1].partition
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_a_one_example_client_keeps_it_for_training():
  train = data.partition_to_client_data(np.arange(5.0)[:, None], np.zeros(5, np.int32),
                                        [np.array([0]), np.array([1, 2, 3, 4])])
  fit, validation = data.split_validation(train, 0.5, seed=0)
  assert list(fit.client_sizes) == [1, 2] and list(validation.client_sizes) == [0, 2]


def _tagged_clients(sizes, ragged=False):
  """TestClientData whose client k's example at position p has x = [1000 k + p] (or, ragged,
  x of length 1 + p % 3 starting with that value)."""
  rng = np.random.default_rng(0)
  clients = {}
  for k, n in enumerate(sizes):
    tags = 1000 * k + np.arange(n, dtype=np.float32)
    y = rng.integers(0, 3, n).astype(np.int32)
    if ragged:
      clients[f'c{k}'] = [collections.OrderedDict(x=np.full(1 + p % 3, t, np.float32), y=y[p])
                          for p, t in enumerate(tags)]
    else:
      clients[f'c{k}'] = collections.OrderedDict(x=tags[:, None], y=y)
  if ragged:
    def dataset_fn(client_id):
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      rows = clients[client_id]
      return tf.data.Dataset.from_generator(
          lambda: iter(rows), output_signature=collections.OrderedDict(
              x=tf.TensorSpec([None], tf.float32), y=tf.TensorSpec([], tf.int32)))
    return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(sorted(clients), dataset_fn)
  return tff.simulation.datasets.TestClientData(clients)


def _positions(client_data, client_id):
  return [int(e['x'].numpy()[0]) % 1000 for e in
          client_data.create_tf_dataset_for_client(client_id)]


SIZES = [0, 1, 2, 3, 5, 7, 10, 200]


@pytest.mark.parametrize('n,fraction,held', [(0, 0.3, 0), (1, 0.5, 0), (2, 0.2, 0), (2, 0.9, 1),
                                             (3, 0.5, 2), (5, 0.5, 2), (7, 0.5, 4), (10, 0.25, 2),
                                             (200, 0.3, 60), (4, 0.99, 3)])
def test_held_out_count_by_hand(n, fraction, held):
  assert validation.held_out_count(n, fraction) == held


def test_any_client_data_is_split_by_the_count_rule_in_order(fraction=0.5):
  train = _tagged_clients(SIZES)
  fit, held_out = data.split_validation(train, fraction, seed=5)
  assert list(fit.client_ids) == list(held_out.client_ids) == list(train.client_ids)
  assert fit.element_type_structure == held_out.element_type_structure == (
      train.element_type_structure)
  for cid, n in zip(train.client_ids, SIZES):
    f, v = _positions(fit, cid), _positions(held_out, cid)
    assert len(v) == validation.held_out_count(n, fraction), (cid, n)
    assert sorted(f + v) == list(range(n))  # no overlap, nothing lost
    assert f == sorted(f) and v == sorted(v)  # the client's order kept in both parts
    assert _positions(held_out, cid) == v  # read again: the same split
    labels = [int(e['y']) for e in train.create_tf_dataset_for_client(cid)]
    assert [int(e['y']) for e in held_out.create_tf_dataset_for_client(cid)] == [
        labels[p] for p in v]  # whole examples move, x with its y
  again = data.split_validation(train, fraction, seed=5)[1]
  other = data.split_validation(train, fraction, seed=6)[1]
  assert all(_positions(again, cid) == _positions(held_out, cid) for cid in train.client_ids)
  assert _positions(other, 'c7') != _positions(held_out, 'c7')


def test_every_position_is_held_out_equally_often():
  # 600 clients of 10 examples, 3 held out each: each position's share is 0.3 (binomial sd 0.019).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def dataset_fn(client_id):
    tags = 1000 * tf.strings.to_number(client_id) + tf.range(10, dtype=tf.float32)
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
        x=tags[:, None], y=tf.zeros([10], tf.int32)))

  train = tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      [str(k) for k in range(600)], dataset_fn)
  _, held_out = data.split_validation(train, 0.3, seed=0)
  counts = np.zeros(10)
  for element in held_out.create_tf_dataset_from_all_clients():
    counts[int(element['x'].numpy()[0]) % 1000] += 1
  assert counts.sum() == 1800
  assert np.all(np.abs(counts / 600 - 0.3) < 0.08), counts


def test_graph_mode_reads_the_same_split():
  train = _tagged_clients(SIZES)
  fit, held_out = data.split_validation(train, 0.3, seed=2)
  for part in (fit, held_out):
    eager = [(cid, p) for cid in part.client_ids for p in _positions(part, cid)]
    pooled = [int(e['x'].numpy()[0]) for e in part.create_tf_dataset_from_all_clients()]
    assert sorted(pooled) == sorted(1000 * int(cid[1:]) + p for cid, p in eager)
    via_tff = [int(e['x'][0]) % 1000 for e in part.dataset_computation('c7').as_numpy_iterator()]
    assert via_tff == _positions(part, 'c7')


def test_elements_of_varying_shape_are_split_the_same_way():
  ragged = _tagged_clients(SIZES, ragged=True)
  dense = _tagged_clients(SIZES)
  for part_ragged, part_dense in zip(data.split_validation(ragged, 0.4, seed=1),
                                     data.split_validation(dense, 0.4, seed=1)):
    for cid in dense.client_ids:
      assert _positions(part_ragged, cid) == _positions(part_dense, cid)
    lengths = [e['x'].shape[0] for e in part_ragged.create_tf_dataset_for_client('c7')]
    assert lengths == [1 + p % 3 for p in _positions(part_ragged, 'c7')]


def test_leaf_writers_are_split_by_the_count_rule(tmp_path):
  _, expected = leaf_fixtures.femnist(str(tmp_path), sizes=[1, 2, 5, 3, 6, 9, 4])
  train, _ = data.leaf(str(tmp_path / 'data' / 'femnist'))
  fit, held_out = data.split_validation(train, 0.25, seed=0)
  got_fit, got_held = leaf_fixtures.read_split(fit), leaf_fixtures.read_split(held_out)
  for cid, (x, y) in expected['train'].items():
    n = y.size
    assert got_held[cid][1].size == validation.held_out_count(n, 0.25)
    assert got_fit[cid][1].size == n - validation.held_out_count(n, 0.25) >= 1
    rows = [r for r in (got_fit[cid][0], got_held[cid][0]) if r is not None]
    np.testing.assert_array_equal(np.sort(np.concatenate(rows).reshape(n, -1), axis=0),
                                  np.sort(x.reshape(n, -1), axis=0))


@pytest.mark.parametrize('fraction', [0, 1, 1.5, -0.1, True, 'x'])
def test_bad_fraction(fraction):
  train, _ = data.digits(num_clients=3)
  with pytest.raises(ValueError, match='fraction must be a number in'):
    data.split_validation(train, fraction, seed=0)

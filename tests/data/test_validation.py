"""`split_validation`: every training example in exactly one of (fit, validation), seeded."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_conflict import data


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


def test_any_client_data_is_split_per_example_and_stably():
  rng = np.random.default_rng(0)
  clients = {f'c{k}': collections.OrderedDict(
      x=(1000 * k + np.arange(200, dtype=np.float32))[:, None],
      y=rng.integers(0, 3, 200).astype(np.int32)) for k in range(3)}
  train = tff.simulation.datasets.TestClientData(clients)
  fit, validation = data.split_validation(train, 0.3, seed=5)
  assert list(fit.client_ids) == list(validation.client_ids) == list(train.client_ids)
  held = 0
  for cid in train.client_ids:
    f, v = _values(fit, cid), _values(validation, cid)
    assert sorted(f + v) == _values(train, cid)
    assert not set(f) & set(v)
    held += len(v)
    assert _values(validation, cid) == v  # read again: the same split
  assert 0.2 < held / 600 < 0.4
  other = data.split_validation(train, 0.3, seed=6)[1]
  assert any(_values(other, cid) != _values(validation, cid) for cid in train.client_ids)


@pytest.mark.parametrize('fraction', [0, 1, 1.5, -0.1, True, 'x'])
def test_bad_fraction(fraction):
  train, _ = data.digits(num_clients=3)
  with pytest.raises(ValueError, match='fraction must be a number in'):
    data.split_validation(train, fraction, seed=0)

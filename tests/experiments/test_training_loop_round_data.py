"""experiments.training_loop.RoundData: a round's datasets made in one traced call equal those made
one client at a time (in-memory arrays, their validation split, TFF's test client data); client
data whose dataset function cannot be traced is read one client at a time."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from experiments import config as config_lib
from experiments import training_loop
from tests.experiments import conftest
from tff_conflict import data


def _elements(dataset):
  return [(b['x'], b['y']) for b in dataset.as_numpy_iterator()]


def _assert_same_datasets(actual, expected):
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    assert a.element_spec == e.element_spec
    a, e = _elements(a), _elements(e)
    assert len(a) == len(e)
    for (ax, ay), (ex, ey) in zip(a, e):
      np.testing.assert_array_equal(ax, ex)
      np.testing.assert_array_equal(ay, ey)


def _client_data(kind):
  if kind == 'tff_test':
    return conftest.make_tiny_client_data(num_clients=5, examples_per_client=23)[0]
  train, _ = data.digits(num_clients=8, alpha=0.5, seed=0)
  if kind == 'split':
    return data.split_validation(train, 0.2, seed=1)[0]
  return train


@pytest.mark.parametrize('kind', ['arrays', 'split', 'tff_test'])
@pytest.mark.parametrize('epochs,shuffle_buffer', [(1, 1000), (2, 5), (1, 0)])
def test_round_datasets_equal_one_client_at_a_time(kind, epochs, shuffle_buffer):
  train = _client_data(kind)
  config = config_lib.LoopConfig(rounds=3, clients_per_round=3, batch_size=4, seed=3,
                                 client_epochs=epochs, shuffle_buffer=shuffle_buffer)
  make = training_loop.RoundData(train, config)
  for round_num, ids in ((1, train.client_ids[:3]), (2, train.client_ids[1:4]),
                         (3, train.client_ids[:1])):
    expected = [training_loop.preprocess(train.create_tf_dataset_for_client(cid), config,
                                      round_num=round_num, client_index=i)
                for i, cid in enumerate(ids)]
    _assert_same_datasets(make(ids, round_num), expected)
  assert make([], 1) == []


class _EagerOnlyClientData(tff.simulation.datasets.ClientData):
  """Client data whose dataset function reads the client id in Python (not traceable)."""

  def __init__(self, inner):
    super().__init__()
    self._inner = inner

  def _dataset_fn(self, client_id):
    return self._inner.create_tf_dataset_for_client(client_id.numpy().decode()
                                                    if hasattr(client_id, 'numpy') else client_id)

  @property
  def client_ids(self):
    return self._inner.client_ids

  @property
  def serializable_dataset_fn(self):
    return self._dataset_fn

  @property
  def element_type_structure(self):
    return self._inner.element_type_structure


class _OtherShapesWhenTracedClientData(_EagerOnlyClientData):
  """Client data whose traced dataset function loses the examples' shape (a traced dataset
  would have another element spec than the eager one)."""

  def _dataset_fn(self, client_id):
    dataset = self._inner.serializable_dataset_fn(client_id)
    if tf.executing_eagerly():
      return dataset
    return dataset.map(lambda e: {'x': tf.reshape(e['x'], [-1]), 'y': e['y']})


@pytest.mark.parametrize('wrapper', [_EagerOnlyClientData, _OtherShapesWhenTracedClientData])
def test_client_data_that_cannot_be_traced_alike_is_read_one_client_at_a_time(wrapper):
  """Untraceable, or traced to other shapes than the eager dataset's."""
  inner = _client_data('arrays')
  train = wrapper(inner)
  config = config_lib.LoopConfig(rounds=1, clients_per_round=2, batch_size=4, seed=0)
  ids = train.client_ids[:2]
  expected = [training_loop.preprocess(inner.create_tf_dataset_for_client(cid), config,
                                       round_num=1, client_index=i) for i, cid in enumerate(ids)]
  _assert_same_datasets(training_loop.RoundData(train, config)(ids, 1), expected)

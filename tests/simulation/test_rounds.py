"""tff_conflict.simulation.rounds: client sampling by (seed, round), seeded preprocessing, and
RoundData: a round's datasets made in one traced call equal those made one client at a time
(in-memory arrays, their validation split, TFF's test client data); client data whose dataset
function cannot be traced is read one client at a time."""

import collections
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from experiments import config as config_lib
from tests.experiments import conftest
from tff_conflict import _checks
from tff_conflict import data
from tff_conflict import learning
from tff_conflict.simulation import rounds


def test_sample_clients_depends_only_on_seed_and_round():
  ids = [f'c{i}' for i in range(20)]
  a = rounds.sample_clients(ids, 5, seed=1, round_num=3)
  assert a == rounds.sample_clients(ids, 5, seed=1, round_num=3)
  assert len(set(a)) == 5 and a == sorted(a, key=ids.index)
  others = {tuple(rounds.sample_clients(ids, 5, seed=s, round_num=r))
            for s, r in [(1, 4), (2, 3), (1, 5)]}
  assert tuple(a) not in others or len(others) > 1
  # Round 3's sample is the same whatever was drawn before (no shared generator state).
  rounds.sample_clients(ids, 5, seed=1, round_num=2)
  assert rounds.sample_clients(ids, 5, seed=1, round_num=3) == a
  for too_many in (0, 21):
    with pytest.raises(_checks.ArgumentError,
                       match=rf'^num_clients must be an integer in \[1, 20\], got {too_many}$'
                       ) as refused:
      rounds.sample_clients(ids, too_many, seed=1, round_num=3)
    assert (refused.value.argument, refused.value.value) == ('num_clients', too_many)
  assert rounds.sample_clients(ids, 20, seed=0, round_num=1) == ids
  with pytest.raises(ValueError, match='num_clients'):
    rounds.sample_clients(ids, 21, seed=0, round_num=1)


def test_sample_frequencies_are_uniform():
  ids = [str(i) for i in range(10)]
  counts = collections.Counter(c for r in range(1, 2001)
                               for c in rounds.sample_clients(ids, 3, seed=0, round_num=r))
  # Each client is drawn with probability 3/10: 600 of 2000 rounds (std about 20).
  assert all(abs(n - 600) < 100 for n in counts.values()), counts


def test_preprocess_is_seeded_per_round_and_client():
  train, _ = conftest.make_tiny_client_data(examples_per_client=40)
  config = config_lib.LoopConfig(rounds=1, clients_per_round=1, batch_size=8,
                                 client_epochs=2, seed=5)
  ds = train.create_tf_dataset_for_client('c0')
  labels = lambda d: np.concatenate([b['y'] for b in d.as_numpy_iterator()]).tolist()
  a = labels(rounds.preprocess(ds, config, round_num=1, client_index=0))
  assert a == labels(rounds.preprocess(ds, config, round_num=1, client_index=0))
  assert len(a) == 80 and sorted(a) == sorted(labels(ds.batch(40)) * 2)
  b = labels(rounds.preprocess(ds, config, round_num=2, client_index=0))
  assert a != b


def test_any_config_with_the_four_fields_preprocesses_as_a_loop_config():
  train, _ = conftest.make_tiny_client_data(examples_per_client=40)
  loop = config_lib.LoopConfig(rounds=1, clients_per_round=1, batch_size=8, client_epochs=2,
                               seed=5)
  plain = types.SimpleNamespace(shuffle_buffer=loop.shuffle_buffer, seed=5, client_epochs=2,
                                batch_size=8)
  ds = train.create_tf_dataset_for_client('c0')
  _assert_same_datasets([rounds.preprocess(ds, plain, round_num=2, client_index=1)],
                        [rounds.preprocess(ds, loop, round_num=2, client_index=1)])


def test_a_checkpointed_state_restores_the_controls_saved_with_it():
  assert rounds.checkpointed('state', None, 3) == 'state'
  assert rounds.restored('state', None) == 'state'
  saved = learning.ClientControls(['a', 'b'], 2)
  saved.restore(collections.OrderedDict(controls=np.array([[1, 2], [3, 4]], np.float32),
                                        participated=np.array([True, True]), version=3))
  checkpoint = rounds.checkpointed('state', saved, 3)
  assert list(checkpoint) == ['state', 'client_controls']
  fresh = learning.ClientControls(['a', 'b'], 2)
  assert rounds.restored(checkpoint, fresh) == 'state'
  np.testing.assert_array_equal(fresh.control('b'), [3, 4])
  assert fresh.version == 3 and fresh.has_participated('a')
  with pytest.raises(ValueError, match='version 2 is not held'):
    rounds.checkpointed('state', saved, 2)


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
  make = rounds.RoundData(train, config)
  for round_num, ids in ((1, train.client_ids[:3]), (2, train.client_ids[1:4]),
                         (3, train.client_ids[:1])):
    expected = [rounds.preprocess(train.create_tf_dataset_for_client(cid), config,
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
  expected = [rounds.preprocess(inner.create_tf_dataset_for_client(cid), config,
                                round_num=1, client_index=i) for i, cid in enumerate(ids)]
  _assert_same_datasets(rounds.RoundData(train, config)(ids, 1), expected)

"""Tests of `emnist` against a tiny SQLite file in TFF's format, offline."""

import collections
import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import data
from tff_conflict.data import emnist_data

# split -> client -> list of labels
_LAYOUT = {
    'digits_only_train': {'w0': [1, 2, 3], 'w1': [4]},
    'digits_only_test': {'w0': [5], 'w1': [6]},
    'all_train': {'w0': [1, 2, 3, 40], 'w1': [4, 11], 'w2': [61]},
    'all_test': {'w0': [5], 'w1': [36], 'w2': [7]},
}


def _pixels(split, client, i):
  seed = abs(hash((split, client, i))) % (2**31)
  return np.random.default_rng(seed).random(784).astype(np.float32)


def _example(pixels, label):
  return tf.train.Example(features=tf.train.Features(feature={
      'pixels': tf.train.Feature(float_list=tf.train.FloatList(value=pixels.tolist())),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
  })).SerializeToString()


def _write_db(path, layout=_LAYOUT):
  connection = sqlite3.connect(path)
  connection.execute('CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
                     'serialized_example_proto BLOB NOT NULL)')
  connection.execute('CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT '
                     'NULL, num_examples INTEGER NOT NULL)')
  for split, clients in layout.items():
    for client, labels in clients.items():
      for i, label in enumerate(labels):
        connection.execute('INSERT INTO examples VALUES (?, ?, ?)',
                           (split, client, _example(_pixels(split, client, i), label)))
      connection.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                         (client, split, len(labels)))
  connection.commit()
  connection.close()


@pytest.fixture
def cache_dir(tmp_path):
  _write_db(str(tmp_path / 'emnist_all.sqlite'))
  return tmp_path


@pytest.mark.parametrize('only_digits', [True, False])
def test_loads_both_splits_offline(cache_dir, only_digits):
  train, test = data.emnist(only_digits=only_digits, cache_dir=cache_dir)
  prefix = 'digits_only' if only_digits else 'all'
  spec = collections.OrderedDict(x=tf.TensorSpec([28, 28, 1], tf.float32),
                                 y=tf.TensorSpec([], tf.int32))
  for cd, split in ((train, f'{prefix}_train'), (test, f'{prefix}_test')):
    assert cd.element_type_structure == spec
    assert cd.client_ids == sorted(_LAYOUT[split])
    for client, labels in _LAYOUT[split].items():
      elements = list(cd.create_tf_dataset_for_client(client))
      assert sorted(int(e['y']) for e in elements) == sorted(labels)
      by_label = {int(e['y']): e['x'].numpy() for e in elements}
      for i, label in enumerate(labels):
        np.testing.assert_array_equal(by_label[label],
                                      _pixels(split, client, i).reshape(28, 28, 1))
  summary = data.describe(train)
  assert summary['num_clients'] == len(_LAYOUT[f'{prefix}_train'])
  assert summary['num_examples'] == sum(map(len, _LAYOUT[f'{prefix}_train'].values()))
  pooled = [int(e['y']) for e in test.create_tf_dataset_from_all_clients()]
  assert sorted(pooled) == sorted(sum(_LAYOUT[f'{prefix}_test'].values(), []))


def test_stays_sql_backed(cache_dir):
  # Rows added after loading show up: each client's examples are read when iterated, not held.
  train, _ = data.emnist(cache_dir=cache_dir)
  connection = sqlite3.connect(str(cache_dir / 'emnist_all.sqlite'))
  connection.execute('INSERT INTO examples VALUES (?, ?, ?)',
                     ('all_train', 'w1', _example(np.zeros(784, np.float32), 9)))
  connection.commit()
  connection.close()
  assert sorted(int(e['y']) for e in train.create_tf_dataset_for_client('w1')) == [4, 9, 11]


def test_missing_file_fails_at_once_naming_it(tmp_path, monkeypatch, network_attempts):
  loads = []
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tff.simulation.datasets.emnist, 'load_data',
                      lambda *args, **kwargs: loads.append(kwargs))
  with pytest.raises(FileNotFoundError) as info:
    data.emnist(cache_dir=tmp_path / 'nowhere')
  assert loads == [] and network_attempts == []   # TFF's loader (which downloads) is never called
  message = str(info.value)
  assert str(tmp_path / 'nowhere' / 'emnist_all.sqlite') in message
  assert 'emnist_all.sqlite.lzma' in message and 'cache_dir' in message
  assert not (tmp_path / 'nowhere').exists()  # nothing created


def test_default_cache_dir_is_tffs(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  assert emnist_data.default_cache_dir() == os.path.join(str(tmp_path), '.tff')
  with pytest.raises(FileNotFoundError, match=str(tmp_path / '.tff' / 'emnist_all.sqlite')):
    data.emnist()
  (tmp_path / '.tff').mkdir()
  _write_db(str(tmp_path / '.tff' / 'emnist_all.sqlite'))
  train, _ = data.emnist(only_digits=True)
  assert train.client_ids == ['w0', 'w1']


def test_bad_only_digits(cache_dir):
  with pytest.raises(ValueError, match='only_digits'):
    data.emnist(only_digits='yes', cache_dir=cache_dir)


def test_validation_split_of_the_writers(cache_dir):
  # SQL-backed writers are split by the count rule (each keeps a training example), eagerly and
  # in a graph alike.
  train, _ = data.emnist(cache_dir=cache_dir)
  fit, held_out = data.split_validation(train, 0.5, seed=0)
  for client, labels in _LAYOUT['all_train'].items():
    f = [int(e['y']) for e in fit.create_tf_dataset_for_client(client)]
    v = [int(e['y']) for e in held_out.create_tf_dataset_for_client(client)]
    assert len(v) == min(round(0.5 * len(labels)), len(labels) - 1)
    assert sorted(f + v) == sorted(labels)
    assert [int(e['y']) for e in held_out.dataset_computation(client).as_numpy_iterator()] == v

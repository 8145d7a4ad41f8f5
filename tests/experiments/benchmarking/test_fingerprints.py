"""Fingerprints of your own data and model: what they hold, and what a change shows."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments.benchmarking import fingerprints


def _client_data(sizes, ids=None):
  ids = ids or [f'c{k}' for k in range(len(sizes))]
  return tff.simulation.datasets.TestClientData({
      cid: collections.OrderedDict(x=np.zeros((n, 3), np.float32), y=np.zeros(n, np.int32))
      for cid, n in zip(ids, sizes)})


def _model(width):
  return lambda: tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(3,)),
                                      tf.keras.layers.Dense(width), tf.keras.layers.Dense(2)])


def test_data_fingerprints_count_clients_and_examples_and_see_ids_and_sizes():
  test = _client_data([2])
  base = fingerprints.of_data(_client_data([4, 5]), test)
  assert base['train']['clients'] == 2 and base['train']['examples'] == 9
  assert base['element'] == {'x': 'float32[3]', 'y': 'int32[]'}
  assert fingerprints.of_data(_client_data([4, 5]), test) == base
  moved = fingerprints.of_data(_client_data([5, 4]), test)    # same totals, sizes swapped
  renamed = fingerprints.of_data(_client_data([4, 5], ids=['a', 'b']), test)
  for other in (moved, renamed):
    assert other['train']['examples'] == 9
    changes = fingerprints.differences({'d': base}, {'d': other})
    assert len(changes) == 1 and changes[0].startswith('d train.ids_and_sizes: ')


def test_model_fingerprints_see_shapes_and_name_what_changed():
  small, wide = fingerprints.of_model(_model(4)), fingerprints.of_model(_model(8))
  assert small == fingerprints.of_model(_model(4))
  assert small['layers'] == 2 and small['parameters'] == 3 * 4 + 4 + 4 * 2 + 2
  assert fingerprints.differences({'m': small}, {'m': wide})[-1] == 'm parameters: 26 -> 50'
  assert fingerprints.differences({'m': small}, {'m': small}) == []
  # A run recorded before fingerprints: nothing to compare, so never taken as unchanged.
  assert fingerprints.differences(None, {'m': small}) == [
      'm: not recorded (the run finished before fingerprints were kept)']
  assert fingerprints.differences(None, {}) == []   # built-in data and model: nothing to check

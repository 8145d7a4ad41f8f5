"""Tests of the offline default data set `digits`."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import data
from tff_conflict.data import digits_data


def _pooled(cd):
  xs, ys = [], []
  for e in cd.create_tf_dataset_from_all_clients():
    xs.append(e['x'].numpy())
    ys.append(int(e['y'].numpy()))
  return np.stack(xs), np.array(ys)


@pytest.fixture(scope='module')
def default_split():
  return data.digits()


def test_shapes_counts_and_ranges(default_split):
  train, test = default_split
  spec = collections.OrderedDict(x=tf.TensorSpec([8, 8, 1], tf.float32),
                                 y=tf.TensorSpec([], tf.int32))
  assert train.element_type_structure == spec and test.element_type_structure == spec
  assert train.client_ids == test.client_ids == [f'{k:02d}' for k in range(20)]
  assert train.client_sizes.sum() == 1438 and test.client_sizes.sum() == 359
  assert train.client_sizes.min() >= 1 and test.client_sizes.min() >= 1
  x, y = _pooled(train)
  assert x.min() == 0.0 and x.max() == 1.0
  assert sorted(set(y.tolist())) == list(range(10))


def test_test_split_is_the_stratified_holdout(default_split):
  _, test = default_split
  x_all, y_all = digits_data.load_digits_arrays()
  _, test_idx = digits_data.holdout_split(y_all, 0.2, 0)
  x, y = _pooled(test)
  np.testing.assert_array_equal(np.bincount(y), np.bincount(y_all[test_idx]))
  # The same images, in some order.
  key = lambda a: sorted(map(bytes, a.reshape(len(a), -1)))
  assert key(x) == key(x_all[test_idx])
  np.testing.assert_array_equal(np.bincount(y), [round(0.2 * n) for n in np.bincount(y_all)])


def test_test_clients_follow_training_label_mix(default_split):
  train, test = default_split
  tr, te = train.label_counts, test.label_counts
  # Test examples of a class go mostly to the clients that train on it.
  on_train_classes = (te * (tr > 0)).sum()
  assert on_train_classes / te.sum() > 0.97
  assert np.corrcoef(tr.ravel(), te.ravel())[0, 1] > 0.9


def test_alpha_controls_skew_and_seed_is_deterministic():
  skewed = data.describe(data.digits(alpha=0.1)[0])['label_tv_distance']['mean']
  iid = data.describe(data.digits(alpha=1000.0)[0])['label_tv_distance']['mean']
  assert skewed > 0.5 > 0.1 > iid
  a = data.digits(num_clients=5, seed=3)[0]
  b = data.digits(num_clients=5, seed=3)[0]
  c = data.digits(num_clients=5, seed=4)[0]
  np.testing.assert_array_equal(a.label_counts, b.label_counts)
  assert not np.array_equal(a.label_counts, c.label_counts)


@pytest.mark.parametrize('kwargs,match', [
    (dict(alpha=0.0), 'alpha'), (dict(alpha=-0.1), 'alpha'), (dict(num_clients=0), 'num_clients'),
    (dict(num_clients=360), 'num_clients'), (dict(seed=-3), 'seed'), (dict(num_clients=True),
                                                                         'num_clients'),
])
def test_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    data.digits(**kwargs)


@pytest.mark.slow
def test_one_fedavg_round_with_tff_builders():
  """The elements, batched by the caller, feed TFF's learning builders directly."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  train, _ = data.digits(num_clients=3, alpha=1.0, seed=0)
  datasets = [train.create_tf_dataset_for_client(cid).batch(32) for cid in train.client_ids]

  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(8, 8, 1)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10, kernel_initializer='zeros'),
    ])
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=datasets[0].element_spec)

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  state = process.initialize()
  result = process.next(state, datasets)
  train_metrics = result.metrics['client_work']['train']
  assert train_metrics['num_examples'] == int(train.client_sizes.sum())
  # Mean loss over the round's steps, starting from the uniform prediction (loss ln 10).
  assert 0.0 < train_metrics['loss'] < np.log(10)

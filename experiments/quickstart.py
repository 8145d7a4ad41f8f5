"""Smallest end-to-end run: TFF FedAvg on scikit-learn's bundled digits, split over a few clients.

    python -m experiments.quickstart [--rounds=10] [--num_clients=5]

Prints the held-out accuracy of the global model after every round. Runs offline: the digits
(1,797 8x8 images) ship inside scikit-learn. The method comparison binary replaces this as the
README's main command once it exists.
"""

import collections
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# TensorFlow must be imported before absl's app.run() parses flags: imported inside main(), Keras
# 2.14 fails to build any model ('SymbolicTensor' object has no attribute 'node').
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np

from tff_conflict import runtime

_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Number of federated rounds.', lower_bound=1)
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 5, 'Clients; all take part in every round.',
                                    lower_bound=1)
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the split and the model initialisation.')


def _load_digits_split(num_clients, seed):
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int32)
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(y))
  test, train = order[:360], order[360:]
  # Label-sorted shards: each client sees mostly a few digits (non-IID).
  train = train[np.argsort(y[train], kind='stable')]
  shards = np.array_split(train, num_clients)
  return [(x[s], y[s]) for s in shards], (x[test], y[test])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  runtime.set_local_context()
  tf.keras.utils.set_random_seed(_SEED.value)

  clients, (x_test, y_test) = _load_digits_split(_NUM_CLIENTS.value, _SEED.value)
  client_data = [
      tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=cx, y=cy)).batch(20)
      for cx, cy in clients
  ]

  def keras_model():
    inputs = tf.keras.Input(shape=(64,))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(10)(inputs))

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_model(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=client_data[0].element_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0))
  state = process.initialize()
  # Created after TFF has traced model_fn: Keras (TF 2.14) invalidates models created eagerly
  # before a model is built inside a graph, which TFF's tracing does.
  eval_model = keras_model()
  print(f'FedAvg on sklearn digits: {len(clients)} clients (label-sorted shards), '
        f'{len(y_test)} held-out examples')
  for round_num in range(1, _ROUNDS.value + 1):
    start = time.monotonic()
    result = process.next(state, client_data)
    state = result.state
    process.get_model_weights(state).assign_weights_to(eval_model)
    predictions = np.argmax(eval_model(x_test).numpy(), axis=1)
    accuracy = float(np.mean(predictions == y_test))
    train = result.metrics['client_work']['train']
    print(f'round {round_num:3d}  train_loss {train["loss"]:.4f}  '
          f'test_accuracy {accuracy:.4f}  ({time.monotonic() - start:.1f}s)', flush=True)


if __name__ == '__main__':
  app.run(main)

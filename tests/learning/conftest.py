"""Fixtures and float64 references for the learning tests.

`run_client_update` runs the client work's `tf.function` eagerly (no TFF runtime: fast and exact);
`softmax_sgd_reference` is plain-numpy local SGD on softmax regression with cross-entropy and an
optional proximal term, written from the update rule `w <- w - lr (grad F(w) + mu (w - w0))`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model

NUM_FEATURES = 4
NUM_CLASSES = 3


def input_spec():
  return collections.OrderedDict(x=tf.TensorSpec([None, NUM_FEATURES], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))


def ce_model_fn(loss_fn=None):
  """A VariableModel factory: tiny softmax regression (seeded init) with the given loss."""
  def model_fn():
    loss = loss_fn() if loss_fn else tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)
    return tff.learning.models.from_keras_model(
        make_tiny_keras_model(), loss=loss, input_spec=input_spec(),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  return model_fn


def initial_weights(seed=1, num_features=NUM_FEATURES, num_classes=NUM_CLASSES):
  """Random float32 starting weights `(kernel [F, C], bias [C])` as numpy arrays."""
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(num_features, num_classes)).astype(np.float32),
          rng.normal(size=(num_classes,)).astype(np.float32))


def as_model_weights(arrays):
  return tff.learning.models.ModelWeights(trainable=[tf.constant(a) for a in arrays],
                                          non_trainable=[])


def run_client_update(model_fn, dataset, optimizer, weights, **kwargs):
  """Runs `client_work._make_client_update(model_fn, **kwargs)` eagerly on one client."""
  from tff_conflict.learning import client_work  # pylint: disable=g-import-not-at-top
  update = client_work._make_client_update(model_fn, **kwargs)  # pylint: disable=protected-access
  hparams = optimizer.get_hparams(optimizer.initialize(tf.TensorSpec([], tf.float32)))
  result, metrics = update(optimizer, hparams, as_model_weights(weights), dataset)
  return result, metrics


def batches_of(dataset):
  return [(b['x'].numpy().astype(np.float64), b['y'].numpy()) for b in dataset]


def softmax(z):
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def ce_loss_and_grads(kernel, bias, x, y):
  """Mean cross-entropy of softmax(x W + b) and its gradients (float64)."""
  p = softmax(x @ kernel + bias)
  loss = float(np.mean(-np.log(p[np.arange(len(y)), y])))
  g = p.copy()
  g[np.arange(len(y)), y] -= 1.0
  g /= len(y)
  return loss, x.T @ g, g.sum(axis=0)


def softmax_sgd_reference(weights, batches, lr, mu=0.0):
  """Local SGD (one pass over `batches`), float64. Returns (kernel, bias, mean training loss)."""
  k0, b0 = (w.astype(np.float64) for w in weights)
  kernel, bias = k0.copy(), b0.copy()
  loss_sum, count = 0.0, 0
  for x, y in batches:
    loss, gk, gb = ce_loss_and_grads(kernel, bias, x, y)
    loss_sum += loss * len(y)
    count += len(y)
    kernel = kernel - lr * (gk + mu * (kernel - k0))
    bias = bias - lr * (gb + mu * (bias - b0))
  return kernel, bias, loss_sum / count


@pytest.fixture
def client_dataset():
  return make_tiny_client_datasets(num_clients=1, examples_per_client=20, batch_size=6,
                                   seed=3)[0]

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


def named_process(name, model_fn, **kwargs):
  """`learning.ALGORITHMS[name](model_fn, **kwargs)`, with `num_clients` for a builder that needs
  the federation's size (SCAFFOLD: the clients of `client_inputs`, at most 8)."""
  import inspect  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  builder = learning.ALGORITHMS[name]
  if 'num_clients' in inspect.signature(builder).parameters:
    kwargs.setdefault('num_clients', 8)
  return builder(model_fn, **kwargs)


def client_inputs(process, datasets):
  """What `process.next` takes for `datasets`: the datasets, or for SCAFFOLD each with a zero
  control (clients that have not trained before)."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  if learning.control_layout(process) is None:
    return list(datasets)
  controls = learning.ClientControls.for_process(process, list(range(8)))
  return controls.for_cohort(list(range(len(datasets))), list(datasets))


def scaffold_reference(weights, rounds, *, num_clients, lr, server_lr=1.0, weighting='uniform',
                       clip_norm=None):
  """SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1, option II) on softmax regression with
  cross-entropy, as plain float64 loops.

  Args:
    weights: starting `(kernel, bias)`.
    rounds: per round, a list of `(client_id, batches)` with `batches` as `batches_of` gives.
    num_clients: N.
    lr, server_lr: eta_l and eta_g.
    weighting: 'uniform' (the paper) or 'num_examples'.
    clip_norm: None, or c: each raw gradient is clipped to global norm c before the correction.

  Returns:
    Per round, `dict(kernel, bias, c, controls={client_id: c_i}, excluded)` after the round.
  """
  shapes = [w.shape for w in weights]
  sizes = [int(np.prod(s)) for s in shapes]
  x = np.concatenate([w.astype(np.float64).reshape(-1) for w in weights])
  c = np.zeros_like(x)
  controls = {}
  history = []

  def grad(flat, xb, yb):
    kernel, bias = np.split(flat, [sizes[0]])
    _, gk, gb = ce_loss_and_grads(kernel.reshape(shapes[0]), bias, xb, yb)
    g = np.concatenate([gk.reshape(-1), gb])
    if clip_norm is not None:
      g = g * min(1.0, clip_norm / max(np.linalg.norm(g), 1e-300))
    return g

  for cohort in rounds:
    updates, deltas, weights_ = [], [], []
    excluded = 0
    for cid, batches in cohort:
      c_i = controls.get(cid, np.zeros_like(x))
      y = x.copy()
      steps = 0
      with np.errstate(all='ignore'):
        for xb, yb in batches:
          y = y - lr * (grad(y, xb, yb) - c_i + c)
          steps += 1
        u = x - y
        if steps == 0:
          u, dc = np.zeros_like(x), np.zeros_like(x)
        else:
          c_plus = c_i - c + u / (steps * lr)
          dc = c_plus - c_i
      w = 1.0 if weighting == 'uniform' else float(sum(len(yb) for _, yb in batches))
      w = w if steps else 0.0   # a client with 0 steps takes no part in the mean
      if not (np.all(np.isfinite(u)) and np.all(np.isfinite(dc))):
        u, dc, w = np.zeros_like(x), np.zeros_like(x), 0.0
        excluded += 1
      controls[cid] = c_i + dc
      updates.append(u)
      deltas.append(dc)
      weights_.append(w)
    total = sum(weights_)
    a = sum(w * u for w, u in zip(weights_, updates)) / total if total > 0 else np.zeros_like(x)
    x = x - server_lr * a
    c = c + len(cohort) / num_clients * np.mean(deltas, axis=0)
    kernel, bias = np.split(x, [sizes[0]])
    history.append(dict(kernel=kernel.reshape(shapes[0]), bias=bias, c=c.copy(),
                        controls={k: v.copy() for k, v in controls.items()},
                        excluded=excluded))
  return history

"""A conflict aggregator on top of a baseline: FedProx + FedGH in TFF's runtime against FedGH's
kernel applied to proximal local updates from a float64 loop (FedNova + FedGH and FedDecorr +
FedGH: test_fednova.py, test_feddecorr.py)."""

import collections
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_keras_model
from tests.conftest import tiny_model_fn_for
from tests.learning import conftest as h
from tff_conflict import conflict
from tff_conflict import learning


@functools.lru_cache(maxsize=None)
def _skewed_data():
  """Three clients, each holding (mostly) one class: their updates conflict."""
  rng = np.random.default_rng(7)
  centers = rng.normal(scale=2.0, size=(h.NUM_CLASSES, h.NUM_FEATURES)).astype(np.float32)
  datasets = []
  for k, n in enumerate((10, 14, 6)):
    y = np.full(n, k, np.int32)
    y[0] = (k + 1) % h.NUM_CLASSES
    x = (centers[y] + rng.normal(size=(n, h.NUM_FEATURES))).astype(np.float32)
    datasets.append(tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(4))
  return tuple(datasets)


def test_fedprox_with_fedgh_equals_the_harmonized_proximal_updates():
  lr, mu = 0.2, 0.1
  process = learning.build_fedprox(
      make_tiny_keras_model, input_spec=h.input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=lr),
      proximal_strength=mu, aggregator='fedgh', aggregator_kwargs=dict(order='index'))
  state = process.initialize()
  data = list(_skewed_data())
  sizes = np.array([sum(len(b[1]) for b in h.batches_of(ds)) for ds in data], np.float64)
  projections = 0
  for _ in range(3):
    weights = [np.asarray(w) for w in process.get_model_weights(state).trainable]
    x = np.concatenate([w.astype(np.float64).ravel() for w in weights])
    updates = []
    for ds in data:
      kernel, bias, _ = h.softmax_sgd_reference(weights, h.batches_of(ds), lr, mu)
      updates.append(x - np.concatenate([kernel.ravel(), bias.ravel()]))
    updates = np.stack(updates)
    expected = x - np.asarray(conflict.harmonize(updates, sizes / sizes.sum(), order='index'))
    plain = x - (sizes / sizes.sum()) @ updates
    output = process.next(state, data)
    state = output.state
    got = np.concatenate([np.asarray(w, np.float64).ravel()
                          for w in process.get_model_weights(state).trainable])
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)
    projections += int(output.metrics['aggregator']['num_projections'])
    if output.metrics['aggregator']['num_projections'] > 0:
      assert np.max(np.abs(expected - plain)) > 1e-3   # FedGH changed the step
  assert projections > 0


def test_every_baseline_builder_passes_its_aggregator_to_build_process(monkeypatch):
  from tff_conflict.learning import process as process_lib  # pylint: disable=g-import-not-at-top
  calls = []
  monkeypatch.setattr(process_lib, 'build_process', lambda *a, **kw: calls.append(kw))
  for name in ('fedavg', 'fedprox', 'fednova', 'feddecorr'):
    learning.ALGORITHMS[name](
        tiny_model_fn_for(name), input_spec=h.input_spec(),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
        aggregator='fedgh', aggregator_kwargs=dict(order='index'))
    assert calls[-1]['aggregator'] == 'fedgh', name
    assert calls[-1]['aggregator_kwargs'] == dict(order='index'), name
    learning.ALGORITHMS[name](
        tiny_model_fn_for(name), input_spec=h.input_spec(),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
    assert calls[-1]['aggregator'] == 'mean' and calls[-1]['aggregator_kwargs'] is None, name

"""Client work numerics, run eagerly against float64 references (fast, no TFF runtime)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.learning import loop_builder
from tensorflow_federated.python.learning.templates import model_delta_client_work
from tensorflow_federated.python.learning.templates import proximal_client_work

from tests.learning import conftest as h
from tff_conflict import losses
from tff_conflict.learning import client_work

LR = 0.2


def _sgd():
  return tff.learning.optimizers.build_sgdm(learning_rate=LR)


def _trained(weights, delta):
  return [w.astype(np.float64) - np.asarray(d, np.float64) for w, d in zip(weights, delta)]


@pytest.mark.parametrize('mu', [0.0, 0.7])
def test_delta_and_loss_weight_match_numpy_sgd(client_dataset, mu):
  weights = h.initial_weights()
  result, _ = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                  weighting='loss', proximal_strength=mu)
  kernel, bias, mean_loss = h.softmax_sgd_reference(weights, h.batches_of(client_dataset), LR,
                                                    mu=mu)
  np.testing.assert_allclose(_trained(weights, result.update)[0], kernel, atol=2e-5)
  np.testing.assert_allclose(_trained(weights, result.update)[1], bias, atol=2e-5)
  np.testing.assert_allclose(float(result.update_weight), mean_loss, rtol=1e-5)


@pytest.mark.parametrize('weighting,expected', [('num_examples', 20.0), ('uniform', 1.0)])
def test_example_weightings_equal_tff_model_delta_client_work(client_dataset, weighting,
                                                              expected):
  weights = h.initial_weights()
  ours, _ = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                weighting=weighting)
  tff_weighting = {'num_examples': tff.learning.ClientWeighting.NUM_EXAMPLES,
                   'uniform': tff.learning.ClientWeighting.UNIFORM}[weighting]
  tff_update = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
      h.ce_model_fn(), weighting=tff_weighting,
      loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE)
  theirs, _ = tff_update(_sgd(), h.as_model_weights(weights), client_dataset)
  for a, b in zip(ours.update, theirs.update):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert float(ours.update_weight) == float(theirs.update_weight) == expected


def _one_dim_model_fn():
  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(1,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.MeanSquaredError(),
        input_spec=collections.OrderedDict(x=tf.TensorSpec([None, 1], tf.float32),
                                           y=tf.TensorSpec([None, 1], tf.float32)))
  return model_fn


def _one_dim_data(steps):
  # x = 1, y = 3, one example per batch: loss (w - 3)^2, gradient 2 (w - 3).
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.ones((steps, 1), np.float32), y=np.full((steps, 1), 3.0, np.float32))).batch(1)


def _one_dim_hand(mu, steps, lr, w0=0.0, sign=1.0):
  w = w0
  for _ in range(steps):
    w = w - lr * (2.0 * (w - 3.0) + sign * mu * (w - w0))
  return w


@pytest.mark.parametrize('mu', [0.0, 0.5, 2.0])
def test_fedprox_one_dimensional_hand_computation(mu):
  steps, lr = 4, 0.1
  opt = tff.learning.optimizers.build_sgdm(learning_rate=lr)
  result, _ = h.run_client_update(_one_dim_model_fn(), _one_dim_data(steps), opt,
                                  [np.zeros((1, 1), np.float32)], weighting='num_examples',
                                  proximal_strength=mu)
  w = 0.0 - float(result.update[0].numpy().squeeze())
  assert w == pytest.approx(_one_dim_hand(mu, steps, lr), abs=1e-6)
  if mu > 0:  # The proximal pull keeps the client closer to w0 = 0 than plain SGD does.
    assert abs(w) < abs(_one_dim_hand(0.0, steps, lr))


def test_tff_fed_prox_has_the_opposite_sign():
  """Documents why TFF 0.87's proximal client work is not used: it adds mu (w0 - w)."""
  steps, lr, mu = 4, 0.1, 2.0
  tff_update = proximal_client_work.build_model_delta_update_with_tff_optimizer(
      _one_dim_model_fn(), weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      delta_l2_regularizer=mu,
      loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE)
  result, _ = tff_update(tff.learning.optimizers.build_sgdm(learning_rate=lr),
                         h.as_model_weights([np.zeros((1, 1), np.float32)]), _one_dim_data(steps))
  w = -float(result.update[0].numpy().squeeze())
  assert w == pytest.approx(_one_dim_hand(mu, steps, lr, sign=-1.0), abs=1e-6)
  assert abs(w) > abs(_one_dim_hand(0.0, steps, lr))  # pushed away from the global model


def test_larger_mu_keeps_client_closer_to_global_model(client_dataset):
  weights = h.initial_weights()
  distances = []
  for mu in (0.0, 0.3, 1.0, 3.0):
    result, _ = h.run_client_update(h.ce_model_fn(), client_dataset.repeat(3), _sgd(), weights,
                                    weighting='num_examples', proximal_strength=mu)
    distances.append(float(np.sqrt(sum(np.sum(np.square(d.numpy())) for d in result.update))))
  assert all(a > b for a, b in zip(distances, distances[1:])), distances


def test_corrective_sends_gradient_and_loss_at_trained_model(client_dataset):
  weights = h.initial_weights()
  result, _ = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                  weighting='num_examples', corrective=True)
  value = result.update
  assert list(value) == ['update', 'gradient', 'loss']
  kernel, bias, _ = h.softmax_sgd_reference(weights, h.batches_of(client_dataset), LR)
  np.testing.assert_allclose(_trained(weights, value['update'])[0], kernel, atol=2e-5)
  # Reference: gradient of the mean CE over ALL local examples at the trained weights.
  x = np.concatenate([b[0] for b in h.batches_of(client_dataset)])
  y = np.concatenate([b[1] for b in h.batches_of(client_dataset)])
  trained = _trained(weights, value['update'])
  loss, gk, gb = h.ce_loss_and_grads(trained[0], trained[1], x, y)
  np.testing.assert_allclose(value['gradient'][0].numpy(), gk, atol=1e-5)
  np.testing.assert_allclose(value['gradient'][1].numpy(), gb, atol=1e-5)
  assert float(value['loss']) == pytest.approx(loss, rel=1e-5)
  assert float(result.update_weight) == 20.0
  # Same local training as the plain client work.
  plain, _ = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                 weighting='num_examples')
  for a, b in zip(value['update'], plain.update):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_corrective_extra_pass_leaves_training_metrics_alone(client_dataset):
  weights = h.initial_weights()
  _, with_pass = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                     weighting='num_examples', corrective=True)
  _, without = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                   weighting='num_examples')
  tf.nest.map_structure(np.testing.assert_array_equal, with_pass, without)
  assert float(np.sum(without['num_examples'])) == 20


@pytest.mark.parametrize('weighting', ['loss', 'num_examples'])
def test_non_finite_client_sends_zeros_and_weight_zero(weighting):
  x = np.ones((4, h.NUM_FEATURES), np.float32)
  x[1, 2] = np.nan
  data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=x, y=np.array([0, 1, 2, 0], np.int32))).batch(2)
  result, _ = h.run_client_update(h.ce_model_fn(), data, _sgd(), h.initial_weights(),
                                  weighting=weighting)
  assert float(result.update_weight) == 0.0
  for d in result.update:
    np.testing.assert_array_equal(d.numpy(), np.zeros_like(d.numpy()))


def test_empty_client_reports_no_loss():
  data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.zeros((0, h.NUM_FEATURES), np.float32), y=np.zeros((0,), np.int32))).batch(2)
  result, _ = h.run_client_update(h.ce_model_fn(), data, _sgd(), h.initial_weights(),
                                  weighting='loss')
  assert float(result.update_weight) == 0.0


def test_dataset_label_counts_reach_the_loss():
  # Imbalanced client whose batches have other class counts than the whole dataset.
  y = np.array([0, 0, 0, 0, 0, 1, 2, 0, 1, 1], np.int32)
  x = np.random.default_rng(5).normal(size=(10, h.NUM_FEATURES)).astype(np.float32)
  data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(4)
  created = []

  def model_and_loss_fn():
    loss = losses.CalibratedLabelLoss(counts='dataset')
    created.append(loss)
    return h.ce_model_fn(lambda: loss)(), loss

  weights = h.initial_weights()
  result, _ = h.run_client_update(
      model_and_loss_fn, data, _sgd(), weights, weighting='num_examples',
      num_classes_to_count=h.NUM_CLASSES, set_counts=lambda l, c: l.assign_class_counts(c))
  np.testing.assert_array_equal(created[0].class_counts.numpy(), [6.0, 3.0, 1.0])
  # Reference: the same SGD with the whole-dataset counts given to the loss kernel directly.
  kernel = tf.Variable(weights[0])
  bias = tf.Variable(weights[1])
  counts = tf.constant([6.0, 3.0, 1.0])
  for batch in data:
    with tf.GradientTape() as tape:
      logits = tf.matmul(batch['x'], kernel) + bias
      loss = tf.reduce_mean(losses.calibrated_label_loss(batch['y'], logits, class_counts=counts))
    gk, gb = tape.gradient(loss, [kernel, bias])
    kernel.assign_sub(LR * gk)
    bias.assign_sub(LR * gb)
  np.testing.assert_allclose(weights[0] - result.update[0].numpy(), kernel.numpy(), atol=1e-5)
  # ... which differs from training with per-batch counts.
  batch_result, _ = h.run_client_update(
      h.ce_model_fn(lambda: losses.CalibratedLabelLoss(counts='batch')), data, _sgd(), weights,
      weighting='num_examples')
  assert not np.allclose(batch_result.update[0].numpy(), result.update[0].numpy(), atol=1e-4)


def test_count_labels():
  data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.zeros((7, 2), np.float32), y=np.array([2, 2, 0, 4, 2, 0, 1], np.int32))).batch(3)
  np.testing.assert_array_equal(client_work.count_labels(data, 5).numpy(), [2, 1, 3, 0, 1])


@pytest.mark.parametrize('value,expected', [
    (None, 'num_examples'), ('loss', 'loss'), ('UNIFORM', 'uniform'),
    (tff.learning.ClientWeighting.NUM_EXAMPLES, 'num_examples'),
    (tff.learning.ClientWeighting.UNIFORM, 'uniform')])
def test_resolve_weighting(value, expected):
  assert client_work.resolve_weighting(value) == expected


@pytest.mark.parametrize('value', ['examples', 3, object()])
def test_resolve_weighting_rejects(value):
  with pytest.raises(ValueError, match='client_weighting'):
    client_work.resolve_weighting(value)


def _clipped_softmax_sgd_reference(weights, batches, lr, clip, mu=0.0):
  """Local SGD on softmax regression, float64, each step's gradient (proximal term included)
  scaled by min(1, clip / |g|) with |g| the global norm over kernel and bias."""
  k0, b0 = (w.astype(np.float64) for w in weights)
  kernel, bias = k0.copy(), b0.copy()
  num_clipped = 0
  for x, y in batches:
    _, gk, gb = h.ce_loss_and_grads(kernel, bias, x, y)
    gk = gk + mu * (kernel - k0)
    gb = gb + mu * (bias - b0)
    norm = float(np.sqrt(np.sum(gk * gk) + np.sum(gb * gb)))
    scale = 1.0
    if norm > clip:
      scale = clip / norm
      num_clipped += 1
    kernel = kernel - lr * scale * gk
    bias = bias - lr * scale * gb
  return kernel, bias, num_clipped


@pytest.mark.parametrize('clip,mu', [(0.05, 0.0), (0.3, 0.0), (0.05, 0.7)])
def test_clipped_step_matches_float64_reference(client_dataset, clip, mu):
  weights = h.initial_weights()
  data = client_dataset.repeat(2)
  result, _ = h.run_client_update(h.ce_model_fn(), data, _sgd(), weights,
                                  weighting='num_examples', proximal_strength=mu, clip_norm=clip)
  kernel, bias, num_clipped = _clipped_softmax_sgd_reference(weights, h.batches_of(data), LR,
                                                             clip, mu=mu)
  assert num_clipped > 0  # the case exercises clipping
  trained = _trained(weights, result.update)
  np.testing.assert_allclose(trained[0], kernel, atol=2e-6)
  np.testing.assert_allclose(trained[1], bias, atol=2e-6)
  if clip == 0.05 and mu == 0.0:  # every step clipped: the delta is at most steps * lr * clip
    assert num_clipped == len(h.batches_of(data))
    norm = np.sqrt(sum(np.sum(np.square(d.numpy())) for d in result.update))
    assert norm <= len(h.batches_of(data)) * LR * clip * (1 + 1e-6)


def test_large_clip_norm_changes_nothing(client_dataset):
  weights = h.initial_weights()
  plain, _ = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                 weighting='num_examples')
  clipped, _ = h.run_client_update(h.ce_model_fn(), client_dataset, _sgd(), weights,
                                   weighting='num_examples', clip_norm=1e6)
  for a, b in zip(plain.update, clipped.update):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_clipped_calibrated_loss_step_matches_reference(client_dataset):
  # FedGA as the authors' code trains: soft-target calibrated loss, gradient clipped at c.
  from tests.losses import references  # pylint: disable=g-import-not-at-top
  weights = h.initial_weights()
  clip = 0.1
  model_fn = h.ce_model_fn(lambda: losses.CalibratedLabelLoss(form='soft_target'))
  result, _ = h.run_client_update(model_fn, client_dataset, _sgd(), weights,
                                  weighting='num_examples', clip_norm=clip)
  kernel, bias = (w.astype(np.float64) for w in weights)
  for x, y in h.batches_of(client_dataset):
    g = references.calibrated_soft_target_gradient(y, x @ kernel + bias) / len(y)
    gk, gb = x.T @ g, g.sum(axis=0)
    scale = min(1.0, clip / float(np.sqrt(np.sum(gk * gk) + np.sum(gb * gb))))
    kernel, bias = kernel - LR * scale * gk, bias - LR * scale * gb
  trained = _trained(weights, result.update)
  np.testing.assert_allclose(trained[0], kernel, atol=2e-6)
  np.testing.assert_allclose(trained[1], bias, atol=2e-6)


@pytest.mark.parametrize('value', [0, -1.0, float('nan'), float('inf'), True, '5'])
def test_bad_clip_norm(value):
  with pytest.raises(ValueError, match='clip_norm must be None or a finite number > 0'):
    client_work.build_client_work(h.ce_model_fn(), _sgd(), clip_norm=value)

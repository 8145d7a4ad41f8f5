"""Margin-control loss (fedld eq. 3) against a float64 reference, limits, extremes, Keras plumbing."""

import numpy as np
import pytest
import tensorflow as tf

from tests.losses import references
from tff_conflict import losses


def _grad(fn, logits):
  z = tf.constant(logits)
  with tf.GradientTape() as tape:
    tape.watch(z)
    value = tf.reduce_sum(fn(z))
  return value.numpy(), tape.gradient(value, z).numpy()


@pytest.mark.parametrize('lam', [0.0, 0.01, 0.03, 0.1, 2.5])
def test_matches_float64_reference(random_batch, lam):
  labels, logits = random_batch
  got = losses.margin_control_loss(labels, logits, margin_weight=lam).numpy()
  np.testing.assert_allclose(got, references.margin(labels, logits, lam), rtol=1e-13)
  got32 = losses.margin_control_loss(labels, tf.constant(logits, tf.float32), margin_weight=lam)
  np.testing.assert_allclose(got32.numpy(), references.margin(labels, logits, lam), rtol=2e-6)


@pytest.mark.parametrize('lam', [0.01, 0.5])
def test_gradient_matches_finite_differences(random_batch, lam):
  labels, logits = random_batch
  _, grad = _grad(lambda z: losses.margin_control_loss(labels, z, margin_weight=lam), logits)
  expected = references.numeric_gradient(lambda z: references.margin(labels, z, lam), logits)
  np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-8)


def test_small_logits_branch_matches_reference():
  # Every |z_i| <= 1 takes the log1p branch, including all-zero logits.
  logits = np.array([[0.0, 0.0, 0.0], [0.5, -1.0, 0.25], [1e-8, 0.0, -1e-8]])
  labels = np.array([0, 1, 2])
  np.testing.assert_allclose(losses.margin_control_loss(labels, logits, margin_weight=0.7).numpy(),
                             references.margin(labels, logits, 0.7), rtol=1e-14, atol=1e-300)
  _, grad = _grad(lambda z: losses.margin_control_loss(labels, z, margin_weight=0.7), logits)
  expected = references.softmax(logits) - np.eye(3)[labels] + 0.7 * 2 * logits / (
      1 + np.sum(logits**2, axis=1, keepdims=True))
  np.testing.assert_allclose(grad, expected, rtol=1e-13, atol=1e-16)


def test_zero_weight_is_sparse_cross_entropy(random_batch):
  labels, logits = random_batch
  ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  loss = losses.MarginControlLoss(margin_weight=0.0)
  for dtype in (tf.float32, tf.float64):
    z = tf.constant(logits, dtype)
    np.testing.assert_allclose(loss(labels, z).numpy(), ce(labels, z).numpy(), rtol=1e-6)
  np.testing.assert_allclose(losses.margin_control_loss(labels, logits, margin_weight=0.0).numpy(),
                             references.cross_entropy(labels, logits), rtol=1e-13)


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
def test_finite_on_extreme_logits(extreme_batch, dtype):
  labels, logits = extreme_batch
  value, grad = _grad(lambda z: losses.margin_control_loss(labels, z, margin_weight=0.1),
                      logits.astype(dtype.as_numpy_dtype))
  assert np.isfinite(value) and np.all(np.isfinite(grad))
  per_example = losses.margin_control_loss(labels, tf.constant(logits, dtype), margin_weight=0.1)
  np.testing.assert_allclose(per_example.numpy(), references.margin(labels, logits, 0.1),
                             rtol=1e-6)
  # |z|^2 = 1e40 and more overflows float32; the scaled form does not (labels: CE = 0 here).
  huge = np.array([[1e20, -3e20, 0.0], [3e38, 1.0, -1.0]], dtype.as_numpy_dtype)
  value, grad = _grad(lambda z: losses.margin_control_loss([0, 0], z, margin_weight=0.1), huge)
  assert np.isfinite(value) and np.all(np.isfinite(grad))
  expected = 0.1 * (2 * np.log(3e20) + np.log(1 + (1 / 3) ** 2))
  per_example = losses.margin_control_loss([0, 0], tf.constant(huge), margin_weight=0.1).numpy()
  np.testing.assert_allclose(per_example[0], expected, rtol=1e-6)


def test_keras_loss_is_batch_mean_and_accepts_b1_labels(random_batch):
  labels, logits = random_batch
  loss = losses.MarginControlLoss(margin_weight=0.03)
  expected = np.mean(references.margin(labels, logits, 0.03))
  np.testing.assert_allclose(loss(labels, logits).numpy(), expected, rtol=1e-13)
  np.testing.assert_allclose(loss(labels[:, None], logits).numpy(), expected, rtol=1e-13)


def test_config_round_trip():
  loss = losses.MarginControlLoss(margin_weight=0.1, name='mc')
  config = loss.get_config()
  assert config['margin_weight'] == 0.1 and config['name'] == 'mc'
  assert config['margin_form'] == 'logits'
  clone = losses.MarginControlLoss.from_config(config)
  assert clone.get_config() == config
  labels, logits = np.array([0, 1]), np.array([[0.3, -1.0], [2.0, 0.5]])
  np.testing.assert_allclose(clone(labels, logits).numpy(), loss(labels, logits).numpy())


@pytest.mark.parametrize('value', [-0.01, float('nan'), float('inf'), None, False])
def test_bad_margin_weight(value):
  with pytest.raises(ValueError, match='margin_weight'):
    losses.MarginControlLoss(margin_weight=value)
  with pytest.raises(ValueError, match='margin_weight'):
    losses.margin_control_loss([0], [[0.0, 1.0]], margin_weight=value)


# ---- margin_form='batch_probabilities': the authors' code, one norm over the batch's softmax --


@pytest.mark.parametrize('lam', [0.0, 0.03, 0.5])
def test_batch_probabilities_matches_float64_reference(random_batch, lam):
  labels, logits = random_batch
  expected = references.margin_batch_probabilities(labels, logits, lam)
  got = losses.margin_control_loss(labels, logits, margin_weight=lam,
                                   margin_form='batch_probabilities').numpy()
  np.testing.assert_allclose(got, expected, rtol=1e-13)
  loss = losses.MarginControlLoss(0.03 if lam == 0.0 else lam, margin_form='batch_probabilities')
  np.testing.assert_allclose(
      loss(labels, logits).numpy(),
      np.mean(references.margin_batch_probabilities(labels, logits, loss.margin_weight)),
      rtol=1e-13)
  if lam > 0:   # a different function from eq. 3's
    assert np.max(np.abs(got - references.margin(labels, logits, lam))) > 1e-3


def test_batch_probabilities_gradient_matches_finite_differences(random_batch):
  labels, logits = random_batch
  _, grad = _grad(lambda z: losses.margin_control_loss(
      labels, z, margin_weight=0.5, margin_form='batch_probabilities'), logits)
  expected = references.numeric_gradient(
      lambda z: references.margin_batch_probabilities(labels, z, 0.5), logits)
  np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-8)


def test_batch_probabilities_hand_worked():
  # Two examples with equal logits over 2 classes: P = 1/2 everywhere, |P|_F^2 = 4/4 = 1, so the
  # term is lambda log 2 for each example; CE = log 2.
  got = losses.margin_control_loss([0, 1], np.zeros((2, 2)), margin_weight=0.25,
                                   margin_form='batch_probabilities').numpy()
  np.testing.assert_allclose(got, [np.log(2) * 1.25] * 2, rtol=1e-15)


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
def test_batch_probabilities_finite_on_extreme_logits(extreme_batch, dtype):
  labels, logits = extreme_batch
  value, grad = _grad(lambda z: losses.margin_control_loss(
      labels, z, margin_weight=0.1, margin_form='batch_probabilities'),
      logits.astype(dtype.as_numpy_dtype))
  assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_margin_form_round_trip_and_bad_value():
  loss = losses.MarginControlLoss(0.1, margin_form='batch_probabilities')
  clone = losses.MarginControlLoss.from_config(loss.get_config())
  assert clone.margin_form == 'batch_probabilities' and clone.get_config() == loss.get_config()
  assert losses.MarginControlLoss().margin_form == 'logits'
  for bad in ('probabilities', None, 1):
    with pytest.raises(ValueError, match=f'margin_form must be one of .*got {bad!r}'):
      losses.MarginControlLoss(margin_form=bad)
    with pytest.raises(ValueError, match='margin_form must be one of'):
      losses.margin_control_loss([0], [[0.0, 1.0]], margin_form=bad)

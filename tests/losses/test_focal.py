"""Focal loss (fedmgc eq. 10) against a float64 reference, limits, extremes, Keras plumbing."""

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


@pytest.mark.parametrize('gamma,beta', [(0.0, 1.0), (0.1, 1.2), (0.5, 1.0), (1.0, 2.0), (2.0, 1.5),
                                        (3.7, 0.3)])
def test_matches_float64_reference(random_batch, gamma, beta):
  labels, logits = random_batch
  got = losses.focal_loss(labels, tf.constant(logits), gamma=gamma, beta=beta).numpy()
  np.testing.assert_allclose(got, references.focal(labels, logits, gamma, beta), rtol=1e-12,
                             atol=1e-14)
  got32 = losses.focal_loss(labels, tf.constant(logits, tf.float32), gamma=gamma, beta=beta)
  assert got32.dtype == tf.float32
  np.testing.assert_allclose(got32.numpy(), references.focal(labels, logits, gamma, beta),
                             rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize('gamma,beta', [(0.0, 1.0), (0.2, 1.0), (0.5, 1.5), (2.0, 1.0)])
def test_gradient_matches_finite_differences(random_batch, gamma, beta):
  labels, logits = random_batch
  _, grad = _grad(lambda z: losses.focal_loss(labels, z, gamma=gamma, beta=beta), logits)
  expected = references.numeric_gradient(lambda z: references.focal(labels, z, gamma, beta), logits)
  np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-8)


def test_gamma0_beta1_is_sparse_cross_entropy(random_batch):
  labels, logits = random_batch
  ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  focal = losses.FocalLoss(gamma=0.0, beta=1.0)
  for dtype in (tf.float32, tf.float64):
    z = tf.constant(logits, dtype)
    np.testing.assert_allclose(focal(labels, z).numpy(), ce(labels, z).numpy(), rtol=1e-6)
  np.testing.assert_allclose(
      losses.focal_loss(labels, logits, gamma=0.0, beta=1.0).numpy(),
      references.cross_entropy(labels, logits), rtol=1e-13)
  _, grad = _grad(lambda z: losses.focal_loss(labels, z, gamma=0.0, beta=1.0), logits)
  np.testing.assert_allclose(grad, references.softmax(logits) - np.eye(5)[labels], atol=1e-14)


def test_focusing_lowers_loss_of_well_classified_examples(random_batch):
  labels, logits = random_batch
  ce = references.cross_entropy(labels, logits)
  focal = losses.focal_loss(labels, logits, gamma=2.0, beta=1.0).numpy()
  assert np.all(focal <= ce + 1e-15)
  assert np.all(focal >= 0.0)
  scaled = losses.focal_loss(labels, logits, gamma=2.0, beta=3.0).numpy()
  np.testing.assert_allclose(scaled, 3.0 * focal, rtol=1e-14)


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
@pytest.mark.parametrize('gamma', [0.0, 0.1, 0.5, 1.0, 2.0])
def test_finite_on_extreme_logits(extreme_batch, dtype, gamma):
  labels, logits = extreme_batch
  value, grad = _grad(lambda z: losses.focal_loss(labels, z, gamma=gamma, beta=1.5),
                      logits.astype(dtype.as_numpy_dtype))
  per_example = losses.focal_loss(labels, tf.constant(logits, dtype), gamma=gamma, beta=1.5)
  assert np.all(np.isfinite(per_example.numpy())) and np.isfinite(value)
  assert np.all(np.isfinite(grad))
  # Row 0 is classified with p_t == 1 in float arithmetic: loss 0, gradient 0 (gamma > 0) or the
  # cross-entropy gradient p - onehot = 0 (gamma = 0).
  assert per_example.numpy()[0] == 0.0
  np.testing.assert_array_equal(grad[0], np.zeros(3))
  # Row 1 is wrong with certainty: p_t = 0, (1 - p_t)^gamma = 1, loss = beta * 2e4, gradient
  # beta * (p - onehot).
  np.testing.assert_allclose(per_example.numpy()[1], 1.5 * 2e4, rtol=1e-6)
  np.testing.assert_allclose(grad[1], 1.5 * np.array([1.0, -1.0, 0.0]), atol=1e-6)


def test_gradient_finite_when_true_class_probability_rounds_to_one():
  # Large margins where 1 - p_t is tiny but not zero, and zero: gamma < 1 makes d^(gamma-1) huge.
  logits = np.array([[30.0, 0.0], [60.0, 0.0], [200.0, 0.0], [800.0, 0.0]], np.float32)
  labels = np.array([0, 0, 0, 0])
  for gamma in (0.1, 0.5, 0.99):
    _, grad = _grad(lambda z, g=gamma: losses.focal_loss(labels, z, gamma=g, beta=1.0), logits)
    assert np.all(np.isfinite(grad))
    assert np.all(np.abs(grad) <= 1.0)


def test_labels_of_shape_b1_and_float_dtype(random_batch):
  labels, logits = random_batch
  loss = losses.FocalLoss(gamma=1.0, beta=1.0)
  expected = loss(labels, logits).numpy()
  np.testing.assert_allclose(loss(labels[:, None], logits).numpy(), expected, rtol=1e-14)
  np.testing.assert_allclose(loss(labels.astype(np.float32), logits).numpy(), expected,
                             rtol=1e-14)
  np.testing.assert_allclose(expected, np.mean(references.focal(labels, logits, 1.0, 1.0)),
                             rtol=1e-12)


def test_config_round_trip():
  loss = losses.FocalLoss(gamma=0.5, beta=1.2, name='fl',
                          reduction=tf.keras.losses.Reduction.SUM)
  config = loss.get_config()
  assert config['gamma'] == 0.5 and config['beta'] == 1.2
  clone = losses.FocalLoss.from_config(config)
  assert clone.get_config() == config
  labels, logits = np.array([0, 1]), np.array([[0.3, -1.0], [2.0, 0.5]])
  np.testing.assert_allclose(clone(labels, logits).numpy(), loss(labels, logits).numpy())
  restored = tf.keras.losses.deserialize(tf.keras.losses.serialize(loss),
                                         custom_objects={'FocalLoss': losses.FocalLoss})
  assert isinstance(restored, losses.FocalLoss) and restored.get_config() == config


@pytest.mark.parametrize('kwargs,name', [
    (dict(gamma=-0.1), 'gamma'), (dict(gamma=float('nan')), 'gamma'), (dict(gamma='2'), 'gamma'),
    (dict(beta=-1.0), 'beta'), (dict(beta=0.0), 'beta'), (dict(beta=float('inf')), 'beta'),
    (dict(gamma=True), 'gamma')])
def test_bad_arguments(kwargs, name):
  with pytest.raises(ValueError, match=name):
    losses.FocalLoss(**kwargs)
  with pytest.raises(ValueError, match=name):
    losses.focal_loss([0], [[0.0, 1.0]], **kwargs)


def test_bad_shapes():
  with pytest.raises(ValueError, match='logits'):
    losses.focal_loss([0], [0.0, 1.0])
  with pytest.raises(ValueError, match='labels'):
    losses.focal_loss([[0, 1]], [[0.0, 1.0]])

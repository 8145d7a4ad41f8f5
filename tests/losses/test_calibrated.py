"""Calibrated-label loss (FedGA, fedga eqs. 8-10) against a float64 reference: the default
soft-target form (gradient (sum q) p - q, rows summing to 0) and form='paper' (gradient p - q)."""

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


def test_targets_match_reference(random_batch):
  labels, logits = random_batch
  probs = tf.nn.softmax(logits)
  counts = losses.batch_class_counts(tf.constant(labels, tf.int32), 5)
  np.testing.assert_array_equal(counts.numpy(), references.class_counts(labels, 5))
  q = losses.calibrated_labels(tf.constant(labels, tf.int32), probs, counts).numpy()
  np.testing.assert_allclose(q, references.calibrated_targets(labels, logits), rtol=1e-13,
                             atol=1e-16)


def test_matches_float64_reference(random_batch):
  labels, logits = random_batch
  got = losses.calibrated_label_loss(labels, logits, form='paper').numpy()
  np.testing.assert_allclose(got, references.calibrated(labels, logits), rtol=1e-12, atol=1e-12)
  got32 = losses.calibrated_label_loss(labels, tf.constant(logits, tf.float32), form='paper').numpy()
  np.testing.assert_allclose(got32, references.calibrated(labels, logits), rtol=1e-5, atol=1e-5)


# "Exactly" up to rounding: autodiff's p (the gradient of log_softmax) and tf.nn.softmax differ
# by a few units in the last place (float32 ulp at 1 is 1.2e-7).
@pytest.mark.parametrize('dtype,atol', [(tf.float64, 1e-15), (tf.float32, 3e-7)])
def test_gradient_is_exactly_p_minus_q(random_batch, dtype, atol):
  labels, logits = random_batch
  z = logits.astype(dtype.as_numpy_dtype)
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='paper'), z)
  p = tf.nn.softmax(tf.constant(z)).numpy()
  q = losses.calibrated_labels(tf.constant(labels, tf.int32), p,
                               references.class_counts(labels, 5)).numpy()
  np.testing.assert_allclose(grad, p - q, rtol=0, atol=atol)
  # ... and against the float64 reference of p and q.
  np.testing.assert_allclose(grad, references.softmax(logits)
                             - references.calibrated_targets(labels, logits), atol=10 * atol)


def test_keras_loss_gradient_is_mean_of_p_minus_q(random_batch):
  labels, logits = random_batch
  _, grad = _grad(lambda t: losses.CalibratedLabelLoss(form='paper')(labels, t), logits)
  expected = (references.softmax(logits) - references.calibrated_targets(labels, logits)) / 12
  np.testing.assert_allclose(grad, expected, atol=1e-16)


def test_balanced_batch_gradient_is_p_minus_onehot_and_loss_is_cross_entropy():
  rng = np.random.default_rng(7)
  labels = np.repeat(np.arange(4), 3)
  rng.shuffle(labels)
  logits = rng.normal(scale=2.0, size=(12, 4))
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='paper'), logits)
  np.testing.assert_allclose(grad, references.softmax(logits) - np.eye(4)[labels], atol=1e-15)
  np.testing.assert_allclose(losses.calibrated_label_loss(labels, logits, form='paper').numpy(),
                             references.cross_entropy(labels, logits), rtol=1e-13)


def test_hand_worked_batch():
  # Labels (0, 0, 1), three classes: N = (2, 1, 0).
  # Class-0 examples: q = (1, (2 - 1)/2 p_1, (2 - 0)/2 p_2) = (1, p_1 / 2, p_2).
  # Class-1 example:  q = ((1 - 2)/1 p_0, 1, (1 - 0)/1 p_2) = (-p_0, 1, p_2).
  logits = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [np.log(2.0), 0.0, 0.0]])
  labels = np.array([0, 0, 1])
  p = references.softmax(logits)
  q = np.array([[1.0, p[0, 1] / 2, p[0, 2]],
                [1.0, p[1, 1] / 2, p[1, 2]],
                [-p[2, 0], 1.0, p[2, 2]]])
  np.testing.assert_allclose(p[2], [0.5, 0.25, 0.25])
  got_q = losses.calibrated_labels(tf.constant(labels, tf.int32), p, [2, 1, 0]).numpy()
  np.testing.assert_allclose(got_q, q, rtol=1e-15)
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='paper'), logits)
  np.testing.assert_allclose(grad, p - q, atol=1e-15)
  # Row 2: p - q = (0.5 + 0.5, 0.25 - 1, 0) = (1, -0.75, 0).
  np.testing.assert_allclose(grad[2], [1.0, -0.75, 0.0], atol=1e-15)
  # Class 2 is absent from the batch: zero gradient on its logit from every example.
  np.testing.assert_array_equal(grad[:, 2], np.zeros(3))
  # Eq. (7): the inactive gradient summed over class-0 examples on logit 1 is N_1 * mean p_1.
  np.testing.assert_allclose(grad[:2, 1].sum(), 1 * p[:2, 1].mean(), rtol=1e-14)
  np.testing.assert_allclose(grad[2, 0], 2 * p[2, 0], rtol=1e-14)


def test_aligned_inactive_gradients_on_random_batch(random_batch):
  # fedga eq. (7): for classes i != j, sum over examples of class j of dL/dz_i = N_i * mean p_i.
  labels, logits = random_batch
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='paper'), logits)
  p = references.softmax(logits)
  counts = references.class_counts(labels, 5)
  for j in range(5):
    rows = labels == j
    if not rows.any():
      continue
    for i in range(5):
      if i != j:
        np.testing.assert_allclose(grad[rows, i].sum(), counts[i] * p[rows, i].mean(),
                                   rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
def test_finite_on_extreme_logits(extreme_batch, dtype):
  labels, logits = extreme_batch
  z = logits.astype(dtype.as_numpy_dtype)
  value, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='paper'), z)
  assert np.isfinite(value) and np.all(np.isfinite(grad))
  np.testing.assert_allclose(grad, references.softmax(logits)
                             - references.calibrated_targets(labels, logits), atol=1e-6)
  np.testing.assert_allclose(losses.calibrated_label_loss(labels, tf.constant(z), form='paper').numpy(),
                             references.calibrated(labels, logits), rtol=1e-6, atol=1e-3)


def test_dataset_counts(random_batch):
  labels, logits = random_batch
  counts = [7.0, 1.0, 0.0, 30.0, 2.0]
  labels = np.where(labels == 2, 3, labels)  # every label has a positive count
  loss = losses.CalibratedLabelLoss(counts='dataset', form='paper')
  loss.assign_class_counts(counts)
  expected = references.calibrated(labels, logits, counts)
  np.testing.assert_allclose(loss(labels, logits).numpy(), np.mean(expected), rtol=1e-12)
  np.testing.assert_allclose(
      losses.calibrated_label_loss(labels, logits, class_counts=counts, form='paper').numpy(), expected,
      rtol=1e-12, atol=1e-12)
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, class_counts=counts, form='paper'), logits)
  np.testing.assert_allclose(
      grad, references.softmax(logits) - references.calibrated_targets(labels, logits, counts),
      atol=1e-15)
  assert np.all(grad[:, 2] == 0.0)  # class 2 absent from the local dataset


def test_dataset_counts_set_inside_tf_function(random_batch):
  labels, logits = random_batch
  loss = losses.CalibratedLabelLoss(counts='dataset', num_classes=5, form='paper')
  assert loss.class_counts.shape == (5,)

  @tf.function
  def count_then_loss(y, z):
    loss.assign_class_counts(losses.batch_class_counts(y, 5))
    return loss(y, z)

  got = count_then_loss(tf.constant(labels, tf.int32), tf.constant(logits))
  np.testing.assert_allclose(got.numpy(), np.mean(references.calibrated(labels, logits)),
                             rtol=1e-12)


def test_unset_dataset_counts_fail_instead_of_dividing_by_zero(random_batch):
  labels, logits = random_batch
  loss = losses.CalibratedLabelLoss(counts='dataset', num_classes=5)
  with pytest.raises(tf.errors.InvalidArgumentError, match='N_j = 0'):
    loss(labels, logits)
  with pytest.raises(tf.errors.InvalidArgumentError, match='N_j = 0'):
    tf.function(loss)(labels, logits)


def test_config_round_trip():
  for loss in (losses.CalibratedLabelLoss(), losses.CalibratedLabelLoss(counts='dataset'),
               losses.CalibratedLabelLoss(counts='dataset', num_classes=4, name='ga')):
    config = loss.get_config()
    clone = losses.CalibratedLabelLoss.from_config(config)
    assert clone.get_config() == config
    assert clone.counts == loss.counts
  labels, logits = np.array([0, 1, 1]), np.array([[0.3, -1.0], [2.0, 0.5], [0.0, 0.1]])
  loss = losses.CalibratedLabelLoss()
  np.testing.assert_allclose(losses.CalibratedLabelLoss.from_config(loss.get_config())(
      labels, logits).numpy(), loss(labels, logits).numpy())


def test_bad_arguments():
  with pytest.raises(ValueError, match="counts.*'client'"):
    losses.CalibratedLabelLoss(counts='client')
  with pytest.raises(ValueError, match='num_classes'):
    losses.CalibratedLabelLoss(counts='dataset', num_classes=0)
  with pytest.raises(ValueError, match='counts="dataset"'):
    losses.CalibratedLabelLoss().assign_class_counts([1.0, 2.0])


# ---- form="soft_target": the authors' code, -sum_i q_i log p_i, gradient (sum q) p - q ----------


def _batch_with_absent_class():
  """Labels over classes {0, 1, 3} of 5 (2 and 4 absent), unbalanced; random logits."""
  rng = np.random.default_rng(99)
  labels = np.array([0, 0, 0, 0, 1, 3, 3, 0, 1, 0])
  logits = rng.normal(scale=2.0, size=(10, 5))
  return labels, logits


def test_soft_target_matches_float64_reference(random_batch):
  for labels, logits in (random_batch, _batch_with_absent_class()):
    got = losses.calibrated_label_loss(labels, logits, form='soft_target').numpy()
    np.testing.assert_allclose(got, references.calibrated_soft_target(labels, logits),
                               rtol=1e-12, atol=1e-12)
    got32 = losses.calibrated_label_loss(labels, tf.constant(logits, tf.float32),
                                         form='soft_target').numpy()
    np.testing.assert_allclose(got32, references.calibrated_soft_target(labels, logits),
                               rtol=1e-5, atol=1e-5)


def test_soft_target_reference_gradient_is_the_derivative_with_q_fixed():
  # The reference formula (sum q) p - q checked by central differences of -sum q log p(z).
  labels, logits = _batch_with_absent_class()
  q = references.calibrated_targets(labels, logits)

  def fixed_q_loss(z):
    return np.array([-sum(a * b for a, b in zip(qb, references.log_softmax_row(zb)[0]))
                     for qb, zb in zip(q.tolist(), z.tolist())])

  np.testing.assert_allclose(references.numeric_gradient(fixed_q_loss, logits),
                             references.calibrated_soft_target_gradient(labels, logits),
                             atol=1e-8)


@pytest.mark.parametrize('dtype,atol', [(tf.float64, 1e-14), (tf.float32, 1e-6)])
def test_soft_target_gradient_is_sum_q_p_minus_q(random_batch, dtype, atol):
  for labels, logits in (random_batch, _batch_with_absent_class()):
    z = logits.astype(dtype.as_numpy_dtype)
    _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='soft_target'), z)
    np.testing.assert_allclose(
        grad, references.calibrated_soft_target_gradient(labels, logits), rtol=0, atol=atol)


def test_soft_target_absent_class_gradient_is_small_but_not_muted():
  labels, logits = _batch_with_absent_class()
  _, paper = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='paper'), logits)
  _, soft = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='soft_target'), logits)
  p = references.softmax(logits)
  q = references.calibrated_targets(labels, logits)
  for absent in (2, 4):
    np.testing.assert_array_equal(paper[:, absent], np.zeros(10))   # the paper mutes it
    # soft target: (sum q - 1) p_i, with 0 <= sum q - 1 <= 1 - p_j here (every N_k <= N_j
    # for the majority class 0; bounded by cross-entropy's p_i).
    expected = (q.sum(axis=1) - 1.0) * p[:, absent]
    np.testing.assert_allclose(soft[:, absent], expected, atol=1e-15)
    assert np.all(np.abs(soft[:, absent]) > 0)
    majority = labels == 0
    assert np.all(soft[majority, absent] <= p[majority, absent])
    assert np.all(soft[majority, absent] <= (1 - p[majority, 0]) * p[majority, absent] + 1e-15)


def test_soft_target_on_balanced_batch_is_cross_entropy():
  rng = np.random.default_rng(7)
  labels = np.repeat(np.arange(4), 3)
  logits = rng.normal(scale=2.0, size=(12, 4))
  np.testing.assert_allclose(
      losses.calibrated_label_loss(labels, logits, form='soft_target').numpy(),
      references.cross_entropy(labels, logits), rtol=1e-13)
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='soft_target'), logits)
  np.testing.assert_allclose(grad, references.softmax(logits) - np.eye(4)[labels], atol=1e-15)


def test_soft_target_keras_loss_with_dataset_counts(random_batch):
  labels, logits = random_batch
  counts = [7.0, 1.0, 3.0, 30.0, 2.0]
  loss = losses.CalibratedLabelLoss(counts='dataset', num_classes=5, form='soft_target')
  loss.assign_class_counts(counts)
  np.testing.assert_allclose(
      loss(labels, logits).numpy(),
      np.mean(references.calibrated_soft_target(labels, logits, counts)), rtol=1e-12)
  _, grad = _grad(lambda t: loss(labels, t), logits)
  np.testing.assert_allclose(
      grad, references.calibrated_soft_target_gradient(labels, logits, counts) / 12, atol=1e-15)


def test_form_config_round_trip_and_bad_form():
  loss = losses.CalibratedLabelLoss(form='soft_target')
  clone = losses.CalibratedLabelLoss.from_config(loss.get_config())
  assert clone.form == 'soft_target' and clone.get_config() == loss.get_config()
  assert losses.CalibratedLabelLoss().form == 'soft_target'
  for bad in ('soft', None, 1):
    with pytest.raises(ValueError, match=f'form must be one of .*got {bad!r}'):
      losses.CalibratedLabelLoss(form=bad)
    with pytest.raises(ValueError, match='form must be one of'):
      losses.calibrated_label_loss([0], [[0.0, 1.0]], form=bad)


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
def test_soft_target_finite_on_extreme_logits(extreme_batch, dtype):
  labels, logits = extreme_batch
  z = logits.astype(dtype.as_numpy_dtype)
  value, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='soft_target'), z)
  assert np.isfinite(value) and np.all(np.isfinite(grad))
  np.testing.assert_allclose(grad, references.calibrated_soft_target_gradient(labels, logits),
                             atol=1e-6)


def test_paper_form_is_not_shift_invariant_and_soft_target_is(random_batch):
  # Shifting every logit of every example by c changes the paper's loss by c (1 - sum q) per
  # example; the soft-target form (a cross-entropy) does not change.
  labels, logits = _batch_with_absent_class()
  q = references.calibrated_targets(labels, logits)
  c = 3.0
  paper = losses.calibrated_label_loss(labels, logits, form='paper').numpy()
  paper_shifted = losses.calibrated_label_loss(labels, logits + c, form='paper').numpy()
  np.testing.assert_allclose(paper_shifted - paper, c * (1.0 - q.sum(axis=1)), atol=1e-12)
  assert np.any(q.sum(axis=1) > 1.0)   # the loss falls along the shift for these examples
  soft = losses.calibrated_label_loss(labels, logits, form='soft_target').numpy()
  soft_shifted = losses.calibrated_label_loss(labels, logits + c, form='soft_target').numpy()
  np.testing.assert_allclose(soft_shifted, soft, atol=1e-12)
  _, grad = _grad(lambda t: losses.calibrated_label_loss(labels, t, form='soft_target'), logits)
  np.testing.assert_allclose(grad.sum(axis=1), 0.0, atol=1e-14)


def test_default_is_the_soft_target_form_whose_gradient_rows_sum_to_zero(random_batch):
  for labels, logits in (random_batch, _batch_with_absent_class()):
    b = len(labels)
    _, grad = _grad(lambda t: losses.CalibratedLabelLoss()(labels, t), logits)
    np.testing.assert_allclose(grad.sum(axis=1), 0.0, atol=1e-15)
    np.testing.assert_allclose(
        grad, references.calibrated_soft_target_gradient(labels, logits) / b, atol=1e-15)
    _, default_kernel = _grad(lambda t: losses.calibrated_label_loss(labels, t), logits)
    np.testing.assert_allclose(default_kernel.sum(axis=1), 0.0, atol=1e-14)
    # form='paper' is still there, and its rows sum to 1 - sum(q), not 0, on these batches.
    _, paper = _grad(lambda t: losses.CalibratedLabelLoss(form='paper')(labels, t), logits)
    q = references.calibrated_targets(labels, logits)
    np.testing.assert_allclose(paper.sum(axis=1), (1.0 - q.sum(axis=1)) / b, atol=1e-15)
    assert np.max(np.abs(paper.sum(axis=1))) > 1e-3

"""FedLD's margin-control loss (docs/methods.md, FedLD)."""

import tensorflow as tf

from tff_conflict import hparams
from tff_conflict.losses import _common


def log1p_squared_norm(logits) -> tf.Tensor:
  """`log(1 + |z|^2)` for each row `z` of `logits` `[B, C]`, without overflow; shape `[B]`."""
  logits = tf.convert_to_tensor(logits)
  scale = tf.reduce_max(tf.abs(logits), axis=-1)
  large = scale > 1.0
  safe_scale = tf.where(large, scale, tf.ones_like(scale))
  scaled = logits / safe_scale[:, tf.newaxis]
  large_form = 2.0 * tf.math.log(safe_scale) + tf.math.log(
      tf.square(tf.math.reciprocal(safe_scale)) + tf.reduce_sum(tf.square(scaled), axis=-1))
  small_logits = tf.where(large[:, tf.newaxis], tf.zeros_like(logits), logits)
  small_form = tf.math.log1p(tf.reduce_sum(tf.square(small_logits), axis=-1))
  return tf.where(large, large_form, small_form)


def margin_control_loss(labels, logits, *,
                        margin_weight: float = hparams.MARGIN_WEIGHT.default,
                        margin_form: str = hparams.MARGIN_FORM.default) -> tf.Tensor:
  """Per-example margin-control loss (fedld paper, eq. 3).

  Zeng, Guo, Wang, Wang, Zhou, Qu, "Tackling Data Heterogeneity in Federated Learning via Loss
  Decomposition", MICCAI 2024, arXiv:2408.12300, eq. 3. With `"logits"`, `log(1 + |z|^2)` is
  evaluated without overflow (`log1p_squared_norm`); with `"batch_probabilities"` each example's
  loss carries the batch term under one norm, so the mean over the batch is that loss.
  `margin_weight = 0` is cross-entropy.

  Args:
    labels: integer class indices, shape `[B]` or `[B, 1]`.
    logits: unnormalized scores `z`, shape `[B, C]`, a floating dtype.
    margin_weight: lambda, a finite number >= 0 (`hparams.MARGIN_WEIGHT`, default 0.01).
    margin_form: `"logits"` (default): `CE(y, z_b) + lambda log(1 + |z_b|^2)` for each example
      b (eq. 3); `"batch_probabilities"` (the authors' code): `CE(y, z_b) + lambda
      log(1 + |P|_F^2)`, P the softmax probabilities of the whole batch (`hparams.MARGIN_FORM`).

  Returns:
    A `[B]` tensor of per-example losses (the mean over the batch is the loss;
    `MarginControlLoss` takes it).

  Raises:
    ValueError: for a negative or non-finite `margin_weight`, an unknown `margin_form`, or
      badly shaped inputs.
  """
  margin_weight = hparams.MARGIN_WEIGHT.check(margin_weight)
  margin_form = hparams.MARGIN_FORM.check(margin_form)
  labels, logits = _common.prepare(labels, logits)
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  if margin_weight == 0.0:
    return ce
  weight = tf.constant(margin_weight, logits.dtype)
  if margin_form == 'batch_probabilities':
    # |P|_F^2 <= B: no overflow; the same batch term for every example.
    squared = tf.reduce_sum(tf.square(tf.nn.softmax(logits, axis=-1)))
    return ce + weight * tf.math.log1p(squared)
  return ce + weight * log1p_squared_norm(logits)


class MarginControlLoss(tf.keras.losses.Loss):
  """Keras loss of `margin_control_loss` (fedld paper, eq. 3): sparse integer labels, logits.

  Args:
    margin_weight: lambda, a finite number >= 0 (`hparams.MARGIN_WEIGHT`, default 0.01).
    margin_form: `"logits"` (default, eq. 3) or `"batch_probabilities"` (the authors' code);
      `hparams.MARGIN_FORM`.

  The default reduction takes the mean over the batch. `MarginControlLoss(margin_weight=0.0)`
  equals `tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)`.
  """

  def __init__(self, margin_weight: float = hparams.MARGIN_WEIGHT.default, *,
               margin_form: str = hparams.MARGIN_FORM.default,
               reduction=tf.keras.losses.Reduction.AUTO, name: str = 'margin_control_loss'):
    margin_weight = hparams.MARGIN_WEIGHT.check(margin_weight)
    margin_form = hparams.MARGIN_FORM.check(margin_form)
    super().__init__(reduction=reduction, name=name)
    self.margin_weight = margin_weight
    self.margin_form = margin_form

  def call(self, y_true, y_pred):
    return margin_control_loss(y_true, y_pred, margin_weight=self.margin_weight,
                               margin_form=self.margin_form)

  def get_config(self):
    config = super().get_config()
    config.update(margin_weight=self.margin_weight, margin_form=self.margin_form)
    return config

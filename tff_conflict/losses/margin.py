"""Margin-control loss, FedLD's client loss (docs/methods.md, FedLD).

Paper: Zeng, Guo, Wang, Wang, Zhou, Qu, "Tackling Data Heterogeneity in Federated Learning via
Loss Decomposition", MICCAI 2024, arXiv:2408.12300 (the fedld paper), eq. 3.

Per example, with `z` that example's logits (length C),

    L = CE(y, z) + lambda * log(1 + |z|_2^2),

and the batch loss is the mean over examples. `lambda = 0` is exactly cross-entropy. (The authors'
code penalizes softmax probabilities with one norm over the whole batch; this loss follows the
paper.)

Numerics. `log(1 + |z|^2)` is evaluated as `2 log s + log(1/s^2 + |z/s|^2)` with `s = max_i |z_i|`
when `s > 1` (and as `log1p(|z|^2)` otherwise), so that `|z|^2` never overflows; both forms are
the same function, so the gradient `2 z / (1 + |z|^2)` is unchanged (`1/s^2` is computed as
`(1/s)^2`, whose derivative underflows to 0 instead of overflowing).
"""

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
                        margin_weight: float = hparams.MARGIN_WEIGHT.default) -> tf.Tensor:
  """Per-example `CE(y, z) + margin_weight * log(1 + |z|^2)` (fedld paper, eq. 3).

  Args:
    labels: integer class indices, shape `[B]` or `[B, 1]`.
    logits: unnormalized scores `z`, shape `[B, C]`, a floating dtype.
    margin_weight: lambda, a finite number >= 0 (`hparams.MARGIN_WEIGHT`, default 0.01).

  Returns:
    A `[B]` tensor of per-example losses (the mean over the batch is the paper's loss;
    `MarginControlLoss` takes it).

  Raises:
    ValueError: for a negative or non-finite `margin_weight`, or badly shaped inputs.
  """
  margin_weight = hparams.MARGIN_WEIGHT.check(margin_weight)
  labels, logits = _common.prepare(labels, logits)
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  if margin_weight == 0.0:
    return ce
  return ce + tf.constant(margin_weight, logits.dtype) * log1p_squared_norm(logits)


class MarginControlLoss(tf.keras.losses.Loss):
  """Keras loss of `margin_control_loss` (fedld paper, eq. 3): sparse integer labels, logits.

  Args:
    margin_weight: lambda, a finite number >= 0 (`hparams.MARGIN_WEIGHT`, default 0.01).

  The default reduction takes the mean over the batch. `MarginControlLoss(margin_weight=0.0)`
  equals `tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)`.
  """

  def __init__(self, margin_weight: float = hparams.MARGIN_WEIGHT.default, *,
               reduction=tf.keras.losses.Reduction.AUTO, name: str = 'margin_control_loss'):
    super().__init__(reduction=reduction, name=name)
    self.margin_weight = hparams.MARGIN_WEIGHT.check(margin_weight)

  def call(self, y_true, y_pred):
    return margin_control_loss(y_true, y_pred, margin_weight=self.margin_weight)

  def get_config(self):
    config = super().get_config()
    config.update(margin_weight=self.margin_weight)
    return config

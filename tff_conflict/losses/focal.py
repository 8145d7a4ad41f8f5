"""Focal loss, FedMGC's client loss (docs/methods.md, "Focal loss (client)")."""

import tensorflow as tf

from tff_conflict import hparams
from tff_conflict.losses import _common


def _focal_of_log_prob(log_p, gamma: float, beta: float):
  """Elementwise `-beta * (1 - exp(l))^gamma * l` with a hand-written gradient that stays finite
  and exact when `p_t = exp(l)` rounds to 1 (docs/methods.md, "Focal loss (client)")."""

  @tf.custom_gradient
  def focal(l):
    d = -tf.math.expm1(l)  # 1 - p_t, in [0, 1].
    modulation = tf.pow(d, tf.constant(gamma, l.dtype))  # pow(0, 0) == 1: gamma = 0 is CE.
    value = -beta * modulation * l

    def grad(upstream):
      zero = tf.equal(d, 0.0)
      # (-l) / d, with its limit 1 where d == 0 (then l == 0 too); the double tf.where keeps
      # the unused branch free of 0/0.
      ratio = tf.where(zero, tf.ones_like(l), -l / tf.where(zero, tf.ones_like(d), d))
      dvalue = -beta * modulation * (1.0 + gamma * (1.0 - d) * ratio)
      return upstream * dvalue

    return value, grad

  return focal(log_p)


def focal_loss(labels, logits, *, gamma: float = hparams.FOCAL_GAMMA.default,
               beta: float = hparams.FOCAL_BETA.default) -> tf.Tensor:
  """Per-example focal loss `FL(p_t) = -beta (1 - p_t)^gamma log p_t` (fedmgc paper, eq. 10).

  Wang, Mao, Wang, Wu, Wu, "Joint Focal Loss and Dominant Gradient Correction for Gradient
  Conflict in Federated Learning", eq. (10); Lin et al., "Focal Loss for Dense Object Detection",
  ICCV 2017. Computed from `log_softmax`; `gamma = 0, beta = 1` is cross-entropy.

  Args:
    labels: integer class indices, shape `[B]` or `[B, 1]`.
    logits: unnormalized scores, shape `[B, C]`, a floating dtype.
    gamma: focusing parameter, a finite number >= 0 (`hparams.FOCAL_GAMMA`: default 0.5, from
      the paper's grid {0.1, 0.2, 0.5, 1.0}).
    beta: loss scale, a finite number > 0 (`hparams.FOCAL_BETA`: default 1.0, from the paper's
      grid {1.0, 1.2, 1.5, 2.0}).

  Returns:
    A `[B]` tensor of per-example losses, in the dtype of `logits` (the mean over the batch is the
    paper's loss; `FocalLoss` takes it).

  Raises:
    ValueError: for a negative or non-finite `gamma`, a non-positive or non-finite `beta`, or
      badly shaped inputs.
  """
  gamma = hparams.FOCAL_GAMMA.check(gamma)
  beta = hparams.FOCAL_BETA.check(beta)
  labels, logits = _common.prepare(labels, logits)
  log_p = _common.true_class_log_prob(labels, tf.nn.log_softmax(logits, axis=-1))
  return _focal_of_log_prob(log_p, gamma, beta)


class FocalLoss(tf.keras.losses.Loss):
  """Keras loss of `focal_loss` (fedmgc paper, eq. 10): sparse integer labels, logits.

  Args:
    gamma: focusing parameter, a finite number >= 0 (`hparams.FOCAL_GAMMA`, default 0.5).
    beta: loss scale, a finite number > 0 (`hparams.FOCAL_BETA`, default 1.0).

  The default reduction takes the mean over the batch. `FocalLoss(gamma=0.0, beta=1.0)` equals
  `tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)`.
  """

  def __init__(self, gamma: float = hparams.FOCAL_GAMMA.default,
               beta: float = hparams.FOCAL_BETA.default, *,
               reduction=tf.keras.losses.Reduction.AUTO, name: str = 'focal_loss'):
    super().__init__(reduction=reduction, name=name)
    self.gamma = hparams.FOCAL_GAMMA.check(gamma)
    self.beta = hparams.FOCAL_BETA.check(beta)

  def call(self, y_true, y_pred):
    return focal_loss(y_true, y_pred, gamma=self.gamma, beta=self.beta)

  def get_config(self):
    config = super().get_config()
    config.update(gamma=self.gamma, beta=self.beta)
    return config

"""FedGA's calibrated-label loss (docs/methods.md, FedGA)."""

import tensorflow as tf

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.losses import _common

COUNTS_OPTIONS = hparams.CALIBRATION_COUNTS.choices
FORMS = hparams.CALIBRATION_FORM.choices


def calibrated_labels(labels, probabilities, class_counts) -> tf.Tensor:
  """Calibrated targets q of fedga paper eq. (10), shape `[B, C]`.

  Args:
    labels: int32 `[B]` class indices j.
    probabilities: `[B, C]` softmax outputs p (used as given; callers stop the gradient).
    class_counts: `[C]` counts N (any numeric dtype); `N_j` must be positive for every label j.

  Returns:
    `q` with `q[b, j] = 1` for `j = labels[b]` and `q[b, i] = (N_j - N_i) / N_j * p[b, i]` else.
  """
  probabilities = tf.convert_to_tensor(probabilities)
  dtype = probabilities.dtype
  counts = tf.cast(class_counts, dtype)
  own = tf.gather(counts, labels)  # N_j for each example, [B]
  check = tf.debugging.assert_positive(
      own, message='calibrated_label_loss: an example\'s own class has count N_j = 0 (were the '
      'class counts set from this client\'s data?)')
  with tf.control_dependencies([check]):
    own = tf.identity(own)
  ratio = (own[:, tf.newaxis] - counts[tf.newaxis, :]) / own[:, tf.newaxis]  # [B, C]
  onehot = tf.one_hot(labels, tf.shape(probabilities)[-1], dtype=dtype)
  return onehot + (1.0 - onehot) * ratio * probabilities


def batch_class_counts(labels, num_classes) -> tf.Tensor:
  """Number of examples of each class among int `labels` `[B]`: float32 `[num_classes]`."""
  return tf.reduce_sum(tf.one_hot(labels, num_classes, dtype=tf.float32), axis=0)


def calibrated_label_loss(labels, logits, *, class_counts=None,
                          form: str = hparams.CALIBRATION_FORM.default) -> tf.Tensor:
  """Per-example calibrated-label loss with q the calibrated labels (fedga paper, eqs. 8-10).

  Xiao, Zuo, Wang, "FedGA: Federated Learning with Gradient Alignment for Error Asymmetry
  Mitigation", AAAI 2025, arXiv:2412.16582, eqs. 8-10 and Algorithm 1. For an example of class j
  with softmax output p (stop-gradient) the target is `q_j = 1`, `q_i = (N_j - N_i) / N_j * p_i`
  (N: the class counts). The `"soft_target"` gradient rows sum to 0; the `"paper"` form is not
  invariant to a common shift of the logits.

  Args:
    labels: integer class indices, shape `[B]` or `[B, 1]`.
    logits: unnormalized scores z, shape `[B, C]`, a floating dtype.
    class_counts: `None` to count the classes of this mini-batch (the authors' code), or a `[C]`
      tensor/variable of counts N (e.g. over the client's whole local dataset).
    form: `"soft_target"` (default, the authors' code): `-sum_i q_i log p_i`, gradient
      `(sum q) p - q`; `"paper"`: `logsumexp(z) - q . z`, gradient `p - q` (eq. 8).

  Returns:
    A `[B]` tensor of per-example losses whose gradient with respect to `logits[b]` is exactly
    `p[b] - q[b]` (`"paper"`) or `sum(q[b]) p[b] - q[b]` (`"soft_target"`); the mean over the
    batch is the loss (`CalibratedLabelLoss` takes it).

  Raises:
    ValueError: for badly shaped inputs or an unknown `form`.
    tf.errors.InvalidArgumentError: (when run) if an example's own class has count 0.
  """
  form = hparams.CALIBRATION_FORM.check(form)
  labels, logits = _common.prepare(labels, logits)
  if class_counts is None:
    class_counts = batch_class_counts(labels, tf.shape(logits)[-1])
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  q = tf.stop_gradient(calibrated_labels(labels, tf.exp(log_probs), class_counts))
  if form == 'soft_target':
    # -q . log_softmax(z): a soft-target cross-entropy; d/dz = (sum q) p - q.
    return -tf.reduce_sum(q * log_probs, axis=-1)
  # logsumexp(z) - q.z == -log p_j - sum_{i != j} q_i z_i (q_j = 1): the same function, computed
  # without cancelling two large numbers for large logits.
  onehot = tf.one_hot(labels, tf.shape(logits)[-1], dtype=logits.dtype)
  inactive = tf.reduce_sum((1.0 - onehot) * q * logits, axis=-1)
  return -_common.true_class_log_prob(labels, log_probs) - inactive


class CalibratedLabelLoss(tf.keras.losses.Loss):
  """Keras loss of `calibrated_label_loss` (fedga paper, eqs. 8-10): sparse integer labels, logits.

  Args:
    counts: `"batch"` (default, `hparams.CALIBRATION_COUNTS`) counts classes in each
      mini-batch (the paper's Algorithm 1 and the authors' code); `"dataset"` uses the counts
      stored in the loss's non-trainable variable `class_counts`, which the client work sets
      before training (so create the loss inside the TFF `model_fn`); an example whose own class
      has count 0 fails the computation (`tf.errors.InvalidArgumentError`).
    num_classes: with `counts="dataset"`, the length of `class_counts` (optional: without it the
      variable has shape `[None]` and takes counts of any length). Ignored for `"batch"`.
    form: `"soft_target"` (default, the authors' code, gradient `(sum q) p - q`) or `"paper"`
      (eq. 8, gradient `p - q`); see `calibrated_label_loss`.

  The default reduction takes the mean over the batch.
  """

  def __init__(self, counts: str = hparams.CALIBRATION_COUNTS.default, *, num_classes=None,
               form: str = hparams.CALIBRATION_FORM.default,
               reduction=tf.keras.losses.Reduction.AUTO, name: str = 'calibrated_label_loss'):
    counts = hparams.CALIBRATION_COUNTS.check(counts)
    form = hparams.CALIBRATION_FORM.check(form)
    num_classes = _checks.check_optional_int('num_classes', num_classes, minimum=1)
    super().__init__(reduction=reduction, name=name)
    self.counts = counts
    self.num_classes = num_classes
    self.form = form
    self.class_counts = None
    if counts == 'dataset':
      shape = [num_classes] if num_classes is not None else [None]
      self.class_counts = tf.Variable(
          tf.zeros([num_classes or 0], tf.float32), trainable=False, shape=tf.TensorShape(shape),
          name='class_counts')

  def assign_class_counts(self, counts):
    """Sets the dataset class counts N (`counts="dataset"` only); returns the assign op."""
    if self.class_counts is None:
      raise _checks.ArgumentError(argument='counts', value=self.counts, message=(
          f'assign_class_counts needs counts="dataset", this loss has '
          f'counts={self.counts!r}'))
    return self.class_counts.assign(tf.cast(counts, tf.float32))

  def call(self, y_true, y_pred):
    counts = None if self.class_counts is None else self.class_counts.read_value()
    return calibrated_label_loss(y_true, y_pred, class_counts=counts, form=self.form)

  def get_config(self):
    config = super().get_config()
    config.update(counts=self.counts, num_classes=self.num_classes, form=self.form)
    return config

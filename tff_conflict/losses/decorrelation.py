"""FedDecorr's decorrelation regularizer on a batch of representations `z` `[N, m]` (the input
of the classifier layer): the authors' form (default) or the paper's text's. docs/methods.md,
"FedDecorr".
"""

import tensorflow as tf

from tff_conflict import hparams
from tff_conflict._checks import ArgumentError

EPSILON = 1e-8  # the authors' eps inside sqrt(eps + var)


def decorrelation_loss(representations, *, form: str = hparams.FEDDECORR_FORM.default
                       ) -> tf.Tensor:
  """FedDecorr's `L_decorr(z)` of one batch (Shi et al., "Towards Understanding and Mitigating
  Dimensional Collapse in Heterogeneous Federated Learning", ICLR 2023, arXiv 2210.00226).

  `z` is flattened to `[N, m]` and each column standardised, `z_j <- (z_j - mean z_j) /
  sqrt(1e-8 + var z_j)`; then
    - form 'authors' (the authors' code, github.com/bytedance/FedDecorr, `FedDecorrLoss`):
      `C = z^T z`, `L = mean_{j != k} C_jk^2 / N` with the unbiased variance;
    - form 'paper' (Sec. 4, eq. 3): `K = z^T z / N`, the correlation matrix (population
      variance, so that `K_jj = 1` up to eps), `L = ||K||_F^2 / m^2`.
  0 for a batch of one example (as the authors' code); with one feature (m = 1) 'authors' has no
  off-diagonal entry and gives 0. Computed in the representations' dtype (float32 or float64).

  Args:
    representations: float tensor `[N, ...]`, one row per example.
    form: 'authors' (default) or 'paper' (`hparams.FEDDECORR_FORM`).

  Returns:
    A scalar tensor.
  """
  form = hparams.FEDDECORR_FORM.check(form)
  z = tf.convert_to_tensor(representations)
  if not z.dtype.is_floating:
    raise ArgumentError(argument='representations', value=z, message=(
        f'representations must be a float tensor, got dtype {z.dtype.name}'))
  if z.shape.rank is not None and z.shape.rank < 2:
    raise ArgumentError(argument='representations', value=z, message=(
        f'representations must be [N, m] (one row per example), got shape {z.shape}'))
  z = tf.reshape(z, [tf.shape(z)[0], -1])
  n = tf.cast(tf.shape(z)[0], z.dtype)
  m = tf.cast(tf.shape(z)[1], z.dtype)
  z = z - tf.reduce_mean(z, axis=0, keepdims=True)
  squares = tf.reduce_sum(tf.square(z), axis=0, keepdims=True)
  if form == 'authors':
    variance = squares / tf.maximum(n - 1.0, 1.0)   # unbiased (torch's default)
  else:
    variance = squares / tf.maximum(n, 1.0)
  z = z / tf.sqrt(EPSILON + variance)
  gram = tf.matmul(z, z, transpose_a=True)
  if form == 'authors':
    off_diagonal = (tf.reduce_sum(tf.square(gram))
                    - tf.reduce_sum(tf.square(tf.linalg.diag_part(gram))))
    value = tf.math.divide_no_nan(off_diagonal, m * (m - 1.0)) / n
  else:
    value = tf.reduce_sum(tf.square(gram / n)) / (m * m)
  return tf.where(n > 1.0, value, tf.zeros_like(value))

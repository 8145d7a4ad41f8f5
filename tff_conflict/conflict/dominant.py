"""FedMGC's dominant gradient correction (DGC) on a `[K, d]` stack (docs/methods.md, FedMGC)."""

import tensorflow as tf

from tff_conflict import hparams
from tff_conflict.conflict import _eager
from tff_conflict.conflict import geometry

LOSS_FLOOR = 1e-12
_COUNT_SLACK = 1e-9


def _dominant(updates, losses, selection_ratio, include, validate):
  ratio = hparams.DGC_SELECTION_RATIO.check(selection_ratio)
  r, loss = geometry.begin_round(updates, losses=losses, include=include, validate=validate)
  k = r.num_rows
  g = r.gram
  sq = r.sq_norms
  norms = tf.sqrt(sq)
  inv_norms = tf.math.divide_no_nan(tf.ones_like(norms), norms)
  scaled = g * inv_norms[tf.newaxis, :]            # u_i . u_j / |u_j|
  p_pair = 0.5 * (scaled + tf.transpose(scaled))
  p_pair = tf.linalg.set_diag(p_pair, tf.zeros_like(sq))
  p = tf.math.divide_no_nan(tf.reduce_sum(p_pair, axis=1), r.num_part - 1.0)
  z = p / tf.maximum(loss, LOSS_FLOOR)
  z = tf.where(r.part, z, tf.fill(tf.shape(z), tf.constant(-float('inf'), tf.float64)))
  ranking = tf.math.top_k(z, k=k, sorted=True).indices      # ties: lower index first
  num_dominant = tf.cast(tf.math.ceil(ratio * r.num_part - _COUNT_SLACK * r.num_part), tf.int32)
  num_dominant = tf.minimum(num_dominant, tf.cast(r.num_part, tf.int32))
  rows = tf.range(k)

  def body(t, coeffs, inner, count):
    s = ranking[t]
    p_is = inner[:, s]                                     # u_i . u_s
    g_ss = sq[s]
    act = r.part & (rows != s) & (p_is < 0) & (g_ss > 0)
    a = tf.where(act, p_is / tf.where(g_ss > 0, g_ss, tf.ones_like(g_ss)), tf.zeros_like(p_is))
    inner = inner - a[:, tf.newaxis] * g[s][tf.newaxis, :]
    coeffs = coeffs - a[:, tf.newaxis] * tf.one_hot(s, k, dtype=tf.float64)[tf.newaxis, :]
    return t + 1, coeffs, inner, count + tf.reduce_sum(tf.cast(act, tf.int32))

  _, coeffs, _, count = tf.while_loop(
      lambda t, *_: t < num_dominant, body,
      (tf.constant(0), tf.eye(k, dtype=tf.float64), g, tf.constant(0)))
  mean_weights = tf.math.divide_no_nan(tf.cast(r.part, tf.float64), r.num_part)
  combo = tf.linalg.matvec(coeffs, mean_weights, transpose_a=True)
  aggregate = r.combine(combo)
  return r, coeffs, aggregate, count, num_dominant


def _aggregate_only(updates, losses, selection_ratio, include, validate):
  return _dominant(updates, losses, selection_ratio, include, validate)[2]


def _with_diagnostics(updates, losses, selection_ratio, include, validate):
  r, coeffs, aggregate, count, num_dominant = _dominant(updates, losses, selection_ratio, include,
                                                        validate)
  gram_after = tf.matmul(tf.matmul(coeffs, r.gram), coeffs, transpose_b=True)
  return aggregate, r.diagnostics(gram_after, aggregate, {
      'num_dominant': tf.cast(num_dominant, geometry.COUNT_DTYPE),
      'num_projections': tf.cast(count, geometry.COUNT_DTYPE)})


def _run(impl, updates, losses, selection_ratio, include, validate):
  """`impl` inline in a graph; eagerly, checks first, then a cached graph (`_eager`)."""
  if not _eager.executing_eagerly():
    return impl(updates, losses, selection_ratio, include, validate)
  ratio = hparams.DGC_SELECTION_RATIO.check(selection_ratio)
  stack, _, loss, inc = geometry.check_round(updates, losses=losses, include=include,
                                             validate=validate)
  return _eager.call(impl, dict(updates=stack, losses=loss, include=inc),
                     dict(selection_ratio=ratio, validate=False))


def dominant_correction(updates, losses, *, selection_ratio=0.5, include=None, validate=True):
  """FedMGC's dominant gradient correction.

  Wang, Mao, Wang, Wu, Wu, "Joint Focal Loss and Dominant Gradient Correction for Gradient
  Conflict in Federated Learning", Definition 3, Algorithms 1-2: the `ceil(lambda K)` clients with
  the largest projection similarity over training loss are dominant; every other update is
  projected off each dominant ORIGINAL update it conflicts with, in descending score order; the
  aggregate is the unweighted mean of the clients taking part, computed on the Gram matrix.

  Args:
    updates: float32/float64 [K, d], one client update per row.
    losses: [K] each client's mean training loss this round.
    selection_ratio: lambda in (0, 1] (`hparams.DGC_SELECTION_RATIO`, default 0.5);
      `ceil(lambda K)` clients are dominant.
    include: optional bool [K]; False rows take no part.
    validate: value checks (docs/methods.md, "Conventions").

  Returns:
    [d] in the dtype of `updates`: the mean of the corrected updates.
  """
  return _run(_aggregate_only, updates, losses, selection_ratio, include, validate)


def dominant_correction_with_diagnostics(updates, losses, *, selection_ratio=0.5, include=None,
                                         validate=True):
  """`dominant_correction` and its diagnostics (docs/methods.md, "Diagnostics") from the same
  Gram matrix.

  Returns (aggregate [d], OrderedDict): the common diagnostics plus `num_dominant` and
  `num_projections` (int32).
  """
  return _run(_with_diagnostics, updates, losses, selection_ratio, include, validate)

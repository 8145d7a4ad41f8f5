"""FedAvg's weighted mean `sum_k w_k u_k` with the conflict kernels' diagnostics, plus
`mean_update_norm` (`sum_k w_k |u_k|`) and `mean_norm_ratio` (`|mean| / mean_update_norm`), the
reference the conflict methods are measured against (docs/methods.md, "Diagnostics").
"""

import tensorflow as tf

from tff_conflict.conflict import geometry


def weighted_mean_with_diagnostics(updates, weights, *, include=None, validate=True):
  """`sum_k w_k u_k` and the common diagnostics, plus `mean_update_norm`, `mean_norm_ratio`.

  Args:
    updates: float32/float64 [K, d], one client update per row.
    weights: [K] non-negative, normalised over the clients taking part.
    include: optional bool [K]; False rows take no part (as does a weight of 0).
    validate: value checks (docs/methods.md, "Conventions").

  Returns:
    (aggregate [d] in the dtype of `updates`, OrderedDict of diagnostics; `mean_update_norm` and
    `mean_norm_ratio` float32, the ratio 0 when no client moved).
  """
  r, _ = geometry.begin_round(updates, weights=weights, include=include, validate=validate)
  aggregate = r.combine(r.weights)
  norms = tf.sqrt(tf.maximum(r.sq_norms, tf.constant(0.0, tf.float64)))
  mean_update_norm = tf.reduce_sum(r.weights * tf.where(r.part, norms, tf.zeros_like(norms)))
  aggregate_norm = tf.norm(tf.cast(aggregate, tf.float64))
  ratio = tf.math.divide_no_nan(aggregate_norm, mean_update_norm)
  return aggregate, r.diagnostics(r.gram, aggregate, {
      'mean_update_norm': tf.cast(mean_update_norm, geometry.REAL_DTYPE),
      'mean_norm_ratio': tf.cast(tf.minimum(ratio, 1.0), geometry.REAL_DTYPE)})

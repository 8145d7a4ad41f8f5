"""Corrective gradient weights on `[K, d]` stacks of updates and gradients (docs/methods.md)."""

import tensorflow as tf

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.conflict import _eager
from tff_conflict.conflict import _validation
from tff_conflict.conflict import geometry


def _weights_from_round(r, alpha):
  """x (float64 [K]) from a Round over the gradients (masked Gram, `r.part`)."""
  g = r.gram
  sq = r.sq_norms
  nz = r.part & (sq > 0)
  norms = tf.sqrt(tf.where(nz, sq, tf.ones_like(sq)))
  m = tf.reduce_sum(g, axis=1)                               # D_i . S
  bound = tf.where(nz, alpha * r.losses / norms,
                   tf.fill(tf.shape(sq), tf.constant(float('inf'), tf.float64)))
  c = tf.where(tf.reduce_any(nz), tf.reduce_min(bound), tf.constant(0.0, tf.float64))
  scaled = tf.where(nz, m / norms, tf.zeros_like(m))
  denom = tf.sqrt(tf.reduce_sum(tf.square(scaled)))
  x = tf.where(nz, tf.math.divide_no_nan(c, denom) * m / tf.where(nz, sq, tf.ones_like(sq)),
               tf.zeros_like(m))
  return x


def _check_pair(updates, gradients):
  """(updates, gradients) as [K, d] stacks of one dtype and one shape (checked)."""
  u, checks = _validation.stack(updates, 'updates')
  grads, more = _validation.stack(gradients, 'gradients')
  if u.dtype != grads.dtype:
    raise _checks.ArgumentError(argument='gradients', value=gradients, message=(
        'updates and gradients must have the same dtype, got '
        f'{u.dtype.name} and {grads.dtype.name}'))
  checks += more + _validation.same_shape(u, 'updates', grads, 'gradients')
  if checks:
    with tf.control_dependencies(checks):
      u = tf.identity(u)
  return u, grads


def _begin(gradients, losses, weights, include, validate, alpha, updates=None):
  alpha = hparams.CORRECTIVE_ALPHA.check(alpha)
  u = None
  grads = gradients
  if updates is not None:
    u, grads = _check_pair(updates, gradients)
  r, loss = geometry.begin_round(grads, weights=weights, losses=losses, include=include,
                                 validate=validate, updates_name='gradients')
  r.losses = loss
  return r, alpha, u


def corrective_weights(gradients, losses, *, alpha=0.1, include=None, validate=True):
  """The corrective weights `x_i = c / sqrt(sum_j (m_j / |D_j|)^2) * m_i / |D_i|^2`.

  Mousazadeh, Khodadadi, Salehi, "A Novel Approach for Improving Generalization in Federated
  Learning Through Corrective Gradient Weights" (2023), eqs. (6), (13), (29):
  `m_i = D_i . sum_j D_j`, `c = min_i alpha L_i / |D_i|`, from one Gram matrix of the gradients.

  Args:
    gradients: float32/float64 [K, d], `D_i` per row.
    losses: [K], `L_i`.
    alpha: in [0, 1] (eqs. (12)-(13); `hparams.CORRECTIVE_ALPHA`, default 0.1); 0 gives x = 0.
    include: optional bool [K]; False rows take no part (x = 0 there).
    validate: value checks (docs/methods.md, "Conventions").

  Returns:
    [K] in the dtype of `gradients`.
  """
  if _eager.executing_eagerly():
    alpha = hparams.CORRECTIVE_ALPHA.check(alpha)
    grads, _, loss, inc = geometry.check_round(gradients, losses=losses, include=include,
                                               validate=validate, updates_name='gradients')
    return _eager.call(_weights_only, dict(gradients=grads, losses=loss, include=inc),
                       dict(alpha=alpha, validate=False))
  return _weights_only(gradients, losses, alpha, include, validate)


def _weights_only(gradients, losses, alpha, include, validate):
  r, alpha, _ = _begin(gradients, losses, None, include, validate, alpha)
  return tf.cast(_weights_from_round(r, alpha), r.dtype)


def _aggregate(updates, gradients, losses, weights, alpha, include, validate):
  r, alpha, u = _begin(gradients, losses, weights, include, validate, alpha, updates=updates)
  w0 = r.weights

  def slow():
    row_sq = tf.reduce_sum(tf.square(u), axis=1)
    finite_u = tf.math.is_finite(row_sq)
    w = tf.where(r.part & finite_u, r.raw_weights, tf.zeros_like(r.raw_weights))
    w = tf.math.divide_no_nan(w, tf.reduce_sum(w))
    clean = tf.where(finite_u[:, tf.newaxis], u, tf.zeros([], u.dtype))
    return geometry.weighted_sum(tf.cast(w, u.dtype), clean), finite_u

  first = geometry.weighted_sum(tf.cast(w0, u.dtype), u)
  fedavg, finite_u = tf.cond(tf.reduce_all(tf.math.is_finite(first)),
                             lambda: (first, tf.ones_like(r.part)), slow)
  full = geometry.Round(r.stack, r.raw_gram, r.finite & finite_u, r.part & finite_u,
                        r.raw_weights)
  full.losses = r.losses
  x = _weights_from_round(full, alpha)
  correction = full.combine(x)
  aggregate = fedavg + correction
  return full, x, aggregate, fedavg


def _aggregate_only(updates, gradients, losses, weights, alpha, include, validate):
  return _aggregate(updates, gradients, losses, weights, alpha, include, validate)[2]


def _with_diagnostics(updates, gradients, losses, weights, alpha, include, validate):
  full, x, aggregate, fedavg = _aggregate(updates, gradients, losses, weights, alpha, include,
                                          validate)
  gram_after = x[:, tf.newaxis] * full.gram * x[tf.newaxis, :]
  return aggregate, full.diagnostics(
      gram_after, aggregate, {'corrective_weights': tf.cast(x, geometry.REAL_DTYPE)},
      mean_norm=tf.norm(tf.cast(fedavg, tf.float64)))


def _run(impl, updates, gradients, losses, weights, alpha, include, validate):
  """`impl` inline in a graph; eagerly, checks first, then a cached graph (`_eager`)."""
  if not _eager.executing_eagerly():
    return impl(updates, gradients, losses, weights, alpha, include, validate)
  alpha = hparams.CORRECTIVE_ALPHA.check(alpha)
  u, grads = _check_pair(updates, gradients)
  grads, w, loss, inc = geometry.check_round(grads, weights=weights, losses=losses,
                                             include=include, validate=validate,
                                             updates_name='gradients')
  return _eager.call(impl, dict(updates=u, gradients=grads, losses=loss, weights=w, include=inc),
                     dict(alpha=alpha, validate=False))


def corrective_aggregate(updates, gradients, losses, weights, *, alpha=0.1, include=None,
                         validate=True):
  """Corrective-weights aggregate `sum_k w_k u_k + sum_i x_i D_i` (corrective paper, eq. (8)).

  Args:
    updates: float32/float64 [K, d], the model deltas `initial - trained`.
    gradients: [K, d] (same shape and dtype family), `D_i`.
    losses: [K], `L_i`.
    weights: [K] non-negative (e.g. example counts), normalised over the clients taking part.
    alpha: in [0, 1] (`hparams.CORRECTIVE_ALPHA`, default 0.1); 0 is FedAvg.
    include: optional bool [K]; False rows take no part (as does a weight of 0).
    validate: value checks (docs/methods.md, "Conventions").

  Returns:
    [d] in the dtype of `updates`.
  """
  return _run(_aggregate_only, updates, gradients, losses, weights, alpha, include, validate)


def corrective_aggregate_with_diagnostics(updates, gradients, losses, weights, *, alpha=0.1,
                                          include=None, validate=True):
  """`corrective_aggregate` and its diagnostics (docs/methods.md, "Diagnostics") from the same
  (gradients') Gram matrix.

  Returns (aggregate [d], OrderedDict): the common diagnostics (pair statistics of the gradients,
  docs/methods.md, "Diagnostics") plus `corrective_weights` (float32 [K]).
  """
  return _run(_with_diagnostics, updates, gradients, losses, weights, alpha, include, validate)

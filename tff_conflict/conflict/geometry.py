"""Gram-matrix geometry shared by the kernels: cosines, conflict statistics, who takes part in a
round, `norm_ratio`, and `combine`, the one weighted sum `c^T U` that forms every aggregate."""

import collections

import numpy as np
import tensorflow as tf

from tff_conflict import _checks
from tff_conflict.conflict import _eager
from tff_conflict.conflict import _validation

COUNT_DTYPE = tf.int32
REAL_DTYPE = tf.float32


def gram(stack):
  """`U U^T` for a [K, d] stack U: the [K, K] matrix of pairwise inner products (one matmul)."""
  return tf.matmul(stack, stack, transpose_b=True)


def conflict_tolerance(dtype):
  """Cosines below `-conflict_tolerance(dtype)` count as conflicts (docs/methods.md, "Conventions")."""
  return 100.0 * float(np.finfo(tf.as_dtype(dtype).as_numpy_dtype).eps)


def pair_mask(valid):
  """[K, K] bool: True for i < j with both clients valid."""
  k = tf.shape(valid)[0]
  r = tf.range(k)
  upper = r[:, tf.newaxis] < r[tf.newaxis, :]
  return upper & valid[:, tf.newaxis] & valid[tf.newaxis, :]


def mask_gram(g, valid):
  """Zeroes the rows and columns of clients that do not take part (and any non-finite entry)."""
  keep = valid[:, tf.newaxis] & valid[tf.newaxis, :] & tf.math.is_finite(g)
  return tf.where(keep, g, tf.zeros_like(g))


def cosine_from_gram(g, valid=None):
  """Cosine matrix from a Gram matrix: `G_ij / sqrt(G_ii G_jj)`; 0 where a norm is 0 or a client
  is not valid; clipped to [-1, 1]."""
  sq = tf.linalg.diag_part(g)
  ok = tf.math.is_finite(sq) & (sq > 0)
  if valid is not None:
    ok = ok & valid
  norms = tf.sqrt(tf.where(ok, sq, tf.ones_like(sq)))
  cos = g / (norms[:, tf.newaxis] * norms[tf.newaxis, :])
  pair_ok = ok[:, tf.newaxis] & ok[tf.newaxis, :]
  cos = tf.where(pair_ok & tf.math.is_finite(cos), cos, tf.zeros_like(cos))
  return tf.clip_by_value(cos, -1.0, 1.0)


def pair_statistics(cos, valid, tol):
  """(conflict_fraction, min_cosine, mean_cosine) over pairs of valid clients, float64."""
  pairs = pair_mask(valid)
  num_pairs = tf.reduce_sum(tf.cast(pairs, tf.float64))
  num_conflicts = tf.reduce_sum(tf.cast(pairs & (cos < -tol), tf.float64))
  fraction = tf.math.divide_no_nan(num_conflicts, num_pairs)
  min_cos = tf.reduce_min(tf.where(pairs, cos, tf.ones_like(cos)))
  min_cos = tf.minimum(min_cos, tf.constant(1.0, tf.float64))  # K = 0: reduce_min of [] is +inf
  mean_cos = tf.math.divide_no_nan(tf.reduce_sum(tf.where(pairs, cos, tf.zeros_like(cos))),
                                   num_pairs)
  return fraction, min_cos, mean_cos


def weighted_sum(coefficients, stack):
  """`c^T U` as a [1, K] x [K, d] matmul (measured faster here than `matvec(transpose_a=True)`)."""
  return tf.matmul(coefficients[tf.newaxis, :], stack)[0]


def combine(stack, coefficients, finite_rows, any_nonfinite):
  """`coefficients^T stack` (a [d] vector in the stack's dtype): the one weighted sum.

  Rows that are not finite are zeroed first, only when `any_nonfinite` (one `tf.cond`): the copy
  of the stack that needs is made only for a round that has such a row.
  """
  c = tf.cast(coefficients, stack.dtype)

  def plain():
    return weighted_sum(c, stack)

  def cleaned():
    clean = tf.where(finite_rows[:, tf.newaxis], stack, tf.zeros([], stack.dtype))
    return weighted_sum(c, clean)

  return tf.cond(any_nonfinite, cleaned, plain)


class Round:
  """What every kernel needs about one round, computed from ONE Gram matrix.

  Attributes (float64 unless stated):
    stack: the [K, d] updates (input dtype). dtype: the input dtype.
    num_rows: K (int32 scalar tensor).
    gram: the masked Gram matrix (rows/cols of clients not taking part are 0), [K, K].
    sq_norms: its diagonal, [K].
    finite: bool [K], client's row is finite (docs/methods.md, "Conventions").
    part: bool [K], client takes part.
    num_part: number of clients taking part (float64 scalar).
    weights: normalised weights over the clients taking part (0 elsewhere), [K] or None.
    raw_gram, raw_weights: the unmasked Gram matrix and the weights before normalisation.
    any_nonfinite: bool scalar.
  """

  def __init__(self, stack, gram64, finite, part, weights):
    self.stack = stack
    self.dtype = stack.dtype
    self.num_rows = tf.shape(stack)[0]
    self.finite = finite
    self.part = part
    self.raw_gram = gram64
    self.raw_weights = weights
    self.gram = mask_gram(gram64, part)
    self.sq_norms = tf.linalg.diag_part(self.gram)
    self.num_part = tf.reduce_sum(tf.cast(part, tf.float64))
    self.any_nonfinite = tf.logical_not(tf.reduce_all(finite))
    if weights is not None:
      w = tf.where(part, weights, tf.zeros_like(weights))
      self.weights = tf.math.divide_no_nan(w, tf.reduce_sum(w))
    else:
      self.weights = None
    self.tol = conflict_tolerance(stack.dtype)

  def combine(self, coefficients):
    return combine(self.stack, coefficients, self.finite, self.any_nonfinite)

  def cosines(self):
    return cosine_from_gram(self.gram, self.part)

  def mean_weights(self):
    """The weights of the plain mean: `weights` (normalised), or 1/K over the clients taking part
    for a kernel without weights. float64 [K]."""
    if self.weights is not None:
      return self.weights
    return tf.math.divide_no_nan(tf.cast(self.part, tf.float64), self.num_part)

  def mean_norm(self):
    """Norm of the plain mean `m = sum_k w_k u_k` of the clients taking part, from the Gram
    matrix: `|m|^2 = w^T G w` (clamped at 0 against rounding), float64."""
    w = self.mean_weights()
    sq = tf.reduce_sum(w * tf.linalg.matvec(self.gram, w))
    return tf.sqrt(tf.maximum(sq, tf.constant(0.0, tf.float64)))

  def diagnostics(self, gram_after, aggregate, extra, *, mean_norm=None):
    """The diagnostics common to every kernel, then `extra` (name -> tensor) in order.

    gram_after: [K, K] Gram matrix of the corrected client vectors (float64).
    mean_norm: norm of the plain mean the aggregate is compared with (float64 scalar); None for
      `self.mean_norm()`.
    """
    frac_before, min_cos, mean_cos = pair_statistics(self.cosines(), self.part, self.tol)
    frac_after, _, _ = pair_statistics(cosine_from_gram(gram_after, self.part), self.part,
                                       self.tol)
    out = collections.OrderedDict()
    out['num_clients'] = tf.cast(self.num_part, COUNT_DTYPE)
    out['num_excluded_nonfinite'] = tf.reduce_sum(tf.cast(~self.finite, COUNT_DTYPE))
    out['conflict_fraction_before'] = tf.cast(frac_before, REAL_DTYPE)
    out['conflict_fraction_after'] = tf.cast(frac_after, REAL_DTYPE)
    out['min_cosine'] = tf.cast(min_cos, REAL_DTYPE)
    out['mean_cosine'] = tf.cast(mean_cos, REAL_DTYPE)
    aggregate_norm = tf.norm(tf.cast(aggregate, tf.float64))
    if mean_norm is None:
      mean_norm = self.mean_norm()
    out['aggregate_norm'] = tf.cast(aggregate_norm, REAL_DTYPE)
    out['norm_ratio'] = norm_ratio(aggregate_norm, mean_norm)
    for key, value in extra.items():
      out[key] = value
    return out


def norm_ratio(aggregate_norm, mean_norm):
  """`aggregate_norm / mean_norm` as a float32 scalar, defined everywhere (never NaN).

  Below 1 the method shortens the server step relative to the plain mean, above 1 it lengthens
  it. Where the plain mean is 0: 1 if the aggregate is 0 too (neither moves the model), else the
  ratio is unbounded and reported as the largest float32; every ratio is capped there, so the
  result is always finite.
  """
  aggregate_norm = tf.cast(aggregate_norm, tf.float64)
  mean_norm = tf.cast(mean_norm, tf.float64)
  positive = mean_norm > 0
  ratio = aggregate_norm / tf.where(positive, mean_norm, tf.ones_like(mean_norm))
  cap = tf.constant(float(np.finfo(np.float32).max), tf.float64)
  degenerate = tf.where(aggregate_norm > 0, cap, tf.ones_like(cap))
  return tf.cast(tf.minimum(tf.where(positive, ratio, degenerate), cap), REAL_DTYPE)


def check_round(updates, *, weights=None, losses=None, include=None, validate=True,
                updates_name='updates'):
  """Converts and checks the arguments of a round (docs/methods.md, "Conventions").

  Returns (stack, weights, losses, include) as tensors: the [K, d] stack in its dtype, weights and
  losses as float64 [K] (or None), include as bool [K]. Called eagerly, every check has run (and
  raised `ValueError`) when it returns; in a graph the returned tensors depend on the assertions.
  """
  validate = _checks.check_bool('validate', validate)
  stack, checks = _validation.stack(updates, updates_name)
  w = None
  if weights is not None:
    w, c = _validation.vector(weights, 'weights', stack, updates_name)
    checks += c
  l = None
  if losses is not None:
    l, c = _validation.vector(losses, 'losses', stack, updates_name)
    checks += c
  eager = _eager.executing_eagerly()
  if eager and include is None:   # every shape is known: no shape ops
    inc, c = tf.ones([stack.shape[0]], tf.bool), []
  else:
    inc, c = _validation.include_mask(include, stack, updates_name)
  checks += c
  if checks:   # structural checks first: value checks and everything else depend on them
    with tf.control_dependencies(checks):
      stack = tf.identity(stack)
      inc = tf.identity(inc)
      w = None if w is None else tf.identity(w)
      l = None if l is None else tf.identity(l)
  num_rows = stack.shape[0] if eager else tf.shape(stack)[0]
  value_checks = _validation.values(w, inc, num_rows, validate=validate, stack_name=updates_name)
  if value_checks:
    with tf.control_dependencies(value_checks):
      stack = tf.identity(stack)
  return stack, w, l, inc


def begin_round(updates, *, weights=None, losses=None, include=None, validate=True,
                updates_name='updates'):
  """Checks the arguments, computes the Gram matrix once and decides who takes part.

  Returns (Round, losses as float64 [K] or None). A client with a non-finite loss is treated as
  non-finite (excluded and counted in `num_excluded_nonfinite`).
  """
  stack, w, l, inc = check_round(updates, weights=weights, losses=losses, include=include,
                                 validate=validate, updates_name=updates_name)
  g = tf.cast(gram(stack), tf.float64)
  finite = tf.math.is_finite(tf.linalg.diag_part(g))
  if l is not None:
    finite = finite & tf.math.is_finite(l)
    l = tf.where(finite, l, tf.zeros_like(l))
  part = finite & inc
  if w is not None:
    part = part & tf.math.is_finite(w) & (w > 0)
    w = tf.where(part, w, tf.zeros_like(w))
  return Round(stack, g, finite, part, w), l


def pairwise_cosine(updates):
  """Pairwise cosine similarities `u_i . u_j / (|u_i| |u_j|)` of the rows of `updates` [K, d].

  One Gram matrix. Returns [K, K] in the input dtype. Pairs involving a zero or non-finite row
  are 0 (so is that row's diagonal); the diagonal is 1 for the other rows.
  """
  if _eager.executing_eagerly():
    stack, _ = _validation.stack(updates, 'updates')
    return _eager.call(_pairwise_cosine, dict(updates=stack))
  return _pairwise_cosine(updates)


def _pairwise_cosine(updates):
  stack, checks = _validation.stack(updates, 'updates')
  if checks:
    with tf.control_dependencies(checks):
      stack = tf.identity(stack)
  g = tf.cast(gram(stack), tf.float64)
  return tf.cast(cosine_from_gram(g), stack.dtype)


def conflict_stats(updates, *, include=None):
  """Conflict statistics of the rows of `updates` [K, d] (one Gram matrix).

  Returns an OrderedDict of scalars: `num_clients` (int32, finite included rows),
  `num_excluded_nonfinite` (int32), `conflict_fraction` (float32, fraction of pairs with cosine
  `< -100 eps`, the fedgh paper's Sec. II-B measure of conflict), `min_cosine` and
  `mean_cosine` (float32) over pairs of finite included rows; with fewer than two such rows the
  fraction and mean are 0 and the minimum is 1. `include`: optional bool [K] mask.
  """
  if _eager.executing_eagerly():
    stack, _, _, inc = check_round(updates, include=include, validate=False)
    return _eager.call(_conflict_stats, dict(updates=stack, include=inc))
  return _conflict_stats(updates, include)


def _conflict_stats(updates, include):
  r, _ = begin_round(updates, include=include, validate=False)
  frac, min_cos, mean_cos = pair_statistics(r.cosines(), r.part, r.tol)
  out = collections.OrderedDict()
  out['num_clients'] = tf.cast(r.num_part, COUNT_DTYPE)
  out['num_excluded_nonfinite'] = tf.reduce_sum(tf.cast(~r.finite, COUNT_DTYPE))
  out['conflict_fraction'] = tf.cast(frac, REAL_DTYPE)
  out['min_cosine'] = tf.cast(min_cos, REAL_DTYPE)
  out['mean_cosine'] = tf.cast(mean_cos, REAL_DTYPE)
  return out

"""FedGH's gradient harmonization on a `[K, d]` stack (docs/methods.md, FedGH)."""

import tensorflow as tf

from tff_conflict import hparams
from tff_conflict.conflict import _eager
from tff_conflict.conflict import _validation
from tff_conflict.conflict import geometry

def projection_order(num_clients, order='random', seed=None):
  """[K, K] int32: row k lists every client index in the order client k visits its partners
  (k itself appears in the row and is skipped by the kernel)."""
  order = hparams.FEDGH_ORDER.check(order)
  k = tf.convert_to_tensor(num_clients, tf.int32)
  if order == 'index':
    return tf.tile(tf.range(k)[tf.newaxis, :], [k, 1])
  keys = tf.random.stateless_uniform(tf.stack([k, k]), seed=_validation.seed_pair(seed),
                                     alg='philox')
  return tf.argsort(keys, axis=1, stable=True, direction='ASCENDING')


def _harmonize(updates, weights, order, seed, include, validate):
  order = hparams.FEDGH_ORDER.check(order)
  seed_tensor = None if order == 'index' else _validation.seed_pair(seed)
  r, _ = geometry.begin_round(updates, weights=weights, include=include, validate=validate)
  k = r.num_rows
  g = r.gram
  sq = r.sq_norms
  if order == 'index':
    partners = tf.tile(tf.range(k)[tf.newaxis, :], [k, 1])
  else:
    keys = tf.random.stateless_uniform(tf.stack([k, k]), seed=seed_tensor, alg='philox')
    partners = tf.argsort(keys, axis=1, stable=True, direction='ASCENDING')
  rows = tf.range(k)
  eye = tf.eye(k, dtype=tf.float64)

  def body(t, coeffs, inner, count):
    j = partners[:, t]                                   # partner of each client at step t
    p_kj = tf.gather(inner, j, axis=1, batch_dims=1)     # u_k . ~u_j
    g_jj = tf.gather(sq, j)
    act = r.part & tf.gather(r.part, j) & (j != rows) & (p_kj < 0) & (g_jj > 0)
    a = tf.where(act, p_kj / tf.where(act, g_jj, tf.ones_like(g_jj)), tf.zeros_like(p_kj))
    inner = inner - a[:, tf.newaxis] * tf.gather(g, j)
    coeffs = coeffs - a[:, tf.newaxis] * tf.one_hot(j, k, dtype=tf.float64)
    return t + 1, coeffs, inner, count + tf.reduce_sum(tf.cast(act, tf.int32))

  _, coeffs, _, count = tf.while_loop(
      lambda t, *_: t < k, body, (tf.constant(0), eye, g, tf.constant(0)))
  combo = tf.linalg.matvec(coeffs, r.weights, transpose_a=True)   # w^T C
  aggregate = r.combine(combo)
  return r, coeffs, combo, aggregate, count


def _aggregate_only(updates, weights, order, seed, include, validate):
  return _harmonize(updates, weights, order, seed, include, validate)[3]


def _with_diagnostics(updates, weights, order, seed, include, validate):
  r, coeffs, _, aggregate, count = _harmonize(updates, weights, order, seed, include, validate)
  gram_after = tf.matmul(tf.matmul(coeffs, r.gram), coeffs, transpose_b=True)
  return aggregate, r.diagnostics(gram_after, aggregate,
                                  {'num_projections': tf.cast(count, geometry.COUNT_DTYPE)})


def _run(impl, updates, weights, order, seed, include, validate):
  """`impl` inline in a graph; eagerly, checks first, then a cached graph (`_eager`)."""
  if not _eager.executing_eagerly():
    return impl(updates, weights, order, seed, include, validate)
  order = hparams.FEDGH_ORDER.check(order)
  seed = None if order == 'index' else _validation.seed_pair(seed)
  stack, w, _, inc = geometry.check_round(updates, weights=weights, include=include,
                                          validate=validate)
  return _eager.call(impl, dict(updates=stack, weights=w, seed=seed, include=inc),
                     dict(order=order, validate=False), exact=('seed',))


def harmonize(updates, weights, *, order='random', seed=None, include=None, validate=True):
  """FedGH aggregate: harmonize, then the weighted mean.

  Zhang, Sun, Chen, "Tackling the Non-IID Issue in Heterogeneous Federated Learning by Gradient
  Harmonization", arXiv:2309.06692, eq. (1), Algorithm 1: each update is projected off every other
  client's ORIGINAL update it conflicts with, `u_k <- u_k - (u_k . ~u_j) / |~u_j|^2 ~u_j` if
  `u_k . ~u_j < 0`, in a per-client random (seeded) or index order; the aggregate is
  `sum_k w_k u_k`, computed on the Gram matrix.

  Args:
    updates: float32/float64 [K, d], one client update per row.
    weights: [K] non-negative (e.g. example counts), normalised over the clients taking part.
    order: "random" (per-client random partner order drawn from `seed`) or "index".
    seed: None, a Python int, or an integer tensor of shape [] or [2] (`projection_order`).
    include: optional bool [K]; False rows take no part (as does a weight of 0).
    validate: value checks on weights/include (docs/methods.md, "Conventions").

  Returns:
    [d] in the dtype of `updates`: `sum_k w_k u_k` over the harmonized `u_k`.
  """
  return _run(_aggregate_only, updates, weights, order, seed, include, validate)


def harmonize_with_diagnostics(updates, weights, *, order='random', seed=None, include=None,
                               validate=True):
  """`harmonize` and its diagnostics (docs/methods.md, "Diagnostics") from the same Gram matrix.

  Returns (aggregate [d], OrderedDict): the common diagnostics (see `geometry`) plus
  `num_projections` (int32).
  """
  return _run(_with_diagnostics, updates, weights, order, seed, include, validate)

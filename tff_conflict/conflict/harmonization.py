"""FedGH: gradient harmonization (docs/methods.md, FedGH).

Paper: Zhang, Sun, Chen, "Tackling the Non-IID Issue in Heterogeneous Federated Learning by
Gradient Harmonization", arXiv:2309.06692 ("the fedgh paper"): Sec. II-C, eq. (1), Algorithm 1.

For each client k and each other client j in a random order (Algorithm 1, line 78):

    if u_k . ~u_j < 0:   u_k <- u_k - (u_k . ~u_j) / |~u_j|^2 ~u_j          (line 79-80, eq. (1))

where ~u are the ORIGINAL updates (the paper's duplicate G~, line 76), never the already projected
ones. The aggregate is `sum_k w_k u_k` with `w_k = n_k / n` (line 81).

Gram formulation. After any number of projections, `u_k = sum_i C_ki ~u_i` (C starts as the
identity), and `P_kj = u_k . ~u_j = (C G)_kj`. A projection onto ~u_j with coefficient
`a = P_kj / G_jj` is `C_k <- C_k - a e_j`, `P_k <- P_k - a G_j`. The whole sequence therefore runs on
K x K numbers (K steps; at step t every client k processes its t-th partner at once, O(K^2) each),
and the aggregate is the one weighted sum `(w^T C) U`.

Decisions (docs/methods.md, FedGH):
* Order. `order="random"` draws, per round, an independent random order of the partners for every
  client k (Algorithm 1 draws the order inside the loop over k): row k of
  `argsort(stateless_uniform([K, K], seed, alg="philox"), axis=1)`. The same `seed` (and K) always
  gives the same orders and so the same result. Under XLA (`jit_compile=True`) the stateless
  generator's XLA lowering yields other numbers for the same seed (TF 2.14, even with the
  algorithm pinned), so an XLA-compiled FedGH is reproducible from its seed but draws other orders
  than the non-XLA one. `order="index"` visits j = 0, 1, ..., K-1.
  `projection_order` returns the orders used, for tests and reproduction.
* `seed`: None (a fresh random seed, not reproducible), a Python int s (the stateless seed
  [s, 0]), or an integer tensor of shape [] (s -> [s, 0]) or [2] (used as is), e.g. a per-round
  seed held in a TFF server state. Ignored for `order="index"`.
* A zero update has `~u_j . u_k = 0`, so it is never projected onto and nothing divides by its
  norm; the test `< 0` is strict, as in line 79.
* `num_projections` counts the projections performed (pairs (k, j) with the test true).
* `conflict_fraction_after` is measured on the harmonized vectors `u_k`, whose Gram matrix is
  `C G C^T`.
"""

import tensorflow as tf

from tff_conflict import hparams
from tff_conflict.conflict import _eager
from tff_conflict.conflict import _validation
from tff_conflict.conflict import geometry

ORDERS = hparams.FEDGH_ORDER.choices


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
  """FedGH aggregate (fedgh paper, Algorithm 1): harmonize, then weighted mean.

  Args:
    updates: float32/float64 [K, d], one client update per row.
    weights: [K] non-negative (e.g. example counts), normalised over the clients taking part.
    order: "random" (per-client random partner order drawn from `seed`) or "index".
    seed: None, a Python int, or an integer tensor of shape [] or [2] (see module docstring).
    include: optional bool [K]; False rows take no part (as does a weight of 0).
    validate: value checks on weights/include (package docstring, "Validation").

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

"""FedLD's principal-gradient aggregation on a `[K, d]` stack (docs/methods.md, FedLD)."""

import numpy as np
import tensorflow as tf

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.conflict import _eager
from tff_conflict.conflict import geometry

_COUNT_SLACK = 1e-9
_COS_ZERO = 64 * float(np.finfo(np.float64).eps)


def _check_tensor_sizes(tensor_sizes, num_columns=None):
  """None, or a tuple of positive ints (summing to `num_columns` when that is known)."""
  if tensor_sizes is None:
    return None
  try:
    sizes = tuple(tensor_sizes)
  except TypeError:
    raise _checks.ArgumentError.must_be('tensor_sizes', tensor_sizes,
                                        'None or a sequence of integers >= 1') from None
  if not sizes:
    raise _checks.ArgumentError.must_be('tensor_sizes', tensor_sizes,
                                        'None or a non-empty sequence of integers >= 1')
  sizes = tuple(_checks.check_int('tensor_sizes', n, minimum=1) for n in sizes)
  if num_columns is not None and sum(sizes) != num_columns:
    raise _checks.ArgumentError(argument='tensor_sizes', value=tensor_sizes, message=(
        f'tensor_sizes must sum to the number of columns of updates, {num_columns}, got '
        f'{tensor_sizes!r} (sum {sum(sizes)})'))
  return sizes


def _bounds(granularity, tensor_sizes):
  """[(start, end)] column ranges the aggregation runs on separately; [None] is the whole row."""
  if granularity == 'model' or tensor_sizes is None or len(tensor_sizes) == 1:
    return [None]
  ends = np.cumsum(tensor_sizes).tolist()
  return list(zip([0] + ends[:-1], ends))


def _revise(g, part, kp, k, eps, ratio, preserve_norms, revision):
  """Eq. (4)-(7) on one slice's masked Gram matrix `g` (float64 [K, K]).

  Returns (coeffs [K, K]: revised u_i = (coeffs U)_i, num_kept, kept eigenvalue sum, S).
  """
  gamma = g / tf.maximum(kp, 1.0)
  eigvals, eigvecs = tf.linalg.eigh(gamma)                   # ascending
  eigvals = tf.reverse(eigvals, axis=[0])
  eigvecs = tf.reverse(eigvecs, axis=[1])
  total = tf.linalg.trace(gamma)                             # S = sum of all eigenvalues
  num_kept = tf.cast(tf.floor(ratio * kp + _COUNT_SLACK * kp), tf.int32)
  num_kept = tf.where(kp > 0, tf.maximum(num_kept, 1), 0)
  lam_max = tf.reduce_max(tf.concat([eigvals, tf.zeros([1], tf.float64)], 0))
  top = tf.range(k) < num_kept
  kept = top & (eigvals > tf.cast(k, tf.float64) * eps * lam_max) & (eigvals > 0)
  gv = tf.matmul(g, eigvecs)                                 # (G E)_il = u_i . v_l
  v_sq = tf.reduce_sum(eigvecs * gv, axis=0)                 # |v_l|^2 = e_l^T G e_l
  v_norm = tf.sqrt(tf.where(kept & (v_sq > 0), v_sq, tf.ones_like(v_sq)))
  u_norm = tf.sqrt(tf.linalg.diag_part(g))
  cos = gv / (tf.where(u_norm > 0, u_norm, tf.ones_like(u_norm))[:, tf.newaxis]
              * v_norm[tf.newaxis, :])
  nonzero = (tf.abs(cos) > _COS_ZERO) & kept[tf.newaxis, :] & part[:, tf.newaxis]
  share = tf.math.divide_no_nan(eigvals, total)              # lambda_l / S
  if revision == 'projection':
    # g'_il = (u_i . v_l / |v_l|^2) v_l.
    b = tf.where(nonzero, gv / tf.square(v_norm)[tf.newaxis, :], tf.zeros_like(gv))
  else:
    b = tf.where(nonzero, u_norm[:, tf.newaxis] * share[tf.newaxis, :] * tf.sign(gv)
                 / v_norm[tf.newaxis, :], tf.zeros_like(gv))
  if preserve_norms:
    # The v_l are orthogonal: |revised u_i| = sqrt(sum_l b_il^2 |v_l|^2); rescaled to |u_i|
    # (eq. 7: |u_i| sqrt(sum_l share_l^2) over its nonzero terms).
    length = tf.sqrt(tf.reduce_sum(tf.square(b * v_norm[tf.newaxis, :]), axis=1))
    b = b * tf.math.divide_no_nan(u_norm, length)[:, tf.newaxis]
  coeffs = tf.matmul(b, eigvecs, transpose_b=True)           # revised u_i = (B E^T)_i U
  kept_sum = tf.reduce_sum(tf.where(top, eigvals, tf.zeros_like(eigvals)))
  return coeffs, num_kept, kept_sum, total


def _begin(updates, weights, include, validate, granularity, tensor_sizes):
  """`geometry.begin_round` with the whole rows' Gram matrix summed from the slices' Gram
  matrices (each slice's is needed anyway). Returns (Round, bounds, the slices' Gram matrices)."""
  stack, w, _, inc = geometry.check_round(updates, weights=weights, include=include,
                                          validate=validate)
  bounds = _bounds(granularity, _check_tensor_sizes(tensor_sizes, stack.shape[1]))
  if bounds == [None]:
    grams = [tf.cast(geometry.gram(stack), tf.float64)]
  else:
    if stack.shape[1] is None:   # unknown d in a graph: the slices must still cover it exactly
      check = tf.debugging.assert_equal(
          tf.shape(stack)[1], bounds[-1][1],
          message=f'tensor_sizes must sum to the number of columns of updates ({bounds[-1][1]})')
      with tf.control_dependencies([check]):
        stack = tf.identity(stack)
    grams = [tf.cast(geometry.gram(stack[:, a:b]), tf.float64) for a, b in bounds]
  g = tf.add_n(grams) if len(grams) > 1 else grams[0]
  finite = tf.math.is_finite(tf.linalg.diag_part(g))
  part = finite & inc & tf.math.is_finite(w) & (w > 0)
  w = tf.where(part, w, tf.zeros_like(w))
  return geometry.Round(stack, g, finite, part, w), bounds, grams


@tf.autograph.experimental.do_not_convert
def _principal(updates, weights, component_ratio, include, validate,
               preserve_norms=False, granularity='tensor', tensor_sizes=None,
               revision='eigenvalue_share'):
  ratio = hparams.PRINCIPAL_COMPONENT_RATIO.check(component_ratio)
  preserve_norms = hparams.PRINCIPAL_PRESERVE_NORMS.check(preserve_norms)
  granularity = hparams.PRINCIPAL_GRANULARITY.check(granularity)
  revision = hparams.PRINCIPAL_REVISION.check(revision)
  r, bounds, grams = _begin(updates, weights, include, validate, granularity, tensor_sizes)
  eps = float(np.finfo(r.dtype.as_numpy_dtype).eps)
  k = r.num_rows
  pieces, gram_after, kept_sum, total = [], 0.0, 0.0, 0.0
  for bound, g in zip(bounds, grams):
    g = r.gram if len(grams) == 1 else geometry.mask_gram(g, r.part)
    coeffs, num_kept, kept_t, total_t = _revise(g, r.part, r.num_part, k, eps, ratio,
                                                preserve_norms, revision)
    combo = tf.linalg.matvec(coeffs, r.weights, transpose_a=True)
    if bound is None:
      pieces.append(r.combine(combo))
    else:
      pieces.append(geometry.combine(r.stack[:, bound[0]:bound[1]], combo, r.finite,
                                     r.any_nonfinite))
    gram_after += tf.matmul(tf.matmul(coeffs, g), coeffs, transpose_b=True)
    kept_sum += kept_t
    total += total_t
  aggregate = pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=0)
  explained = tf.math.divide_no_nan(kept_sum, total)
  return r, gram_after, aggregate, num_kept, explained


def _aggregate_only(updates, weights, component_ratio, include, validate,
                    preserve_norms=False, granularity='tensor', tensor_sizes=None,
                    revision='eigenvalue_share'):
  return _principal(updates, weights, component_ratio, include, validate,
                    preserve_norms, granularity, tensor_sizes, revision)[2]


def _with_diagnostics(updates, weights, component_ratio, include, validate,
                      preserve_norms=False, granularity='tensor', tensor_sizes=None,
                      revision='eigenvalue_share'):
  r, gram_after, aggregate, num_kept, explained = _principal(
      updates, weights, component_ratio, include, validate, preserve_norms,
      granularity, tensor_sizes, revision)
  return aggregate, r.diagnostics(gram_after, aggregate, {
      'num_components': tf.cast(num_kept, geometry.COUNT_DTYPE),
      'explained_variance': tf.cast(explained, geometry.REAL_DTYPE)})


def _run(impl, updates, weights, component_ratio, include, validate,
         preserve_norms, granularity, tensor_sizes, revision):
  """`impl` inline in a graph; eagerly, checks first, then a cached graph (`_eager`)."""
  if not _eager.executing_eagerly():
    return impl(updates, weights, component_ratio, include, validate,
                preserve_norms, granularity, tensor_sizes, revision)
  ratio = hparams.PRINCIPAL_COMPONENT_RATIO.check(component_ratio)
  preserve_norms = hparams.PRINCIPAL_PRESERVE_NORMS.check(preserve_norms)
  granularity = hparams.PRINCIPAL_GRANULARITY.check(granularity)
  revision = hparams.PRINCIPAL_REVISION.check(revision)
  stack, w, _, inc = geometry.check_round(updates, weights=weights, include=include,
                                          validate=validate)
  tensor_sizes = _check_tensor_sizes(tensor_sizes, stack.shape[1])
  return _eager.call(impl, dict(updates=stack, weights=w, include=inc),
                     dict(component_ratio=ratio, validate=False,
                          preserve_norms=preserve_norms, granularity=granularity,
                          tensor_sizes=tensor_sizes, revision=revision))


def principal_aggregate(updates, weights, *, component_ratio=0.8, include=None, validate=True, preserve_norms=False,
                        granularity='tensor', tensor_sizes=None, revision='eigenvalue_share'):
  """FedLD principal-gradient aggregate.

  Zeng, Guo, Wang, Wang, Zhou, Qu, "Tackling Data Heterogeneity in Federated Learning via Loss
  Decomposition", MICCAI 2024, arXiv:2408.12300, Sec. 2.4, eqs. (4)-(7). For one slice U of the
  updates ([K, d_t]): `Gamma = U U^T / K`, eigenpairs `(lambda_z, e_z)` descending, directions
  `v_z = U^T e_z`; keep the top `L = max(1, floor(rho K))`; revise
  `u_i = sum_{kept l, g'_il != 0} |u_i| / |g'_il| * lambda_l / S * g'_il`, `g'_il` the projection
  of `u_i` on `v_l`, `S` the sum of all K eigenvalues; aggregate `sum_i w_i u_i`. Computed from
  each slice's K x K Gram matrix (`tf.linalg.eigh` in float64) and one weighted sum per slice.

  Args:
    updates: float32/float64 [K, d], one client update per row.
    weights: [K] non-negative, normalised over the clients taking part.
    component_ratio: rho in (0, 1] (`hparams.PRINCIPAL_COMPONENT_RATIO`, default 0.8);
      `L = max(1, floor(rho K))` principal directions are kept (in each slice).
    include: optional bool [K]; False rows take no part (as does a weight of 0).
    validate: value checks (docs/methods.md, "Conventions").
    preserve_norms: rescale each revised update (slice) to its original length
      (`hparams.PRINCIPAL_PRESERVE_NORMS`, default False: eq. (7) as the authors' code).
    granularity: "tensor" (default, `hparams.PRINCIPAL_GRANULARITY`): the aggregation runs on each
      slice of `tensor_sizes` separately, the authors' per-tensor `pcgrad_svd`; "model": once on
      the whole row (the paper's text; `tensor_sizes` is then ignored).
    tensor_sizes: None (the whole row is one tensor) or the lengths of the model's tensors in
      the order they are concatenated in a row, summing to d.
    revision: "eigenvalue_share" (default, eq. (7)) or "projection" (the plain orthogonal
      projection on the kept directions; `hparams.PRINCIPAL_REVISION`).

  Returns:
    [d] in the dtype of `updates`.
  """
  return _run(_aggregate_only, updates, weights, component_ratio, include, validate,
              preserve_norms, granularity, tensor_sizes, revision)


def principal_aggregate_with_diagnostics(updates, weights, *, component_ratio=0.8,
                                         include=None, validate=True,
                                         preserve_norms=False, granularity='tensor',
                                         tensor_sizes=None, revision='eigenvalue_share'):
  """`principal_aggregate` and its diagnostics (docs/methods.md, "Diagnostics") from the same
  Gram matrices.

  Returns (aggregate [d], OrderedDict): the common diagnostics (of the whole rows; "after" of the
  revised rows, every slice revised) plus `num_components` (int32, L, the same in every slice)
  and `explained_variance` (float32: the kept eigenvalues summed over the slices, over all
  eigenvalues summed over the slices; one slice: kept over all).
  """
  return _run(_with_diagnostics, updates, weights, component_ratio, include,
              validate, preserve_norms, granularity, tensor_sizes, revision)

"""FedLD principal-gradient aggregation (docs/methods.md, FedLD).

Paper: Zeng, Guo, Wang, Wang, Zhou, Qu, "Tackling Data Heterogeneity in Federated Learning via
Loss Decomposition", MICCAI 2024, arXiv:2408.12300 ("the fedld paper"): Sec. 2.4, eqs. (4)-(7).

* `Gamma = U U^T / K` with eigenpairs `(lambda_z, e_z)`, descending; principal directions
  `v_z = U^T e_z` (eqs. (4)-(5), the paper's bijection).
* Orientation (eq. (6)): `v_z` or `-v_z`, whichever has a non-negative inner product with the mean
  update (the authors' code uses a "majority" rule instead).
* Keep the top `L = max(1, floor(rho K))` directions, `rho = component_ratio`.
* `g'_il = (u_i . v_l) / |v_l|^2 v_l`; revised
  `u_i = sum over kept l with g'_il != 0 of |u_i| / |g'_il| * lambda_l / S * g'_il` (eq. (7)), with
  `S` the sum of ALL K eigenvalues (as the authors' code; the paper's `|lambda_l|` is ambiguous).
* Optionally (`preserve_norms=True`), each revised update is rescaled to `|u_i|`: eq. (7) gives it
  the norm `|u_i| sqrt(sum over its kept l with g'_il != 0 of (lambda_l / S)^2)` (the kept
  `v_l` are orthogonal), below `|u_i|` whenever two eigenvalues are positive, although the paper
  states that the length correction keeps the original magnitude.
* Aggregate `sum_i w_i u_i`, `w_i = n_i / n`.

Gram formulation: with `G = U U^T`, `|v_l|^2 = e_l^T G e_l` and `u_i . v_l = (G e_l)_i`, and
`|u_i| / |g'_il| g'_il = |u_i| sign(u_i . v_l) v_l / |v_l|`. So the revised update is
`u_i = sum_l B_il v_l = (B E^T)_i U` with `B_il = |u_i| (lambda_l / S) sign(u_i . v_l) / |v_l|`, and
the aggregate is one weighted sum `(w^T B E^T) U`. The eigendecomposition is of a K x K matrix
(`tf.linalg.eigh`, float64).

Decisions (docs/methods.md, FedLD):
* Orientation has no effect on the result. `g'_il` is the projection of `u_i` onto the line of
  `v_l`, which is the same for `v_l` and `-v_l` (eq. (7) uses only `g'_il` and norms), so eq. (6)
  and the "majority" rule give the same aggregate. `orientation` is accepted ("mean", "majority")
  and validated; the tests check the invariance against a reference that
  orients explicitly.
* K is the number of clients taking part (finite, included, weight > 0); the others' Gram rows
  and columns are zero, which only adds zero eigenvalues (they do not change `S` or the kept
  directions' coefficients). `L = max(1, floor(rho K + 1e-9 K))` (the slack keeps 0.29 * 100 from
  flooring to 28); with no client taking part L = 0 and the aggregate is 0.
* "g'_il != 0" in floating point: a kept direction whose eigenvalue is at most
  `K eps lambda_max` (eps of the input dtype; a null direction, `v_l` is rounding noise)
  contributes nothing, and a pair with `|cos(u_i, v_l)| <= 64 eps_float64` (rounding of the
  float64 K x K eigen-solve) counts as `g'_il = 0`. Without these thresholds, rounding noise would
  add a full `|u_i| lambda_l / S` along an arbitrary direction. Eq. (7) is discontinuous where
  `u_i . v_l` crosses 0; rounding of the inputs' own Gram matrix (float32 inputs) is not
  compensated, so for updates orthogonal only up to that rounding the result follows it. A
  genuine component is kept however small its cosine (a coarser threshold such as
  sqrt(eps_float32) would drop some).
* With repeated eigenvalues the eigenvectors (and so eq. (7)) are not unique; the result then
  depends on the eigensolver's basis. The paper does not define this case.
* `num_components` is L; `explained_variance` is `sum of the top L eigenvalues / S` (0 when S = 0).
  `conflict_fraction_after` is measured on the revised vectors (Gram `C G C^T`, C = B E^T).
"""

import numpy as np
import tensorflow as tf

from tff_conflict import hparams
from tff_conflict.conflict import _eager
from tff_conflict.conflict import _validation
from tff_conflict.conflict import geometry

ORIENTATIONS = hparams.PRINCIPAL_ORIENTATION.choices
_COUNT_SLACK = 1e-9
_COS_ZERO = 64 * float(np.finfo(np.float64).eps)


def _principal(updates, weights, component_ratio, orientation, include, validate,
               preserve_norms=False):
  ratio = hparams.PRINCIPAL_COMPONENT_RATIO.check(component_ratio)
  hparams.PRINCIPAL_ORIENTATION.check(orientation)
  preserve_norms = hparams.PRINCIPAL_PRESERVE_NORMS.check(preserve_norms)
  r, _ = geometry.begin_round(updates, weights=weights, include=include, validate=validate)
  eps = float(np.finfo(r.dtype.as_numpy_dtype).eps)
  k = r.num_rows
  g = r.gram
  kp = r.num_part
  gamma = g / tf.maximum(kp, 1.0)
  eigvals, eigvecs = tf.linalg.eigh(gamma)                   # ascending
  eigvals = tf.reverse(eigvals, axis=[0])
  eigvecs = tf.reverse(eigvecs, axis=[1])
  total = tf.linalg.trace(gamma)                             # S = sum of all eigenvalues
  num_kept = tf.cast(tf.floor(ratio * kp + _COUNT_SLACK * kp), tf.int32)
  num_kept = tf.where(kp > 0, tf.maximum(num_kept, 1), 0)
  lam_max = tf.reduce_max(tf.concat([eigvals, tf.zeros([1], tf.float64)], 0))
  kept = (tf.range(k) < num_kept) & (eigvals > tf.cast(k, tf.float64) * eps * lam_max)
  kept = kept & (eigvals > 0)
  gv = tf.matmul(g, eigvecs)                                 # (G E)_il = u_i . v_l
  v_sq = tf.reduce_sum(eigvecs * gv, axis=0)                 # |v_l|^2 = e_l^T G e_l
  v_norm = tf.sqrt(tf.where(kept & (v_sq > 0), v_sq, tf.ones_like(v_sq)))
  u_norm = tf.sqrt(r.sq_norms)
  cos = gv / (tf.where(u_norm > 0, u_norm, tf.ones_like(u_norm))[:, tf.newaxis]
              * v_norm[tf.newaxis, :])
  nonzero = (tf.abs(cos) > _COS_ZERO) & kept[tf.newaxis, :] & r.part[:, tf.newaxis]
  share = tf.math.divide_no_nan(eigvals, total)              # lambda_l / S
  b = tf.where(nonzero,
               u_norm[:, tf.newaxis] * share[tf.newaxis, :] * tf.sign(gv) / v_norm[tf.newaxis, :],
               tf.zeros_like(gv))
  if preserve_norms:
    # |revised u_i| = |u_i| sqrt(sum_l share_l^2) over its nonzero terms (orthogonal v_l).
    length = tf.sqrt(tf.reduce_sum(
        tf.where(nonzero, tf.square(share)[tf.newaxis, :], tf.zeros_like(gv)), axis=1))
    b = b / tf.where(length > 0, length, tf.ones_like(length))[:, tf.newaxis]
  coeffs = tf.matmul(b, eigvecs, transpose_b=True)           # revised u_i = (B E^T)_i U
  combo = tf.linalg.matvec(coeffs, r.weights, transpose_a=True)
  aggregate = r.combine(combo)
  top = tf.range(k) < num_kept
  explained = tf.math.divide_no_nan(tf.reduce_sum(tf.where(top, eigvals, tf.zeros_like(eigvals))),
                                    total)
  return r, coeffs, aggregate, num_kept, explained


def _aggregate_only(updates, weights, component_ratio, orientation, include, validate,
                    preserve_norms=False):
  return _principal(updates, weights, component_ratio, orientation, include, validate,
                    preserve_norms)[2]


def _with_diagnostics(updates, weights, component_ratio, orientation, include, validate,
                      preserve_norms=False):
  r, coeffs, aggregate, num_kept, explained = _principal(
      updates, weights, component_ratio, orientation, include, validate, preserve_norms)
  gram_after = tf.matmul(tf.matmul(coeffs, r.gram), coeffs, transpose_b=True)
  return aggregate, r.diagnostics(gram_after, aggregate, {
      'num_components': tf.cast(num_kept, geometry.COUNT_DTYPE),
      'explained_variance': tf.cast(explained, geometry.REAL_DTYPE)})


def _run(impl, updates, weights, component_ratio, orientation, include, validate,
         preserve_norms):
  """`impl` inline in a graph; eagerly, checks first, then a cached graph (`_eager`)."""
  if not _eager.executing_eagerly():
    return impl(updates, weights, component_ratio, orientation, include, validate,
                preserve_norms)
  ratio = hparams.PRINCIPAL_COMPONENT_RATIO.check(component_ratio)
  orientation = hparams.PRINCIPAL_ORIENTATION.check(orientation)
  preserve_norms = hparams.PRINCIPAL_PRESERVE_NORMS.check(preserve_norms)
  stack, w, _, inc = geometry.check_round(updates, weights=weights, include=include,
                                          validate=validate)
  return _eager.call(impl, dict(updates=stack, weights=w, include=inc),
                     dict(component_ratio=ratio, orientation=orientation, validate=False,
                          preserve_norms=preserve_norms))


def principal_aggregate(updates, weights, *, component_ratio=0.8, orientation='mean',
                        include=None, validate=True, preserve_norms=False):
  """FedLD principal-gradient aggregate (fedld paper, eqs. (4)-(7)).

  Args:
    updates: float32/float64 [K, d], one client update per row.
    weights: [K] non-negative, normalised over the clients taking part.
    component_ratio: rho in (0, 1] (`hparams.PRINCIPAL_COMPONENT_RATIO`, default 0.8);
      `L = max(1, floor(rho K))` principal directions are kept.
    orientation: "mean" (eq. (6)) or "majority"; provably no effect (module docstring).
    include: optional bool [K]; False rows take no part (as does a weight of 0).
    validate: value checks (package docstring, "Validation").
    preserve_norms: rescale each revised update to `|u_i|` (`hparams.PRINCIPAL_PRESERVE_NORMS`,
      default False: eq. (7) as the authors' code computes it; module docstring).

  Returns:
    [d] in the dtype of `updates`.
  """
  return _run(_aggregate_only, updates, weights, component_ratio, orientation, include, validate,
              preserve_norms)


def principal_aggregate_with_diagnostics(updates, weights, *, component_ratio=0.8,
                                         orientation='mean', include=None, validate=True,
                                         preserve_norms=False):
  """`principal_aggregate` and its diagnostics (docs/methods.md, "Diagnostics") from the same
  Gram matrix.

  Returns (aggregate [d], OrderedDict): the common diagnostics plus `num_components` (int32) and
  `explained_variance` (float32).
  """
  return _run(_with_diagnostics, updates, weights, component_ratio, orientation, include,
              validate, preserve_norms)

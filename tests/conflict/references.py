"""Float64 loop references written from the papers' equations (not importing the library).

Each works on a list of d-vectors (numpy float64), loops over clients and over the vectors they
are projected onto, and returns the aggregate plus what the diagnostics report. Clients that do
not take part are removed by the caller (`take_part`).
"""

import math

import numpy as np


def dot(a, b):
  return float(np.dot(a, b))


def take_part(updates, *masks):
  """Indices of finite rows where every mask is True."""
  keep = []
  for k, u in enumerate(updates):
    if not np.all(np.isfinite(u)) or not np.isfinite(dot(u, u)):
      continue
    if all(m[k] for m in masks):
      keep.append(k)
  return keep


def cosine(a, b):
  na, nb = math.sqrt(dot(a, a)), math.sqrt(dot(b, b))
  if na == 0 or nb == 0:
    return 0.0
  return max(-1.0, min(1.0, dot(a, b) / (na * nb)))


def pair_stats(vectors, tol):
  """(conflict fraction, min cosine, mean cosine) over unordered pairs."""
  cos = [cosine(vectors[i], vectors[j])
         for i in range(len(vectors)) for j in range(i + 1, len(vectors))]
  if not cos:
    return 0.0, 1.0, 0.0
  return sum(c < -tol for c in cos) / len(cos), min(cos), sum(cos) / len(cos)


def fedgh(updates, weights, orders):
  """fedgh paper Algorithm 1: for k, for j in orders[k] (j != k): project u_k against ~u_j."""
  original = [np.array(u, np.float64) for u in updates]
  out, count = [], 0
  for k in range(len(original)):
    g = original[k].copy()
    for j in orders[k]:
      if j == k:
        continue
      d = dot(g, original[j])
      if d < 0:
        g = g - d / dot(original[j], original[j]) * original[j]
        count += 1
    out.append(g)
  w = np.asarray(weights, np.float64)
  w = w / w.sum()
  agg = sum(w[k] * out[k] for k in range(len(out)))
  return agg, out, count


def dgc(updates, losses, ratio):
  """fedmgc paper Definition 3 and Algorithms 1-2 as docs/methods.md, FedMGC states them."""
  u = [np.array(x, np.float64) for x in updates]
  k_num = len(u)
  norms = [math.sqrt(dot(x, x)) for x in u]
  p = []
  for i in range(k_num):
    total = 0.0
    for j in range(k_num):
      if j == i:
        continue
      a = dot(u[i], u[j]) / norms[j] if norms[j] > 0 else 0.0
      b = dot(u[j], u[i]) / norms[i] if norms[i] > 0 else 0.0
      total += (a + b) / 2
    p.append(total / (k_num - 1) if k_num > 1 else 0.0)
  z = [p[i] / max(losses[i], 1e-12) for i in range(k_num)]
  ranking = sorted(range(k_num), key=lambda i: (-z[i], i))
  m = math.ceil(ratio * k_num - 1e-9)
  dominant = ranking[:m]
  out, count = [], 0
  for i in range(k_num):
    g = u[i].copy()
    for s in dominant:
      if s == i:
        continue
      d = dot(g, u[s])
      if d < 0:
        g = g - d / dot(u[s], u[s]) * u[s]
        count += 1
    out.append(g)
  agg = sum(out) / k_num
  return agg, out, count, m, z


def fedld(updates, weights, ratio, orientation='mean', rel_tol=1e-12, preserve_norms=False,
          revision='eigenvalue_share'):
  """fedld paper eqs. (4)-(7) via an SVD of the d x K matrix [u_1 ... u_K] (its left singular
  vectors are the principal directions v_z; eigenvalues of U U^T / K are s^2 / K). With
  `preserve_norms`, each nonzero revised update is rescaled to |u_i|; with
  `revision='projection'` the kept projections are summed as they are (no eq. 7 weights)."""
  u = [np.array(x, np.float64) for x in updates]
  k_num = len(u)
  mat = np.stack(u, axis=1)                      # d x K, the paper's G
  left, s, _ = np.linalg.svd(mat, full_matrices=False)
  eig = list(s ** 2 / k_num) + [0.0] * (k_num - len(s))
  total = sum(dot(x, x) for x in u) / k_num      # sum of all eigenvalues = trace
  mean = sum(u) / k_num
  directions = []
  for z in range(len(s)):
    v = left[:, z] * s[z]                        # any scale; eq. (7) is scale-free in v
    if orientation == 'mean':
      if dot(v, mean) < 0:
        v = -v
    else:
      pos = sum(dot(x, v) >= 0 for x in u)
      if pos < k_num - pos:
        v = -v
    directions.append(v)
  num_kept = max(1, math.floor(ratio * k_num + 1e-9))
  lam_max = max(eig) if eig else 0.0
  out = []
  for i in range(k_num):
    g = np.zeros_like(u[i])
    norm_i = math.sqrt(dot(u[i], u[i]))
    for l in range(min(num_kept, len(directions))):
      if eig[l] <= 1e-12 * lam_max or eig[l] <= 0:
        continue
      v = directions[l]
      proj = dot(u[i], v) / (math.sqrt(dot(v, v)) * math.sqrt(dot(v, v))) * v
      norm_p = math.sqrt(dot(proj, proj))
      if norm_p <= rel_tol * norm_i or norm_p == 0:
        continue
      if revision == 'projection':
        g = g + proj
      else:
        g = g + norm_i / norm_p * eig[l] / total * proj
    norm_g = math.sqrt(dot(g, g))
    if preserve_norms and norm_g > 0:
      g = g * (norm_i / norm_g)
    out.append(g)
  w = np.asarray(weights, np.float64)
  w = w / w.sum()
  agg = sum(w[i] * out[i] for i in range(k_num))
  explained = sum(eig[:num_kept]) / total if total > 0 else 0.0
  return agg, out, num_kept, explained


def fedld_per_tensor(updates, weights, ratio, tensor_sizes, preserve_norms=False,
                     revision='eigenvalue_share'):
  """The fedld authors' `svd_tools.pcgrad_svd`: `fedld` applied to each tensor's columns of the
  [K, d] updates separately (weights over every client), the aggregates concatenated. Returns
  (aggregate, revised whole rows, L, explained variance pooled over the tensors)."""
  u = np.asarray(updates, np.float64)
  aggregates, revised, kept, total = [], [], 0.0, 0.0
  start = 0
  for size in tensor_sizes:
    piece = u[:, start:start + size]
    agg, out, num_kept, _ = fedld(list(piece), weights, ratio, preserve_norms=preserve_norms,
                                  revision=revision)
    k_num = len(piece)
    lam = sorted(np.linalg.eigvalsh(piece @ piece.T / k_num).tolist(), reverse=True)
    kept += sum(lam[:num_kept])
    total += sum(dot(x, x) for x in piece) / k_num
    aggregates.append(agg)
    revised.append(np.stack(out))
    start += size
  assert start == u.shape[1]
  explained = kept / total if total > 0 else 0.0
  return np.concatenate(aggregates), list(np.concatenate(revised, axis=1)), num_kept, explained


def corrective_x(gradients, losses, alpha):
  """corrective paper eqs. (6), (13), (29)."""
  d = [np.array(x, np.float64) for x in gradients]
  total = sum(d)
  norms = [math.sqrt(dot(x, x)) for x in d]
  m = [dot(x, total) for x in d]
  nz = [i for i in range(len(d)) if norms[i] > 0]
  if not nz:
    return np.zeros(len(d))
  c = min(alpha * losses[i] / norms[i] for i in nz)
  denom = math.sqrt(sum((m[j] / norms[j]) ** 2 for j in nz))
  x = np.zeros(len(d))
  for i in nz:
    x[i] = c / denom * m[i] / norms[i] ** 2 if denom > 0 else 0.0
  return x


def corrective(updates, gradients, losses, weights, alpha):
  x = corrective_x(gradients, losses, alpha)
  w = np.asarray(weights, np.float64)
  w = w / w.sum()
  agg = sum(w[k] * np.asarray(updates[k], np.float64) for k in range(len(updates)))
  agg = agg + sum(x[i] * np.asarray(gradients[i], np.float64) for i in range(len(gradients)))
  return agg, x


def conflicting_updates(num_clients, dim, seed):
  """Random updates with many conflicts: each is +-(one of three directions) plus noise, with
  norms spread over two orders of magnitude."""
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(3, dim))
  signs = rng.choice([-1.0, 1.0], size=num_clients)
  rows = [signs[k] * centers[k % 3] + 0.6 * rng.normal(size=dim) for k in range(num_clients)]
  scales = 10.0 ** rng.uniform(-1, 1, size=num_clients)
  return np.stack([s * r for s, r in zip(scales, rows)])


def assert_close(actual, expected, rtol, scale=None):
  """max |actual - expected| <= rtol * max(max |expected|, scale)."""
  actual = np.asarray(actual, np.float64)
  expected = np.asarray(expected, np.float64)
  assert actual.shape == expected.shape, (actual.shape, expected.shape)
  ref = max(float(np.max(np.abs(expected))) if expected.size else 0.0, scale or 0.0)
  err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
  assert err <= rtol * ref or err == 0.0, f'max error {err:.3e} > {rtol:.1e} * {ref:.3e}'


def parameter_cases(default, others):
  """Test grid (num_clients, dtype, rtol, parameter): every K in {1, 2, 3, 10, 50} and both dtypes
  at the parameter's default value; the other values at K = 3 and 50 (float64) and K = 10
  (float32). Tolerances: 1e-10 relative in float64, 1e-4 in float32."""
  base = [(k, np.float64, 1e-10) for k in (1, 2, 3, 10, 50)] + [
      (k, np.float32, 1e-4) for k in (1, 2, 3, 10, 50)]
  out = [(k, dt, tol, default) for k, dt, tol in base]
  for value in others:
    out += [(3, np.float64, 1e-10, value), (50, np.float64, 1e-10, value),
            (10, np.float32, 1e-4, value)]
  return out

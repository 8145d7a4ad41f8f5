"""The `norm_ratio` diagnostic: |aggregate| / |plain mean of the clients taking part|, against float64
references, hand-worked cases and the degenerate rounds (docs/methods.md, "Diagnostics")."""

import numpy as np
import pytest

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _grads(u):
  return np.roll(u, 1, axis=1) * 0.5


# name -> (kernel with diagnostics, float64 reference aggregate, weights of the plain mean)
KERNELS = {
    'harmonize': (
        lambda u, w, l, **kw: conflict.harmonize_with_diagnostics(u, w, order='index', **kw),
        lambda u, w, l: ref.fedgh(u, w, [list(range(len(u)))] * len(u))[0],
        lambda w: w / w.sum()),
    'dominant': (
        lambda u, w, l, **kw: conflict.dominant_correction_with_diagnostics(u, l, **kw),
        lambda u, w, l: ref.dgc(u, l, 0.5)[0],
        lambda w: np.full(len(w), 1.0 / len(w))),   # DGC's mean is unweighted
    'principal': (
        lambda u, w, l, **kw: conflict.principal_aggregate_with_diagnostics(u, w, **kw),
        lambda u, w, l: ref.fedld(u, w, 0.8)[0],
        lambda w: w / w.sum()),
    'corrective': (
        lambda u, w, l, **kw: conflict.corrective_aggregate_with_diagnostics(
            u, _grads(u), l, w, alpha=0.5, **kw),
        lambda u, w, l: ref.corrective(u, _grads(u), l, w, 0.5)[0],
        lambda w: w / w.sum()),
}


def _reference_ratio(name, u, w, l):
  u64 = np.asarray(u, np.float64)
  _, reference, mean_weights = KERNELS[name]
  aggregate = reference(u64, w, l)
  mean = mean_weights(np.asarray(w, np.float64)) @ u64
  return np.linalg.norm(aggregate) / np.linalg.norm(mean)


@pytest.mark.parametrize('name', KERNELS)
@pytest.mark.parametrize('num_clients,dtype,rtol', [
    (1, np.float64, 1e-6), (2, np.float64, 1e-6), (10, np.float64, 1e-6),
    (30, np.float64, 1e-6), (10, np.float32, 1e-4), (30, np.float32, 1e-4)])
def test_matches_float64_reference(name, num_clients, dtype, rtol):
  # The diagnostic is a float32 scalar: 1e-6 is its own precision for float64 inputs.
  rng = np.random.default_rng(num_clients)
  u = ref.conflicting_updates(num_clients, 40, seed=200 + num_clients).astype(dtype)
  w = rng.uniform(1, 5, num_clients)
  l = rng.uniform(0.5, 2.0, num_clients)
  _, diag = KERNELS[name][0](u, w, l)
  assert list(diag)[6:8] == ['aggregate_norm', 'norm_ratio']
  assert diag['norm_ratio'].dtype == np.float32
  expected = _reference_ratio(name, u, w, l)
  np.testing.assert_allclose(diag['norm_ratio'].numpy(), expected, rtol=rtol)
  if num_clients == 1 and name != 'corrective':
    assert diag['norm_ratio'].numpy() == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize('name', KERNELS)
def test_only_clients_taking_part_enter_the_mean(name):
  rng = np.random.default_rng(5)
  u = ref.conflicting_updates(6, 12, seed=5)
  w = rng.uniform(1, 5, 6)
  l = rng.uniform(0.5, 2.0, 6)
  include = np.array([True, False, True, True, True, True])
  u_bad = u.copy()
  u_bad[3] = np.nan   # non-finite: excluded
  _, diag = KERNELS[name][0](u_bad, w, l, include=include)
  keep = [0, 2, 4, 5]
  expected = _reference_ratio(name, u[keep], w[keep], l[keep])
  np.testing.assert_allclose(diag['norm_ratio'].numpy(), expected, rtol=1e-6)


def test_hand_worked_fedgh_lengthens_the_step():
  # u1 = (1, 0), u2 = (-1, 1) conflict (u1 . u2 = -1): u1' = (1/2, 1/2), u2' = (0, 1); equal
  # weights: aggregate (1/4, 3/4), |a| = sqrt(10)/4; plain mean (0, 1/2): ratio sqrt(10)/2.
  _, diag = conflict.harmonize_with_diagnostics([[1.0, 0.0], [-1.0, 1.0]], [3.0, 3.0],
                                                order='index')
  np.testing.assert_allclose(diag['norm_ratio'].numpy(), np.sqrt(10) / 2, rtol=1e-6)


def test_hand_worked_fedld_shortens_the_step():
  # u1 = (3, 0), u2 = (0, 1): Gamma = diag(9, 1) / 2, eigenvalues 4.5 and 0.5, S = 5. With
  # rho = 0.8, L = 1: u1' = 0.9 u1, u2' = 0 (orthogonal to v1); aggregate (1.35, 0) against the
  # plain mean (1.5, 0.5): ratio 1.35 / sqrt(2.5). With rho = 1: u2' = 0.1 u2, aggregate
  # (1.35, 0.05).
  u = [[3.0, 0.0], [0.0, 1.0]]
  _, diag = conflict.principal_aggregate_with_diagnostics(u, [1.0, 1.0])
  np.testing.assert_allclose(diag['norm_ratio'].numpy(), 1.35 / np.sqrt(2.5), rtol=1e-6)
  _, diag = conflict.principal_aggregate_with_diagnostics(u, [1.0, 1.0], component_ratio=1.0)
  np.testing.assert_allclose(diag['norm_ratio'].numpy(), np.hypot(1.35, 0.05) / np.sqrt(2.5),
                             rtol=1e-6)
  assert diag['norm_ratio'].numpy() < 1.0


def test_alpha_zero_corrective_is_exactly_one():
  u = ref.conflicting_updates(5, 8, seed=9)
  _, diag = conflict.corrective_aggregate_with_diagnostics(u, _grads(u), np.ones(5), np.ones(5),
                                                           alpha=0.0)
  assert diag['norm_ratio'].numpy() == 1.0


@pytest.mark.parametrize('name', KERNELS)
def test_degenerate_rounds_are_defined(name):
  call = KERNELS[name][0]
  l = np.ones(2)
  # Exactly opposite updates with equal weights: the plain mean is 0. FedGH projects each onto
  # 0 (aggregate 0 -> 1); DGC makes client 0 dominant and projects only client 1 (u1 + u2 = 0),
  # so its aggregate is u1 / 2 (-> the largest float32). Never NaN or Inf.
  u = np.array([[1.0, 2.0, -1.0], [-1.0, -2.0, 1.0]])
  agg, diag = call(u, np.ones(2), l)
  ratio = diag['norm_ratio'].numpy()
  assert np.isfinite(ratio)
  if name == 'harmonize':
    np.testing.assert_array_equal(agg.numpy(), np.zeros(3))
    assert ratio == 1.0
  if name == 'dominant':
    np.testing.assert_allclose(agg.numpy(), u[0] / 2, rtol=1e-12)
    assert ratio == np.float32(FLOAT32_MAX)
  # No client takes part: aggregate 0, mean 0 -> 1.
  _, diag = call(np.full((2, 3), np.nan), np.ones(2), l)
  assert diag['norm_ratio'].numpy() == 1.0
  _, diag = call(np.ones((2, 3)), np.ones(2), l, include=np.zeros(2, bool), validate=False)
  assert diag['norm_ratio'].numpy() == 1.0


def test_zero_mean_with_a_nonzero_aggregate_is_capped():
  # Every update 0, gradients not: the plain mean is 0 but the corrective term is not.
  d = np.array([[1.0, 0.0], [1.0, 1.0]])
  _, diag = conflict.corrective_aggregate_with_diagnostics(np.zeros((2, 2)), d, np.ones(2),
                                                           np.ones(2), alpha=0.5)
  assert diag['aggregate_norm'].numpy() > 0
  assert diag['norm_ratio'].numpy() == np.float32(FLOAT32_MAX)


def test_norm_ratio_function():
  cases = [(2.0, 4.0, 0.5), (0.0, 0.0, 1.0), (3.0, 0.0, FLOAT32_MAX), (0.0, 5.0, 0.0),
           (1e300, 1e-300, FLOAT32_MAX)]
  for aggregate_norm, mean_norm, expected in cases:
    ratio = geometry.norm_ratio(np.float64(aggregate_norm), np.float64(mean_norm))
    assert ratio.dtype == np.float32
    assert ratio.numpy() == np.float32(expected)

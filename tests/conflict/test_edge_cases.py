"""Edge cases of every kernel (docs/methods.md, "Conventions"): K = 1, zero, NaN and Inf
updates, duplicated, identical and orthogonal updates, and rounds in which no client takes
part."""

import numpy as np
import pytest

from tests.conflict import references as ref
from tff_conflict import conflict


def _grads(u):
  return np.roll(u, 1, axis=1) * 0.5   # a finite gradient stack with the same shape as u


KERNELS = {
    'harmonize': (
        lambda u, w, l, **kw: conflict.harmonize_with_diagnostics(u, w, order='index', **kw),
        lambda u, w, l: ref.fedgh(u, w, [list(range(len(u)))] * len(u))[0]),
    'dominant': (
        lambda u, w, l, **kw: conflict.dominant_correction_with_diagnostics(u, l, **kw),
        lambda u, w, l: ref.dgc(u, l, 0.5)[0]),
    'principal': (
        lambda u, w, l, **kw: conflict.principal_aggregate_with_diagnostics(u, w, **kw),
        lambda u, w, l: ref.fedld(u, w, 0.8)[0]),
    'corrective': (
        lambda u, w, l, **kw: conflict.corrective_aggregate_with_diagnostics(
            u, _grads(u), l, w, **kw),
        lambda u, w, l: ref.corrective(u, _grads(u), l, w, 0.1)[0]),
}


def _inputs(num_clients, dim=6, seed=0):
  rng = np.random.default_rng(seed)
  return (ref.conflicting_updates(num_clients, dim, seed), rng.uniform(1, 5, num_clients),
          rng.uniform(0.5, 2.0, num_clients))


@pytest.mark.parametrize('name', KERNELS)
def test_single_client(name):
  call, reference = KERNELS[name]
  u, w, l = _inputs(1)
  agg, diag = call(u, w, l)
  if name != 'corrective':   # K = 1 returns that update unchanged
    np.testing.assert_allclose(agg.numpy(), u[0], rtol=1e-12)
  ref.assert_close(agg, reference(u, w, l), 1e-10)
  assert diag['num_clients'].numpy() == 1
  assert diag['min_cosine'].numpy() == 1.0 and diag['mean_cosine'].numpy() == 0.0
  assert diag['conflict_fraction_before'].numpy() == 0.0


@pytest.mark.parametrize('name', KERNELS)
def test_zero_update_takes_part_in_no_projection(name):
  call, reference = KERNELS[name]
  u, w, l = _inputs(5, seed=1)
  u[2] = 0.0
  agg, diag = call(u, w, l)
  assert np.all(np.isfinite(agg.numpy()))
  ref.assert_close(agg, reference(u, w, l), 1e-10)
  assert diag['num_clients'].numpy() == 5


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf, 1e20])
@pytest.mark.parametrize('name', KERNELS)
def test_nonfinite_update_is_excluded_and_counted(name, bad):
  call, reference = KERNELS[name]
  u, w, l = _inputs(6, seed=2)
  u32 = u.astype(np.float32)
  u32[3, 1:] = bad      # 1e20: finite entries whose squared norm overflows float32
  keep = [0, 1, 2, 4, 5]
  expected = reference(u32[keep].astype(np.float64), w[keep], l[keep])
  agg, diag = call(u32, w, l)
  assert np.all(np.isfinite(agg.numpy()))
  ref.assert_close(agg, expected, 1e-4)
  assert diag['num_excluded_nonfinite'].numpy() == 1
  assert diag['num_clients'].numpy() == 5
  assert all(np.all(np.isfinite(v.numpy())) for v in diag.values())


@pytest.mark.parametrize('name', KERNELS)
def test_every_client_nonfinite_gives_zeros(name):
  call, _ = KERNELS[name]
  u = np.full((3, 4), np.nan)
  u[1] = np.inf
  agg, diag = call(u, np.ones(3), np.ones(3))
  np.testing.assert_array_equal(agg.numpy(), np.zeros(4))
  assert diag['num_clients'].numpy() == 0 and diag['num_excluded_nonfinite'].numpy() == 3
  assert all(np.all(np.isfinite(v.numpy())) for v in diag.values())


@pytest.mark.parametrize('name', KERNELS)
def test_nobody_takes_part_with_validate_false_gives_zeros(name):
  call, _ = KERNELS[name]
  u, w, l = _inputs(4, seed=3)
  for kwargs in ({'include': np.zeros(4, bool)},):
    agg, diag = call(u, w, l, validate=False, **kwargs)
    np.testing.assert_array_equal(agg.numpy(), np.zeros(6))
    assert diag['num_clients'].numpy() == 0
  if name != 'dominant':
    agg, _ = call(u, np.zeros(4), l, validate=False)
    np.testing.assert_array_equal(agg.numpy(), np.zeros(6))
    agg, _ = call(u, -np.ones(4), l, validate=False)   # negative weights exclude, too
    np.testing.assert_array_equal(agg.numpy(), np.zeros(6))
  agg, _ = call(np.zeros((0, 6)), np.zeros(0), np.zeros(0), validate=False)
  np.testing.assert_array_equal(agg.numpy(), np.zeros(6))


@pytest.mark.parametrize('name', KERNELS)
def test_duplicated_updates(name):
  call, reference = KERNELS[name]
  u, w, l = _inputs(5, seed=4)
  u[3] = u[1]
  l[3] = l[1]
  agg, _ = call(u, w, l)
  ref.assert_close(agg, reference(u, w, l), 1e-10)


@pytest.mark.parametrize('name', ['harmonize', 'dominant', 'principal'])
def test_all_identical_updates_return_that_update(name):
  call, _ = KERNELS[name]
  row = np.array([0.5, -2.0, 1.0, 3.0])
  u = np.tile(row, (4, 1))
  agg, diag = call(u, np.array([1.0, 2.0, 3.0, 4.0]), np.ones(4))
  np.testing.assert_allclose(agg.numpy(), row, rtol=1e-12)
  assert diag['conflict_fraction_before'].numpy() == 0.0
  np.testing.assert_allclose(diag['min_cosine'].numpy(), 1.0, rtol=1e-6)


def test_orthogonal_updates():
  # Exactly orthogonal, distinct norms: no projection in FedGH and DGC (weighted / plain mean);
  # FedLD with L = K keeps each u_i along itself with weight lambda_i / S = |u_i|^2 / sum |u|^2.
  u = np.diag([1.0, 2.0, 3.0])
  w = np.array([1.0, 1.0, 2.0])
  agg, diag = conflict.harmonize_with_diagnostics(u, w)
  np.testing.assert_allclose(agg.numpy(), [0.25, 0.5, 1.5], rtol=1e-12)
  assert diag['num_projections'].numpy() == 0 and diag['conflict_fraction_before'].numpy() == 0
  np.testing.assert_allclose(conflict.dominant_correction(u, [1.0, 2.0, 3.0]).numpy(),
                             [1 / 3, 2 / 3, 1.0], rtol=1e-12)
  agg = conflict.principal_aggregate(u, w, component_ratio=1.0)
  share = np.array([1.0, 4.0, 9.0]) / 14.0
  np.testing.assert_allclose(agg.numpy(), (w / 4) * share * np.array([1.0, 2.0, 3.0]),
                             rtol=1e-12)

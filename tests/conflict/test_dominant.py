"""FedMGC dominant gradient correction against the float64 loop reference and hand-worked cases."""

import numpy as np
import pytest

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry


@pytest.mark.parametrize('num_clients,dtype,rtol,ratio', ref.parameter_cases(0.5, [0.2, 1.0]))
def test_matches_reference(num_clients, dtype, rtol, ratio):
  updates = ref.conflicting_updates(num_clients, 64, seed=20 + num_clients).astype(dtype)
  losses = np.random.default_rng(num_clients).uniform(0.1, 3.0, size=num_clients)
  expected, out, count, num_dom, _ = ref.dgc(updates.astype(np.float64), losses, ratio)
  agg, diag = conflict.dominant_correction_with_diagnostics(updates, losses,
                                                            selection_ratio=ratio)
  assert agg.dtype == dtype
  ref.assert_close(agg, expected, rtol)
  ref.assert_close(conflict.dominant_correction(updates, losses, selection_ratio=ratio),
                   expected, rtol)
  tol = geometry.conflict_tolerance(dtype)
  cf_before, min_cos, mean_cos = ref.pair_stats(list(updates.astype(np.float64)), tol)
  cf_after, _, _ = ref.pair_stats(out, tol)
  assert diag['num_dominant'].numpy() == num_dom
  assert diag['num_projections'].numpy() == count
  assert diag['num_clients'].numpy() == num_clients
  np.testing.assert_allclose(diag['conflict_fraction_before'].numpy(), cf_before, atol=1e-6)
  np.testing.assert_allclose(diag['conflict_fraction_after'].numpy(), cf_after, atol=1e-6)
  np.testing.assert_allclose(diag['min_cosine'].numpy(), min_cos, atol=1e-5)
  np.testing.assert_allclose(diag['mean_cosine'].numpy(), mean_cos, atol=1e-5)
  np.testing.assert_allclose(diag['aggregate_norm'].numpy(), np.linalg.norm(expected), rtol=1e-4)


def test_hand_worked_2d_losses_decide_dominance():
  # u1 = (2, 0), u2 = (-1, 1): p_12 = (u1.u2/|u2| + u2.u1/|u1|)/2 = (-2/sqrt2 - 1)/2 = p_1 = p_2.
  # losses (1, 2): z2 > z1 (both negative, z2 = p/2), one dominant (ceil(0.5*2) = 1): client 2.
  #   u1.u2 = -2 < 0 -> u1 - (-2)/2 u2 = (1, 1); mean with u2: (0, 1).
  u = np.array([[2.0, 0.0], [-1.0, 1.0]])
  agg, diag = conflict.dominant_correction_with_diagnostics(u, [1.0, 2.0])
  np.testing.assert_allclose(agg.numpy(), [0.0, 1.0], atol=1e-12)
  assert diag['num_dominant'].numpy() == 1 and diag['num_projections'].numpy() == 1
  # losses (2, 1): client 1 dominant; u2 - (-2)/4 u1 = (0, 1); mean with u1: (1, 0.5).
  np.testing.assert_allclose(conflict.dominant_correction(u, [2.0, 1.0]).numpy(), [1.0, 0.5],
                             atol=1e-12)


def test_hand_worked_3d_one_and_all_dominant():
  # a=(1,0,0), b=(-1,1,0), c=(-1,-1,1), losses 1: p_a = (p_ab + p_ac)/2 ~ -0.821,
  # p_b = p_ab/2 ~ -0.427, p_c = p_ac/2 ~ -0.394 (p_bc = 0): z order c, b, a.
  u = np.array([[1.0, 0, 0], [-1, 1, 0], [-1, -1, 1]])
  losses = [1.0, 1.0, 1.0]
  # ratio 1/3 -> 1 dominant (c): a + c/3 = (2/3,-1/3,1/3); b.c = 0: b; mean (-4/9, -1/9, 4/9)
  agg, diag = conflict.dominant_correction_with_diagnostics(u, losses, selection_ratio=1 / 3)
  np.testing.assert_allclose(agg.numpy(), [-4 / 9, -1 / 9, 4 / 9], atol=1e-12)
  assert diag['num_dominant'].numpy() == 1 and diag['num_projections'].numpy() == 1
  # ratio 1 -> all dominant, visited c, b, a:
  #  a: vs c -> (2/3,-1/3,1/3); vs b: dot -1 -> + b/2 = (1/6, 1/6, 1/3)
  #  b: vs c: 0; vs a: -1 -> b + a = (0, 1, 0)
  #  c: vs b: 0; vs a: -1 -> c + a = (0, -1, 1)
  #  mean (1/18, 1/18, 4/9), 4 projections (2 for a, 1 each for b and c).
  agg, diag = conflict.dominant_correction_with_diagnostics(u, losses, selection_ratio=1.0)
  np.testing.assert_allclose(agg.numpy(), [1 / 18, 1 / 18, 4 / 9], atol=1e-12)
  assert diag["num_dominant"].numpy() == 3 and diag["num_projections"].numpy() == 4


def test_ceil_is_not_fooled_by_rounding():
  u = ref.conflicting_updates(10, 8, seed=1)
  _, diag = conflict.dominant_correction_with_diagnostics(u, np.ones(10), selection_ratio=0.3)
  assert diag['num_dominant'].numpy() == 3     # 0.3 * 10 = 3.0000000000000004 in floating point
  _, diag = conflict.dominant_correction_with_diagnostics(u, np.ones(10), selection_ratio=0.31)
  assert diag['num_dominant'].numpy() == 4


def test_ties_broken_by_lower_index():
  # Clients 0 and 2 are identical with equal losses (equal z); with one dominant, client 0 wins:
  # client 1 is projected onto u0 (= u2) and client 0 is not projected at all, client 2 is
  # projected against u0, which it does not conflict with.
  u = np.array([[1.0, 0.0], [-1.0, 0.2], [1.0, 0.0]])
  losses = [1.0, 0.5, 1.0]   # client 1's z = p/0.5 is more negative
  expected, _, _, _, z = ref.dgc(u, losses, 1 / 3)
  assert z[0] == z[2] and z[0] > z[1]
  ref.assert_close(conflict.dominant_correction(u, losses, selection_ratio=1 / 3), expected,
                   1e-12)


def test_loss_clamped_and_nonfinite_loss_excludes():
  u = ref.conflicting_updates(4, 6, seed=9)
  expected, *_ = ref.dgc(u, [1e-12, 1.0, 2.0, 0.5], 0.5)
  ref.assert_close(conflict.dominant_correction(u, [0.0, 1.0, 2.0, 0.5]), expected, 1e-10)
  expected, *_ = ref.dgc(u[[0, 2, 3]], [1.0, 2.0, 0.5], 0.5)
  agg, diag = conflict.dominant_correction_with_diagnostics(u, [1.0, np.nan, 2.0, 0.5])
  ref.assert_close(agg, expected, 1e-10)
  assert diag['num_excluded_nonfinite'].numpy() == 1 and diag['num_clients'].numpy() == 3


def test_include_excludes_rows():
  u = ref.conflicting_updates(7, 10, seed=4)
  losses = np.linspace(0.5, 2.0, 7)
  include = np.array([True, False, True, True, False, True, True])
  expected, *_ = ref.dgc(u[include], losses[include], 0.5)
  agg, diag = conflict.dominant_correction_with_diagnostics(u, losses, include=include)
  ref.assert_close(agg, expected, 1e-10)
  assert diag['num_clients'].numpy() == 5 and diag['num_dominant'].numpy() == 3

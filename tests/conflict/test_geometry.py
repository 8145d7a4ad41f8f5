"""pairwise_cosine and conflict_stats against loops over pairs."""

import numpy as np
import pytest

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import geometry


@pytest.mark.parametrize('dtype,rtol', [(np.float64, 1e-10), (np.float32, 1e-5)])
@pytest.mark.parametrize('num_clients', [1, 2, 3, 10, 50])
def test_pairwise_cosine_and_stats(num_clients, dtype, rtol):
  u = ref.conflicting_updates(num_clients, 32, seed=num_clients).astype(dtype)
  u64 = u.astype(np.float64)
  expected = np.array([[ref.cosine(a, b) for b in u64] for a in u64])
  cos = conflict.pairwise_cosine(u)
  assert cos.dtype == dtype and cos.shape == (num_clients, num_clients)
  np.testing.assert_allclose(cos.numpy(), expected, atol=rtol)
  stats = conflict.conflict_stats(u)
  frac, min_cos, mean_cos = ref.pair_stats(list(u64), geometry.conflict_tolerance(dtype))
  assert list(stats) == ['num_clients', 'num_excluded_nonfinite', 'conflict_fraction',
                         'min_cosine', 'mean_cosine']
  assert stats['num_clients'].numpy() == num_clients
  np.testing.assert_allclose(stats['conflict_fraction'].numpy(), frac, atol=1e-7)
  np.testing.assert_allclose(stats['min_cosine'].numpy(), min_cos, atol=1e-6)
  np.testing.assert_allclose(stats['mean_cosine'].numpy(), mean_cos, atol=1e-6)


def test_hand_worked_and_degenerate_rows():
  # (1,0), (-1,1), (0,0), (nan,0): cos(u1,u2) = -1/sqrt2; zero/non-finite rows give 0.
  u = np.array([[1.0, 0.0], [-1.0, 1.0], [0.0, 0.0], [np.nan, 0.0]])
  c = -1 / np.sqrt(2)
  np.testing.assert_allclose(conflict.pairwise_cosine(u).numpy(),
                             [[1, c, 0, 0], [c, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
                             atol=1e-15)
  stats = conflict.conflict_stats(u)
  # Pairs among the three finite rows: (1,2) conflicts, (1,3) and (2,3) have cosine 0.
  assert stats['num_clients'].numpy() == 3 and stats['num_excluded_nonfinite'].numpy() == 1
  np.testing.assert_allclose(stats['conflict_fraction'].numpy(), 1 / 3, rtol=1e-6)
  np.testing.assert_allclose(stats['min_cosine'].numpy(), c, rtol=1e-6)
  np.testing.assert_allclose(stats['mean_cosine'].numpy(), c / 3, rtol=1e-6)
  stats = conflict.conflict_stats(u, include=np.array([True, False, True, True]))
  assert stats['conflict_fraction'].numpy() == 0.0 and stats['num_clients'].numpy() == 2
  # exactly orthogonal: no conflict
  assert conflict.conflict_stats(np.eye(3))['conflict_fraction'].numpy() == 0.0

"""Tests of `dirichlet_partition`, `client_dirichlet_partition` and `partition_like` against loop
references (FedGH Sec. II-B; the FedGA authors' per-client split)."""

import math

import numpy as np
import pytest

from tff_conflict import data
from tff_conflict.data import partition


def _labels(n=2000, num_classes=10, seed=0):
  return np.random.default_rng(seed).integers(0, num_classes, size=n)


def _reference_counts(labels, num_clients, alpha, seed):
  """Counts [class, client] of the first Dirichlet draw, by the paper's rule, with loops."""
  rng = np.random.default_rng(seed)
  classes = sorted(set(labels.tolist()))
  props = rng.dirichlet([alpha] * num_clients, size=len(classes))
  counts = np.zeros((len(classes), num_clients), dtype=np.int64)
  for ci, c in enumerate(classes):
    n_c = sum(1 for v in labels if v == c)
    cumulative = 0.0
    previous = 0
    for k in range(num_clients):
      cumulative += props[ci][k]
      bound = n_c if k == num_clients - 1 else int(math.floor(cumulative * n_c))
      counts[ci, k] = bound - previous
      previous = bound
  return counts


def _tv_mean(labels, parts, num_classes):
  pooled = np.bincount(labels, minlength=num_classes) / labels.size
  distances = []
  for p in parts:
    dist = np.bincount(labels[p], minlength=num_classes) / len(p)
    distances.append(0.5 * sum(abs(dist[c] - pooled[c]) for c in range(num_classes)))
  return float(np.mean(distances))


@pytest.mark.parametrize('num_clients,alpha,seed', [(5, 1.0, 0), (20, 0.5, 3), (7, 10.0, 11)])
def test_matches_reference_counts(num_clients, alpha, seed):
  labels = _labels()
  parts = data.dirichlet_partition(labels, num_clients, alpha, seed=seed, min_examples=0)
  expected = _reference_counts(labels, num_clients, alpha, seed)
  got = np.array([[np.count_nonzero(labels[p] == c) for p in parts] for c in range(10)])
  np.testing.assert_array_equal(got, expected)


def test_every_example_in_exactly_one_client():
  labels = _labels(1234, 7)
  parts = data.dirichlet_partition(labels, 13, 0.3, seed=1)
  everything = np.concatenate(parts)
  assert everything.size == labels.size
  np.testing.assert_array_equal(np.sort(everything), np.arange(labels.size))
  assert all(p.dtype == np.int64 for p in parts)


def test_same_seed_same_partition_other_seed_differs():
  labels = _labels()
  a = data.dirichlet_partition(labels, 10, 0.5, seed=4)
  b = data.dirichlet_partition(labels, 10, 0.5, seed=4)
  c = data.dirichlet_partition(labels, 10, 0.5, seed=5)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_label_skew_grows_as_alpha_falls():
  labels = _labels(5000)
  skews = [np.mean([_tv_mean(labels, data.dirichlet_partition(labels, 10, alpha, seed=s), 10)
                    for s in range(3)])
           for alpha in (1000.0, 10.0, 1.0, 0.1)]
  assert all(a < b for a, b in zip(skews, skews[1:])), skews
  assert skews[0] < 0.05  # alpha -> infinity: about IID
  assert skews[-1] > 0.6  # alpha = 0.1: mostly one or two classes per client


def test_min_examples_honoured():
  labels = _labels(500)
  parts = data.dirichlet_partition(labels, 20, 0.1, seed=0, min_examples=5)
  assert min(len(p) for p in parts) >= 5


def test_min_examples_impossible_is_a_clear_error():
  labels = _labels(100)
  with pytest.raises(ValueError, match='num_clients=30'):
    data.dirichlet_partition(labels, 30, 0.5, seed=0, min_examples=4)
  with pytest.raises(ValueError, match='min_examples=9 .* draws'):
    data.dirichlet_partition(labels, 10, 0.01, seed=0, min_examples=9)


@pytest.mark.parametrize('kwargs,match', [
    (dict(alpha=0.0), 'alpha'), (dict(alpha=-1.0), 'alpha'), (dict(alpha=float('inf')), 'alpha'),
    (dict(num_clients=0), 'num_clients'), (dict(num_clients=2.5), 'num_clients'),
    (dict(seed=-1), 'seed'), (dict(min_examples=-1), 'min_examples'),
    (dict(labels=[[0, 1]]), 'labels'), (dict(labels=[0.5, 1.0]), 'labels'),
    (dict(labels=[]), 'labels'), (dict(labels=[0, -2]), 'labels'),
])
def test_bad_input(kwargs, match):
  args = dict(labels=[0, 1, 2, 0, 1, 2], num_clients=2, alpha=1.0, seed=0)
  args.update(kwargs)
  labels = args.pop('labels')
  with pytest.raises(ValueError, match=match):
    data.dirichlet_partition(labels, args.pop('num_clients'), args.pop('alpha'), **args)


def test_partition_like_follows_reference_proportions():
  rng = np.random.default_rng(0)
  reference = rng.integers(0, 50, size=(6, 4)) * (rng.random((6, 4)) < 0.6)
  reference[:, 0] += 1  # every client holds something
  labels = rng.integers(0, 4, size=400)
  parts = partition.partition_like(labels, reference, seed=2, min_examples=0)
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(labels.size))
  for c in range(4):
    n_c = np.count_nonzero(labels == c)
    for k, p in enumerate(parts):
      quota = n_c * reference[k, c] / reference[:, c].sum()
      got = np.count_nonzero(labels[p] == c)
      assert abs(got - quota) < 1.0, (c, k, got, quota)  # largest-remainder rounding


def test_partition_like_gives_every_client_min_examples():
  reference = np.array([[100, 0], [0, 100], [1, 0], [0, 1]])
  labels = np.array([0] * 10 + [1] * 10)
  parts = partition.partition_like(labels, reference, seed=0, min_examples=1)
  assert [len(p) for p in parts][2:] == [1, 1]
  # The receiving client gets its own majority class.
  assert labels[parts[2]].tolist() == [0] and labels[parts[3]].tolist() == [1]
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(20))


def test_partition_like_bad_input():
  with pytest.raises(ValueError, match='reference_counts'):
    partition.partition_like([0, 1, 2], np.ones((2, 2)), seed=0)
  with pytest.raises(ValueError, match='reference_counts'):
    partition.partition_like([0, 1], np.array([[1, 1], [0, 0]]), seed=0)
  with pytest.raises(ValueError, match='num_clients=3'):
    partition.partition_like([0, 1], np.ones((3, 2)), seed=0, min_examples=1)


# ---- client_dirichlet_partition: each client's class mix ~ Dir_C(alpha), equal sizes (FedGA) ----

def _client_dirichlet_reference(labels, num_clients, alpha, seed):
  """Counts [client, class] from the same first draw, with loops: the largest common size m
  that over-uses no class after rounding each client's m r_kc by largest remainder."""
  rng = np.random.default_rng(seed)
  classes = sorted(set(labels.tolist()))
  mix = rng.dirichlet([alpha] * len(classes), size=num_clients)
  sizes = [sum(1 for v in labels if v == c) for c in classes]
  demand = [sum(mix[k][c] for k in range(num_clients)) for c in range(len(classes))]
  m = int(math.floor(min(sizes[c] / demand[c] for c in range(len(classes)) if demand[c] > 0)))
  while m >= 1:
    counts = []
    for k in range(num_clients):
      quota = [m * mix[k][c] / sum(mix[k]) for c in range(len(classes))]
      row = [int(math.floor(q)) for q in quota]
      by_remainder = sorted(range(len(classes)), key=lambda c: (-(quota[c] - row[c]), c))
      for c in by_remainder[:m - sum(row)]:
        row[c] += 1
      counts.append(row)
    if all(sum(counts[k][c] for k in range(num_clients)) <= sizes[c]
           for c in range(len(classes))):
      return np.array(counts)
    m -= 1
  raise AssertionError('no size')


@pytest.mark.parametrize('num_clients,alpha,seed', [(5, 1.0, 0), (20, 0.5, 3), (7, 10.0, 11),
                                                    (30, 0.1, 4)])
def test_client_dirichlet_matches_reference_counts_and_sizes_are_equal(num_clients, alpha, seed):
  labels = _labels()
  parts = data.client_dirichlet_partition(labels, num_clients, alpha, seed=seed)
  expected = _client_dirichlet_reference(labels, num_clients, alpha, seed)
  got = np.stack([np.bincount(labels[p], minlength=10) for p in parts])
  np.testing.assert_array_equal(got, expected)
  sizes = {len(p) for p in parts}
  assert len(sizes) == 1 and sizes.pop() >= 1
  everything = np.concatenate(parts)
  assert np.unique(everything).size == everything.size          # no example twice
  assert everything.min() >= 0 and everything.max() < labels.size
  assert all(p.dtype == np.int64 for p in parts)
  # The size is the largest the draw allows: one more would over-use some class.
  class_sizes = np.bincount(labels, minlength=10)
  assert (got.sum(axis=0) <= class_sizes).all()


def test_client_dirichlet_class_mix_follows_the_dirichlet():
  # Balanced labels, many clients: each client's class fraction has the Dir_C(alpha) marginal's
  # mean 1/C and variance (1/C)(1 - 1/C) / (C alpha + 1).
  labels = np.repeat(np.arange(10), 3000)
  for alpha in (0.2, 1.0, 5.0):
    parts = data.client_dirichlet_partition(labels, 400, alpha, seed=1)
    fractions = np.stack([np.bincount(labels[p], minlength=10) / len(p) for p in parts])
    np.testing.assert_allclose(fractions.mean(), 0.1, rtol=1e-12)
    np.testing.assert_allclose(fractions.mean(axis=0), 0.1, atol=0.03)
    expected_var = 0.1 * 0.9 / (10 * alpha + 1)
    np.testing.assert_allclose(fractions.var(axis=0).mean(), expected_var, rtol=0.2)
  # ... and unlike dirichlet_partition, client sizes do not vary with the skew.
  skewed = data.dirichlet_partition(labels, 40, 0.2, seed=1)
  assert np.std([len(p) for p in skewed]) > 100


def test_client_dirichlet_is_deterministic_by_seed():
  labels = _labels()
  a, b, c = (data.client_dirichlet_partition(labels, 9, 0.5, seed=s) for s in (2, 2, 3))
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert [sorted(x.tolist()) for x in a] != [sorted(x.tolist()) for x in c]


@pytest.mark.parametrize('kwargs,match', [
    (dict(alpha=0.0), 'alpha'), (dict(alpha=float('nan')), 'alpha'),
    (dict(num_clients=0), 'num_clients'), (dict(seed=-1), 'seed'),
    (dict(labels=[0.5, 1.0]), 'labels'),
    (dict(labels=[0, 1, 2], num_clients=50), 'cannot give each of num_clients=50 clients'),
])
def test_client_dirichlet_bad_input(kwargs, match):
  args = dict(labels=[0, 1, 2, 0, 1, 2], num_clients=2, alpha=1.0, seed=0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    data.client_dirichlet_partition(args.pop('labels'), args.pop('num_clients'),
                                    args.pop('alpha'), **args)

"""NIID-Bench's homogeneous, `#C=k` and quantity-skew partitions against loop references of their
definitions (Li et al., "Federated Learning on Non-IID Data Silos", ICDE 2022, Sec. III-A)."""

import numpy as np
import pytest

from tff_conflict import data
from tff_conflict.data import partition


def _labels(n=600, num_classes=10, seed=0):
  return np.random.default_rng(seed).integers(0, num_classes, size=n)


def _sorted_parts(parts):
  return [sorted(int(i) for i in p) for p in parts]


def _covers_once(parts, n):
  everything = np.concatenate(parts)
  return everything.size == n and np.array_equal(np.sort(everything), np.arange(n))


@pytest.mark.parametrize('n,k,seed', [(100, 7, 0), (12, 12, 3), (1438, 20, 5)])
def test_iid_is_equal_slices_of_a_permutation(n, k, seed):
  parts = data.iid_partition(n, k, seed=seed)
  permutation = list(np.random.default_rng(seed).permutation(n))
  expected, start = [], 0
  for client in range(k):
    size = n // k + (1 if client < n % k else 0)
    expected.append(sorted(permutation[start:start + size]))
    start += size
  assert _sorted_parts(parts) == expected
  assert all(p.dtype == np.int64 for p in parts)


def _label_quantity_reference(labels, num_clients, k, num_classes, seed):
  """NIID-Bench's `noniid-#label<k>` loop, with the same random draws in the same order."""
  rng = np.random.default_rng(seed)
  contain, times = [], [0] * num_classes
  for i in range(num_clients):
    current = [i % num_classes]
    times[i % num_classes] += 1
    while len(current) < k:
      ind = int(rng.integers(num_classes))
      if ind not in current:
        current.append(ind)
        times[ind] += 1
    contain.append(current)
  parts = [[] for _ in range(num_clients)]
  for c in range(num_classes):
    if times[c] == 0:
      continue
    members = list(rng.permutation(np.flatnonzero(labels == c)))
    size, extra = divmod(len(members), times[c])
    start, chunk = 0, 0
    for j in range(num_clients):
      if c in contain[j]:
        length = size + (1 if chunk < extra else 0)
        parts[j].extend(members[start:start + length])
        start += length
        chunk += 1
  return [sorted(int(i) for i in p) for p in parts]


@pytest.mark.parametrize('num_clients,k,seed', [(20, 2, 0), (10, 1, 1), (13, 3, 7), (4, 2, 2)])
def test_label_quantity_matches_niid_bench_loop(num_clients, k, seed):
  labels = _labels()
  parts = data.label_quantity_partition(labels, num_clients, k, seed=seed, num_classes=10)
  assert _sorted_parts(parts) == _label_quantity_reference(labels, num_clients, k, 10, seed)
  for p in parts:
    assert len(set(labels[p].tolist())) == k  # exactly k classes each
  held = sorted({int(c) for p in parts for c in labels[p]})
  covered = np.flatnonzero(np.isin(labels, held))
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), covered)
  for c in held:  # each class split as equally as possible among its holders
    shares = [np.count_nonzero(labels[p] == c) for p in parts if np.any(labels[p] == c)]
    assert max(shares) - min(shares) <= 1


def test_label_quantity_first_class_is_the_client_index_mod_c():
  labels = _labels()
  parts = data.label_quantity_partition(labels, 25, 2, seed=3)
  for k, p in enumerate(parts):
    assert k % 10 in set(labels[p].tolist())


def test_label_quantity_bad_input():
  labels = _labels(50)
  with pytest.raises(ValueError, match='classes_per_client must be at most num_classes=10'):
    data.label_quantity_partition(labels, 5, 11, seed=0)
  with pytest.raises(ValueError, match='classes_per_client'):
    data.label_quantity_partition(labels, 5, 0, seed=0)
  with pytest.raises(ValueError, match='class .* examples for .* clients'):
    data.label_quantity_partition(np.array([0, 1, 1, 1]), 4, 2, seed=0, num_classes=2)
  with pytest.raises(ValueError, match='num_classes=3 is not above the largest label'):
    data.label_quantity_partition(labels, 5, 2, seed=0, num_classes=3)


def _quantity_reference(n, num_clients, beta, seed, min_examples):
  rng = np.random.default_rng(seed)
  order = list(rng.permutation(n))
  while True:
    q = rng.dirichlet([beta] * num_clients)
    q = q / q.sum()
    bounds, cumulative = [], 0.0
    for j in range(num_clients - 1):
      cumulative += q[j]
      bounds.append(int(np.floor(cumulative * n)))
    sizes = np.diff([0] + bounds + [n])
    if min(sizes) >= min_examples:
      break
  parts, start = [], 0
  for size in sizes:
    parts.append(sorted(int(i) for i in order[start:start + size]))
    start += size
  return parts


@pytest.mark.parametrize('n,k,beta,seed,min_examples', [
    (1438, 20, 0.5, 0, 10), (300, 6, 0.1, 4, 1), (500, 10, 5.0, 2, 10)])
def test_quantity_skew_matches_niid_bench_loop(n, k, beta, seed, min_examples):
  parts = data.quantity_skew_partition(n, k, beta, seed=seed, min_examples=min_examples)
  assert _sorted_parts(parts) == _quantity_reference(n, k, beta, seed, min_examples)
  assert _covers_once(parts, n)
  assert min(len(p) for p in parts) >= min_examples


def test_quantity_skew_sizes_grow_more_unequal_as_beta_falls():
  def spread(beta):
    return np.mean([np.std([len(p) for p in data.quantity_skew_partition(
        2000, 10, beta, seed=s, min_examples=0)]) for s in range(5)])
  spreads = [spread(b) for b in (100.0, 1.0, 0.1)]
  assert spreads[0] < spreads[1] < spreads[2], spreads


def test_quantity_skew_bad_input_and_impossible_minimum(monkeypatch):
  monkeypatch.setattr(partition, 'QUANTITY_SKEW_MAX_DRAWS', 50)
  with pytest.raises(ValueError, match='beta'):
    data.quantity_skew_partition(100, 5, 0.0, seed=0)
  with pytest.raises(ValueError, match='num_clients=20 clients with min_examples=10'):
    data.quantity_skew_partition(100, 20, 0.5, seed=0)
  with pytest.raises(ValueError, match='in 50 draws'):
    data.quantity_skew_partition(100, 9, 0.01, seed=0, min_examples=11)


def test_iid_bad_input():
  with pytest.raises(ValueError, match='num_clients=5 is larger than the 4 examples'):
    data.iid_partition(4, 5, seed=0)
  with pytest.raises(ValueError, match='seed'):
    data.iid_partition(4, 2, seed=-1)


def test_every_split_is_deterministic():
  labels = _labels()
  for make in (lambda s: partition.iid_partition(600, 7, seed=s),
               lambda s: partition.label_quantity_partition(labels, 7, 2, seed=s),
               lambda s: partition.quantity_skew_partition(600, 7, 0.5, seed=s)):
    a, b, c = make(1), make(1), make(2)
    assert _sorted_parts(a) == _sorted_parts(b)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert _sorted_parts(a) != _sorted_parts(c)

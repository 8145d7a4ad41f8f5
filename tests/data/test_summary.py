"""Tests of `describe` on hand-worked label counts."""

import numpy as np
import pytest

from tff_conflict import data
from tff_conflict.data import summary


def _client_data(counts):
  """Client k holds counts[k][c] examples of class c."""
  ys, parts, start = [], [], 0
  for row in counts:
    labels = [c for c, n in enumerate(row) for _ in range(n)]
    ys.extend(labels)
    parts.append(np.arange(start, start + len(labels)))
    start += len(labels)
  y = np.array(ys)
  return data.partition_to_client_data(np.zeros((len(y), 2)), y, parts)


def test_hand_worked_summary():
  # Pooled distribution (3/6, 1/6, 2/6). Client 0 = (1, 0, 0): TV 0.5(1/2 + 1/6 + 2/6) = 1/2.
  # Client 1 = (2/5, 1/5, 2/5): TV 0.5(1/10 + 1/30 + 1/15) = 1/10.
  cd = _client_data([[1, 0, 0], [2, 1, 2]])
  s = data.describe(cd)
  assert isinstance(s, dict)
  assert s['num_clients'] == 2 and s['num_examples'] == 6 and s['num_empty_clients'] == 0
  assert s['examples_per_client'] == dict(min=1, median=3.0, max=5, mean=3.0)
  assert s['num_classes'] == 3
  assert s['classes_per_client'] == dict(min=1, median=2.0, max=3, mean=2.0)
  assert s['dominant_class_fraction']['max'] == 1.0
  assert s['dominant_class_fraction']['min'] == pytest.approx(0.4)
  assert s['label_tv_distance']['max'] == pytest.approx(0.5)
  assert s['label_tv_distance']['min'] == pytest.approx(0.1)
  assert s['label_tv_distance']['mean'] == pytest.approx(0.3)
  text = str(s)
  assert 'num_clients' in text and 'label_tv_distance' in text and len(text.splitlines()) == 8


def test_iid_clients_have_zero_distance_and_empty_clients_are_counted():
  s = data.describe(_client_data([[2, 2], [1, 1], [0, 0]]))
  assert s['label_tv_distance']['max'] == pytest.approx(0.0)
  assert s['num_empty_clients'] == 1
  assert s['examples_per_client']['min'] == 0


def test_generic_path_reads_labels_like_the_stored_counts():
  cd = _client_data([[3, 0, 1], [0, 2, 0], [1, 1, 1]])
  wrapped = cd.preprocess(lambda ds: ds)  # a ClientData without `label_counts`
  assert not hasattr(wrapped, 'label_counts')
  assert dict(data.describe(wrapped)) == dict(data.describe(cd))
  np.testing.assert_array_equal(summary.label_counts_of(wrapped), cd.label_counts)
  assert data.describe(wrapped, max_clients=1)['num_examples'] == 4


def test_bad_max_clients():
  with pytest.raises(ValueError, match='max_clients'):
    data.describe(_client_data([[1]]), max_clients=0)

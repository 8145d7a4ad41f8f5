"""tff_conflict.simulation.metrics: metrics.csv flattening, stable columns, resume truncation, exact
round trip."""

import asyncio
import collections
import math
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_conflict import _files
from tff_conflict.simulation import metrics as metrics_lib


def test_flatten_metrics_joins_nested_names_and_summarizes_vectors():
  metrics = collections.OrderedDict(
      client_work=collections.OrderedDict(train=collections.OrderedDict(
          loss=np.float32(0.5), num_examples=np.int64(7))),
      aggregator=collections.OrderedDict(conflict_fraction_before=np.float32(0.25),
                                         weights=np.array([0.1, 0.4], np.float32),
                                         single=np.array([3.0]), listed=[1, 2, 6]),
      distributor=(), finalizer=collections.OrderedDict(update_non_finite=0))
  flat = metrics_lib.flatten_metrics(metrics)
  summary = lambda name: [f'aggregator/{name}/{s}' for s in ('min', 'mean', 'max', 'count')]
  assert list(flat) == ['client_work/train/loss', 'client_work/train/num_examples',
                        'aggregator/conflict_fraction_before', *summary('weights'),
                        *summary('single'), *summary('listed'), 'finalizer/update_non_finite']
  assert flat['client_work/train/loss'] == 0.5
  assert [flat[c] for c in summary('weights')] == pytest.approx([0.1, 0.25, 0.4, 2])
  assert [flat[c] for c in summary('single')] == [3.0, 3.0, 3.0, 1]
  assert [flat[c] for c in summary('listed')] == [1.0, 3.0, 6.0, 3]


def test_an_empty_vector_has_count_0_and_nan_statistics():
  flat = metrics_lib.flatten_metrics({'w': np.zeros(0, np.float32)})
  assert flat['w/count'] == 0 and all(math.isnan(flat[f'w/{s}']) for s in ('min', 'mean', 'max'))


def test_release_manager_keeps_columns_when_the_cohort_changes_size(tmp_path):
  manager = metrics_lib.MetricsReleaseManager(str(tmp_path), always=('test_accuracy',))
  assert isinstance(manager, tff.program.ReleaseManager)
  rng = np.random.default_rng(0)
  vectors = {1: rng.normal(size=10), 2: rng.normal(size=9), 3: rng.normal(size=10)}
  for r, vector in vectors.items():
    asyncio.run(manager.release({'train_loss': 1.0 / r, 'aggregator': {'w': vector}}, r))
  rows = metrics_lib.read_csv(str(tmp_path / 'metrics.csv'))
  assert metrics_lib.read_metrics(str(tmp_path / 'metrics.csv'))[1] == [
      'round_num', 'train_loss', 'test_accuracy', 'aggregator/w/min', 'aggregator/w/mean',
      'aggregator/w/max', 'aggregator/w/count']
  for row, vector in zip(rows, vectors.values()):
    assert row['aggregator/w/count'] == len(vector) and row['test_accuracy'] is None
    assert (row['aggregator/w/min'], row['aggregator/w/max']) == (min(vector), max(vector))
    assert row['aggregator/w/mean'] == pytest.approx(sum(vector) / len(vector), rel=1e-15)
  per_client = metrics_lib.read_csv(str(tmp_path / 'per_client.csv'))
  assert [(r['round_num'], r['name'], r['client_index'], r['value']) for r in per_client] == [
      (round_num, 'aggregator/w', i, v) for round_num, vector in vectors.items()
      for i, v in enumerate(vector)]
  # A resumed run keeps rounds 1-2 of both files.
  kept, columns, _ = metrics_lib.read_metrics(str(tmp_path / 'metrics.csv'))
  metrics_lib.MetricsReleaseManager(str(tmp_path), rows=kept[:2], columns=columns)
  assert [r['round_num'] for r in metrics_lib.read_csv(str(tmp_path / 'metrics.csv'))] == [1, 2]
  assert (metrics_lib.read_csv(str(tmp_path / 'per_client.csv'))
          == [r for r in per_client if r['round_num'] <= 2])


def test_flatten_metrics_rejects_strings():
  with pytest.raises(ValueError, match='a/b'):
    metrics_lib.flatten_metrics({'a': {'b': 'text'}})


def _writer(tmp_path):
  manager = metrics_lib.MetricsReleaseManager(str(tmp_path))
  return manager, lambda r, row: asyncio.run(manager.release(row, r))


def test_rows_order_headline_columns_and_round_trip_floats_exactly(tmp_path):
  path = str(tmp_path / 'metrics.csv')
  _, append = _writer(tmp_path)
  value = 0.1 + 0.2  # not representable in short decimal form
  append(1, {'aggregator/x': value, 'round_time_s': 1.5, 'train_loss': 2.0,
             'test_accuracy': None})
  append(2, {'aggregator/x': float('nan'), 'round_time_s': 1.0, 'train_loss': 1.0,
             'test_accuracy': 0.5})
  assert metrics_lib.read_metrics(path)[1] == ['round_num', 'train_loss', 'test_accuracy',
                                            'round_time_s', 'aggregator/x']
  rows = metrics_lib.read_csv(path)
  assert rows[0]['aggregator/x'] == value
  assert rows[0]['test_accuracy'] is None
  assert math.isnan(rows[1]['aggregator/x'])
  assert rows[1]['round_num'] == 2 and isinstance(rows[1]['round_num'], int)


def test_a_round_is_appended_in_place_and_the_file_equals_a_full_rewrite(tmp_path):
  path, full = str(tmp_path / 'metrics.csv'), str(tmp_path / 'full.csv')
  writer, append = _writer(tmp_path)
  append(1, {'train_loss': 1.0, 'a': 0.5, 'v': np.ones(2)})
  inodes = os.stat(path).st_ino, os.stat(tmp_path / 'per_client.csv').st_ino
  for r in range(2, 6):
    before = os.path.getsize(path)
    append(r, {'train_loss': 1.0 / r, 'a': None if r == 3 else 0.1 * r, 'v': np.ones(2)})
    # The same files, longer: a round's cost does not grow with the number of rounds.
    assert (os.stat(path).st_ino, os.stat(tmp_path / 'per_client.csv').st_ino) == inodes
    assert os.path.getsize(path) > before
  _files.write_csv_atomically(full, metrics_lib.read_metrics(path)[1], writer.rows)
  with open(path) as appended, open(full) as rewritten:
    assert appended.read() == rewritten.read()


def test_a_changed_column_set_and_non_increasing_rounds_are_refused(tmp_path):
  _, append = _writer(tmp_path)
  append(1, {'a': 1.0})
  with pytest.raises(ValueError, match=r"missing \['a'\], new \['b'\]"):
    append(2, {'b': 1.0})
  with pytest.raises(ValueError, match='must increase'):
    append(1, {'a': 1.0})


def test_a_resumed_run_keeps_the_rows_given_and_a_new_one_none(tmp_path):
  path = str(tmp_path / 'metrics.csv')
  _, append = _writer(tmp_path)
  for r in range(1, 5):
    append(r, {'a': float(r)})
  resumed = metrics_lib.MetricsReleaseManager(str(tmp_path),
                                              rows=metrics_lib.read_metrics(path)[0][:2])
  assert [r['round_num'] for r in metrics_lib.read_csv(path)] == [1, 2]
  asyncio.run(resumed.release({'a': 30.0}, 3))
  assert [(r['round_num'], r['a']) for r in metrics_lib.read_csv(path)] == [
      (1, 1.0), (2, 2.0), (3, 30.0)]
  fresh = metrics_lib.MetricsReleaseManager(str(tmp_path))
  assert fresh.rows == [] and metrics_lib.read_csv(path) == []
  assert os.listdir(tmp_path) == ['metrics.csv']


def _written(tmp_path, rounds=4):
  _, append = _writer(tmp_path)
  for r in range(1, rounds + 1):
    append(r, {'train_loss': 1.0 / r, 'test_accuracy': None if r % 2 else 0.5})
  return str(tmp_path / 'metrics.csv')


def test_read_metrics_of_an_intact_file(tmp_path):
  rows, columns, problem = metrics_lib.read_metrics(_written(tmp_path))
  assert problem is None
  assert columns == ['round_num', 'train_loss', 'test_accuracy']
  assert [r['round_num'] for r in rows] == [1, 2, 3, 4]
  assert rows[1] == {'round_num': 2, 'train_loss': 0.5, 'test_accuracy': 0.5}


@pytest.mark.parametrize('damage, intact, problem', [
    (lambda text: text[:-7], 3, 'ends in a line cut short after round 3'),
    (lambda text: text.replace('\r\n3,', '\r\n3,9,'), 2, 'has 4 cells in row 3, where the header'),
    (lambda text: text.replace('\r\n3,', '\r\n5,'), 2, "holds round '5' in row 3, expected 3"),
    (lambda text: text.replace('\r\n2,0.5,', '\r\n2,abc,'), 1,
     "holds a cell that is not a number in row 2 (column 'train_loss')"),
    (lambda text: text.replace('round_num', 'round', 1), 0, 'has no valid header'),
    (lambda text: text[:10], 0, 'ends in a line cut short'),
    (lambda text: '', 0, 'is empty'),
])
def test_read_metrics_keeps_the_intact_rows_of_a_damaged_file(tmp_path, damage, intact, problem):
  path = _written(tmp_path)
  with open(path, newline='') as f:
    text = f.read()
  with open(path, 'w', newline='') as f:
    f.write(damage(text))
  rows, _, found = metrics_lib.read_metrics(path)
  assert [r['round_num'] for r in rows] == list(range(1, intact + 1))
  assert found is not None and found.startswith(problem), found


def test_read_metrics_of_a_binary_file(tmp_path):
  path = tmp_path / 'metrics.csv'
  path.write_bytes(b'\xff\xfe\x00garbage')
  assert metrics_lib.read_metrics(str(path)) == ([], [], 'is not a CSV text file')


def test_read_csv_reads_missing_cells_as_none(tmp_path):
  path = _written(tmp_path)
  with open(path, newline='') as f:
    text = f.read()
  with open(path, 'w', newline='') as f:
    f.write(text[:-9])  # the last row loses its last cells
  rows = metrics_lib.read_csv(path)
  assert rows[-1]['round_num'] == 4 and rows[-1]['test_accuracy'] is None

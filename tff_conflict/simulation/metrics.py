"""Round metrics on disk: `metrics.csv` and `per_client.csv` keyed by `round_num`, written by a
`tff.program.ReleaseManager` and read back up to the first damaged row (docs/design.md, "Results
on disk")."""

import collections
import csv
import io
import math
import os
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow_federated as tff

from tff_conflict import _files

METRICS_FILE = 'metrics.csv'
PER_CLIENT_FILE = 'per_client.csv'
ROUND_COLUMN = 'round_num'
PER_CLIENT_COLUMNS = (ROUND_COLUMN, 'name', 'client_index', 'value')
HEADLINE_COLUMNS = ('train_loss', 'train_accuracy', 'test_accuracy', 'test_loss', 'test_macro_f1',
                    'round_time_s', 'eval_time_s')
# The column counting the examples a round's clients trained on: 0 when every client was left out.
TRAINED_EXAMPLES = 'train/num_examples'


def trained_nothing(flat: Mapping[str, Any]) -> bool:
  """Whether flattened round metrics count 0 trained examples."""
  count = next((v for k, v in flat.items() if k.endswith(TRAINED_EXAMPLES)), None)
  return count is not None and float(count) == 0


def _leaves(value: Any, name: str = '') -> Iterator[tuple[str, Any]]:
  """(`/`-joined name, value) of nested measurements (mappings, namedtuples): None, a float, or a
  per-client float64 vector (rank >= 1, a non-empty list); `ValueError` naming a non-number."""
  if isinstance(value, Mapping) or hasattr(value, '_asdict'):
    for key, item in (value if isinstance(value, Mapping) else value._asdict()).items():
      yield from _leaves(item, f'{name}/{key}' if name else str(key))
  elif value is None:
    yield name, None
  elif not (isinstance(value, (list, tuple)) and not value):  # TFF's `distributor=()`
    array = np.asarray(value.numpy() if callable(getattr(value, 'numpy', None)) else value)
    if array.dtype.kind not in 'biuf':
      raise ValueError(f'metric {name!r} is not numeric: {value!r}')
    if isinstance(value, (list, tuple)) or array.ndim > 0:
      yield name, array.astype(np.float64).reshape(-1)
    else:
      yield name, float(array)


def flatten_metrics(metrics: Any, prefix: str = '') -> 'collections.OrderedDict[str, Any]':
  """metrics.csv cells: each per-client vector as `<name>/min`, `/mean`, `/max` and `/count`."""
  out = collections.OrderedDict()
  for name, value in _leaves(metrics, prefix):
    if not isinstance(value, np.ndarray):
      out[name] = value
      continue
    for statistic, function in (('min', np.min), ('mean', np.mean), ('max', np.max)):
      out[f'{name}/{statistic}'] = float(function(value)) if value.size else math.nan
    out[f'{name}/count'] = int(value.size)
  return out


def _parse(value: Optional[str]):
  if value is None or value == '':
    return None
  try:
    number = float(value)
  except ValueError:
    return value
  return int(number) if number.is_integer() and '.' not in value and 'e' not in value else number


def read_csv(path: str) -> list[dict[str, Any]]:
  """Rows of a CSV written here, numbers parsed, empty (or missing) cells None."""
  with open(path, newline='') as f:
    return [{k: _parse(v) for k, v in row.items() if k is not None}
            for row in csv.DictReader(f)]


def read_metrics(path: str) -> tuple[list[dict[str, Any]], list[str], Optional[str]]:
  """(intact rows, header ([] when damaged), why reading stopped early or None) of a metrics.csv;
  `OSError`. Rows end before the first damaged one: a last line cut short, another number of
  cells than the header, a `round_num` other than its position, a cell not a number."""
  with open(path, 'rb') as f:
    data = f.read()
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError:
    return [], [], 'is not a CSV text file'
  # Every line written here ends; a truncated file's last line does not.
  cut = 'ends in a line cut short' if text and not text.endswith('\n') else None
  lines = list(csv.reader(io.StringIO(text[:text.rfind('\n') + 1])))
  if not lines:
    return [], [], cut or 'is empty'
  columns, rows = lines[0], []
  if not columns or columns[0] != ROUND_COLUMN or len(set(columns)) != len(columns):
    return [], [], (f'has no valid header (its first line must start with {ROUND_COLUMN!r} and '
                    'name each column once)')
  for r, cells in enumerate(lines[1:], start=1):
    row = {c: _parse(cell) for c, cell in zip(columns, cells)}
    bad = next((c for c, value in row.items() if isinstance(value, str)), None)
    problem = (
        f'has {len(cells)} cells in row {r}, where the header has {len(columns)}'
        if len(cells) != len(columns) else
        f'holds round {cells[0]!r} in row {r}, expected {r}' if cells[0] != str(r) else
        None if bad is None else f'holds a cell that is not a number in row {r} (column {bad!r})')
    if problem:
      return rows, columns, problem
    rows.append(row)
  return rows, columns, cut and f'{cut} after round {len(rows)}'


def _per_client_rows(path: str, through_round: int) -> list[dict[str, Any]]:
  """The rows of rounds 1..through_round of a per_client.csv, up to its first damaged row."""
  try:
    rows = read_csv(path) if through_round > 0 and os.path.exists(path) else []
  except (OSError, ValueError, csv.Error):
    rows = []
  intact = [set(row) == set(PER_CLIENT_COLUMNS) and isinstance(row[ROUND_COLUMN], int)
            and isinstance(row['client_index'], int) and isinstance(row['value'], (int, float))
            for row in rows] + [False]
  return [row for row in rows[:intact.index(False)] if row[ROUND_COLUMN] <= through_round]


class MetricsReleaseManager(tff.program.ReleaseManager):
  """Releases round `key`'s measurements as a metrics.csv row (`round_num`, `HEADLINE_COLUMNS`,
  then `flatten_metrics(value)`) and per_client.csv rows, appended (docs/design.md, "Results on
  disk"). `rows` (header `columns`) are a resumed run's rounds 1..n to keep; `always`: columns of
  every row; `sync`: each round's lines are synced to disk."""

  def __init__(self, directory: str, *, rows: Optional[Sequence[Mapping[str, Any]]] = None,
               columns: Optional[Sequence[str]] = None, always: Sequence[str] = (),
               sync: bool = True):
    self.metrics_path = os.path.join(directory, METRICS_FILE)
    self.per_client_path = os.path.join(directory, PER_CLIENT_FILE)
    self._always, self._sync = tuple(always), sync
    self._rows = [dict(r) for r in rows or []]
    self._columns = None
    if self._rows:
      self._columns = list(columns) if columns is not None else list(self._rows[0])
    _files.write_csv_atomically(self.metrics_path, self._columns or [ROUND_COLUMN], self._rows)
    self._per_client = _per_client_rows(self.per_client_path, len(self._rows))
    if self._per_client or os.path.exists(self.per_client_path):
      _files.write_csv_atomically(self.per_client_path, PER_CLIENT_COLUMNS, self._per_client)

  @property
  def rows(self) -> list[dict[str, Any]]:
    return list(self._rows)

  def _add(self, path, columns, rows, new, rewrite) -> None:
    rows.extend(new)
    if rewrite or not os.path.exists(path):
      _files.write_csv_atomically(path, columns, rows)
    else:  # the new lines only: a round's cost does not grow with the round number
      _files.append_csv_rows(path, columns, new, sync=self._sync)

  async def release(self, value: Any, key: int) -> None:
    """`ValueError` for a round not after the last one or other columns than the file's."""
    round_num = int(key)
    row = collections.OrderedDict((name, None) for name in self._always)
    row.update(flatten_metrics(value))
    if self._rows and round_num <= self._rows[-1][ROUND_COLUMN]:
      raise ValueError(f'round_num must increase: got {round_num} after '
                       f'{self._rows[-1][ROUND_COLUMN]}')
    names = [c for c in row if c != ROUND_COLUMN]
    new_header = self._columns is None
    if new_header:
      headline = [c for c in HEADLINE_COLUMNS if c in row]
      self._columns = [ROUND_COLUMN] + headline + [c for c in names if c not in headline]
    elif set(names) | {ROUND_COLUMN} != set(self._columns):
      raise ValueError(f'metrics of round {round_num} change the column set of '
                       f'{self.metrics_path}: missing '
                       f'{sorted(set(self._columns) - set(names) - {ROUND_COLUMN})}, new '
                       f'{sorted(set(names) - set(self._columns))}')
    self._add(self.metrics_path, self._columns, self._rows,
              [dict(row, **{ROUND_COLUMN: round_num})], new_header)
    new = [{ROUND_COLUMN: round_num, 'name': name, 'client_index': i, 'value': float(v)}
           for name, vector in _leaves(value) if isinstance(vector, np.ndarray)
           for i, v in enumerate(vector)]
    if new:
      self._add(self.per_client_path, PER_CLIENT_COLUMNS, self._per_client, new,
                not self._per_client)

"""Results on disk: `metrics.csv` and `per_client.csv` keyed by `round_num`, and `hparams.csv`.
Layout and guarantees: docs/design.md, "Results on disk".
"""

import collections
import csv
import dataclasses
import io
import math
import os
import platform
import subprocess
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
import tensorflow_federated as tff

from experiments import files

METRICS_FILE = 'metrics.csv'
PER_CLIENT_FILE = 'per_client.csv'
ROUND_COLUMN = 'round_num'
PER_CLIENT_COLUMNS = (ROUND_COLUMN, 'name', 'client_index', 'value')
VECTOR_SUMMARIES = ('min', 'mean', 'max', 'count')
HEADLINE_COLUMNS = ('train_loss', 'train_accuracy', 'test_accuracy', 'test_loss', 'test_macro_f1',
                    'round_time_s', 'eval_time_s')
TIMING_COLUMNS = ('round_time_s', 'eval_time_s')


def split_metrics(metrics: Any, prefix: str = '') -> tuple[
    'collections.OrderedDict[str, Optional[float]]', 'collections.OrderedDict[str, np.ndarray]']:
  """Nested measurements as (scalars, per-client vectors), both by `/`-joined name.

  Mappings (and namedtuple-like objects with `_asdict`) nest by key, in their own order; an array
  of any rank (flattened, even of length 0 or 1) or a non-empty list or tuple of numbers is a
  per-client vector; numbers (Python or numpy) become floats and None stays None. Empty mappings,
  lists and tuples produce nothing.

  Raises:
    ValueError: a value that is not a number (naming it).
  """
  scalars: 'collections.OrderedDict[str, Optional[float]]' = collections.OrderedDict()
  vectors: 'collections.OrderedDict[str, np.ndarray]' = collections.OrderedDict()

  def visit(value, name):
    if isinstance(value, Mapping):
      for key, item in value.items():
        visit(item, f'{name}/{key}' if name else str(key))
    elif hasattr(value, '_asdict'):
      visit(value._asdict(), name)
    elif value is None:
      scalars[name] = None
    elif isinstance(value, (list, tuple)) and not value:
      pass  # an empty structure (TFF's `distributor=()`), not a vector
    else:
      if hasattr(value, 'numpy') and callable(value.numpy):
        value = value.numpy()
      array = np.asarray(value)
      if array.dtype.kind not in 'biuf':
        raise ValueError(f'metric {name!r} is not numeric: {value!r}')
      if isinstance(value, (list, tuple)) or array.ndim > 0:
        vectors[name] = array.astype(np.float64).reshape(-1)
      else:
        scalars[name] = float(array)

  visit(metrics, prefix)
  return scalars, vectors


def vector_summary(name: str, vector: np.ndarray) -> 'collections.OrderedDict[str, float]':
  """`<name>/min`, `/mean`, `/max` (NaN for an empty vector) and `/count` of a vector."""
  empty = vector.size == 0
  return collections.OrderedDict([
      (f'{name}/min', math.nan if empty else float(np.min(vector))),
      (f'{name}/mean', math.nan if empty else float(np.mean(vector))),
      (f'{name}/max', math.nan if empty else float(np.max(vector))),
      (f'{name}/count', int(vector.size))])


def flatten_metrics(metrics: Any, prefix: str = '') -> 'collections.OrderedDict[str, Any]':
  """The metrics.csv cells of nested measurements: the scalars of `split_metrics`, and each
  per-client vector as its `vector_summary`, in the measurements' order."""
  out = collections.OrderedDict()

  def visit(value, name):
    if isinstance(value, Mapping) or hasattr(value, '_asdict'):
      items = value.items() if isinstance(value, Mapping) else value._asdict().items()
      for key, item in items:
        visit(item, f'{name}/{key}' if name else str(key))
      return
    scalars, vectors = split_metrics(value, name)
    out.update(scalars)
    for vector_name, vector in vectors.items():
      out.update(vector_summary(vector_name, vector))

  visit(metrics, prefix)
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
  """Rows of a CSV written here, with numbers parsed and empty (or missing) cells as None."""
  with open(path, newline='') as f:
    return [{k: _parse(v) for k, v in row.items() if k is not None}
            for row in csv.DictReader(f)]


@dataclasses.dataclass
class MetricsFile:
  """What `read_metrics` found in a metrics.csv.

  Attributes:
    columns: the header ([] when it is damaged).
    rows: the intact rows, which hold rounds 1, 2, ..., len(rows) in order.
    problem: why reading stopped before the end of the file (e.g. 'has a row cut short after
      round 3'), or None when every row is intact.
  """
  columns: list[str]
  rows: list[dict[str, Any]]
  problem: Optional[str] = None


def _is_number(cell: str) -> bool:
  try:
    float(cell)
  except ValueError:
    return False
  return True


def read_metrics(path: str) -> MetricsFile:
  """Reads a `metrics.csv` written by `MetricsWriter`, keeping its intact rows.

  Rows are intact from the first one up to the first that is damaged: a last line cut short
  (no line end: the file was truncated), a row with another number of cells than the header, a
  `round_num` other than the row's position (1, 2, ...), or a cell that is neither empty nor a
  number. That row and everything after it are left out, and `problem` says what was found.

  Raises:
    OSError: the file cannot be read (missing, no permission).
  """
  with open(path, 'rb') as f:
    data = f.read()
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError:
    return MetricsFile([], [], 'is not a CSV text file')
  if not text:
    return MetricsFile([], [], 'is empty')
  problem = None
  if not text.endswith('\n'):  # MetricsWriter ends every line; a truncated file does not
    text = text[:text.rfind('\n') + 1]
    problem = 'ends in a line cut short'
  lines = list(csv.reader(io.StringIO(text)))
  if not lines:
    return MetricsFile([], [], problem or 'is empty')
  columns = lines[0]
  if not columns or columns[0] != ROUND_COLUMN or len(set(columns)) != len(columns):
    return MetricsFile([], [], f'has no valid header (its first line must start with '
                       f'{ROUND_COLUMN!r} and name each column once)')
  rows: list[dict[str, Any]] = []
  for expected_round, cells in enumerate(lines[1:], start=1):
    where = f'row {expected_round}'
    if len(cells) != len(columns):
      return MetricsFile(columns, rows, f'has {len(cells)} cells in {where}, where the header '
                         f'has {len(columns)}')
    if cells[0] != str(expected_round):
      return MetricsFile(columns, rows, f'holds round {cells[0]!r} in {where}, expected '
                         f'{expected_round}')
    bad = next((c for c, cell in zip(columns, cells) if cell and not _is_number(cell)), None)
    if bad is not None:
      return MetricsFile(columns, rows, f'holds a cell that is not a number in {where} '
                         f'(column {bad!r})')
    rows.append({c: _parse(cell) for c, cell in zip(columns, cells)})
  if problem:
    problem = f'{problem} after round {len(rows)}'
  return MetricsFile(columns, rows, problem)


class MetricsWriter:
  """Writes `metrics.csv` one round at a time.

  One row per round: `round_num`, the `HEADLINE_COLUMNS`, then every measurement flattened to
  `/`-joined names (`flatten_metrics`; a per-client vector becomes its `/min`, `/mean`, `/max`,
  `/count` columns). Each round appends its line; a header change or a resumed run rewrites the
  file atomically (docs/design.md, "Results on disk").

  Args:
    path: the CSV file.
    keep_through_round: rows already in `path` with `round_num <= keep_through_round` are kept
      (a resumed run); later rows, and damaged ones (`read_metrics`), are dropped. 0 starts a new
      file.
    rows: the rows to start from (rounds 1..n, e.g. `read_metrics(path).rows[:n]`), in place of
      `keep_through_round`; with `columns`, their header.
    columns: the header of `rows`.
    sync: whether each appended row is synced to disk (`files.append_csv_rows`).
  """

  def __init__(self, path: str, keep_through_round: int = 0, *,
               rows: Optional[Iterable[Mapping[str, Any]]] = None,
               columns: Optional[Iterable[str]] = None, sync: bool = True):
    if keep_through_round < 0:
      raise ValueError(f'keep_through_round must be >= 0, got {keep_through_round}')
    self._path = path
    self._sync = sync
    self._rows: list[dict[str, Any]] = []
    self._columns: Optional[list[str]] = None
    if rows is not None:
      self._rows = [dict(r) for r in rows]
      if self._rows:
        self._columns = list(columns) if columns is not None else list(self._rows[0])
    elif keep_through_round > 0 and os.path.exists(path):
      found = read_metrics(path)
      kept = [r for r in found.rows if r[ROUND_COLUMN] <= keep_through_round]
      if kept:
        self._columns = found.columns
        self._rows = kept
    if rows is not None or keep_through_round == 0 or os.path.exists(path):
      files.write_csv_atomically(path, self._columns or [ROUND_COLUMN], self._rows)

  @property
  def rows(self) -> list[dict[str, Any]]:
    return list(self._rows)

  def append(self, round_num: int, row: Mapping[str, Any]) -> None:
    """Adds the row of `round_num` (after the last one) to the file."""
    if self._rows and round_num <= self._rows[-1][ROUND_COLUMN]:
      raise ValueError(f'round_num must increase: got {round_num} after '
                       f'{self._rows[-1][ROUND_COLUMN]}')
    columns = [ROUND_COLUMN] + [c for c in row if c != ROUND_COLUMN]
    new_header = self._columns is None
    if new_header:
      headline = [c for c in HEADLINE_COLUMNS if c in row]
      self._columns = [ROUND_COLUMN] + headline + [c for c in columns[1:] if c not in headline]
    elif set(columns) != set(self._columns):
      missing = sorted(set(self._columns) - set(columns))
      extra = sorted(set(columns) - set(self._columns))
      raise ValueError(f'metrics of round {round_num} change the column set of {self._path}: '
                       f'missing {missing}, new {extra}')
    self._rows.append(dict(row, **{ROUND_COLUMN: round_num}))
    if new_header or not os.path.exists(self._path):
      files.write_csv_atomically(self._path, self._columns, self._rows)
    else:  # one line, not the whole file: a round's cost does not grow with the round number
      files.append_csv_rows(self._path, self._columns, self._rows[-1:], sync=self._sync)


def _per_client_rows(path: str, through_round: int) -> list[dict[str, Any]]:
  """The rows of rounds 1..through_round of a per_client.csv, up to its first damaged row."""
  if through_round <= 0 or not os.path.exists(path):
    return []
  try:
    rows = read_csv(path)
  except (OSError, ValueError, csv.Error):
    return []
  kept = []
  for row in rows:
    if (set(row) != set(PER_CLIENT_COLUMNS) or not isinstance(row[ROUND_COLUMN], int)
        or not isinstance(row['client_index'], int) or not isinstance(row['value'], (int, float))):
      break
    if row[ROUND_COLUMN] <= through_round:
      kept.append(row)
  return kept


class MetricsReleaseManager(tff.program.ReleaseManager):
  """Releases each round's measurements (key: the round) to `metrics.csv` and `per_client.csv`.

  `release(value, round_num)` takes the round's nested measurements: scalars become one
  metrics.csv row (`flatten_metrics`), per-client vectors their summary columns there and their
  values in per_client.csv. Rounds must increase; each round appends its lines.

  Args:
    directory: where the files are.
    rows: the metrics.csv rows to keep (rounds 1..n of a resumed run, e.g.
      `read_metrics(path).rows[:n]`); per_client.csv keeps the same rounds. None or []: new files.
    columns: the header of `rows`.
    always: names every row has, None where a round has no value (e.g. test metrics on rounds
      without evaluation), so the column set stays fixed.
    sync: whether each round's lines are synced to disk (needed only where a run resumes from
      its checkpoints: without them a rerun starts over).
  """

  def __init__(self, directory: str, *, rows: Optional[Sequence[Mapping[str, Any]]] = None,
               columns: Optional[Sequence[str]] = None, always: Sequence[str] = (),
               sync: bool = True):
    self.metrics_path = os.path.join(directory, METRICS_FILE)
    self.per_client_path = os.path.join(directory, PER_CLIENT_FILE)
    self._always = tuple(always)
    rows = list(rows or [])
    self._sync = sync
    self._table = MetricsWriter(self.metrics_path, rows=rows, columns=columns, sync=sync)
    self._per_client = _per_client_rows(self.per_client_path, len(rows))
    if self._per_client or os.path.exists(self.per_client_path):
      files.write_csv_atomically(self.per_client_path, PER_CLIENT_COLUMNS, self._per_client)

  @property
  def rows(self) -> list[dict[str, Any]]:
    """The metrics.csv rows."""
    return self._table.rows

  async def release(self, value: Any, key: int) -> None:
    """Writes the measurements `value` of round `key` (see the class docstring).

    Raises:
      ValueError: `key` does not increase, or the flattened names differ from the file's columns.
    """
    row = collections.OrderedDict((name, None) for name in self._always)
    row.update(flatten_metrics(value))
    self._table.append(int(key), row)
    _, vectors = split_metrics(value)
    if vectors:
      new_rows = [{ROUND_COLUMN: int(key), 'name': name, 'client_index': i, 'value': float(v)}
                  for name, vector in vectors.items() for i, v in enumerate(vector)]
      if self._per_client and os.path.exists(self.per_client_path):
        files.append_csv_rows(self.per_client_path, PER_CLIENT_COLUMNS, new_rows,
                              sync=self._sync)
        self._per_client.extend(new_rows)
      else:
        self._per_client.extend(new_rows)
        files.write_csv_atomically(self.per_client_path, PER_CLIENT_COLUMNS, self._per_client)


def non_timing(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """The rows without their timing columns (what determinism and resume compare)."""
  return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


def write_hparams(path: str, hparams: Mapping[str, Any]) -> None:
  """Writes `hparams.csv`: a header of names and one row of values."""
  columns = list(hparams)
  files.write_csv_atomically(path, columns, [{k: _hparam_str(v) for k, v in hparams.items()}])


def _hparam_str(value) -> str:
  if isinstance(value, (list, tuple)):
    return ','.join(str(v) for v in value)
  return '' if value is None else str(value)


def read_hparams(path: str) -> dict[str, str]:
  """`hparams.csv` as name -> string value."""
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  if len(rows) != 1:
    raise ValueError(f'{path} must hold exactly one row of values, found {len(rows)}')
  return dict(rows[0])


def _package_versions() -> dict[str, str]:
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  versions = {'python': platform.python_version()}
  for package in ('tensorflow', 'tensorflow-federated', 'numpy', 'absl-py', 'scikit-learn',
                  'tensorflow-datasets'):
    try:
      versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      versions[package] = 'not installed'
  import tff_conflict  # pylint: disable=g-import-not-at-top
  versions['tff_conflict'] = tff_conflict.__version__
  return versions


def _git_commit() -> str:
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    out = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, capture_output=True, text=True,
                         timeout=5, check=False)
  except (OSError, subprocess.SubprocessError):
    return ''
  return out.stdout.strip() if out.returncode == 0 else ''


def provenance() -> dict[str, str]:
  """`version/<package>` for the packages results depend on, and `git_commit` (hparams.csv)."""
  values = {f'version/{package}': version for package, version in _package_versions().items()}
  values['git_commit'] = _git_commit()
  return values

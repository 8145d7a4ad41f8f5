"""Results on disk: `metrics.csv` keyed by `round_num`, and `hparams.csv`.

`metrics.csv` has one row per round. Its columns, in order: `round_num`, the headline columns
(`HEADLINE_COLUMNS`: training loss and accuracy, test accuracy, loss and macro-F1, round and
evaluation time), then every metric the learning process reports, flattened to `/`-joined names
(`client_work/train/loss`, `aggregator/conflict_fraction_before`, ...). Test columns are empty on
rounds without evaluation. The column set is fixed by the first row written and checked on every
later row, so a process whose metrics change structure fails loudly instead of shifting columns.

Timing columns (`TIMING_COLUMNS`, names ending in `_time_s`) are the only ones that differ
between two runs with the same flags and seed; `non_timing(rows)` drops them for comparisons.

The file is rewritten whole after every round (write to a temporary file, then rename), so an
interruption never leaves a half-written row, and resuming from a checkpoint at round r drops the
rows after r before new ones are appended (`MetricsWriter(path, keep_through_round=r)`). A file
damaged from outside (truncated, edited) is read up to its first damaged row
(`read_metrics(path)`, which says what it found) and never makes a reader crash.
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

from experiments import files

ROUND_COLUMN = 'round_num'
HEADLINE_COLUMNS = ('train_loss', 'train_accuracy', 'test_accuracy', 'test_loss', 'test_macro_f1',
                    'round_time_s', 'eval_time_s')
TIMING_COLUMNS = ('round_time_s', 'eval_time_s')


def flatten_metrics(metrics: Any, prefix: str = '') -> 'collections.OrderedDict[str, float]':
  """Flattens nested metrics to `/`-joined names with float values.

  Mappings (and attrs/namedtuple-like objects with `_asdict`) nest by key, in their own order;
  lists, tuples and arrays of more than one element nest by index (`aggregator/weights/0`);
  scalars (Python or numpy, any dtype) become floats. Empty structures produce no column.

  Args:
    metrics: a nested structure of scalars, e.g. `LearningProcessOutput.metrics`.
    prefix: prepended to every name.

  Returns:
    An OrderedDict name -> float.
  """
  out = collections.OrderedDict()

  def visit(value, name):
    if isinstance(value, Mapping):
      for key, item in value.items():
        visit(item, f'{name}/{key}' if name else str(key))
      return
    if hasattr(value, '_asdict'):
      visit(value._asdict(), name)
      return
    if hasattr(value, 'numpy') and callable(value.numpy):
      value = value.numpy()
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0):
      items = list(np.asarray(value).reshape(-1)) if isinstance(value, np.ndarray) else value
      if len(items) == 1 and isinstance(value, np.ndarray):
        visit(items[0], name)
        return
      for i, item in enumerate(items):
        visit(item, f'{name}/{i}' if name else str(i))
      return
    if isinstance(value, (bytes, str)):
      raise ValueError(f'metric {name!r} is not numeric: {value!r}')
    out[name] = float(value)

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


def read_columns(path: str) -> list[str]:
  with open(path, newline='') as f:
    return next(csv.reader(f), [])


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
  """Writes `metrics.csv` one round at a time (see the module docstring).

  Args:
    path: the CSV file.
    keep_through_round: rows already in `path` with `round_num <= keep_through_round` are kept
      (a resumed run); later rows, and damaged ones (`read_metrics`), are dropped. 0 starts a new
      file.
    rows: the rows to start from (rounds 1..n, e.g. `read_metrics(path).rows[:n]`), in place of
      `keep_through_round`; with `columns`, their header.
    columns: the header of `rows`.
  """

  def __init__(self, path: str, keep_through_round: int = 0, *,
               rows: Optional[Iterable[Mapping[str, Any]]] = None,
               columns: Optional[Iterable[str]] = None):
    if keep_through_round < 0:
      raise ValueError(f'keep_through_round must be >= 0, got {keep_through_round}')
    self._path = path
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
    """Adds the row of `round_num` (after the last one) and rewrites the file."""
    if self._rows and round_num <= self._rows[-1][ROUND_COLUMN]:
      raise ValueError(f'round_num must increase: got {round_num} after '
                       f'{self._rows[-1][ROUND_COLUMN]}')
    columns = [ROUND_COLUMN] + [c for c in row if c != ROUND_COLUMN]
    if self._columns is None:
      headline = [c for c in HEADLINE_COLUMNS if c in row]
      self._columns = [ROUND_COLUMN] + headline + [c for c in columns[1:] if c not in headline]
    elif set(columns) != set(self._columns):
      missing = sorted(set(self._columns) - set(columns))
      extra = sorted(set(columns) - set(self._columns))
      raise ValueError(f'metrics of round {round_num} change the column set of {self._path}: '
                       f'missing {missing}, new {extra}')
    self._rows.append(dict(row, **{ROUND_COLUMN: round_num}))
    files.write_csv_atomically(self._path, self._columns, self._rows)


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

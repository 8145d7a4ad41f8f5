"""Atomic file writes (a reader sees the old file or the new one, never half of one), CSV rows
written or appended, and the removal of the temporaries a cut write leaves."""

import contextlib
import csv
import math
import os
import secrets
from typing import IO, Any, Iterable, Iterator, Mapping, Sequence

TEMP_MARK = '.tmp-'


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'w', **kwargs: Any) -> Iterator[IO]:
  """A file (mode 'w' or 'wb') written to `<path>.tmp-<random>`, synced and renamed over `path`
  when the block ends cleanly; an error or a kill leaves the old file and at most a temporary."""
  if mode not in ('w', 'wb'):
    raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
  temp = f'{os.path.abspath(path)}{TEMP_MARK}{secrets.token_hex(6)}'
  try:
    with _naming(path):
      with open(temp, mode.replace('w', 'x'), **kwargs) as f:  # a new file: the umask applies
        yield f
        f.flush()
        os.fsync(f.fileno())
      os.replace(temp, path)
  finally:
    if os.path.exists(temp):
      os.remove(temp)


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
  """An `OSError` without a file name (a write the disk refused) names `path`."""
  try:
    yield
  except OSError as e:
    if e.filename is None and e.errno is not None:
      raise OSError(e.errno, e.strerror, path) from None
    raise


def csv_cell(value: Any) -> str:
  """A value as its CSV cell: '' for None, repr for floats ('nan' for NaN), else str."""
  if value is None:
    return ''
  if isinstance(value, float):
    return 'nan' if math.isnan(value) else repr(value)
  return str(value)


def _write_rows(f: IO, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
  csv.writer(f).writerows([csv_cell(row.get(c)) for c in columns] for row in rows)


def write_csv_atomically(path: str, columns: Sequence[str],
                         rows: Iterable[Mapping[str, Any]]) -> None:
  """A header of `columns`, then one line per row (cells by `csv_cell`, '' where missing)."""
  with atomic_open(path, 'w', newline='') as f:
    csv.writer(f).writerow(list(columns))
    _write_rows(f, columns, rows)


def append_csv_rows(path: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]], *,
                    sync: bool = True) -> None:
  """Appends `rows` to a CSV of `columns`, not atomically (a cut write leaves a partial line)."""
  with _naming(path), open(path, 'a', newline='') as f:
    _write_rows(f, columns, rows)
    f.flush()
    if sync:
      os.fsync(f.fileno())


def remove_temporaries(directory: str, prefix: str = '') -> None:
  """Removes the temporaries of writes cut short in `directory` (names from `prefix`)."""
  for name in os.listdir(directory):
    if name.startswith(prefix) and TEMP_MARK in name:
      os.remove(os.path.join(directory, name))

"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

import contextlib
import csv
import errno
import json
import math
import os
import tempfile
import threading
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

TEMP_MARK = '.tmp-'
# errno of a write refused by the disk itself: full, over quota, read-only.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
_UMASK_LOCK = threading.Lock()


class Failure(Exception):
  """An error the user can fix that is not a flag's value (a damaged or different earlier output,
  an unreachable worker): the binaries print it as one line and exit with status 1."""


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'w', **kwargs: Any) -> Iterator[IO]:
  """A file (mode 'w' or 'wb', `open`'s `kwargs`) whose content replaces `path` when the block
  ends cleanly: written to `<name>.tmp-<random>` beside it, synced, renamed over it. An error or
  a kill leaves the old file and at most a temporary (`remove_temporaries`). The file gets the
  umask's permissions, as `open` would give it."""
  if mode not in ('w', 'wb'):
    raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
  directory, name = os.path.split(os.path.abspath(path))
  fd, temp = tempfile.mkstemp(dir=directory, prefix=f'{name}{TEMP_MARK}')
  try:
    with _UMASK_LOCK:  # read by setting it and setting it back
      umask = os.umask(0o022)
      os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide results from collaborators
    with _naming(path):
      with open(fd, mode, **kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())
      os.replace(temp, path)
  finally:
    if os.path.exists(temp):
      os.remove(temp)


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
  """An `OSError` without a file name (a write or flush the disk refused) names `path`."""
  try:
    yield
  except OSError as e:
    if e.filename is None and e.errno is not None:
      raise OSError(e.errno, e.strerror, path) from None
    raise


def write_text_atomically(path: str, text: str) -> None:
  with atomic_open(path, 'w') as f:
    f.write(text)


def write_json_atomically(path: str, value: Any,
                          default: Optional[Callable[[Any], Any]] = None) -> None:
  """`value` as indented JSON with sorted keys (`default` as in `json.dump`)."""
  with atomic_open(path, 'w') as f:
    json.dump(value, f, indent=1, sort_keys=True, default=default)


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
  """Appends `rows` to a CSV whose header is `columns`: not atomic but cheap, and flushed (and
  with `sync` synced, some milliseconds), so a write cut short leaves at most a partial last
  line (which `metrics_io.read_metrics` drops); without `sync` a machine crash can lose rows."""
  with _naming(path), open(path, 'a', newline='') as f:
    _write_rows(f, columns, rows)
    f.flush()
    if sync:
      os.fsync(f.fileno())


def remove_temporaries(directory: str, prefix: str = '') -> None:
  """Removes temporary files left in `directory` by writes cut short (names from `prefix`)."""
  for name in os.listdir(directory):
    if name.startswith(prefix) and TEMP_MARK in name:
      os.remove(os.path.join(directory, name))

"""Atomic file writes (a reader sees the old file or the new one, never half of one), CSV rows
written or appended, the removal of the temporaries a cut write leaves, and one writer per
experiment directory (`one_writer`)."""

import contextlib
import csv
import errno
import fcntl
import json
import math
import os
import secrets
import sys
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from tff_conflict._checks import Failure

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


# errno of a write refused by the disk itself: full, over quota, read-only.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def write_text_atomically(path: str, text: str) -> None:
  with atomic_open(path, 'w') as f:
    f.write(text)


def write_json_atomically(path: str, value: Any,
                          default: Optional[Callable[[Any], Any]] = None) -> None:
  """`value` as indented JSON with sorted keys (`default` as in `json.dump`)."""
  write_text_atomically(path, json.dumps(value, indent=1, sort_keys=True, default=default))


LOCK_FILE = '.writer.lock'


class Locked(Failure):
  """Another live process writes in the directory."""


def _holder(fd: int) -> str:
  os.lseek(fd, 0, os.SEEK_SET)
  return os.read(fd, 64).decode(errors='replace').strip()


@contextlib.contextmanager
def one_writer(directory: str) -> Iterator[None]:
  """Holds `directory`'s writer lock for the block: an exclusive `fcntl.flock` on
  `<directory>/.writer.lock` holding this process's pid, removed at the end. `Locked` naming the
  holder's pid while another process holds it; a dead holder's pid is taken over with a note."""
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, LOCK_FILE)
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _holder(fd)
      os.close(fd)
      raise Locked(f'{directory} is being written by process {holder or "(starting)"}, which '
                   f'holds {path}: wait for it to end, or write elsewhere') from None
    if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
      break
    os.close(fd)   # its holder removed that file meanwhile: lock the new one
  try:
    stale = _holder(fd)
    if stale:
      print(f'note: took over {path} from process {stale}, which ended without releasing it',
            file=sys.stderr, flush=True)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'{os.getpid()}\n'.encode(), 0)
    yield
  finally:
    with contextlib.suppress(OSError):
      os.unlink(path)
    os.close(fd)

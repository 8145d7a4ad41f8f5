"""Atomic file writes (`tff_conflict._files`: a reader sees the old file or the new one,
never half of one), and one writer per experiment directory (`one_writer`)."""

import contextlib
import errno
import fcntl
import json
import os
import sys
from typing import Any, Callable, Iterator, Optional

# The errors and writes the library shares with the binaries, from one place.
from tff_conflict._checks import Failure
from tff_conflict._files import atomic_open
from tff_conflict._files import csv_cell
from tff_conflict._files import write_csv_atomically

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

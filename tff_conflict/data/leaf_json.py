"""A streaming reader of the JSON files LEAF's `preprocess.sh` writes; a departure from their
structure raises `LeafFormatError` naming the file and the byte offset."""

import json
import math
import os
import re
from typing import Optional, Protocol

import numpy as np

from tff_conflict import _checks

CHUNK_BYTES = 1 << 23  # bytes read at a time (8 MiB)

_WHITESPACE = re.compile(rb'[ \t\r\n]*')
_END_OF_ROWS = re.compile(rb'\][ \t\r\n]*\]')  # the last row's ']' and the closing ']' of x
_NUMERIC_BYTES = b'0123456789.eE+-, \t\r\n[]'
_DECODER = json.JSONDecoder()


class LeafFormatError(ValueError):
  """A LEAF JSON file whose content does not have LEAF's structure; the message names the file."""


class Sink(Protocol):
  """Receives the users of one file as they stream past (see `parse_file`)."""

  def begin_user(self, user: str) -> None:
    ...

  def x_rows(self, rows: np.ndarray) -> None:
    """A block of consecutive rows of the current user's numeric `x`, float64 [r, D]."""

  def x_names(self, names: list) -> None:
    """The current user's `x` when it is a list of image file names (CelebA's)."""

  def x_text(self, strings: list) -> None:
    """The current user's `x` when it is a list of text strings (Shakespeare's)."""

  def y_values(self, values: list) -> None:
    """The current user's `y` (JSON numbers, or for text one-character strings, in order)."""

  def end_user(self, user: str, count: int) -> None:
    """The current user is complete, with `count` examples (x and y agree)."""


class _Stream:
  """A binary file read in chunks, with a cursor and JSON token helpers."""

  def __init__(self, f, path: str, chunk_bytes: int):
    self._f = f
    self.path = path
    self._chunk = chunk_bytes
    self.buf = b''
    self.pos = 0
    self._base = 0  # file offset of buf[0]
    self.eof = False

  def offset(self, pos: Optional[int] = None) -> int:
    return self._base + (self.pos if pos is None else pos)

  def error(self, message: str, pos: Optional[int] = None) -> LeafFormatError:
    return LeafFormatError(f'{self.path}: {message} (at byte {self.offset(pos)})')

  def fill(self, need: int) -> None:
    """Reads until `need` bytes follow the cursor, or the file ends."""
    while not self.eof and len(self.buf) - self.pos < need:
      chunk = self._f.read(max(self._chunk, need - (len(self.buf) - self.pos)))
      if not chunk:
        self.eof = True
        break
      if self.pos:
        self._base += self.pos
        self.buf = self.buf[self.pos:]
        self.pos = 0
      self.buf += chunk

  def skip_ws(self) -> None:
    while True:
      self.pos = _WHITESPACE.match(self.buf, self.pos).end()
      if self.pos < len(self.buf) or self.eof:
        return
      self.fill(1)

  def peek(self) -> bytes:
    """The next non-whitespace byte, or b'' at the end of the file."""
    self.skip_ws()
    self.fill(1)
    return self.buf[self.pos:self.pos + 1]

  def found(self, got: bytes) -> str:
    return repr(got.decode('latin-1')) if got else 'the end of the file (truncated?)'

  def expect(self, char: bytes, where: str) -> None:
    got = self.peek()
    if got != char:
      raise self.error(f'expected {char.decode()!r} {where}, found {self.found(got)}')
    self.pos += 1

  def comma_or_close(self, close: bytes, where: str) -> bool:
    """Consumes ',' (True: another member follows) or `close` (False)."""
    got = self.peek()
    if got == b',':
      self.pos += 1
      return True
    if got == close:
      self.pos += 1
      return False
    raise self.error(f"expected ',' or {close.decode()!r} {where}, found {self.found(got)}")

  def value(self, where: str):
    """Parses one (small) JSON value with the standard library's decoder."""
    self.skip_ws()
    window = 1 << 12
    while True:
      self.fill(window)
      raw = self.buf[self.pos:self.pos + window]
      if not raw:
        raise self.error(f'the file ends where {where} should be (truncated?)')
      text = raw.decode('utf-8', 'surrogateescape')
      try:
        obj, end = _DECODER.raw_decode(text)
      except json.JSONDecodeError as e:
        # An error near the end of the window (a cut literal, a missing delimiter) or in a string
        # that the window cuts may go away with more text; one earlier on cannot.
        incomplete = e.pos >= len(text) - 16 or e.msg.startswith('Unterminated string')
        if incomplete and not (self.eof and len(raw) == len(self.buf) - self.pos):
          window *= 2
          continue
        if incomplete:
          raise self.error(f'the file ends inside {where} (truncated?)') from None
        raise self.error(f'malformed JSON in {where}: {e.msg}',
                         self.pos + len(text[:e.pos].encode('utf-8', 'surrogateescape'))) from None
      nbytes = len(text[:end].encode('utf-8', 'surrogateescape'))
      if nbytes == len(raw) and not self.eof:
        window *= 2  # a number at the end of the window may go on
        continue
      self.pos += nbytes
      return obj

  def key(self, where: str) -> str:
    got = self.peek()
    if got != b'"':
      raise self.error(f'expected a quoted key {where}, found {self.found(got)}')
    name = self.value(where)
    self.expect(b':', f'after the key {name!r}')
    return name


class _RowParser:
  """The fast path for a numeric `x`: a JSON list of equally long lists of numbers."""

  def __init__(self, stream: _Stream, row_length: Optional[int]):
    self._s = stream
    self.row_length = row_length

  def rows(self, user: str, sink: Sink) -> int:
    """Streams the rows of the `x` list at the cursor to `sink`; returns how many there were."""
    s = self._s
    where = f'the x of user {user!r}'
    s.expect(b'[', f'at the start of {where}')
    count = 0
    first = True
    while True:
      got = s.peek()
      if got == b']':
        s.pos += 1
        return count
      if not got:
        raise s.error(f'the file ends inside {where} (truncated?)')
      size = s._chunk  # pylint: disable=protected-access
      while True:
        s.fill(size)
        limit = min(len(s.buf), s.pos + size)
        m = _END_OF_ROWS.search(s.buf, s.pos, limit)
        if m:
          region_end, after, done = m.start() + 1, m.end(), True
          break
        k = s.buf.rfind(b']', s.pos, limit)
        if k >= 0:
          region_end, after, done = k + 1, k + 1, False
          break
        if s.eof and limit == len(s.buf):
          raise s.error(f'the file ends inside {where} (truncated?)')
        size *= 2
      rows = self._parse(s.buf[s.pos:region_end], first, where)
      count += rows.shape[0]
      sink.x_rows(rows)
      first = False
      s.pos = after
      if done:
        return count

  def _parse(self, region: bytes, first: bool, where: str) -> np.ndarray:
    s = self._s
    bad = region.translate(None, _NUMERIC_BYTES)
    if bad:
      at = s.pos + region.find(bad[:1])
      raise s.error(f'unexpected {bad[:1].decode("latin-1")!r} in {where}, which must be a list '
                    'of lists of numbers', at)
    pieces = region.split(b']')
    pieces.pop()  # the region ends with ']'
    bodies = []
    for i, piece in enumerate(pieces):
      j = piece.find(b'[')
      if j < 0 or piece.find(b'[', j + 1) >= 0:
        raise s.error(f'{where} must be a list of flat lists of numbers')
      if piece[:j].strip() != (b'' if first and i == 0 else b','):
        raise s.error(f"malformed JSON in {where}: expected ',' between rows")
      bodies.append(piece[j + 1:])
    lengths = [body.count(b',') + 1 if body.strip() else 0 for body in bodies]
    if self.row_length is None:
      if not lengths[0]:
        raise s.error(f'{where} has an empty row')
      self.row_length = lengths[0]
    bad_rows = [n for n in lengths if n != self.row_length]
    if bad_rows:
      raise s.error(f'{where} has a row of {bad_rows[0]} numbers, expected {self.row_length}')
    total = len(bodies) * self.row_length
    try:
      values = np.fromiter(map(float, b','.join(bodies).split(b',')), np.float64, count=total)
    except ValueError as e:
      raise s.error(f'malformed number in {where}: {e}') from None
    if not np.isfinite(values).all():
      raise s.error(f'{where} holds a non-finite number')
    return values.reshape(len(bodies), self.row_length)


def _check_list(s: _Stream, value, name: str, kind) -> list:
  if not isinstance(value, list) or not all(
      isinstance(v, kind) and not isinstance(v, bool) for v in value):
    raise s.error(f'"{name}" must be a list of {kind.__name__}s')
  return value


class FileSummary:
  """What `parse_file` learnt about a file: its listed users and their counts, in file order."""

  def __init__(self, users: list, num_samples: list):
    self.users = users
    self.num_samples = num_samples


def parse_file(path: str, sink: Sink, *, x_kind: str, row_length: Optional[int] = None,
               chunk_bytes: Optional[int] = None) -> tuple[FileSummary, Optional[int], list]:
  """Reads one LEAF JSON file, handing every user in `user_data` to `sink` in file order.

  Args:
    path: the JSON file.
    sink: receives `begin_user`, the user's `x` (`x_rows` blocks for `x_kind='numeric'`, one
      `x_names` call for `x_kind='names'`, one `x_text` call for `x_kind='text'`), `y_values`,
      then `end_user`.
    x_kind: 'numeric' (each example a list of numbers), 'names' (each example an image's file
      name) or 'text' (each example a string, its label a one-character string).
    row_length: for 'numeric', the required length of every row (None: the first row's).
    chunk_bytes: read size (default `CHUNK_BYTES`).

  Returns:
    `(summary, row_length, dropped)`: the listed users and their `num_samples`; the row length
    seen (None when no numeric row was read); and the users of `user_data` that are not listed
    in `users` and hold no example (LEAF's sample split leaves such empty entries for the users
    it drops), which the caller should discard.

  Raises:
    LeafFormatError: the file does not have LEAF's structure; names the file and the byte offset.
  """
  _checks.check_choice('x_kind', x_kind, ('numeric', 'names', 'text'))
  with open(path, 'rb') as f:
    s = _Stream(f, os.fspath(path), chunk_bytes or CHUNK_BYTES)
    rows = _RowParser(s, row_length)
    users = num_samples = None
    counts: dict = {}
    s.expect(b'{', 'at the start of the file (a LEAF file is one JSON object)')
    more = s.peek() != b'}'
    if not more:
      s.pos += 1
    while more:
      key = s.key('in the top-level object')
      if key == 'users':
        users = _check_list(s, s.value('"users"'), 'users', str)
      elif key == 'num_samples':
        num_samples = _check_list(s, s.value('"num_samples"'), 'num_samples', int)
      elif key == 'user_data':
        _parse_user_data(s, rows, sink, x_kind, counts)
      else:
        s.value(f'"{key}"')  # e.g. LEAF's "hierarchies"
      more = s.comma_or_close(b'}', 'in the top-level object')
    s.skip_ws()
    s.fill(1)
    if s.pos < len(s.buf):
      raise s.error('unexpected data after the top-level object')
  for name, value in (('users', users), ('num_samples', num_samples)):
    if value is None:
      raise LeafFormatError(f'{path}: the file has no "{name}" list')
  if len(users) != len(num_samples):
    raise LeafFormatError(f'{path}: "users" lists {len(users)} users but "num_samples" has '
                          f'{len(num_samples)} entries')
  if len(set(users)) != len(users):
    twice = sorted(u for u in set(users) if users.count(u) > 1)
    raise LeafFormatError(f'{path}: "users" lists {twice[0]!r} more than once')
  listed = set(users)
  missing = [u for u in users if u not in counts]
  if missing:
    raise LeafFormatError(f'{path}: user {missing[0]!r} is listed in "users" but has no entry in '
                          f'"user_data" ({len(missing)} such users)')
  unlisted = [u for u in counts if u not in listed]
  extra = [u for u in unlisted if counts[u]]
  if extra:
    raise LeafFormatError(f'{path}: "user_data" holds {counts[extra[0]]} examples of user '
                          f'{extra[0]!r}, who is not listed in "users"')
  for user, expected in zip(users, num_samples):
    if counts[user] != expected:
      raise LeafFormatError(f'{path}: "num_samples" gives {expected} examples for user {user!r} '
                            f'but "user_data" holds {counts[user]}')
  return FileSummary(users, num_samples), rows.row_length, unlisted


def _parse_user_data(s: _Stream, rows: _RowParser, sink: Sink, x_kind: str, counts: dict):
  s.expect(b'{', 'at the start of "user_data"')
  if s.peek() == b'}':
    s.pos += 1
    return
  while True:
    user = s.key('in "user_data"')
    if user in counts:
      raise s.error(f'user {user!r} appears twice in "user_data"')
    sink.begin_user(user)
    num_x = num_y = None
    s.expect(b'{', f'at the start of the data of user {user!r}')
    more = s.peek() != b'}'
    if not more:
      s.pos += 1
    while more:
      field = s.key(f'in the data of user {user!r}')
      if field == 'x' and num_x is None:
        if x_kind == 'numeric':
          num_x = rows.rows(user, sink)
        else:
          names = s.value(f'the x of user {user!r}')
          if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
            raise s.error(f'the x of user {user!r} must be a list of strings ('
                          f'{"image names" if x_kind == "names" else "text"})')
          num_x = len(names)
          (sink.x_names if x_kind == 'names' else sink.x_text)(names)
      elif field == 'y' and num_y is None:
        values = s.value(f'the y of user {user!r}')
        if x_kind == 'text':
          if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise s.error(f'the y of user {user!r} must be a list of strings (characters)')
        elif not isinstance(values, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
          raise s.error(f'the y of user {user!r} must be a list of numbers')
        num_y = len(values)
        sink.y_values(values)
      elif field in ('x', 'y'):
        raise s.error(f'user {user!r} has two "{field}" entries')
      else:
        s.value(f'"{field}" of user {user!r}')
      more = s.comma_or_close(b'}', f'in the data of user {user!r}')
    if num_x is None or num_y is None:
      raise s.error(f'the data of user {user!r} has no "{"x" if num_x is None else "y"}" list')
    if num_x != num_y:
      raise s.error(f'user {user!r} has {num_x} x values but {num_y} y values')
    counts[user] = num_x
    sink.end_user(user, num_x)
    if not s.comma_or_close(b'}', 'in "user_data"'):
      return


def labels_as_ints(values: list, *, num_classes: Optional[int], where: str) -> np.ndarray:
  """`values` (JSON numbers) as int64 labels; `ValueError` unless integral, >= 0 and below
  `num_classes` (when given). CelebA's labels are written as floats (0.0 / 1.0)."""
  out = np.empty(len(values), np.int64)
  for i, v in enumerate(values):
    if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
      raise ValueError(f'{where}: label {v!r} is not an integer')
    out[i] = int(v)
  if out.size and (out.min() < 0 or (num_classes is not None and out.max() >= num_classes)):
    bad = out[(out < 0) | (out >= (num_classes or np.iinfo(np.int64).max))][0]
    raise ValueError(f'{where}: label {bad} is outside [0, {num_classes or "inf"})')
  return out

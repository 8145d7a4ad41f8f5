"""LEAF's JSON output converted once into a compact on-disk cache of one file per client, rebuilt
when its sources change (docs/design.md, "Data")."""

import contextlib
import dataclasses
import fcntl
import glob
import hashlib
import json
import os
import shutil
import time
from typing import Optional

from absl import logging
import numpy as np

from tff_conflict import _checks
from tff_conflict.data import leaf_json

CACHE_VERSION = 1
DEFAULT_CACHE_NAME = 'tff_conflict_cache'
SPLITS = ('train', 'test')

# Encodings of a client's x rows: name -> (numpy dtype of the stored values).
UNIT8 = 0  # byte k stands for k / 255 (FEMNIST's pixel values)
FLOAT32 = 1  # float32 values
PIXELS = 2  # byte k stands for the pixel value k (CelebA's images)
CHARS = 3  # byte k stands for the character id k (Shakespeare's text)
ENCODINGS = {UNIT8: np.dtype(np.uint8), FLOAT32: np.dtype('<f4'), PIXELS: np.dtype(np.uint8),
             CHARS: np.dtype(np.uint8)}

CELEBA_IMAGE_SIZE = 84  # LEAF's models/celeba/cnn.py: IMAGE_SIZE
CELEBA_IMAGE_DIR = os.path.join('raw', 'img_align_celeba')

# LEAF's models/utils/language_utils.py: ALL_LETTERS, the ids of Shakespeare's characters; its
# `letter_to_vec` gives a character outside them (`find` = -1) the last letter's one-hot label.
SHAKESPEARE_LETTERS = ('\n !"&\'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]'
                       'abcdefghijklmnopqrstuvwxyz}')
SHAKESPEARE_UNKNOWN = len(SHAKESPEARE_LETTERS) - 1  # '}'
SHAKESPEARE_SEQ_LENGTH = 80  # LEAF's shake_utils.py: seq_length


@dataclasses.dataclass(frozen=True)
class LeafSpec:
  """What one supported LEAF dataset's files hold."""
  name: str
  x_kind: str  # 'numeric': rows of numbers; 'names': image file names; 'text': strings
  row_length: Optional[int]  # numbers per row (None: whatever the files hold)
  element_shape: Optional[tuple]  # shape of an element's x (None: (row_length,))
  num_classes: Optional[int]  # None: largest label + 1
  encoding: int  # initial encoding of a client's rows
  x_dtype: str = 'float32'  # the dtype of an element's x


SPECS = {
    # data/femnist/preprocess/data_to_json.py: 28x28 grey images, pixel / 255, 62 classes.
    'femnist': LeafSpec('femnist', 'numeric', 784, (28, 28, 1), 62, UNIT8),
    # data/synthetic/main.py: -num-dim features, -num-classes classes (README: 60 and 5).
    'synthetic': LeafSpec('synthetic', 'numeric', None, None, None, FLOAT32),
    # data/celeba/preprocess/metadata_to_json.py: image names, y = (Smiling + 1) / 2.
    'celeba': LeafSpec('celeba', 'names', None,
                       (CELEBA_IMAGE_SIZE, CELEBA_IMAGE_SIZE, 3), 2, PIXELS),
    # data/shakespeare/preprocess/shake_utils.py: 80-character strings, the next character.
    'shakespeare': LeafSpec('shakespeare', 'text', SHAKESPEARE_SEQ_LENGTH,
                            (SHAKESPEARE_SEQ_LENGTH,), len(SHAKESPEARE_LETTERS), CHARS, 'int32'),
}
UNSUPPORTED = ('sent140', 'reddit')


def unsupported_message(name: str) -> str:
  return (f'LEAF dataset {name!r} is not supported; supported are {sorted(SPECS)} (the '
          f'word-level text datasets {list(UNSUPPORTED)} are not)')


_CHAR_IDS = np.full(128, SHAKESPEARE_UNKNOWN, np.uint8)
_CHAR_IDS[[ord(c) for c in SHAKESPEARE_LETTERS]] = np.arange(len(SHAKESPEARE_LETTERS))


def char_ids(text: str) -> np.ndarray:
  """uint8 ids of `text`'s characters in `SHAKESPEARE_LETTERS`; any other character is
  `SHAKESPEARE_UNKNOWN` (LEAF's labels: `letter_to_vec`'s index -1 is the last letter)."""
  points = np.frombuffer(text.encode('utf-32-le', 'surrogatepass'), np.uint32)
  return np.where(points < 128, _CHAR_IDS[np.minimum(points, 127)], SHAKESPEARE_UNKNOWN
                  ).astype(np.uint8)


@dataclasses.dataclass(frozen=True)
class Source:
  """Where a LEAF dataset's split files are: `data_dir/{train,test}/*.json`."""
  name: str
  data_dir: str
  image_dir: Optional[str]

  def files(self, split: str) -> list[str]:
    return sorted(glob.glob(os.path.join(glob.escape(self.data_dir), split, '*.json')))


def resolve_source(root, name: Optional[str], image_dir=None) -> Source:
  """Finds the split directories under `root` and the dataset's name.

  `root` may be the folder that holds `train/` and `test/` (LEAF's `data/<name>/data`), the
  dataset's folder `data/<name>`, or LEAF's checkout (then `name` is required). Without `name`,
  the name is the dataset folder's (`femnist` in `.../data/femnist/data`).

  Raises:
    FileNotFoundError: no `train/` and `test/` directories there.
    ValueError: unknown, unsupported or contradicting `name`.
  """
  if name is not None and (not isinstance(name, str) or name not in SPECS):
    if name in UNSUPPORTED:
      raise _checks.ArgumentError(unsupported_message(name), argument='name', value=name)
    raise _checks.ArgumentError.must_be('name', name, f'None or {_checks.one_of(sorted(SPECS))}')
  root = os.path.abspath(os.path.expanduser(os.fspath(root)))
  if not os.path.isdir(root):
    raise FileNotFoundError(f'LEAF root {root!r} does not exist or is not a directory')
  candidates = [root, os.path.join(root, 'data')]
  if name is not None:
    candidates.append(os.path.join(root, 'data', name, 'data'))
  for data_dir in candidates:
    if all(os.path.isdir(os.path.join(data_dir, split)) for split in SPLITS):
      break
  else:
    raise FileNotFoundError(
        f'no LEAF split found under {root!r}: expected the train/ and test/ directories that '
        f"LEAF's preprocess.sh writes, in one of {candidates}")
  folder = os.path.basename(data_dir)
  if folder == 'data':
    folder = os.path.basename(os.path.dirname(data_dir))
  if folder in UNSUPPORTED:
    raise _checks.ArgumentError(argument='root', value=root, message=(
        f'{data_dir}: ' + unsupported_message(folder)))
  if name is None:
    if folder not in SPECS:
      raise _checks.ArgumentError(argument='name', value=name, message=(
          f'cannot tell which LEAF dataset {data_dir!r} holds (its folder is '
          f'{folder!r}): pass name= {_checks.one_of(sorted(SPECS))}'))
    name = folder
  elif folder in SPECS and folder != name:
    raise _checks.ArgumentError(argument='name', value=name, message=(
        f'name={name!r} but {data_dir!r} is the folder of LEAF dataset {folder!r}'))
  if name == 'celeba':
    image_dir = os.path.abspath(os.path.expanduser(os.fspath(
        image_dir if image_dir is not None else os.path.join(data_dir, CELEBA_IMAGE_DIR))))
  elif image_dir is not None:
    raise _checks.ArgumentError(argument='image_dir', value=image_dir, message=(
        f'image_dir applies only to celeba, got image_dir={image_dir!r} for {name}'))
  return Source(name, data_dir, image_dir)


def default_cache_path(source: Source, cache_dir=None) -> str:
  """`<data_dir>/tff_conflict_cache`, or a folder per source under `cache_dir`."""
  if cache_dir is None:
    return os.path.join(source.data_dir, DEFAULT_CACHE_NAME)
  digest = hashlib.sha256(source.data_dir.encode()).hexdigest()[:12]
  return os.path.join(os.path.abspath(os.path.expanduser(os.fspath(cache_dir))),
                      f'leaf_{source.name}_{digest}')


@dataclasses.dataclass(frozen=True)
class SplitIndex:
  """One split of an opened cache: client `k` is `ids[k]` with `counts[k]` examples stored in
  `<directory>/<files[k]>.bin` in encoding `encodings[k]`."""
  directory: str
  ids: list
  files: np.ndarray
  counts: np.ndarray
  encodings: np.ndarray
  label_counts: np.ndarray  # [clients, num_classes]

  def path(self, k: int) -> str:
    return client_file(self.directory, int(self.files[k]))


@dataclasses.dataclass(frozen=True)
class LeafCache:
  """An opened cache (docs/design.md, "Data", the LEAF cache)."""
  path: str
  source: Source
  split_kind: str  # 'sample', 'user' or 'mixed'
  num_classes: int
  element_shape: tuple
  x_dtype: str  # 'float32', or 'int32' (Shakespeare's character ids)
  splits: dict  # split -> SplitIndex
  built: bool  # whether this call converted the JSON files


def client_file(directory: str, number: int) -> str:
  return os.path.join(directory, f'{number:07d}.bin')


def _pillow_version() -> str:
  import PIL  # pylint: disable=g-import-not-at-top
  return PIL.__version__


def _file_stats(source: Source) -> dict:
  stats = {}
  for split in SPLITS:
    for path in source.files(split):
      st = os.stat(path)
      stats[os.path.relpath(path, source.data_dir)] = [st.st_size, st.st_mtime_ns]
  return stats


def _image_stats(image_dir: str, names) -> tuple[np.ndarray, np.ndarray]:
  sizes = np.empty(len(names), np.int64)
  mtimes = np.empty(len(names), np.int64)
  for i, name in enumerate(names):
    try:
      st = os.stat(os.path.join(image_dir, name))
    except OSError:
      sizes[i] = mtimes[i] = -1
      continue
    sizes[i], mtimes[i] = st.st_size, st.st_mtime_ns
  return sizes, mtimes


def _stale_reason(path: str, source: Source) -> Optional[str]:
  """Why the cache at `path` cannot be used for `source` (None: it can)."""
  try:
    with open(os.path.join(path, 'manifest.json'), encoding='utf-8') as f:
      manifest = json.load(f)
  except FileNotFoundError:
    return 'no cache yet'
  except (OSError, ValueError) as e:
    return f'unreadable manifest ({e})'
  if manifest.get('version') != CACHE_VERSION:
    return f'cache format {manifest.get("version")} (this code writes {CACHE_VERSION})'
  if manifest.get('name') != source.name:
    return f'cache of {manifest.get("name")!r}'
  old, new = manifest.get('sources', {}), _file_stats(source)
  changed = sorted(set(old) ^ set(new)) or sorted(f for f in new if old[f] != new[f])
  if changed:
    return f'source file {changed[0]} added, removed or changed'
  if source.name == 'celeba':
    if manifest.get('image_dir') != source.image_dir:
      return f'image_dir was {manifest.get("image_dir")!r}'
    if manifest.get('pillow') != _pillow_version():
      return f'images were resized with Pillow {manifest.get("pillow")}'
    with np.load(os.path.join(path, 'index.npz')) as index:
      names = index['image_names']
      sizes, mtimes = _image_stats(source.image_dir, names)
      moved = np.flatnonzero((sizes != index['image_sizes']) | (mtimes != index['image_mtimes']))
    if moved.size:
      return f'image {names[moved[0]]} changed'
  return None


def _open(path: str, source: Source, built: bool) -> LeafCache:
  with open(os.path.join(path, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  splits = {}
  with np.load(os.path.join(path, 'index.npz')) as index:
    for split in SPLITS:
      splits[split] = SplitIndex(
          directory=os.path.join(path, split), ids=[str(u) for u in index[f'{split}_ids']],
          files=index[f'{split}_files'], counts=index[f'{split}_counts'],
          encodings=index[f'{split}_encodings'], label_counts=index[f'{split}_label_counts'])
  return LeafCache(path=path, source=source, split_kind=manifest['split_kind'],
                   num_classes=int(manifest['num_classes']),
                   element_shape=tuple(manifest['element_shape']),
                   x_dtype=manifest.get('x_dtype', 'float32'), splits=splits, built=built)


@contextlib.contextmanager
def _locked(lock):
  with lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


def open_or_build(source: Source, path: str) -> LeafCache:
  """Opens the cache at `path`, converting the JSON files first when it is missing or stale.

  A complete, current cache in a read-only place is opened without the lock.
  """
  for split in SPLITS:
    if not source.files(split):
      raise FileNotFoundError(f'{os.path.join(source.data_dir, split)} holds no .json file')
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock = open(path + '.lock', 'a+b')  # pylint: disable=consider-using-with
  except OSError as e:
    if _stale_reason(path, source) is None:
      return _open(path, source, built=False)
    raise OSError(f'cannot write the LEAF cache {path!r} ({e}); pass cache_dir= a writable '
                  'directory') from e
  with _locked(lock):
    reason = _stale_reason(path, source)
    if reason is None:
      return _open(path, source, built=False)
    for partial in glob.glob(glob.escape(path) + '.partial-*'):
      shutil.rmtree(partial, ignore_errors=True)  # left by a build that was killed
    logging.warning('tff_conflict.data.leaf: converting LEAF %s under %s into the cache %s (%s); '
                    'later runs open it directly', source.name, source.data_dir, path, reason)
    start = time.perf_counter()
    partial = f'{path}.partial-{os.getpid()}'
    shutil.rmtree(partial, ignore_errors=True)
    try:
      _build(source, partial)
      if os.path.exists(path):
        shutil.rmtree(path)
      os.rename(partial, path)
    except BaseException:
      shutil.rmtree(partial, ignore_errors=True)
      raise
    logging.warning('tff_conflict.data.leaf: cache built in %.1f s', time.perf_counter() - start)
    return _open(path, source, built=True)


class _SplitWriter:
  """The sink of `leaf_json.parse_file` that writes one split's client files."""

  def __init__(self, directory: str, spec: LeafSpec, image_dir: Optional[str]):
    self.directory = directory
    self.spec = spec
    self.image_dir = image_dir
    self.records: dict = {}  # user -> dict(file, count, encoding, labels, path)
    self.images: list = []
    self.path = ''
    self._f = None
    self._next_file = 0  # file numbers are never reused (dropped users free theirs)
    os.makedirs(directory)

  def begin_file(self, path: str) -> None:
    self.path = path

  def _fail(self, message: str) -> leaf_json.LeafFormatError:
    return leaf_json.LeafFormatError(f'{self.path}: {message}')

  def begin_user(self, user: str) -> None:
    if user in self.records:
      raise self._fail(f'user {user!r} is also in {self.records[user]["path"]} (a user may be in '
                       'one file of a split only)')
    number = self._next_file
    self._next_file += 1
    self._record = dict(file=number, count=0, encoding=self.spec.encoding, labels=None,
                        path=self.path)
    self.records[user] = self._record
    self._user = user
    self._f = open(client_file(self.directory, number), 'wb')  # pylint: disable=consider-using-with

  def x_rows(self, rows: np.ndarray) -> None:
    record = self._record
    if record['encoding'] == UNIT8:
      k = np.rint(rows * 255.0)
      if np.all((k / 255.0 == rows) & (k >= 0) & (k <= 255)):
        self._f.write(k.astype(np.uint8).tobytes())
        return
      self._to_float32()
    self._f.write(rows.astype('<f4').tobytes())

  def _to_float32(self) -> None:
    """Re-encodes the rows written so far for this user (bytes k/255) as float32."""
    self._f.close()
    name = client_file(self.directory, self._record['file'])
    stored = np.fromfile(name, np.uint8)
    with open(name, 'wb') as f:
      f.write((stored.astype(np.float64) / 255.0).astype('<f4').tobytes())
    self._f = open(name, 'ab')  # pylint: disable=consider-using-with
    self._record['encoding'] = FLOAT32

  def x_names(self, names: list) -> None:
    from PIL import Image  # pylint: disable=g-import-not-at-top
    size = (CELEBA_IMAGE_SIZE, CELEBA_IMAGE_SIZE)
    for name in names:
      if os.path.isabs(name) or '..' in name.replace('\\', '/').split('/'):
        raise self._fail(f'image name {name!r} of user {self._user!r} must be a plain file name')
      image_path = os.path.join(self.image_dir, name)
      try:
        with Image.open(image_path) as image:
          # LEAF's models/celeba/cnn.py: img.resize((IMAGE_SIZE, IMAGE_SIZE)).convert('RGB').
          pixels = np.asarray(image.resize(size).convert('RGB'), dtype=np.uint8)
      except FileNotFoundError:
        raise FileNotFoundError(f'{self.path}: image {name!r} of user {self._user!r} is not in '
                                f'image_dir {self.image_dir!r}') from None
      except OSError as e:
        raise self._fail(f'cannot read image {image_path!r} of user {self._user!r}: {e}') from e
      self._f.write(pixels.tobytes())
      self.images.append(name)

  def x_text(self, strings: list) -> None:
    length = self.spec.row_length
    wrong = next((s for s in strings if len(s) != length), None)
    if wrong is not None:
      raise self._fail(f'the x of user {self._user!r} holds a string of {len(wrong)} characters '
                       f'({wrong[:100]!r}), expected {length}')
    self._f.write(char_ids(''.join(strings)).tobytes())

  def y_values(self, values: list) -> None:
    if self.spec.x_kind == 'text':
      wrong = next((v for v in values if not isinstance(v, str) or len(v) != 1), None)
      if wrong is not None:
        raise self._fail(f'the y of user {self._user!r} must be single characters, got '
                         f'{wrong!r}')
      self._record['labels'] = char_ids(''.join(values)).astype(np.int64)
      return
    try:
      self._record['labels'] = leaf_json.labels_as_ints(
          values, num_classes=self.spec.num_classes, where=f'the y of user {self._user!r}')
    except ValueError as e:
      raise self._fail(str(e)) from None

  def end_user(self, user: str, count: int) -> None:
    self._f.write(self._record['labels'].astype('<i4').tobytes())
    self._f.close()
    self._f = None
    self._record['count'] = count

  def drop(self, users) -> None:
    for user in users:
      os.remove(client_file(self.directory, self.records.pop(user)['file']))

  def close(self) -> None:
    if self._f is not None:
      self._f.close()
      self._f = None


def _build(source: Source, path: str) -> None:
  spec = SPECS[source.name]
  os.makedirs(path)
  if spec.x_kind == 'names' and not os.path.isdir(source.image_dir):
    raise FileNotFoundError(f'CelebA images directory {source.image_dir!r} does not exist '
                            "(LEAF's data/celeba/data/raw/img_align_celeba; or pass image_dir=)")
  sources = _file_stats(source)
  row_length = spec.row_length
  writers = {}
  for split in SPLITS:
    writer = writers[split] = _SplitWriter(os.path.join(path, split), spec, source.image_dir)
    try:
      for file in source.files(split):
        writer.begin_file(file)
        _, row_length, dropped = leaf_json.parse_file(file, writer, x_kind=spec.x_kind,
                                                      row_length=row_length)
        writer.drop(dropped)
    finally:
      writer.close()
    if not writer.records:
      raise leaf_json.LeafFormatError(f'{os.path.join(source.data_dir, split)}: the split holds '
                                      'no users')
  if _file_stats(source) != sources:
    raise RuntimeError(f'LEAF files under {source.data_dir} changed while they were converted; '
                       'call again once they are complete')
  max_label = max((int(r['labels'].max()) for w in writers.values()
                   for r in w.records.values() if r['count']), default=0)
  num_classes = spec.num_classes or max_label + 1
  element_shape = spec.element_shape or (row_length,)
  train, test = (set(writers[s].records) for s in SPLITS)
  split_kind = 'sample' if train == test else 'user' if not train & test else 'mixed'
  arrays = {}
  for split, writer in writers.items():
    ids = sorted(writer.records)
    records = [writer.records[u] for u in ids]
    arrays[f'{split}_ids'] = np.array(ids, dtype=str)
    arrays[f'{split}_files'] = np.array([r['file'] for r in records], np.int64)
    arrays[f'{split}_counts'] = np.array([r['count'] for r in records], np.int64)
    arrays[f'{split}_encodings'] = np.array([r['encoding'] for r in records], np.int8)
    arrays[f'{split}_label_counts'] = np.stack(
        [np.bincount(r['labels'], minlength=num_classes) for r in records]).astype(np.int64)
  manifest = dict(format='tff_conflict LEAF cache', version=CACHE_VERSION, name=source.name,
                  data_dir=source.data_dir, sources=sources, split_kind=split_kind,
                  num_classes=num_classes, element_shape=list(element_shape),
                  x_dtype=spec.x_dtype)
  if spec.x_kind == 'names':
    names = sorted(set(writers['train'].images) | set(writers['test'].images))
    sizes, mtimes = _image_stats(source.image_dir, names)
    arrays.update(image_names=np.array(names, dtype=str), image_sizes=sizes, image_mtimes=mtimes)
    manifest.update(image_dir=source.image_dir, pillow=_pillow_version())
  np.savez(os.path.join(path, 'index.npz'), **arrays)
  with open(os.path.join(path, 'manifest.json'), 'w', encoding='utf-8') as f:
    json.dump(manifest, f, indent=1)

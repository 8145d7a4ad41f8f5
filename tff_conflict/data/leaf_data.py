"""`leaf(root)`: LEAF's FEMNIST, Synthetic, CelebA or Shakespeare as `ClientData` (users are
clients), read from the JSON files of LEAF's `preprocess.sh` through an on-disk cache
(`leaf_cache`); `first_users` keeps some users and thins their examples; `DATASETS`: its regimes."""

import collections
import functools
import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib
from tff_conflict.data import info as info_lib
from tff_conflict.data import leaf_cache

SPLIT_KINDS = {
    'sample': "sample-based: every user's examples are divided between train and test (LEAF's "
              '-t sample), so train and test have the same clients',
    'user': "user-based: users are divided between train and test (LEAF's -t user), so the test "
            'clients are users never seen in training',
    'mixed': 'mixed: some users are in both train and test, others in one of them only',
}


class LeafClientData(tff.simulation.datasets.ClientData):
  """One split of a converted LEAF dataset: a client per LEAF user, ids as in the files.

  Elements are UNBATCHED `OrderedDict(x=float32 element_shape, y=int32 scalar)` (Shakespeare's x:
  int32 character ids; see `leaf`). A client's dataset reads that client's cache file when it is
  created (eagerly) or iterated (inside a graph); nothing else is read. Also exposes
  `label_counts`, `client_sizes`, `num_classes`, `info`, `split_kind` and `cache_path`.
  """

  def __init__(self, cache: leaf_cache.LeafCache, split: str,
               keep: Optional[dict[str, int]] = None):
    """`keep`: client id -> how many of its examples to keep (`first_users`); None: all."""
    super().__init__()
    index = cache.splits[split]
    self._cache = cache
    self._split = split
    rows = range(len(index.ids)) if keep is None else [
        k for k, u in enumerate(index.ids) if u in keep]
    self._ids = [index.ids[k] for k in rows]
    self._paths = [index.path(k) for k in rows]
    self._stored = np.asarray(index.counts, np.int64)[list(rows)]
    self._encodings = np.asarray(index.encodings, np.int64)[list(rows)]
    self._label_counts = np.asarray(index.label_counts, np.int64)[list(rows)]
    self._counts = self._stored.copy()
    self._shape = tuple(cache.element_shape)
    self._x_dtype = tf.as_dtype(cache.x_dtype)
    if keep is not None:
      self._counts = np.minimum(self._stored, [keep[u] for u in self._ids])
      for k in np.flatnonzero(self._counts < self._stored):
        self._label_counts[k] = np.bincount(self._labels(k), minlength=cache.num_classes)
    self._thinned = bool((self._counts < self._stored).any())
    self._info = info_lib.DatasetInfo(f'leaf_{cache.source.name}', self._shape, cache.num_classes,
                                      f'leaf(root, name={cache.source.name!r})')
    self._element_spec = collections.OrderedDict(
        x=tf.TensorSpec(self._shape, self._x_dtype), y=tf.TensorSpec([], tf.int32))

  def _row_bytes(self, k: int) -> int:
    return math.prod(self._shape) * leaf_cache.ENCODINGS[int(self._encodings[k])].itemsize

  def _labels(self, k: int) -> np.ndarray:
    """The labels client `k` keeps (`kept_positions`), read from its cache file."""
    n = int(self._stored[k])
    labels = np.fromfile(self._paths[k], '<i4', count=n, offset=n * self._row_bytes(k))
    return labels[kept_positions(n, int(self._counts[k]))]

  def _decode_x(self, raw: tf.Tensor, encoding: tf.Tensor) -> tf.Tensor:
    def unit8():
      table = tf.constant((np.arange(256) / 255.0).astype(np.float32))
      return tf.gather(table, tf.cast(tf.io.decode_raw(raw, tf.uint8), tf.int32))

    def float32():
      return tf.io.decode_raw(raw, tf.float32, little_endian=True)

    def pixels():
      return tf.cast(tf.io.decode_raw(raw, tf.uint8), tf.float32)

    def chars():
      return tf.cast(tf.io.decode_raw(raw, tf.uint8), tf.int32)

    if self._x_dtype != tf.float32:  # Shakespeare's character ids: one encoding only
      return chars()
    decoders = {leaf_cache.UNIT8: unit8, leaf_cache.FLOAT32: float32, leaf_cache.PIXELS: pixels}
    present = sorted(set(self._encodings.tolist())) or [leaf_cache.FLOAT32]
    if len(present) == 1:
      return decoders[present[0]]()
    branch = tf.gather(tf.constant([present.index(e) if e in present else 0
                                    for e in range(len(decoders))], tf.int32), encoding)
    return tf.switch_case(branch, [decoders[e] for e in present])

  def _read_client(self, client_id) -> collections.OrderedDict:
    """The client's examples as one block `OrderedDict(x=[n, ...], y=[n])` (TF ops only)."""
    k = tf.reshape(tf.where(tf.equal(tf.constant(self._ids), client_id)), [])
    n = tf.gather(tf.constant(self._stored), k)
    encoding = tf.gather(tf.constant(self._encodings), k)
    row_bytes = tf.gather(tf.constant(
        [math.prod(self._shape) * leaf_cache.ENCODINGS[e].itemsize
         for e in sorted(leaf_cache.ENCODINGS)], tf.int64), encoding)
    raw = tf.io.read_file(tf.gather(tf.constant(self._paths), k))
    x_bytes = n * row_bytes
    x = self._decode_x(tf.strings.substr(raw, tf.constant(0, tf.int64), x_bytes), encoding)
    y = tf.io.decode_raw(tf.strings.substr(raw, x_bytes, 4 * n), tf.int32, little_endian=True)
    x, y = tf.reshape(x, (-1,) + self._shape), tf.reshape(y, [-1])
    if self._thinned:  # kept_positions: floor(i n / m), i < m
      m = tf.gather(tf.constant(self._counts), k)
      positions = tf.range(m) * n // m
      x, y = tf.gather(x, positions), tf.gather(y, positions)
    return collections.OrderedDict(x=x, y=y)

  def _dataset_fn(self, client_id) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(self._read_client(client_id))

  def select(self, keep: dict[str, int]) -> 'LeafClientData':
    """The clients in `keep` (client id -> how many of the files' examples it keeps,
    `kept_positions`), read from the same cache (see `first_users`)."""
    unknown = sorted(set(keep) - set(self._ids))
    if unknown:
      raise _checks.ArgumentError(argument='keep', value=unknown[0], message=(
          f'{unknown[0]!r} is not a client of this split ({len(unknown)} such ids)'))
    return LeafClientData(self._cache, self._split, keep)

  @property
  def client_ids(self) -> list[str]:
    return list(self._ids)

  @property
  def serializable_dataset_fn(self):
    return self._dataset_fn

  @property
  def element_type_structure(self):
    return self._element_spec

  @property
  def label_counts(self) -> np.ndarray:
    """[num_clients, num_classes] int64: `label_counts[k, c]` examples of class c at client k."""
    return self._label_counts.copy()

  @property
  def client_sizes(self) -> np.ndarray:
    """Number of examples of each client, in `client_ids` order."""
    return self._counts.copy()

  @property
  def num_classes(self) -> int:
    return self._info.num_classes

  @property
  def info(self) -> info_lib.DatasetInfo:
    """Element shape and number of classes, as `dataset_info` gives for the other loaders."""
    return self._info

  @property
  def name(self) -> str:
    """'femnist', 'synthetic', 'celeba' or 'shakespeare'."""
    return self._cache.source.name

  @property
  def split_kind(self) -> str:
    """'sample', 'user' or 'mixed' (`SPLIT_KINDS`), from the users the two splits hold."""
    return self._cache.split_kind

  @property
  def cache_path(self) -> str:
    return self._cache.path

  @property
  def summary_header(self) -> collections.OrderedDict:
    """The lines `describe` prints before the sizes: source and kind of split."""
    return collections.OrderedDict(
        dataset=f'LEAF {self.name}, {self._split} split of {self._cache.source.data_dir}',
        split=SPLIT_KINDS[self.split_kind])


def kept_positions(n: int, m: int) -> np.ndarray:
  """The positions of the `m` of `n` examples a thinned client keeps, `floor(i n / m)` for
  i < m: evenly spaced from the first, in file order."""
  return np.arange(m, dtype=np.int64) * n // m


def first_users(train: LeafClientData, test: LeafClientData, *,
                num_clients: Optional[int] = None, max_examples: Optional[int] = None,
                max_test_examples: Optional[int] = None
                ) -> tuple[LeafClientData, LeafClientData]:
  """Some users of a LEAF dataset, each with fewer examples: a population a CPU can train.

  Args:
    train, test: the two splits `leaf` returns.
    num_clients: keep the first `num_clients` training users (sorted ids) and, unless the split
      is user-based ('user': its test users are others), the same users of `test`. None: all.
    max_examples: keep at most this many training examples per user, `kept_positions`: evenly
      spaced over the user's examples; its test examples are thinned by the same factor,
      `ceil(n_test * max_examples / n_train)` of them (at least 1), so the train / test
      proportion stays the files' (users only in test keep at most `max_examples`). None: all.
    max_test_examples: instead, keep at most this many test examples per user, evenly spaced
      (`kept_positions`), whatever its training examples: a test split large enough that one
      evaluation's sampling error is small. None: as `max_examples` says.

  Returns:
    `(train, test)` `LeafClientData` with `client_sizes` and `label_counts` of what they keep.

  Raises:
    ValueError: `num_clients` larger than the training users, or a bad argument (named).
  """
  for name, value in (('max_examples', max_examples), ('max_test_examples', max_test_examples)):
    if value is not None:
      _checks.check_int(name, value, minimum=1)
  if num_clients is not None:
    train, test = client_data_lib.first_clients(train, test, num_clients,
                                                 what=f'users of LEAF {train.name}')
  sizes = dict(zip(train.client_ids, train.client_sizes.tolist()))

  def thinned(n: int, n_train: Optional[int]) -> int:
    """How many of a user's n examples it keeps, given its n_train training examples."""
    if max_examples is None:
      return n
    if not n_train:  # a user only in test
      return min(n, max_examples)
    return max(1, min(n, math.ceil(n * max_examples / n_train)))

  def test_kept(n: int, n_train: Optional[int]) -> int:
    return thinned(n, n_train) if max_test_examples is None else min(n, max_test_examples)

  if max_examples is None and max_test_examples is None:
    return train, test
  return (train.select({u: thinned(n, n) for u, n in sizes.items()}),
          test.select({u: test_kept(n, sizes.get(u))
                       for u, n in zip(test.client_ids, test.client_sizes.tolist())}))


def leaf(root, *, name: Optional[str] = None, cache_dir=None, image_dir=None):
  """LEAF's FEMNIST, Synthetic, CelebA or Shakespeare as TFF `ClientData` `(train, test)`, from
  its JSON.

  Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv:1812.01097.

  Reads the output of LEAF's `preprocess.sh` (github.com/TalwalkarLab/leaf): the JSON files
  `train/*.json` and `test/*.json`, each `{"users": [...], "num_samples": [...],
  "user_data": {user: {"x": [...], "y": [...]}}}`. Every user listed in a split's files is a
  client, with id the LEAF user name (client ids are sorted) and its examples in file order;
  the train/test split is exactly the files'. Which kind of split the files hold is detected
  and reported by `train.split_kind` and `describe(train)`: 'sample' (the same users in train
  and test: LEAF's `-t sample`, which LEAF's reference models require), 'user' (disjoint
  users: `-t user`) or 'mixed'.

  Elements are UNBATCHED examples `OrderedDict(x=float32 [...], y=int32 scalar)`, with LEAF's
  own sizes and value conventions (what its reference models in `models/<name>/` receive):

  * femnist: x `[28, 28, 1]`, the 784 values of a row in row-major order, in [0, 1] (LEAF's
    pixel / 255: 1.0 is the white background, as in TFF's EMNIST); y in 0..61 (digits, upper
    case, lower case).
  * synthetic: x `[D]` as in the files (LEAF's `-num-dim`, 60 in its README); y in
    0..C-1 where C is the largest label in either split + 1 (LEAF's `-num-classes`).
  * celeba: x `[84, 84, 3]`, the image named in the file read from `image_dir` and resized as
    LEAF's CNN does (Pillow's `Image.resize((84, 84))` with its default filter, then RGB), the
    pixel values 0..255 unscaled; y the `Smiling` attribute, 0 or 1.
  * shakespeare: x int32 `[80]`, the ids of an 80-character string in LEAF's 80 letters
    (`leaf_cache.SHAKESPEARE_LETTERS`, its `ALL_LETTERS`); y int32, the id of the next
    character. A character outside them gets the last id, 79 (`}`), as LEAF's labels do
    (`letter_to_vec`); LEAF's own x would hold -1 there, which an embedding cannot look up.
    The files: LEAF's `data/shakespeare` or `tools/shakespeare_leaf.py`'s.

  Conversion: the first call (or the first after the files changed) streams the JSON files
  into a cache, holding only a few MB of the text at a time, and reads the CelebA images once;
  later calls open the cache directly. The cache goes next to the data,
  `<data dir>/tff_conflict_cache`, or under `cache_dir`.

  Args:
    root: LEAF's dataset folder `data/<name>` (or its `data/<name>/data` folder holding
      `train/` and `test/`), or LEAF's checkout with `name` given.
    name: 'femnist', 'synthetic', 'celeba' or 'shakespeare'; default: the dataset folder's
      name.
    cache_dir: where to keep the converted cache (default: next to the data).
    image_dir: celeba only: the folder of the aligned CelebA images (default: LEAF's
      `data/celeba/data/raw/img_align_celeba`).

  Returns:
    `(train, test)`, two `LeafClientData` (`tff.simulation.datasets.ClientData`).

  Raises:
    FileNotFoundError: no `train/` and `test/` with JSON files under `root`, or a missing
      CelebA image (named).
    ValueError: an unknown or unsupported `name` (Sent140 and Reddit, word-level text, are
      not supported); `leaf_json.LeafFormatError` (a `ValueError`) naming the file for a
      truncated or malformed file, a user listed without data, x and y of different lengths,
      `num_samples` disagreeing with the data, rows (or strings) of the wrong length, labels
      out of range (or not one character) or a user in two files of a split. Nothing is cached
      then.
    OSError: the cache cannot be written there (pass `cache_dir`).
  """
  source = leaf_cache.resolve_source(root, name, image_dir)
  cache = leaf_cache.open_or_build(source, leaf_cache.default_cache_path(source, cache_dir))
  return LeafClientData(cache, 'train'), LeafClientData(cache, 'test')


def _load(regime, *, seed, source=None, cache_dir=None):
  """The regime `leaf_<name>:natural[(max=N[,test=T])][@K]` from `source`, the leaf_dir
  (`first_users`)."""
  del seed
  _check_leaf_dir(regime.name, source)
  train, test = leaf(source, name=regime.dataset[len('leaf_'):], cache_dir=cache_dir)
  if regime.num_clients is None and not regime.param:
    return train, test
  limits = tuple(regime.param) + (None, None)
  return first_users(train, test, num_clients=regime.num_clients, max_examples=limits[0],
                     max_test_examples=limits[1])


def _check_leaf_dir(what: str, leaf_dir) -> None:
  if leaf_dir is None:
    raise _checks.ArgumentError(argument='leaf_dir', value=leaf_dir, message=(
        f"regime {what!r} needs leaf_dir, LEAF's data/<name> folder"))


def _files(name: str, leaf_dir=None) -> tuple[str, list[str]]:
  _check_leaf_dir(f'leaf_{name}', leaf_dir)
  source = leaf_cache.resolve_source(leaf_dir, name)
  return source.data_dir, [p for split in leaf_cache.SPLITS for p in source.files(split)]


# LEAF's reference models (`models/<name>/`), but Shakespeare's small GRU for the CPU (LEAF's is
# `leaf_shakespeare_lstm`); LEAF Synthetic's shape and classes are its files'.
DATASETS = tuple(
    info_lib.Dataset(f'leaf_{name}', shape, classes, loader=f'leaf(root, name={name!r})',
                     model=model, files=functools.partial(_files, name), source='leaf_dir',
                     load=_load)
    for name, shape, classes, model in (
        ('femnist', (28, 28, 1), 62, 'leaf_femnist_cnn'),
        ('synthetic', None, None, 'logistic_regression'),
        ('celeba', (84, 84, 3), 2, 'leaf_celeba_cnn'),
        ('shakespeare', (leaf_cache.SHAKESPEARE_SEQ_LENGTH,), len(leaf_cache.SHAKESPEARE_LETTERS),
         'shakespeare_gru')))

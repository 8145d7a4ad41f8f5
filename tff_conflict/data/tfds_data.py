"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from tensorflow-datasets, Dirichlet-split; never
downloads (the data must already be prepared in `data_dir`); the regimes of `DATASETS` read
CIFAR-10 and CIFAR-100 from here (MNIST and Fashion-MNIST from their IDX files)."""

import functools
import os

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import array_split
from tff_conflict.data import info

# name -> (image shape [H, W, C], number of classes)
IMAGE_SETS = {
    'mnist': ((28, 28, 1), 10),
    'fashion_mnist': ((28, 28, 1), 10),
    'cifar10': ((32, 32, 3), 10),
    'cifar100': ((32, 32, 3), 100),
}


def _default_data_dir(tfds) -> str:
  return os.environ.get('TFDS_DATA_DIR') or tfds.core.constants.DATA_DIR


def load_arrays(name: str, data_dir=None):
  """`((x_train, y_train), (x_test, y_test))` as numpy: x uint8 [N, H, W, C], y int32 [N].

  Raises:
    ValueError: unknown `name`.
    FileNotFoundError: the dataset is not prepared in `data_dir` (no download is tried).
  """
  _checks.check_choice('name', name, sorted(IMAGE_SETS))
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
  shape, _ = IMAGE_SETS[name]

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
  _checks.check_choice('name', name, sorted(IMAGE_SETS))
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  seed = _checks.check_int('seed', seed, minimum=0)
  _, num_classes = IMAGE_SETS[name]
  regime = info.Regime(name, 'dir', (alpha,), num_clients)
  return array_split.split_arrays(regime, load_arrays(name, data_dir), num_clients, seed=seed,
                                  num_classes=num_classes, transform=array_split.scale_to_unit)


def _files(name: str, data_dir=None) -> tuple[str, list[str]]:
  """The prepared dataset's folder `<data_dir>/<name>` and every file under it."""
  where = os.path.abspath(os.path.expanduser(os.fspath(data_dir))) if data_dir is not None else (
      os.path.abspath(os.environ.get('TFDS_DATA_DIR') or
                      os.path.join(os.path.expanduser('~'), 'tensorflow_datasets')))
  folder = os.path.join(where, name)
  if not os.path.isdir(folder):
    raise FileNotFoundError(f'tensorflow-datasets dataset {name!r} is not prepared in '
                            f'data_dir={where!r} (no folder {folder})')
  return folder, sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names)


# The regimes' tfds data sets and their models: FedAvg's CIFAR CNN (McMahan et al. 2017).
MODELS = {'cifar10': 'cifar_cnn', 'cifar100': 'cifar_cnn'}
DATASETS = tuple(
    info.Dataset(name, IMAGE_SETS[name][0], IMAGE_SETS[name][1],
                 loader=f'tfds_dirichlet({name!r}, ...)', model=model,
                 files=functools.partial(_files, name), source='data_dir', num_clients=100,
                 arrays=functools.partial(load_arrays, name), transform=array_split.scale_to_unit)
    for name, model in MODELS.items())

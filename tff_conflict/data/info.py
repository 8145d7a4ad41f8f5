"""Element shapes, dtypes and numbers of classes of the data sets `tff_conflict.data` loads."""

import dataclasses

from tff_conflict import _checks


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What one element `OrderedDict(x=..., y=...)` of a data set looks like.

  `x` is float32 with shape `element_shape` (LEAF Shakespeare's: int32 character ids); `y` is an
  int32 scalar in `[0, num_classes)`.
  """
  name: str
  element_shape: tuple
  num_classes: int
  loader: str


_INFOS = {
    'digits': DatasetInfo('digits', (8, 8, 1), 10, 'digits()'),
    'synthetic': DatasetInfo('synthetic', (60,), 10, 'synthetic(alpha, beta)'),
    'emnist': DatasetInfo('emnist', (28, 28, 1), 62, 'emnist(only_digits=False)'),
    'emnist_digits': DatasetInfo('emnist_digits', (28, 28, 1), 10, 'emnist(only_digits=True)'),
    'mnist': DatasetInfo('mnist', (28, 28, 1), 10, "tfds_dirichlet('mnist', ...)"),
    'fashion_mnist': DatasetInfo('fashion_mnist', (28, 28, 1), 10, 'fashion_mnist()'),
    'cifar10': DatasetInfo('cifar10', (32, 32, 3), 10, "tfds_dirichlet('cifar10', ...)"),
    'cifar100': DatasetInfo('cifar100', (32, 32, 3), 100, "tfds_dirichlet('cifar100', ...)"),
    # LEAF Synthetic's shape and classes are the files' (`leaf(...)[0].info`).
    'leaf_femnist': DatasetInfo('leaf_femnist', (28, 28, 1), 62, "leaf(root, name='femnist')"),
    'leaf_celeba': DatasetInfo('leaf_celeba', (84, 84, 3), 2, "leaf(root, name='celeba')"),
    'leaf_shakespeare': DatasetInfo('leaf_shakespeare', (80,), 80,
                                    "leaf(root, name='shakespeare')"),
}

DATASET_NAMES = tuple(_INFOS)


def dataset_info(name: str) -> DatasetInfo:
  """The `DatasetInfo` of 'digits', 'synthetic', 'emnist', 'emnist_digits', 'mnist',
  'fashion_mnist', 'cifar10', 'cifar100', 'leaf_femnist', 'leaf_celeba' or 'leaf_shakespeare';
  `ValueError` for any
  other name (LEAF Synthetic's is `data.leaf(...)[0].info`)."""
  return _INFOS[_checks.check_choice('name', name, DATASET_NAMES)]

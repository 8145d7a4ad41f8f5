"""An array data set split over clients: the training pool partitioned by a NIID-Bench split
(`partition_for`), the test split over the same clients with their label proportions
(`split_arrays`)."""

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib
from tff_conflict.data import partition as partition_lib


def scale_to_unit(pixels):
  """uint8 pixels as float32 in [0, 1]: pixel / 255."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.cast(pixels, tf.float32) / 255.0


def partition_for(split: str, param: tuple, labels: np.ndarray, num_clients: int, *, seed: int,
                  num_classes: int) -> list[np.ndarray]:
  """The partition of training `labels` over `num_clients` clients by an array split ('iid',
  'dir', '#C', 'qty' or 'client_dir' with its `param`, `regimes.Regime`)."""
  if split == 'iid':
    return partition_lib.iid_partition(len(labels), num_clients, seed=seed)
  if split == 'dir':
    return partition_lib.dirichlet_partition(labels, num_clients, param[0], seed=seed)
  if split == '#C':
    return partition_lib.label_quantity_partition(labels, num_clients, param[0], seed=seed,
                                                  num_classes=num_classes)
  if split == 'qty':
    return partition_lib.quantity_skew_partition(len(labels), num_clients, param[0], seed=seed)
  if split == 'client_dir':
    return partition_lib.client_dirichlet_partition(labels, num_clients, param[0], seed=seed)
  raise _checks.ArgumentError(argument='split', value=split, message=(
      f'{split!r} is not an array split'))


def split_arrays(regime, arrays, num_clients: int, *, seed: int, num_classes: int,
                 transform=None):
  """`(train, test)` `ArrayClientData` of `arrays` = ((x_train, y_train), (x_test, y_test)) split
  as `regime` (a `regimes.Regime`) says over `num_clients` clients, the test split partitioned
  over the same clients with each client's training label proportions (`partition_like`), so
  that the test clients together hold the whole test split."""
  (x_train, y_train), (x_test, y_test) = arrays
  if num_clients > y_test.size:
    requirement = f'at most {y_test.size} (one held-out example per client)'
    raise _checks.ArgumentError(
        f'regime {regime.name!r}: num_clients must be {requirement}, got {num_clients}',
        argument='num_clients', value=num_clients, requirement=requirement)
  parts = partition_for(regime.split, regime.param, y_train, num_clients, seed=seed,
                        num_classes=num_classes)
  train = client_data_lib.ArrayClientData(x_train, y_train, parts, transform=transform,
                                          num_classes=num_classes)
  if (train.client_sizes == 0).any():
    raise _checks.ArgumentError(argument='regime', value=regime, message=(
        f'regime {regime.name!r} left a client without examples'))
  test_parts = partition_lib.partition_like(y_test, train.label_counts, seed=seed)
  test = client_data_lib.ArrayClientData(x_test, y_test, test_parts, transform=transform,
                                         num_classes=num_classes)
  return train, test

"""scikit-learn's bundled 8x8 digits, split over clients with Dirichlet label skew (offline; the
default data of the README's main command and of the tests).
"""

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import array_split
from tff_conflict.data import info

NUM_CLASSES = 10
IMAGE_SHAPE = (8, 8, 1)
TEST_FRACTION = 0.2
# The holdout is drawn once, with this seed, whatever the seed of the partition: every seed of a
# benchmark (and its tuning, which splits validation off the training pool) sees the same test
# images and never trains or tunes on them.
HOLDOUT_SEED = 0


def load_digits_arrays():
  """The 1,797 digits as `(x, y)`: x float32 [N, 8, 8, 1] in [0, 1] (pixel / 16), y int32 [N]."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  bunch = datasets.load_digits()
  x = (bunch.images / 16.0).astype(np.float32)[..., None]
  return x, bunch.target.astype(np.int32)


def load_arrays(data_dir=None):
  """`((x_train, y_train), (x_test, y_test))`: the digits split by `holdout_split` (the same for
  every seed); `data_dir` is ignored (the data is bundled)."""
  del data_dir
  x, y = load_digits_arrays()
  train_idx, test_idx = holdout_split(y, TEST_FRACTION, HOLDOUT_SEED)
  return (x[train_idx], y[train_idx]), (x[test_idx], y[test_idx])


def holdout_split(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Stratified split: `round(fraction * n_c)` random examples of each class c are held out.

  Returns (train_indices, test_indices), each sorted.
  """
  rng = np.random.default_rng(seed)
  train, test = [], []
  for c in np.unique(y):
    members = rng.permutation(np.flatnonzero(y == c))
    n_test = int(round(fraction * members.size))
    test.append(members[:n_test])
    train.append(members[n_test:])
  return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def digits(*, num_clients=20, alpha=0.1, seed=0):
  """scikit-learn's digits as TFF `ClientData` (train, test) with Dirichlet label skew.

  1,797 images: `round(0.2 n_c)` random examples of each class c (359 in all) are held out as the
  test split, drawn once (`HOLDOUT_SEED`, independent of `seed`: every seed tests on the same
  images and none of them is ever in a training pool); the other 1,438 are split over
  `num_clients` clients by `dirichlet_partition(alpha, seed)` with at least one example each.
  The test split is partitioned over the same client ids with each client's training label
  proportions (`partition.partition_like`, at least one example each), so per-client evaluation
  sees the client's own label mix, and `test.create_tf_dataset_from_all_clients()` is exactly
  the 359-example centralized test set (what the papers report accuracy on).

  Elements are UNBATCHED examples `OrderedDict(x=float32 [8, 8, 1], y=int32 scalar)`: x is the
  8x8 image scaled from 0..16 to [0, 1], 10 classes. The training code batches them.

  Args:
    num_clients: number of clients, 1..359.
    alpha: Dirichlet concentration > 0 (0.1: strong label skew; 100: about IID).
    seed: integer >= 0 for the partition of the training pool (not the holdout).

  Returns:
    `(train, test)`, two `ArrayClientData` (`tff.simulation.datasets.ClientData`).
  """
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  seed = _checks.check_int('seed', seed, minimum=0)
  regime = info.Regime(DATASET.name, 'dir', (alpha,), num_clients)
  return array_split.split_arrays(regime, load_arrays(), num_clients, seed=seed,
                                  num_classes=NUM_CLASSES)


DATASET = info.Dataset(
    'digits', IMAGE_SHAPE, NUM_CLASSES, loader='digits()', model='digits_cnn',
    files=lambda _: ('bundled', []), num_clients=20, arrays=load_arrays,
    tuning_regime='digits:dir(0.1)')

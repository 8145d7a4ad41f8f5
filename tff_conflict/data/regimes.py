"""Data regimes by name (`parse_regime`, `load_regime`): a dataset and the way it is split over
clients. The names: docs/methods.md, "Data sets and partitions".
"""

import dataclasses
import functools
import re
from typing import Any, Optional

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib
from tff_conflict.data import info as info_lib
from tff_conflict.data import partition as partition_lib

ARRAY_DATASETS = ('digits', 'mnist', 'fashion_mnist', 'cifar10', 'cifar100')
WRITER_DATASETS = ('emnist', 'emnist_digits')
LEAF_DATASETS = ('leaf_femnist', 'leaf_synthetic', 'leaf_celeba', 'leaf_shakespeare')
NATURAL_DATASETS = WRITER_DATASETS + LEAF_DATASETS
DATASETS = ARRAY_DATASETS + NATURAL_DATASETS + ('synthetic',)
ARRAY_SPLITS = ('iid', 'dir', '#C', 'qty', 'client_dir')
DEFAULT_NUM_CLIENTS = {'digits': 20, 'synthetic': 30, 'mnist': 100, 'fashion_mnist': 100,
                       'cifar10': 100, 'cifar100': 100}

# Synthetic's clients and test examples are drawn with this seed for every run's seed.
SYNTHETIC_DATA_SEED = 0

_NUMBER = r'([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)'
_SYNTHETIC = re.compile(rf'^synthetic\(\s*{_NUMBER}\s*,\s*{_NUMBER}\s*\)$')
_SPLITS = {
    'iid': re.compile(r'^iid$'),
    'natural': re.compile(r'^natural(?:\(\s*max\s*=\s*([0-9]+)\s*\))?$'),
    'dir': re.compile(rf'^dir\(\s*{_NUMBER}\s*\)$'),
    '#C': re.compile(r'^#C=([0-9]+)$'),
    'qty': re.compile(rf'^qty\(\s*{_NUMBER}\s*\)$'),
    'client_dir': re.compile(rf'^client_dir\(\s*{_NUMBER}\s*\)$'),
}


def _fmt(value: float) -> str:
  return f'{float(value):g}'


@dataclasses.dataclass(frozen=True)
class Regime:
  """A dataset split over clients.

  Attributes:
    dataset: one of `DATASETS`.
    split: 'iid', 'dir' (Dirichlet label skew, `param` = (alpha,)), '#C' (`param` = (k,)),
      'qty' (quantity skew, `param` = (beta,)), 'client_dir' (per-client Dirichlet class mix,
      equal sizes, `param` = (alpha,)), 'synthetic' (`param` = (alpha, beta)) or 'natural'
      (the dataset's own clients; LEAF's may have `param` = (max_examples,): each client keeps
      at most that many training examples, `leaf_data.first_users`).
    param: the split's parameters.
    num_clients: the population size; None for the dataset's default.
  """
  dataset: str
  split: str
  param: tuple = ()
  num_clients: Optional[int] = None

  @property
  def name(self) -> str:
    """The canonical name, e.g. 'digits:dir(0.1)', 'digits:#C=2@100', 'synthetic(1,1)'."""
    if self.split == 'synthetic':
      text = f'synthetic({_fmt(self.param[0])},{_fmt(self.param[1])})'
    elif self.split in ('dir', 'qty', 'client_dir'):
      text = f'{self.dataset}:{self.split}({_fmt(self.param[0])})'
    elif self.split == '#C':
      text = f'{self.dataset}:#C={self.param[0]}'
    elif self.split == 'natural' and self.param:
      text = f'{self.dataset}:natural(max={self.param[0]})'
    else:
      text = f'{self.dataset}:{self.split}'
    return text if self.num_clients is None else f'{text}@{self.num_clients}'

  @property
  def slug(self) -> str:
    """`name` as a file name: letters, digits, '.', '-' and '_' only."""
    return re.sub(r'[^A-Za-z0-9.=-]+', '_', self.name.replace('#C=', 'C')).strip('_')

  def __str__(self) -> str:
    return self.name


def parse_regime(text: str) -> Regime:
  """Parses `'DATASET:SPLIT[@K]'` or `'synthetic(ALPHA,BETA)[@K]'` (LEAF's natural split also as
  `natural(max=N)`); `ValueError` naming the text otherwise. The splits are NIID-Bench's (`tff_conflict.data.partition`); the names, datasets and
  test splits: docs/methods.md, "Data sets and partitions"."""
  if not isinstance(text, str):
    raise _checks.ArgumentError(argument='regime', value=text, message=(
        f'regime must be a string such as "digits:dir(0.1)", got {text!r}'))
  body = text.strip()
  num_clients = None
  if '@' in body:
    body, _, population = body.rpartition('@')
    if not population.isdigit() or int(population) < 1:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: the population after "@" must be an integer >= 1'))
    num_clients = int(population)
  match = _SYNTHETIC.match(body)
  if match:
    return Regime('synthetic', 'synthetic', (float(match[1]), float(match[2])), num_clients)
  dataset, sep, split = body.partition(':')
  if not sep or dataset not in DATASETS or dataset == 'synthetic':
    raise _checks.ArgumentError(argument='regime', value=text, message=(
        f'regime {text!r} must be DATASET:SPLIT with DATASET in '
        f'{[d for d in DATASETS if d != "synthetic"]}, or synthetic(ALPHA,BETA)'))
  for kind, pattern in _SPLITS.items():
    match = pattern.match(split.strip())
    if match:
      break
  else:
    raise _checks.ArgumentError(argument='regime', value=text, message=(
        f'regime {text!r}: the split must be iid, dir(ALPHA), #C=K, qty(BETA), '
        f'client_dir(ALPHA), natural or (LEAF) natural(max=N), got {split!r}'))
  if dataset in NATURAL_DATASETS and kind != 'natural':
    raise _checks.ArgumentError(argument='regime', value=text, message=(
        f'regime {text!r}: {dataset} keeps its own clients; use {dataset}:natural'))
  if dataset in ARRAY_DATASETS and kind == 'natural':
    raise _checks.ArgumentError(argument='regime', value=text, message=(
        f'regime {text!r}: {dataset} has no natural clients; use iid, dir(ALPHA), '
        '#C=K, qty(BETA) or client_dir(ALPHA)'))
  if kind in ('dir', 'qty', 'client_dir'):
    value = float(match[1])
    if not value > 0:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: the concentration must be > 0, got {value:g}'))
    return Regime(dataset, kind, (value,), num_clients)
  if kind == '#C':
    k = int(match[1])
    classes = info_lib.dataset_info(dataset).num_classes  # array datasets: known
    if not 1 <= k <= classes:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: #C=K needs K in 1..{classes} for {dataset}, got {k}'))
    return Regime(dataset, kind, (k,), num_clients)
  if kind == 'natural' and match[1] is not None:
    if dataset not in LEAF_DATASETS:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: natural(max=N) applies to the LEAF datasets {list(LEAF_DATASETS)}; '
          f'use {dataset}:natural'))
    if int(match[1]) < 1:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: natural(max=N) needs N >= 1, got {match[1]}'))
    return Regime(dataset, kind, (int(match[1]),), num_clients)
  return Regime(dataset, kind, (), num_clients)


def num_classes(regime: Regime) -> int:
  """The regime's number of classes; `ValueError` where only its files tell (LEAF Synthetic:
  `train.info.num_classes` of the loaded data)."""
  return info_lib.dataset_info(regime.dataset).num_classes


def partition_for(regime: Regime, labels: np.ndarray, num_clients: int, *,
                  seed: int) -> list[np.ndarray]:
  """The partition of training `labels` over `num_clients` clients by an array split."""
  if regime.split == 'iid':
    return partition_lib.iid_partition(len(labels), num_clients, seed=seed)
  if regime.split == 'dir':
    return partition_lib.dirichlet_partition(labels, num_clients, regime.param[0], seed=seed)
  if regime.split == '#C':
    return partition_lib.label_quantity_partition(labels, num_clients, regime.param[0], seed=seed,
                                                  num_classes=num_classes(regime))
  if regime.split == 'qty':
    return partition_lib.quantity_skew_partition(len(labels), num_clients, regime.param[0],
                                                 seed=seed)
  if regime.split == 'client_dir':
    return partition_lib.client_dirichlet_partition(labels, num_clients, regime.param[0],
                                                    seed=seed)
  raise _checks.ArgumentError(argument='regime', value=regime, message=(
      f'regime {regime.name!r} is not an array split'))


def _split_arrays(regime, x_train, y_train, x_test, y_test, num_clients, seed, transform=None):
  if num_clients > y_test.size:
    raise _checks.ArgumentError(argument='num_clients', value=num_clients, message=(
        f'regime {regime.name!r}: num_clients must be at most {y_test.size} (one '
        f'held-out example per client), got {num_clients}'))
  classes = num_classes(regime)
  parts = partition_for(regime, y_train, num_clients, seed=seed)
  train = client_data_lib.ArrayClientData(x_train, y_train, parts, transform=transform,
                                          num_classes=classes)
  if (train.client_sizes == 0).any():
    raise _checks.ArgumentError(argument='regime', value=regime, message=(
        f'regime {regime.name!r} left a client without examples'))
  test_parts = partition_lib.partition_like(y_test, train.label_counts, seed=seed)
  test = client_data_lib.ArrayClientData(x_test, y_test, test_parts, transform=transform,
                                         num_classes=classes)
  return train, test


def _first_writers(client_data, num_writers):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  ids = sorted(client_data.client_ids)
  if num_writers > len(ids):
    raise _checks.ArgumentError(argument='num_clients', value=num_writers, message=(
        f'num_clients={num_writers} is larger than the {len(ids)} writers'))
  keep = ids[:num_writers]
  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      keep, client_data.serializable_dataset_fn)


@functools.lru_cache(maxsize=2)
def _stored_arrays(name: str, data_dir: Optional[str]):
  """An image dataset's uint8 arrays, read once for every regime and seed that splits it:
  Fashion-MNIST's IDX files (`fashion_mnist_data`), the others' tensorflow-datasets copy."""
  if name == 'fashion_mnist':
    from tff_conflict.data import fashion_mnist_data  # pylint: disable=g-import-not-at-top
    return fashion_mnist_data.load_arrays(data_dir)
  from tff_conflict.data import tfds_data  # pylint: disable=g-import-not-at-top
  return tfds_data.load_arrays(name, data_dir)


def load_regime(regime: Regime, *, seed: int = 0, cache_dir: Optional[str] = None,
                data_dir: Optional[str] = None, leaf_dir: Optional[str] = None
                ) -> tuple[Any, Any]:
  """Loads the `(train, test)` client data of `regime`.

  Args:
    regime: a `Regime` (`parse_regime`).
    seed: integer >= 0: the partition of the training pool (array datasets) or Synthetic's
      training examples. The test split never depends on it: digits' holdout is drawn once
      (`digits_data.HOLDOUT_SEED`), Fashion-MNIST (its official 10,000 test images), the tfds
      datasets, EMNIST and LEAF have their own test split, and Synthetic's clients (their
      models, input means, sizes and test examples) are drawn once (`SYNTHETIC_DATA_SEED`); so
      every seed, and tuning (which carves its validation split from the training pool), sees
      the same test examples and never trains on them.
    cache_dir: emnist: the directory holding `emnist_all.sqlite`; LEAF: where its converted
      cache goes (default: next to the data).
    data_dir: fashion_mnist: the folder of its four IDX files (default: Debian's
      /usr/share/datasets/fashion-mnist, then Keras's ~/.keras/datasets/fashion-mnist); mnist,
      cifar10, cifar100: the tensorflow-datasets data directory.
    leaf_dir: LEAF datasets: LEAF's `data/<name>` folder. `@K` keeps the first K users (sorted
      ids) and, unless the files' split is user-based, the same users' test examples;
      `natural(max=N)` thins each user's examples (`leaf_data.first_users`).

  Returns:
    `(train, test)` `tff.simulation.datasets.ClientData` of unbatched `OrderedDict(x, y)`.

  Raises:
    ValueError: a bad argument or a split the data cannot satisfy (named in the message), or a
      damaged Fashion-MNIST file (`idx.IdxFormatError`, naming it).
    FileNotFoundError: emnist, Fashion-MNIST or a tfds dataset that is not on disk.
  """
  if not isinstance(regime, Regime):
    regime = parse_regime(regime)
  seed = _checks.check_int('seed', seed, minimum=0)
  num_clients = regime.num_clients or DEFAULT_NUM_CLIENTS.get(regime.dataset)
  if regime.dataset == 'synthetic':
    from tff_conflict.data import synthetic_data  # pylint: disable=g-import-not-at-top
    return synthetic_data.synthetic(*regime.param, num_clients=num_clients,
                                    seed=SYNTHETIC_DATA_SEED, train_seed=seed)
  if regime.dataset in LEAF_DATASETS:
    if leaf_dir is None:
      raise _checks.ArgumentError(argument='leaf_dir', value=leaf_dir, message=(
          f'regime {regime.name!r} needs leaf_dir, LEAF\'s data/<name> folder'))
    from tff_conflict.data import leaf_data  # pylint: disable=g-import-not-at-top
    train, test = leaf_data.leaf(leaf_dir, name=regime.dataset[len('leaf_'):],
                                 cache_dir=cache_dir)
    if regime.num_clients is None and not regime.param:
      return train, test
    return leaf_data.first_users(train, test, num_clients=regime.num_clients,
                                 max_examples=regime.param[0] if regime.param else None)
  if regime.dataset in WRITER_DATASETS:
    from tff_conflict.data import emnist_data  # pylint: disable=g-import-not-at-top
    train, test = emnist_data.emnist(only_digits=regime.dataset == 'emnist_digits',
                                     cache_dir=cache_dir)
    if regime.num_clients is not None:
      train = _first_writers(train, regime.num_clients)
    return train, test
  if regime.dataset == 'digits':
    from tff_conflict.data import digits_data  # pylint: disable=g-import-not-at-top
    x, y = digits_data.load_digits_arrays()
    train_idx, test_idx = digits_data.holdout_split(y, digits_data.TEST_FRACTION,
                                                    digits_data.HOLDOUT_SEED)
    return _split_arrays(regime, x[train_idx], y[train_idx], x[test_idx], y[test_idx],
                         num_clients, seed)
  from tff_conflict.data import tfds_data  # pylint: disable=g-import-not-at-top
  (x_train, y_train), (x_test, y_test) = _stored_arrays(regime.dataset, data_dir)
  return _split_arrays(regime, x_train, y_train, x_test, y_test, num_clients, seed,
                       transform=tfds_data._scale_to_unit)  # pylint: disable=protected-access

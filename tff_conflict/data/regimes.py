"""Data regimes by name (`parse_regime`, `load_regime`): a dataset and the way it is split over
clients, loaded through the data set's entry in `registry.DATASETS`. The names: docs/methods.md,
"Data sets and partitions".
"""

import functools
import re
from typing import Any, Optional

from tff_conflict import _checks
from tff_conflict.data import array_split
from tff_conflict.data import registry
from tff_conflict.data.info import Regime
from tff_conflict.data.synthetic_data import SYNTHETIC_DATA_SEED  # re-exported (docs, tests)

# Views of `registry.DATASETS`: array data sets take every NIID-Bench split, the others keep
# their own clients (`natural`), and Synthetic is generated.
ARRAY_DATASETS = tuple(n for n, d in registry.DATASETS.items() if d.arrays is not None)
LEAF_DATASETS = tuple(n for n in registry.DATASETS if n.startswith('leaf_'))
NATURAL_DATASETS = tuple(n for n, d in registry.DATASETS.items()
                         if d.arrays is None and n != 'synthetic')
WRITER_DATASETS = tuple(n for n in NATURAL_DATASETS if n not in LEAF_DATASETS)
DATASETS = tuple(registry.DATASETS)
ARRAY_SPLITS = ('iid', 'dir', '#C', 'qty', 'client_dir')
DEFAULT_NUM_CLIENTS = {n: d.num_clients for n, d in registry.DATASETS.items() if d.num_clients}
DEFAULT_TUNING_REGIMES = {n: d.tuning_regime for n, d in registry.DATASETS.items()
                          if d.tuning_regime}

_NUMBER = r'([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)'
_SYNTHETIC = re.compile(rf'^synthetic\(\s*{_NUMBER}\s*,\s*{_NUMBER}\s*\)$')
_SPLITS = {
    'iid': re.compile(r'^iid$'),
    'natural': re.compile(r'^natural(?:\(\s*max\s*=\s*([0-9]+)\s*'
                          r'(?:,\s*test\s*=\s*([0-9]+)\s*)?\))?$'),
    'dir': re.compile(rf'^dir\(\s*{_NUMBER}\s*\)$'),
    '#C': re.compile(r'^#C=([0-9]+)$'),
    'qty': re.compile(rf'^qty\(\s*{_NUMBER}\s*\)$'),
    'client_dir': re.compile(rf'^client_dir\(\s*{_NUMBER}\s*\)$'),
}


def parse_regime(text: str) -> Regime:
  """Parses `'DATASET:SPLIT[@K]'` or `'synthetic(ALPHA,BETA)[@K]'` (LEAF's natural split also as
  `natural(max=N)` or `natural(max=N,test=T)`); `ValueError` naming the text otherwise. The
  splits are NIID-Bench's
  (`tff_conflict.data.partition`); the names, datasets and test splits: docs/methods.md, "Data
  sets and partitions"."""
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
        f'client_dir(ALPHA), natural or (LEAF) natural(max=N[,test=T]), got {split!r}'))
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
    classes = registry.dataset_info(dataset).num_classes  # array datasets: known
    if not 1 <= k <= classes:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: #C=K needs K in 1..{classes} for {dataset}, got {k}'))
    return Regime(dataset, kind, (k,), num_clients)
  if kind == 'natural' and match[1] is not None:
    if dataset not in LEAF_DATASETS:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: natural(max=N) applies to the LEAF datasets {list(LEAF_DATASETS)}; '
          f'use {dataset}:natural'))
    limits = tuple(int(m) for m in match.groups() if m is not None)
    if min(limits) < 1:
      raise _checks.ArgumentError(argument='regime', value=text, message=(
          f'regime {text!r}: natural(max=N[,test=T]) needs N >= 1 and T >= 1'))
    return Regime(dataset, kind, limits, num_clients)
  return Regime(dataset, kind, (), num_clients)


def num_classes(regime: Regime) -> int:
  """The regime's number of classes; `ValueError` where only its files tell (LEAF Synthetic:
  `train.info.num_classes` of the loaded data)."""
  return registry.dataset_info(regime.dataset).num_classes


@functools.lru_cache(maxsize=2)
def _stored_arrays(name: str, source: Optional[str]):
  """An array data set's arrays (`info.Dataset.arrays`), read once for every regime and seed
  that splits it."""
  return registry.get(name).arrays(source)


def load_regime(regime: Regime, *, seed: int = 0, cache_dir: Optional[str] = None,
                data_dir: Optional[str] = None, leaf_dir: Optional[str] = None
                ) -> tuple[Any, Any]:
  """Loads the `(train, test)` client data of `regime` through its data set's entry
  (`registry.DATASETS`): an array data set's arrays split by `array_split.split_arrays`, any
  other's own `load`.

  Args:
    regime: a `Regime` or its name (`parse_regime`).
    seed: integer >= 0: the partition of the training pool (array datasets) or Synthetic's
      training examples. The test split never depends on it: digits' holdout is drawn once
      (`digits_data.HOLDOUT_SEED`), MNIST and Fashion-MNIST (their official 10,000 test
      images), the tfds datasets, EMNIST and LEAF have their own test split, and Synthetic's
      clients (their models, input means, sizes and test examples) are drawn once
      (`SYNTHETIC_DATA_SEED`); so every seed, and tuning (which carves its validation split from
      the training pool), sees the same test examples and never trains on them.
    cache_dir: emnist: the directory holding `emnist_all.sqlite`; LEAF: where its converted
      cache goes (default: next to the data).
    data_dir: mnist, fashion_mnist: the folder of their four IDX files (defaults:
      `mnist_data`, `fashion_mnist_data`); cifar10, cifar100: the tensorflow-datasets data
      directory.
    leaf_dir: LEAF datasets: LEAF's `data/<name>` folder. `@K` keeps the first K users (sorted
      ids) and, unless the files' split is user-based, the same users' test examples;
      `natural(max=N)` thins each user's examples and `natural(max=N,test=T)` keeps at most T
      test examples per user (`leaf_data.first_users`). EMNIST's `@K`
      keeps the first K writers in train and test alike (`client_data.first_clients`).

  Returns:
    `(train, test)` `tff.simulation.datasets.ClientData` of unbatched `OrderedDict(x, y)`.

  Raises:
    ValueError: a bad argument or a split the data cannot satisfy (named in the message), or a
      damaged IDX file (`idx.IdxFormatError`, naming it).
    FileNotFoundError: the data set's files are not on disk (nothing is downloaded).
  """
  if not isinstance(regime, Regime):
    regime = parse_regime(regime)
  seed = _checks.check_int('seed', seed, minimum=0)
  entry = registry.get(regime.dataset)
  sources = {'data_dir': data_dir, 'leaf_dir': leaf_dir, 'cache_dir': cache_dir}
  source = sources.get(entry.source)
  if entry.arrays is None:
    return entry.load(regime, seed=seed, source=source, cache_dir=cache_dir)
  return array_split.split_arrays(regime, _stored_arrays(regime.dataset, source),
                                  regime.num_clients or entry.num_clients, seed=seed,
                                  num_classes=entry.num_classes, transform=entry.transform)

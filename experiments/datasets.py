"""The binaries' datasets: a `config.DataConfig`'s (train, test) `ClientData` (`load`), its
classes (`num_classes`) and default model (`default_model`), from `tff_conflict.data`."""

import functools
from typing import Any

from experiments import architectures
from experiments import config

_TFDS = ('mnist', 'cifar10', 'cifar100')
# The DataConfig field (and flag) a loader reads from: its errors name it when it is set.
_SOURCE = {'emnist': 'cache_dir', 'leaf': 'leaf_dir',
           **{name: 'data_dir' for name in ('fashion_mnist',) + _TFDS}}


def _data():
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  return data


@functools.lru_cache(maxsize=2)
def _leaf(leaf_dir, leaf_name, cache_dir):
  """`data.leaf(...)` once per source: the loader, the classes and the model all need it."""
  return _data().leaf(leaf_dir, name=leaf_name, cache_dir=cache_dir)


def _first(train, test, n, what, all_test=False):
  """The first `n` clients of train (sorted ids), and of test the same (all with `all_test`)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  ids = sorted(train.client_ids)
  if n > len(ids):
    raise config.ConfigError('num_clients', n, f'at most the {len(ids)} {what}')
  keep = set(ids[:n])
  select = lambda data: tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      [c for c in data.client_ids if c in keep], data.serializable_dataset_fn)
  return select(train), test if all_test else select(test)


def _load(o: config.DataConfig):
  data, n = _data(), o.num_clients
  sized = {} if n is None else {'num_clients': n}
  if o.dataset == 'digits':
    return data.digits(alpha=o.alpha, seed=o.data_seed, **sized)
  if o.dataset == 'synthetic':
    return data.synthetic(o.synthetic_alpha, o.synthetic_beta, seed=o.data_seed, **sized)
  if o.dataset == 'fashion_mnist':
    return data.fashion_mnist(alpha=o.alpha, seed=o.data_seed, data_dir=o.data_dir, **sized)
  if o.dataset in _TFDS:
    return data.tfds_dirichlet(o.dataset, num_clients=100 if n is None else n, alpha=o.alpha,
                               seed=o.data_seed, data_dir=o.data_dir)
  if o.dataset == 'emnist':
    train, test = data.emnist(only_digits=o.emnist_only_digits, cache_dir=o.cache_dir)
    return (train, test) if n is None else _first(train, test, n, 'EMNIST writers')
  # LEAF's own split; with num_clients, a user-based split keeps every test user.
  train, test = _leaf(o.leaf_dir, o.leaf_name, o.cache_dir)
  return (train, test) if n is None else _first(
      train, test, n, f'users of LEAF {train.name}', all_test=train.split_kind == 'user')


def load(data: config.DataConfig) -> tuple[Any, Any]:
  """(train, test) `ClientData` of `data.dataset` (fashion_mnist and the tfds datasets: 100
  clients by default); the loader's ValueError or OSError as a `ConfigError` naming num_clients,
  its `_SOURCE` or dataset."""
  try:
    return _load(data)
  except (ValueError, OSError) as e:
    source = _SOURCE.get(data.dataset)
    argument = source if source and getattr(data, source) else 'dataset'
    raise config.from_library_error(e, argument, getattr(data, argument),
                                    arguments={'num_clients': 'num_clients'}) from e


def _name(data: config.DataConfig) -> str:
  """The dataset's name in `tff_conflict.data.dataset_info` and `architectures.DEFAULT_MODELS`."""
  if data.dataset == 'leaf':
    return 'leaf_' + _leaf(data.leaf_dir, data.leaf_name, data.cache_dir)[0].name
  return 'emnist_digits' if data.dataset == 'emnist' and data.emnist_only_digits else data.dataset


def num_classes(data: config.DataConfig) -> int:
  if data.dataset == 'leaf':  # LEAF Synthetic's classes are its files'
    return _leaf(data.leaf_dir, data.leaf_name, data.cache_dir)[0].num_classes
  return _data().dataset_info(_name(data)).num_classes


def default_model(data: config.DataConfig) -> str:
  return architectures.DEFAULT_MODELS[_name(data)]

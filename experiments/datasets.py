"""The datasets of the experiment binaries: `DATASETS`, name -> `DatasetSpec` (how to load a
`config.DataConfig`'s (train, test) `ClientData`, its classes and default model).
"""

import dataclasses
import functools
from typing import Any, Callable, Optional, Union

from experiments import config


def _tff():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """How to load a dataset: `load(options) -> (train, test)` ClientData, and its defaults.

  Attributes:
    load: the loader.
    num_classes: classes of the labels (for `leaf`, those of the LEAF dataset in `leaf_dir`).
    default_model: the model used when none is given (`experiments.architectures`): a model
      name, or a function of the options giving one (for `leaf`, of the LEAF dataset found).
    source: the `DataConfig` field (and flag) naming where the data are read from (`leaf_dir`,
      `cache_dir`, `data_dir`), to which the loader's errors are attributed when it is set;
      otherwise they are attributed to `dataset`.
  """
  load: Callable[[config.DataConfig], tuple[Any, Any]]
  num_classes: Callable[[config.DataConfig], int]
  default_model: Union[str, Callable[[config.DataConfig], str]]
  source: Optional[str] = None

  def default_model_for(self, options: config.DataConfig) -> str:
    if callable(self.default_model):
      return self.default_model(options)
    return self.default_model


def _data():
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  return data


def _kwargs(options: config.DataConfig, **kwargs):
  if options.num_clients is not None:
    kwargs['num_clients'] = options.num_clients
  return kwargs


def _load_digits(options):
  return _data().digits(**_kwargs(options, alpha=options.alpha, seed=options.data_seed))


def _load_emnist(options):
  train, test = _data().emnist(only_digits=options.emnist_only_digits,
                               cache_dir=options.cache_dir)
  if options.num_clients is not None:
    ids = sorted(train.client_ids)
    if options.num_clients > len(ids):
      raise ValueError(f'num_clients={options.num_clients} is larger than the {len(ids)} EMNIST '
                       'writers')
    keep = set(ids[:options.num_clients])
    train = _select(train, keep)
    test = _select(test, keep & set(test.client_ids))
  return train, test


def _select(client_data, keep):
  """`client_data` restricted to the clients in `keep`."""
  ids = [c for c in client_data.client_ids if c in keep]
  return _tff().simulation.datasets.ClientData.from_clients_and_tf_fn(
      ids, client_data.serializable_dataset_fn)


def _load_synthetic(options):
  return _data().synthetic(options.synthetic_alpha, options.synthetic_beta,
                           **_kwargs(options, seed=options.data_seed))


def _tfds_loader(name):
  def load(options):
    return _data().tfds_dirichlet(name, **_kwargs(options, alpha=options.alpha,
                                                  seed=options.data_seed,
                                                  data_dir=options.data_dir))
  return load


def _tfds_num_clients_default(load):
  """tfds_dirichlet has no default population size; use 100 clients unless given."""
  def wrapped(options):
    if options.num_clients is None:
      options = dataclasses.replace(options, num_clients=100)
    return load(options)
  return wrapped


@functools.lru_cache(maxsize=2)
def _leaf_data(leaf_dir, leaf_name, cache_dir):
  """`data.leaf(...)` once per source: the loader, the classes and the model all need it."""
  return _data().leaf(leaf_dir, name=leaf_name, cache_dir=cache_dir)


def _leaf_of(options):
  return _leaf_data(options.leaf_dir, options.leaf_name, options.cache_dir)


def _load_leaf(options):
  """LEAF's own train/test files; with --num_clients, the first N users (sorted) of train, and
  of test the same users for a sample-based split (all test users for a user-based one)."""
  train, test = _leaf_of(options)
  if options.num_clients is None:
    return train, test
  ids = train.client_ids
  if options.num_clients > len(ids):
    raise ValueError(f'num_clients={options.num_clients} is larger than the {len(ids)} users of '
                     f'LEAF {train.name}')
  keep = set(ids[:options.num_clients])
  if train.split_kind == 'user':
    return _select(train, keep), test
  return _select(train, keep), _select(test, keep & set(test.client_ids))


# Default model per LEAF dataset: LEAF's reference models.
LEAF_MODELS = {'femnist': 'leaf_femnist_cnn', 'synthetic': 'logistic_regression',
               'celeba': 'leaf_celeba_cnn'}


def _num_classes(name):
  return lambda options: _data().dataset_info(name).num_classes


def _tfds(name, model):
  return DatasetSpec(_tfds_num_clients_default(_tfds_loader(name)), _num_classes(name), model,
                     'data_dir')


DATASETS: dict[str, DatasetSpec] = {
    'digits': DatasetSpec(_load_digits, _num_classes('digits'), 'digits_cnn'),
    'emnist': DatasetSpec(
        _load_emnist,
        lambda o: _data().dataset_info('emnist_digits' if o.emnist_only_digits else 'emnist'
                                       ).num_classes,
        'emnist_cnn', 'cache_dir'),
    'synthetic': DatasetSpec(_load_synthetic, _num_classes('synthetic'), 'logistic_regression'),
    'mnist': _tfds('mnist', 'fedavg_cnn'),
    'fashion_mnist': _tfds('fashion_mnist', 'fedavg_cnn'),
    'cifar10': _tfds('cifar10', 'cifar_cnn'),
    'cifar100': _tfds('cifar100', 'cifar_cnn'),
    'leaf': DatasetSpec(_load_leaf, lambda o: _leaf_of(o)[0].num_classes,
                        lambda o: LEAF_MODELS[_leaf_of(o)[0].name], 'leaf_dir'),
}


def load(data: config.DataConfig) -> tuple[Any, Any]:
  """(train, test) `ClientData` of `data.dataset`.

  Raises:
    config.ConfigError: the loader refused a setting or what it points at (too many clients, a
      missing or malformed data file: the loaders' ValueError and OSError), attributed to the
      spec's `source` when it is set, else to `dataset`; the message is the loader's.
  """
  spec = DATASETS[data.dataset]
  try:
    return spec.load(data)
  except (ValueError, OSError) as e:
    source = spec.source if spec.source and getattr(data, spec.source) else None
    argument, value = (source, getattr(data, source)) if source else ('dataset', data.dataset)
    raise config.from_library_error(e, argument, value) from e

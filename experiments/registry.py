"""Name -> builder registries of the experiment binaries (no if/elif ladders).

* `DATASETS`: dataset name -> `DatasetSpec` (loader over `tff_conflict.data`, classes, default
  model; for `leaf`, the classes and model follow the LEAF dataset found in `--leaf_dir`).
* `OPTIMIZERS`: optimizer name -> builder of a `tff.learning.optimizers.Optimizer`
  (`build_optimizer(config.client)`).
* `ALGORITHM_HPARAMS`: algorithm name -> {builder keyword: flag name}, the method
  hyperparameters each `tff_conflict.learning.ALGORITHMS` builder takes from the flags.
* `LOSS_HPARAMS`, `AGGREGATOR_HPARAMS`: the same for the free composition
  (`--algorithm=custom --client_loss=... --aggregator=...`, `tff_conflict.learning.build_process`).

The algorithms themselves are the project's builders, `tff_conflict.learning.ALGORITHMS`.
"""

import dataclasses
import functools
from typing import Any, Callable, Mapping, Union

from experiments import config
from tff_conflict import hparams

CUSTOM_ALGORITHM = config.CUSTOM_ALGORITHM

# The data settings (`config.DataConfig`), under the name the loaders below always used.
DataOptions = config.DataConfig


def _tff():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """How to load a dataset: `load(options) -> (train, test)` ClientData, and its defaults.

  Attributes:
    load: the loader.
    num_classes: classes of the labels.
    default_model: the model used when none is given: a model name, or a function of the
      options giving one.
    arguments: the loader's argument names (or the start of its messages) -> the flags that set
      them, so that an error the loader raises for an argument names the flag
      (`config.translate_message`).
  """
  load: Callable[[DataOptions], tuple[Any, Any]]
  num_classes: Callable[[DataOptions], int]
  default_model: Union[str, Callable[[DataOptions], str]]
  arguments: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def default_model_for(self, options: DataOptions) -> str:
    if callable(self.default_model):
      return self.default_model(options)
    return self.default_model


def _data():
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  return data


def _kwargs(options: DataOptions, **kwargs):
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
  if leaf_dir is None:
    raise ValueError('--dataset=leaf needs --leaf_dir (the LEAF dataset folder data/<name>)')
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


_SPLIT_ARGUMENTS = {'num_clients': 'num_clients', 'alpha': 'alpha', 'seed': 'data_seed'}
_TFDS_ARGUMENTS = dict(_SPLIT_ARGUMENTS, data_dir='data_dir')


def _tfds(name, model):
  return DatasetSpec(_tfds_num_clients_default(_tfds_loader(name)), _num_classes(name), model,
                     _TFDS_ARGUMENTS)


DATASETS: dict[str, DatasetSpec] = {
    'digits': DatasetSpec(_load_digits, _num_classes('digits'), 'digits_cnn', _SPLIT_ARGUMENTS),
    'emnist': DatasetSpec(
        _load_emnist,
        lambda o: _data().dataset_info('emnist_digits' if o.emnist_only_digits else 'emnist'
                                       ).num_classes,
        'emnist_cnn',
        {'num_clients': 'num_clients', 'cache_dir': 'cache_dir',
         'only_digits': 'emnist_only_digits'}),
    'synthetic': DatasetSpec(_load_synthetic, _num_classes('synthetic'), 'logistic_regression',
                             {'num_clients': 'num_clients', 'alpha': 'synthetic_alpha',
                              'beta': 'synthetic_beta', 'seed': 'data_seed'}),
    'mnist': _tfds('mnist', 'fedavg_cnn'),
    'fashion_mnist': _tfds('fashion_mnist', 'fedavg_cnn'),
    'cifar10': _tfds('cifar10', 'cifar_cnn'),
    'cifar100': _tfds('cifar100', 'cifar_cnn'),
    'leaf': DatasetSpec(_load_leaf, lambda o: _leaf_of(o)[0].num_classes,
                        lambda o: LEAF_MODELS[_leaf_of(o)[0].name],
                        {'num_clients': 'num_clients', 'root': 'leaf_dir', 'LEAF root': 'leaf_dir',
                         'name': 'leaf_name', 'cache_dir': 'cache_dir'}),
}


def _sgd(learning_rate, momentum):
  return _tff().learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                               momentum=momentum or None)


def _without_momentum(name):
  def make(learning_rate, momentum):
    del momentum  # config.ClientConfig / ServerConfig: only sgd takes one
    return getattr(_tff().learning.optimizers, name)(learning_rate=learning_rate)
  return make


OPTIMIZERS: dict[str, Callable[[float, float], Any]] = {
    'sgd': _sgd,
    'adam': _without_momentum('build_adam'),
    'adagrad': _without_momentum('build_adagrad'),
    'rmsprop': _without_momentum('build_rmsprop'),
    'yogi': _without_momentum('build_yogi'),
}


def build_optimizer(settings: Union[config.ClientConfig, config.ServerConfig]):
  """The `tff.learning.optimizers.Optimizer` of a client or server config."""
  return OPTIMIZERS[settings.optimizer](settings.learning_rate, settings.momentum)


# Builder keyword -> flag, per algorithm of tff_conflict.learning.ALGORITHMS (`seed` is --seed),
# per loss and per aggregator, from tff_conflict.hparams (hyperparameters without a flag, such as
# DGC's weights_are_losses, keep their defaults).
ALGORITHM_HPARAMS: dict[str, dict[str, str]] = {
    name: hparams.flag_table(table) for name, table in hparams.ALGORITHM_HPARAMS.items()}
LOSS_HPARAMS: dict[str, dict[str, str]] = {
    name: hparams.flag_table(table) for name, table in hparams.LOSS_HPARAMS.items()}
AGGREGATOR_HPARAMS: dict[str, dict[str, str]] = {
    name: hparams.flag_table(table) for name, table in hparams.AGGREGATOR_HPARAMS.items()}


def takes_clip_norm(algorithm: str) -> bool:
  """Whether `algorithm` (a named method or 'custom') uses `--client_clip_norm`."""
  return (algorithm == CUSTOM_ALGORITHM
          or 'client_clip_norm' in ALGORITHM_HPARAMS.get(algorithm, {}).values())


def algorithm_names() -> list[str]:
  """The named methods of `tff_conflict.learning.ALGORITHMS`, in its order."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  return list(learning.ALGORITHMS)


def builder_flags(algorithm: config.AlgorithmConfig) -> dict[str, str]:
  """The arguments of `algorithm`'s builder -> the flags that set them, so that an error a builder
  raises for an argument names the flag (`config.translate_message`)."""
  if algorithm.name == CUSTOM_ALGORITHM:
    table = dict(LOSS_HPARAMS.get(algorithm.client_loss, {}))
    table.update(AGGREGATOR_HPARAMS.get(algorithm.aggregator, {}))
    table['proximal_strength'] = 'proximal_strength'
  else:
    table = dict(ALGORITHM_HPARAMS.get(algorithm.name, {}))
  table.update({
      'client_optimizer_fn: learning_rate': 'client_learning_rate',
      'server_optimizer_fn: learning_rate': 'server_learning_rate',
      'client_weighting': 'client_weighting',
      'keras_model_fn': 'model',
  })
  return table


def hparam_kwargs(table: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, Any]:
  """Builder keyword arguments from flag values, following `table` (keyword -> flag)."""
  return {keyword: values[flag] for keyword, flag in table.items()}

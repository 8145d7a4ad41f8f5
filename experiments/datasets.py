"""The binaries' datasets: a `config.DataConfig` as a regime of `tff_conflict.data`, loaded as the
benchmark loads, its classes and default model."""

from typing import Any

from experiments import config


def regime(data: config.DataConfig):
  """`DATASET:dir(alpha)@K`, `synthetic(a,b)@K`, or the dataset's own clients (`:natural@K`)."""
  from tff_conflict.data import leaf_cache  # pylint: disable=g-import-not-at-top
  from tff_conflict.data import regimes  # pylint: disable=g-import-not-at-top
  name, n = data.dataset, data.num_clients
  if name == 'synthetic':
    return regimes.Regime(name, 'synthetic', (data.synthetic_alpha, data.synthetic_beta), n)
  if name in regimes.ARRAY_DATASETS:
    return regimes.Regime(name, 'dir', (data.alpha,), n)
  if name == 'leaf':
    name = 'leaf_' + leaf_cache.resolve_source(data.leaf_dir, data.leaf_name).name
  elif data.emnist_only_digits:
    name = 'emnist_digits'
  return regimes.Regime(name, 'natural', (), n)


def load(data: config.DataConfig) -> tuple[Any, Any]:
  """(train, test) `ClientData` of `data`; the loader's ValueError or OSError as a `ConfigError`
  naming num_clients, else the dataset's source setting when set, else dataset."""
  from tff_conflict import data as data_lib  # pylint: disable=g-import-not-at-top
  try:
    return data_lib.load_regime(regime(data), seed=data.data_seed, data_dir=data.data_dir,
                                leaf_dir=data.leaf_dir, cache_dir=data.cache_dir)
  except (ValueError, OSError) as e:
    source = 'leaf_dir' if data.dataset == 'leaf' else _entry(data.dataset).source
    argument = source if source and getattr(data, source) else 'dataset'
    raise config.from_library_error(e, argument, getattr(data, argument),
                                    arguments={'num_clients': 'num_clients'}) from e


def _entry(name: str):
  from tff_conflict.data import registry  # pylint: disable=g-import-not-at-top
  return registry.DATASETS.get(name)


def num_classes(data: config.DataConfig) -> int:
  """The classes of `data`'s dataset (LEAF Synthetic's: its files')."""
  classes = _entry(regime(data).dataset).num_classes
  return classes if classes is not None else load(data)[0].num_classes


def default_model(data: config.DataConfig) -> str:
  return _entry(regime(data).dataset).model

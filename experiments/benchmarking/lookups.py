"""What a benchmark config's regimes name: each regime's dataset, the datasets in order, each
dataset's model and tuning regime."""

from typing import Collection, NamedTuple


class OwnRegime(NamedTuple):
  """A dataset of your own (`BenchmarkConfig.datasets`) as a regime of its name."""
  name: str

  dataset = slug = property(lambda self: self.name)


def parse_regime(name: str, own: Collection[str] = ()):
  """`OwnRegime(name)` for a name in `own`, else `tff_conflict.data.parse_regime(name)`."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  return OwnRegime(name) if isinstance(name, str) and name in own else data.parse_regime(name)


def dataset_of(config, regime: str) -> str:
  return parse_regime(regime, config.datasets).dataset


def datasets(config) -> list[str]:
  """The regimes' datasets, in order of first appearance."""
  return list(dict.fromkeys(dataset_of(config, r) for r in config.regimes))


def regimes_of(config, dataset: str) -> list[str]:
  return [r for r in config.regimes if dataset_of(config, r) == dataset]


def model_of(config, dataset: str) -> str:
  """`--models`' entry, else your only model for your dataset, else the dataset's default."""
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  if dataset in config.models:
    return config.models[dataset]
  if dataset in config.datasets:   # your only model (`BenchmarkConfig` checks there is one)
    return next(iter(config.model_fns))
  return models.DEFAULT_MODELS[dataset]


def tuning_regime(config, dataset: str) -> str:
  """`dataset`'s tuning regime: given, else the grid's one of the default split, else its first."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  if dataset in config.tuning_regimes:
    return config.tuning_regimes[dataset]
  ours = [parse_regime(r, config.datasets) for r in regimes_of(config, dataset)]
  default = data.regimes.DEFAULT_TUNING_REGIMES.get(dataset)
  if default is None:
    return ours[0].name
  wanted = data.parse_regime(default)
  return next((r.name for r in ours if (r.split, r.param) == (wanted.split, wanted.param)), default)

"""The settings of a benchmark as typed values, checked when created.

`BenchmarkConfig` holds the grid (regimes x methods x local epochs x seeds), the run settings
shared by every run, the tuning settings (`TuningConfig`) and where the outputs go; each run's
loop is an `experiments.config.LoopConfig`. Every field that a flag of
`python -m experiments.benchmark` sets has that flag's name, so a `ConfigError` ("rounds must be
an integer >= 1, got 0", an `experiments.config.ConfigError`) reads as the flag ("--rounds ...").
"""

import dataclasses
import math
import numbers
import os
from typing import Any, Mapping, Optional

from experiments import config as experiment_config
from experiments.benchmarking import methods as methods_lib


class ConfigError(experiment_config.ConfigError):
  """A benchmark setting with a bad value; `field` is the setting's (and its flag's) name.

  An `experiments.config.ConfigError`, so `experiments.cli` prints `flag_message()` as the
  binaries' one-line error.
  """

  def __init__(self, field: str, message: str):
    super().__init__(field, None, flag=field, message=f'--{field} {message}')
    self.args = (f'{field} {message}',)

  def __str__(self) -> str:
    return self.args[0]


def split_top_level(text: str, separator: str = ',') -> list[str]:
  """Splits at `separator` outside (), [] and {}; strips the pieces and drops empty ones.

  'digits:dir(0.1),synthetic(1,1)' -> ['digits:dir(0.1)', 'synthetic(1,1)'].
  """
  pieces, depth, current = [], 0, []
  for char in text:
    if char in '([{':
      depth += 1
    elif char in ')]}':
      depth -= 1
    if char == separator and depth == 0:
      pieces.append(''.join(current))
      current = []
    else:
      current.append(char)
  pieces.append(''.join(current))
  return [p.strip() for p in pieces if p.strip()]


def parse_grids(text: str) -> dict[str, dict[str, tuple]]:
  """'fedprox.proximal_strength=0.01/0.1,fedmgc.gamma=1/2' -> {method: {argument: values}}."""
  grids: dict[str, dict[str, tuple]] = {}
  for item in split_top_level(text):
    target, sep, values = item.partition('=')
    method, dot, argument = target.strip().partition('.')
    if not sep or not dot or not method or not argument or not values.strip():
      raise ConfigError('grids', f'entries must be METHOD.ARGUMENT=V1/V2/..., got {item!r}')
    grids.setdefault(method, {})[argument] = tuple(
        methods_lib.parse_value(v) for v in values.split('/'))
  return grids


def parse_mapping(field: str, text: str, cast=str) -> dict[str, Any]:
  """'digits:mlp,synthetic:logistic_regression' -> {'digits': 'mlp', ...}."""
  mapping = {}
  for item in split_top_level(text):
    key, sep, value = item.partition(':')
    if not sep or not key.strip() or not value.strip():
      raise ConfigError(field, f'entries must be DATASET:VALUE, got {item!r}')
    try:
      mapping[key.strip()] = cast(value.strip())
    except ValueError:
      raise ConfigError(field, f'has a bad value in {item!r}') from None
  return mapping


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _check_int(field, value, minimum):
  if not _is_int(value) or value < minimum:
    raise ConfigError(field, f'must be an integer >= {minimum}, got {value!r}')


def _check_positive(field, value):
  if not _is_real(value) or value <= 0:
    raise ConfigError(field, f'must be a finite number > 0, got {value!r}')


def _check_ints(field, values, minimum, *, allow_empty=False):
  if not values and not allow_empty:
    raise ConfigError(field, 'must not be empty')
  for v in values:
    if not _is_int(v) or v < minimum:
      raise ConfigError(field, f'must be integers >= {minimum}, got {list(values)}')
  if len(set(values)) != len(values):
    raise ConfigError(field, f'lists a value twice: {list(values)}')


@dataclasses.dataclass(frozen=True)
class TuningConfig:
  """How hyperparameters are chosen without the test split.

  Attributes:
    tune: False: every run uses the given values (`BenchmarkConfig.given`).
    tuning_seeds: seeds of the tuning runs, disjoint from the reporting seeds.
    tuning_regimes: dataset -> the regime tuned on (its choice is reused for every regime of the
      dataset); a dataset left out uses its `DEFAULT_TUNING_REGIMES` split (the grid's regime
      with that split if there is one, e.g. with the grid's population), else its first regime.
    tune_epochs: the local epochs tuned at; empty: every E of the grid. A grid E not tuned uses
      the values of the nearest tuned E.
    client_lr_grid: the client learning rates tried by every method (FedAvg included).
    server_lr_grid: the server learning rates tried by methods with `tune_server_lr`.
    grids: method -> {builder argument: candidates}, replacing that method's default grid.
    strategy: 'staged': the client learning rate first (each method at its given values), then
      the method's own grid (and server lr) at the chosen rate; 'product': every combination.
    last_k: the score of a run is its mean validation accuracy over its last `last_k` rounds.
    validation_fraction: share of each client's training examples held out for validation.
  """
  tune: bool = True
  tuning_seeds: tuple = (100, 101)
  tuning_regimes: Mapping[str, str] = dataclasses.field(default_factory=dict)
  tune_epochs: tuple = ()
  client_lr_grid: tuple = (0.03, 0.1, 0.3)
  server_lr_grid: tuple = (1.0, 2.0, 3.0)
  grids: Mapping[str, Mapping[str, tuple]] = dataclasses.field(default_factory=dict)
  strategy: str = 'staged'
  last_k: int = 5
  validation_fraction: float = 0.2

  def __post_init__(self):
    if not isinstance(self.tune, bool):
      raise ConfigError('tune', f'must be True or False, got {self.tune!r}')
    _check_ints('tuning_seeds', self.tuning_seeds, 0)
    _check_ints('tune_epochs', self.tune_epochs, 1, allow_empty=True)
    for field in ('client_lr_grid', 'server_lr_grid'):
      values = getattr(self, field)
      if not values or not all(_is_real(v) and v > 0 for v in values):
        raise ConfigError(field, f'must be a non-empty list of finite numbers > 0, got '
                          f'{list(values)}')
    if self.strategy not in ('staged', 'product'):
      raise ConfigError('tuning_strategy', f"must be 'staged' or 'product', got "
                        f'{self.strategy!r}')
    _check_int('tuning_last_k', self.last_k, 1)
    if not _is_real(self.validation_fraction) or not 0 < self.validation_fraction < 1:
      raise ConfigError('validation_fraction', f'must be a number in (0, 1), got '
                        f'{self.validation_fraction!r}')


def _check_builder_arguments(method: methods_lib.Method, given: Mapping[str, Any]) -> None:
  """Every fixed or tuned builder argument of `method` is one its builder takes, with a value in
  its range (`tff_conflict.hparams`), so that a typo fails before any run."""
  import inspect  # pylint: disable=g-import-not-at-top
  from tff_conflict import hparams  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  build = (learning.build_process if method.algorithm == methods_lib.CUSTOM
           else learning.ALGORITHMS[method.algorithm])
  parameters = inspect.signature(build).parameters
  open_ended = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
  ranges = {h.keyword: h for h in hparams.ALGORITHM_HPARAMS.get(method.algorithm, ())}
  fixed = dict(method.fixed)
  checks = [('methods', k, v) for k, v in fixed.items()]
  checks += [('grids', k, v) for k, values in method.grid for v in values]
  checks += [('methods', k, v) for k, v in given.items() if k not in fixed]
  for field, keyword, value in checks:
    if not open_ended and keyword not in parameters:
      raise ConfigError(field, f'has {keyword}={value!r} for method {method.name!r}, but its '
                        f'builder ({method.algorithm}) takes no argument {keyword!r}')
    if keyword in ranges:
      try:
        ranges[keyword].check(value, name=f'{keyword} of method {method.name!r}')
      except ValueError as e:
        raise ConfigError(field, f'has a bad value: {e}') from None


DEFAULT_TUNING_REGIMES = {'digits': 'digits:dir(0.1)', 'synthetic': 'synthetic(1,1)'}
RUNTIMES = ('cpp', 'inprocess')


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
  """A benchmark: the grid, the settings every run shares, tuning, and outputs.

  Attributes:
    regimes: regime names (`tff_conflict.data.parse_regime`).
    methods: method names (`methods.parse_method`), the baseline among them.
    epochs: local epochs E of the grid.
    report_seeds: reporting seeds; run seed s uses model initialisation s, the clients sampled
      by (s, round), and (with `vary_partition`) the partition and Synthetic data of seed s.
    rounds, clients_per_round, batch_size, shuffle_buffer: every run's loop.
    models: dataset -> model name (`experiments.models.MODELS`); default the dataset's.
    client_learning_rate, client_momentum, server_learning_rate: the optimizers' values (the
      learning rates are tuned unless `tuning.tune` is False).
    given: method or algorithm name -> builder keyword arguments used where nothing is tuned
      (e.g. the method flags' values); a method's name wins over its algorithm's.
    vary_partition: True: the data of seed s is split with seed s; False: with `data_seed`.
    data_seed: the data seed when `vary_partition` is False.
    baseline: the method every other is compared with (paired by seed).
    targets: dataset -> test accuracy whose first round is reported; a dataset left out uses
      `target_fraction` of the baseline's mean final accuracy in the same regime and E.
    target_fraction: see `targets`.
    tuning: `TuningConfig`.
    output_dir, experiment_name: outputs go to `output_dir/experiment_name/`.
    resume: skip runs whose results are already on disk with the same settings.
    progress: show the grid's progress bar.
    runtime: 'cpp' (TFF's local C++ runtime) or 'inprocess'.
    cache_dir, data_dir, leaf_dir: where EMNIST / tfds / LEAF datasets are on disk.
    description: a sentence for the report's Setup (e.g. how a preset was sized).
    eval_train_loss: also evaluate the global model on the union of the clients' training
      data every round of the reporting runs (`global_train_loss`: the FedProx paper's
      training loss, whose curves the report then plots).
  """
  regimes: tuple
  methods: tuple
  epochs: tuple = (1, 5)
  report_seeds: tuple = (0, 1, 2, 3, 4)
  rounds: int = 30
  clients_per_round: int = 10
  batch_size: int = 20
  shuffle_buffer: int = 1000
  models: Mapping[str, str] = dataclasses.field(default_factory=dict)
  client_learning_rate: float = 0.1
  client_momentum: float = 0.0
  server_learning_rate: float = 1.0
  given: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  vary_partition: bool = True
  data_seed: int = 0
  baseline: str = 'fedavg'
  targets: Mapping[str, float] = dataclasses.field(default_factory=dict)
  target_fraction: float = 0.9
  tuning: TuningConfig = dataclasses.field(default_factory=TuningConfig)
  output_dir: str = 'results'
  experiment_name: str = 'benchmark'
  resume: bool = True
  progress: bool = True
  runtime: str = 'cpp'
  cache_dir: Optional[str] = None
  data_dir: Optional[str] = None
  leaf_dir: Optional[str] = None
  description: str = ''
  eval_train_loss: bool = False

  def __post_init__(self):
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    from experiments import models  # pylint: disable=g-import-not-at-top
    if not self.regimes:
      raise ConfigError('regimes', 'must not be empty')
    parsed = []
    for name in self.regimes:
      try:
        parsed.append(data.parse_regime(name))
      except ValueError as e:
        raise ConfigError('regimes', f'has a bad entry: {e}') from None
    names = [r.name for r in parsed]
    if len(set(names)) != len(names) or len({r.slug for r in parsed}) != len(parsed):
      raise ConfigError('regimes', f'lists a regime twice: {list(self.regimes)}')
    object.__setattr__(self, 'regimes', tuple(names))
    if not self.methods:
      raise ConfigError('methods', 'must not be empty')
    resolved = []
    for name in self.methods:
      try:
        resolved.append(methods_lib.parse_method(name))
      except ValueError as e:
        raise ConfigError('methods', f'has a bad entry: {e}') from None
    method_names = [m.name for m in resolved]
    if len(set(method_names)) != len(method_names):
      raise ConfigError('methods', f'lists a method twice: {list(self.methods)}')
    object.__setattr__(self, 'methods', tuple(method_names))
    if self.baseline not in method_names:
      raise ConfigError('baseline', f'must be one of --methods {method_names}, got '
                        f'{self.baseline!r}')
    _check_ints('epochs', self.epochs, 1)
    _check_ints('report_seeds', self.report_seeds, 0)
    overlap = set(self.report_seeds) & set(self.tuning.tuning_seeds)
    if self.tuning.tune and overlap:
      raise ConfigError('tuning_seeds', f'must be disjoint from --report_seeds; both hold '
                        f'{sorted(overlap)}')
    stray = set(self.tuning.tune_epochs) - set(self.epochs)
    if stray:
      raise ConfigError('tune_epochs', f'must be among --epochs {list(self.epochs)}, got '
                        f'{sorted(stray)}')
    for field in ('rounds', 'clients_per_round', 'batch_size'):
      _check_int(field, getattr(self, field), 1)
    _check_int('shuffle_buffer', self.shuffle_buffer, 0)
    _check_int('data_seed', self.data_seed, 0)
    datasets = {r.dataset for r in parsed}
    leaf = sorted(d for d in datasets if d.startswith('leaf_'))
    if leaf and not self.leaf_dir:
      raise ConfigError('leaf_dir', f'must name LEAF\'s data/<name> folder for the regimes of '
                        f'{leaf}')
    if len(leaf) > 1:
      raise ConfigError('regimes', f'can use one LEAF dataset (one --leaf_dir), got {leaf}')
    for dataset, model in self.models.items():
      if dataset not in datasets:
        raise ConfigError('models', f'names dataset {dataset!r}, which no regime uses '
                          f'({sorted(datasets)})')
      if model not in models.MODELS:
        raise ConfigError('models', f'must name models of {sorted(models.MODELS)}, got '
                          f'{model!r}')
    for dataset, target in self.targets.items():
      if dataset not in datasets:
        raise ConfigError('targets', f'names dataset {dataset!r}, which no regime uses')
      if not _is_real(target) or not 0 < target <= 1:
        raise ConfigError('targets', f'must be accuracies in (0, 1], got {target!r}')
    if not _is_real(self.target_fraction) or not 0 < self.target_fraction <= 1:
      raise ConfigError('target_fraction', f'must be in (0, 1], got {self.target_fraction!r}')
    _check_positive('client_learning_rate', self.client_learning_rate)
    _check_positive('server_learning_rate', self.server_learning_rate)
    if not _is_real(self.client_momentum) or not 0 <= self.client_momentum < 1:
      raise ConfigError('client_momentum', f'must be in [0, 1), got {self.client_momentum!r}')
    for dataset, regime in self.tuning.tuning_regimes.items():
      try:
        tuned = data.parse_regime(regime)
      except ValueError as e:
        raise ConfigError('tuning_regimes', f'has a bad entry: {e}') from None
      if tuned.dataset != dataset:
        raise ConfigError('tuning_regimes', f'maps {dataset!r} to a regime of another dataset: '
                          f'{regime!r}')
    for method in self.tuning.grids:
      if method not in method_names:
        raise ConfigError('grids', f'names method {method!r}, which is not in --methods '
                          f'{method_names}')
    for method in self.parsed_methods():
      _check_builder_arguments(method, self.given_kwargs(method))
    if self.runtime not in RUNTIMES:
      raise ConfigError('runtime', f'must be one of {list(RUNTIMES)}, got {self.runtime!r}')
    name = self.experiment_name
    if (not isinstance(name, str) or not name or os.path.isabs(name)
        or '..' in name.replace('\\', '/').split('/')):
      raise ConfigError('experiment_name', f'must be a relative name without "..", got {name!r}')
    if not isinstance(self.output_dir, str) or not self.output_dir:
      raise ConfigError('output_dir', f'must be a non-empty path, got {self.output_dir!r}')

  @property
  def root(self) -> str:
    """The benchmark's directory."""
    return os.path.join(self.output_dir, self.experiment_name)

  def parsed_regimes(self):
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    return [data.parse_regime(r) for r in self.regimes]

  def parsed_methods(self) -> list[methods_lib.Method]:
    """The methods, with `tuning.grids` replacing their default grids."""
    out = []
    for name in self.methods:
      method = methods_lib.parse_method(name)
      if name in self.tuning.grids:
        method = method.with_grid(self.tuning.grids[name])
      out.append(method)
    return out

  def model_for(self, dataset: str) -> str:
    from experiments import registry  # pylint: disable=g-import-not-at-top
    if dataset in self.models:
      return self.models[dataset]
    if dataset.startswith('leaf_'):
      return registry.LEAF_MODELS[dataset[len('leaf_'):]]
    if dataset in registry.DATASETS:
      return registry.DATASETS[dataset].default_model
    return 'emnist_cnn' if dataset.startswith('emnist') else 'logistic_regression'

  def tuning_regime_for(self, dataset: str) -> str:
    """The regime whose tuning is used for `dataset`'s regimes."""
    if dataset in self.tuning.tuning_regimes:
      return self.tuning.tuning_regimes[dataset]
    ours = [r for r in self.parsed_regimes() if r.dataset == dataset]
    default = DEFAULT_TUNING_REGIMES.get(dataset)
    if default is None:
      return ours[0].name
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    wanted = data.parse_regime(default)
    # The grid's own version of the default split (e.g. with its population), if it has one.
    same = [r for r in ours if (r.split, r.param) == (wanted.split, wanted.param)]
    return same[0].name if same else default

  def tuned_epochs_for(self, epochs: int) -> int:
    """The tuned E whose values a grid E uses: itself if tuned, else the nearest tuned one."""
    tuned = self.tuning.tune_epochs or self.epochs
    return min(tuned, key=lambda e: (abs(e - epochs), e))

  def given_kwargs(self, method: methods_lib.Method) -> dict[str, Any]:
    """Builder arguments used where nothing is tuned: `given` of the algorithm, then of the
    method, then the method's fixed ones."""
    kwargs = dict(self.given.get(method.algorithm, {}))
    kwargs.update(self.given.get(method.name, {}))
    kwargs.update(method.fixed_kwargs)
    return kwargs


def as_dict(config: BenchmarkConfig) -> dict[str, Any]:
  """The config as plain JSON-able values."""
  def plain(value):
    if dataclasses.is_dataclass(value):
      return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
      return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
      return [plain(v) for v in value]
    return value
  return plain(config)


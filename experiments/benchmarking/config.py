"""A benchmark's settings as checked, frozen values (the grid, tuning and the run settings every
run shares); a bad value raises `experiments.config.ConfigError` naming its flag."""

import dataclasses
import functools
import os
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from experiments import config as experiment_config
from experiments.benchmarking import checks
from experiments.benchmarking import lookups
from experiments.benchmarking import methods as methods_lib
from tff_conflict import hparams as hparams_lib

ConfigError = experiment_config.ConfigError
_DEFAULTS = experiment_config.ExperimentConfig()  # the parts' defaults

parse_regime = lookups.parse_regime

# The baselines of the seed papers (`best_of`).
BASELINES = ('fedavg', 'fedprox', 'fednova', 'scaffold', 'feddecorr')
# The accuracy difference a dataset's regimes should detect at 80% power (`--detect`'s default).
DEFAULT_DETECT = 0.02
DETECT = {}
# config.json's protocol: 2 = a fixed test split, one learning-rate search for all, a primary
# statistic named before the runs, divergence at chance, Holm (before: none).
PROTOCOL = 2


def split_top_level(text: str, separator: str = ',') -> list[str]:
  """'digits:dir(0.1),synthetic(1,1)' -> ['digits:dir(0.1)', 'synthetic(1,1)']: the stripped,
  non-empty pieces between separators outside (), [] and {}."""
  pieces, depth, start = [], 0, 0
  for i, char in enumerate(text):
    depth += (char in '([{') - (char in ')]}')
    if char == separator and depth == 0:
      pieces.append(text[start:i])
      start = i + 1
  return [p.strip() for p in pieces + [text[start:]] if p.strip()]


def _dotted_entries(argument: str, text: str, form: str, *, second: bool = False
                    ) -> Iterator[tuple[str, str, str, str]]:
  """(entry, A, B, VALUE) of each entry A.B=VALUE of `text` (B may be empty unless `second`),
  else a `ConfigError` asking for `entries <form>`."""
  for item in split_top_level(text):
    target, sep, value = item.partition('=')
    first, dot, name = target.strip().partition('.')
    if not sep or not dot or not first or not value.strip() or (second and not name):
      raise ConfigError(argument, item, f'entries {form}')
    yield item, first, name, value


def parse_grids(argument: str, text: str) -> dict[str, dict[str, tuple]]:
  """'fedprox.proximal_strength=0.01/0.1,fedmgc.gamma=1/2' -> {method: {keyword: values}}."""
  grids: dict[str, dict[str, tuple]] = {}
  for _, method, keyword, values in _dotted_entries(argument, text, 'METHOD.ARGUMENT=V1/V2/...',
                                                    second=True):
    grids.setdefault(method, {})[keyword] = tuple(
        methods_lib.parse_value(v) for v in values.split('/'))
  return grids


def parse_mapping(argument: str, text: str, cast=str) -> dict[str, Any]:
  """'digits:mlp,synthetic:logistic_regression' -> {'digits': 'mlp', ...}."""
  mapping = {}
  for item in split_top_level(text):
    key, sep, value = item.partition(':')
    if not sep or not key.strip() or not value.strip():
      raise ConfigError(argument, item, 'entries DATASET:VALUE')
    try:
      mapping[key.strip()] = cast(value.strip())
    except ValueError:
      raise ConfigError(argument, item, f'entries DATASET:VALUE with a {cast.__name__} '
                        'value') from None
  return mapping


# What a dataset may set for its own regimes, tuning and reporting; every other is the benchmark's.
DATASET_SETTINGS = ('rounds', 'client_lr_grid', 'server_lr_grid')


def parse_dataset_settings(argument: str, text: str) -> dict[str, dict[str, Any]]:
  """'leaf_shakespeare.rounds=60,leaf_shakespeare.client_lr_grid=1/3/10' -> {dataset: {setting:
  value}}: rounds an int, a grid a tuple of floats."""
  out: dict[str, dict[str, Any]] = {}
  for item, dataset, name, value in _dotted_entries(
      argument, text, 'DATASET.SETTING=VALUE (V1/V2/... for a grid)'):
    if name not in DATASET_SETTINGS:
      raise ConfigError(argument, item, reason=f'{name!r} is not a setting a dataset may set: '
                        f'one of {list(DATASET_SETTINGS)}')
    if name in out.get(dataset, {}):
      raise ConfigError(argument, item, reason=f'{dataset}.{name} is given twice; give it once')
    try:
      out.setdefault(dataset, {})[name] = (
          int(value) if name == 'rounds' else tuple(float(v) for v in value.split('/')))
    except ValueError:
      raise ConfigError(argument, item, 'entries DATASET.rounds=INT or DATASET.GRID=V1/V2/... '
                        'of numbers') from None
  return out


def _parse_names(unused_argument: str, text) -> tuple:
  """Names from a flag's text or a list flag's value (a name's error is the config's)."""
  return tuple(split_top_level(','.join(map(str, text)) if isinstance(text, (list, tuple))
                               else text))


def parse_tuning_regimes(argument: str, text: str) -> dict[str, str]:
  """'digits:dir(0.1),synthetic(1,1)' -> {'digits': 'digits:dir(0.1)', 'synthetic':
  'synthetic(1,1)'}: each entry a regime (its dataset is the key), or DATASET:REGIME."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  mapping = {}
  for item in split_top_level(text):
    try:
      mapping[data.parse_regime(item).dataset] = item
    except ValueError as e:
      if ':' not in item:
        raise ConfigError(argument, item, reason=str(e)) from None
      mapping.update(parse_mapping(argument, item))
  return mapping


_M = experiment_config
must, setting = _M.must, _M.setting
_INTS = functools.partial(_M.parse_numbers, cast=int)
_FLOATS = functools.partial(_M.parse_numbers, cast=float)
_POSITIVES = must('a non-empty list of finite numbers > 0',
                  lambda v: bool(v) and all(_M.is_real(x) and x > 0 for x in v))


def _distinct_ints(minimum: int, *, allow_empty: bool = False) -> _M.Checker:
  return must(f'{"a" if allow_empty else "a non-empty"} list of distinct integers >= {minimum}',
              lambda v: (allow_empty or bool(v)) and len(set(v)) == len(v)
              and all(_M.is_int(x) and x >= minimum for x in v))


def given_arguments(value_of: Optional[Callable[[str], Any]] = None) -> dict[str, dict[str, Any]]:
  """Each algorithm's builder arguments from its method flags, `value_of(flag)` (default: their
  defaults), but the seed; a flag's None leaves the builder's default."""
  value_of = value_of or functools.partial(getattr, _DEFAULTS.algorithm)
  return {algorithm: {h.keyword: value_of(h.flag) for h in hparams
                      if h.flag is not None and h.keyword != 'seed'
                      and value_of(h.flag) is not None}
          for algorithm, hparams in hparams_lib.ALGORITHM_HPARAMS.items()}


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
  """A benchmark: the grid (regimes x methods x E x seeds), tuning (`tune` to
  `plateau_tolerance`), the parts of `ExperimentConfig` every run shares, your own `datasets` and
  `model_fns`, `given`: method or algorithm -> builder keywords (completed by `given_arguments`)."""
  regimes: tuple = setting(
      parse=_parse_names, help='Comma-separated regimes (tff_conflict.data.regimes): '
      'DATASET:iid, DATASET:dir(ALPHA), DATASET:#C=K, DATASET:qty(BETA), synthetic(ALPHA,BETA), '
      'emnist:natural; @K sets the population.')
  methods: tuple = setting(
      parse=_parse_names, help='Comma-separated methods (experiments.benchmarking.methods.'
      'METHODS or ALGORITHM[key=value,...] variants), the baseline among them.')
  epochs: tuple = setting((1, 5), check=_distinct_ints(1), parse=_INTS,
                          help='Local epochs E of the grid.')
  report_seeds: tuple = setting((0, 1, 2, 3, 4), check=_distinct_ints(0), parse=_INTS,
                                help='Reporting seeds: seed s is the initial model, the clients '
                                'sampled and (--vary_partition) the partition.')
  models: Mapping[str, str] = setting(
      default_factory=dict, parse=parse_mapping, help='DATASET:MODEL,... '
      '(tff_conflict.models.MODELS); default each dataset\'s model.')
  given: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  vary_partition: bool = setting(True, check=_M.BOOL, help='Draw each seed\'s partition (and '
      'Synthetic data) with that seed; --novary_partition uses --data_seed for all.')
  baseline: str = setting('fedavg', help='The method every other is compared with (paired by '
                          'seed).')
  best_of: tuple = setting(
      BASELINES, parse=_parse_names, help='The baselines whose best by validation score (of those '
      'that ran) is the primary family\'s second reference beside --baseline; every other method '
      'is compared with both.')
  family_methods: tuple = setting((), parse=_parse_names, help='The methods the primary family '
                                  'compares with the baselines (default: every method but '
                                  'them); the others are reported with intervals, untested.')
  primary_regimes: tuple = setting(
      (), parse=_parse_names, help='The regimes of the primary family, named before the runs '
      '(default: every regime); the others\' differences are reported without a test.')
  primary_statistic: str = setting(
      'last_k_accuracy', choices=('last_k_accuracy', 'final_accuracy'), help='The one statistic '
      'the tables compare, named before the runs: last_k_accuracy (mean test accuracy of the last '
      '--tuning_last_k rounds) or final_accuracy.')
  equivalence_margin: float = setting(0.01, check=_M.FRACTION, help='A method ties the baseline '
      'only when the 95% interval of their difference lies inside +- this margin.')
  detect: Mapping[str, float] = setting(
      default_factory=dict, parse=functools.partial(parse_mapping, cast=float),
      help='DATASET:DIFFERENCE,...: the accuracy difference the report gives a seed count for '
      '(80% power); default DETECT, else DEFAULT_DETECT.')
  variants_inherit: bool = setting(True, check=_M.BOOL, help='A variant of a method in '
                                   '--methods runs at its parent\'s tuned values but what it '
                                   'fixes; --novariants_inherit tunes it on the parent\'s grids.')
  description: str = setting('', help='A sentence for the report\'s Setup section.')
  tune: bool = setting(True, check=_M.BOOL, help='Tune on a validation split first; --notune '
                       'uses the given values (the learning-rate and method flags).')
  tuning_seeds: tuple = setting((100, 101), check=_distinct_ints(0), parse=_INTS,
                                help='Seeds of the tuning runs (disjoint from --report_seeds).')
  tuning_regimes: Mapping[str, str] = setting(
      default_factory=dict, parse=parse_tuning_regimes, help='The regime tuned on per dataset, '
      'its choice serving all the dataset\'s regimes (e.g. digits:dir(0.1),synthetic(1,1), or '
      'DATASET:REGIME). Default: its registry entry\'s split (tff_conflict.data.registry, at the '
      'grid\'s population if any), else its first regime.')
  tune_each_regime: bool = setting(False, check=_M.BOOL, help='Tune every method on each '
                                   'reporting regime\'s own validation split, each regime '
                                   'reported at its own choice (instead of --tuning_regimes).')
  tune_epochs: tuple = setting((), check=_distinct_ints(1, allow_empty=True), parse=_INTS,
                               help='Local epochs tuned at (default: every --epochs); an untuned '
                               'E uses the nearest tuned E\'s values.')
  client_lr_grid: tuple = setting((0.03, 0.1, 0.3), check=_POSITIVES, parse=_FLOATS,
                                  help='Client learning rates tried by every method.')
  server_lr_grid: tuple = setting((1.0, 2.0, 3.0), check=_POSITIVES, parse=_FLOATS,
                                  help='Server learning rates tried by every method (with '
                                  '--tune_server_lr).')
  tune_server_lr: bool = setting(True, check=_M.BOOL, help='Every method, the baseline included, '
                                 'searches --server_lr_grid; --notune_server_lr: none does (never '
                                 'some only: a wider search alone would gain).')
  grids: Mapping[str, Mapping[str, tuple]] = setting(
      default_factory=dict, parse=parse_grids, help='METHOD.ARGUMENT=V1/V2/...,...: replaces a '
      'method\'s default grid of that builder argument.')
  tune_method_grids: bool = setting(True, check=_M.BOOL, help='Search each method\'s own grid '
                                    '(--grids) with the learning rates; --notune_method_grids: '
                                    'the rates only, at the given (the authors\') values.')
  strategy: str = setting('staged', flag='tuning_strategy', choices=('staged', 'product'),
                          help='staged: client lr first, then the method\'s grid (and server lr) '
                          'at the chosen rate; product: every combination.')
  last_k: int = setting(5, flag='tuning_last_k', check=_M.at_least(1), help='A tuning run\'s '
                        'score: mean validation accuracy of its last K rounds.')
  validation_fraction: float = setting(0.2, check=_M.FRACTION, help='Share of each client\'s '
                                       'training examples held out for tuning.')
  edge_steps: int = setting(
      3, flag='tuning_edge_steps', check=_M.at_least(0), help='Extend a numeric grid whose best '
      'is at its edge geometrically until the best is interior or at a hard bound '
      '(search.LR_BOUNDS, a ratio\'s 1), at most this many times a side; 0: never (the report '
      'marks what stays at an edge or a bound).')
  edge_factor: float = setting(3.0, flag='tuning_edge_factor', help='Factor of each extension.',
                               check=must('a finite number > 1', lambda v: _M.is_real(v) and v > 1))
  schedule: str = setting('full', flag='tuning_schedule', choices=('full', 'halving'),
                          help='full: every candidate runs every round; halving: successive '
                          'halving over rounds (the best third of each rung runs 3x longer).')
  plateau_window: int = setting(10, check=_M.at_least(1), help='The report\'s plateau criterion '
      '(stats.plateau): the baseline\'s tuned validation accuracy has plateaued when the mean of '
      'its last K rounds is within --plateau_tolerance of the mean of the K before.')
  plateau_tolerance: float = setting(0.01, check=_M.NON_NEGATIVE, help='Tolerance of the '
                                     'plateau criterion (accuracy).')

  dataset_settings: Mapping[str, Mapping[str, Any]] = setting(
      default_factory=dict, parse=parse_dataset_settings, help='DATASET.SETTING=VALUE,...: a '
      'dataset\'s own --rounds, --client_lr_grid or --server_lr_grid (V1/V2/...) for its regimes, '
      'tuning and reporting (e.g. leaf_shakespeare.rounds=100); the others\' are the flags\'.')

  loop: experiment_config.LoopConfig = _DEFAULTS.training
  client: experiment_config.OptimizerConfig = _DEFAULTS.client
  server: experiment_config.OptimizerConfig = _DEFAULTS.server
  data: experiment_config.DataConfig = _DEFAULTS.data
  output: experiment_config.OutputConfig = _DEFAULTS.output
  datasets: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
  model_fns: Mapping[str, Callable[[], Any]] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    checks.check_own(self.datasets, self.model_fns, self.models)
    _M.check_fields(self)
    must('a non-empty list of regimes', bool)('regimes', self.regimes)
    parsed = [checks.parsed('regimes', name, self.datasets) for name in self.regimes]
    names = [r.name for r in parsed]
    must('distinct regimes', lambda _: len({*names}) == len({r.slug for r in parsed}) == len(
        parsed))('regimes', list(self.regimes))
    object.__setattr__(self, 'regimes', tuple(names))
    defaults = given_arguments()   # an algorithm's given completed by its flags' defaults
    object.__setattr__(self, 'given', {name: {**defaults.get(name, {}), **self.given.get(name, {})}
                                       for name in {**defaults, **self.given}})
    for name in self.datasets:
      must('listed in regimes (your dataset is a regime)', lambda v: v in names)('datasets', name)
    must('a non-empty list of methods', bool)('methods', self.methods)
    resolved = [checks.parsed('methods', name) for name in self.methods]
    method_names = [m.name for m in resolved]
    must('distinct methods', lambda _: len({*method_names}) == len(resolved))(
        'methods', list(self.methods))
    object.__setattr__(self, 'methods', tuple(method_names))
    _M.one_of(method_names)('baseline', self.baseline)
    for flag in ('best_of', 'family_methods'):
      object.__setattr__(self, flag, tuple(filter(None, getattr(self, flag))))
    object.__setattr__(self, 'primary_regimes', tuple(checks.parsed(
        'primary_regimes', r, self.datasets).name for r in self.primary_regimes if r))
    compared = [m for m in method_names if m != self.baseline and m not in self.best_of]
    for flag, choices in (('primary_regimes', names), ('family_methods', compared)):
      for name in getattr(self, flag):
        _M.one_of(choices)(flag, name)
    must('empty with --tune_each_regime (each regime is tuned on itself)', lambda v: not (
        v and self.tune_each_regime))('tuning_regimes', dict(self.tuning_regimes))
    must(f'disjoint from --report_seeds {list(self.report_seeds)}', lambda v: not (
        self.tune and set(v) & set(self.report_seeds)))('tuning_seeds', list(self.tuning_seeds))
    must(f'among --epochs {list(self.epochs)}', lambda v: set(v) <= set(self.epochs))(
        'tune_epochs', list(self.tune_epochs))
    _M.check_parts(self)
    for side in ('client', 'server'):
      _M.one_of(('sgd',))(f'{side}_optimizer', getattr(self, side).optimizer)
    must('0', lambda v: v == 0)('server_momentum', self.server.momentum)
    must('unset (a method variant sets it: METHOD[client_weighting=...])', lambda v: v is None)(
        'client_weighting', self.loop.weighting)
    must('empty (the benchmark runs on local runtimes)', lambda v: not v)(
        'tff_workers', list(self.output.workers))
    checks.check_datasets(self, parsed)
    checks.check_methods(self, resolved)
    checks.check_methods_on_models(self, resolved, parsed)

  experiment_name = property(lambda self: self.output.experiment_name or 'benchmark')
  # The benchmark's directory.
  root = property(lambda self: os.path.join(self.output.output_dir, self.experiment_name))


# flat name (config.json's readers, presets; an optimizer's with its side) -> (part, field).
_PARTS = {(f'{part}_' if part in ('client', 'server') else '') + field.name: (part, field.name)
          for part in ('loop', 'client', 'server', 'data', 'output')
          for field in dataclasses.fields(getattr(BenchmarkConfig, part))}


def flat_settings(values: Mapping[str, Any]) -> dict[str, Any]:
  """A config.json (`as_dict`, or the flat one of benchmarks before the config had parts) with
  the parts' settings also under their flat names (`rounds`, `client_learning_rate`, ...)."""
  out = dict(values)
  for name, (part, field) in _PARTS.items():
    if isinstance(values.get(part), Mapping) and field in values[part]:
      out.setdefault(name, values[part][field])
  return out


def replace_settings(config: BenchmarkConfig, **settings: Any) -> BenchmarkConfig:
  """`config` with `settings` replaced, a part's by its flat name."""
  parts: dict[str, dict[str, Any]] = {}
  for name in [n for n in settings if n in _PARTS]:
    part, field = _PARTS[name]
    parts.setdefault(part, {})[field] = settings.pop(name)
  return dataclasses.replace(config, **settings, **{
      part: dataclasses.replace(getattr(config, part), **fields) for part, fields in parts.items()})


def per_dataset(config: Mapping[str, Any], name: str) -> str:
  """A config.json's setting `name` (flat) as text, with the datasets that set their own:
  '150' or '150 (leaf_shakespeare: 100)'."""
  show = lambda v: str(list(v)) if isinstance(v, (list, tuple)) else str(v)
  own = [f'{d}: {show(s[name])}' for d, s in (config.get('dataset_settings') or {}).items()
         if name in s]
  value = config.get(name, (config.get('tuning') or {}).get(name))
  return show(value) + (f' ({"; ".join(own)})' if own else '')


def rounds_of(config: Mapping[str, Any], regime: str) -> int:
  """A config.json's (flat) rounds of `regime`: its dataset's own, else the flag's."""
  dataset = parse_regime(regime, config.get('datasets') or ()).dataset
  return ((config.get('dataset_settings') or {}).get(dataset) or {}).get(
      'rounds', config.get('rounds'))


CONTROL_DIR = 'positive_control'


def control_root(root: str) -> Optional[str]:
  """The control's directory under the benchmark `root`, if it has runs."""
  path = os.path.join(root, CONTROL_DIR)
  return path if os.path.exists(os.path.join(path, 'runs.csv')) else None


def control_reading(config: Mapping[str, Any]) -> tuple[str, str, str]:
  """(method, baseline, how it ran) of a control, from its config.json."""
  baseline = config.get('baseline', 'fedavg')
  method = next((m for m in config.get('methods') or () if m != baseline), 'fedprox_mu1')
  ran = config.get('description', '').removeprefix('Positive control: ').removesuffix('.')
  return method, baseline, ran


_NAMES = [f.name for f in dataclasses.fields(BenchmarkConfig)]
# The tuning settings, under `tuning` in config.json.
TUNING_SETTINGS = tuple(_NAMES[_NAMES.index('tune'):_NAMES.index('plateau_tolerance') + 1])


def _plain(value: Any) -> Any:
  """`value` as JSON values (a NumPy scalar as its Python value)."""
  if dataclasses.is_dataclass(value):
    value = dataclasses.asdict(value)
  if isinstance(value, Mapping):
    return {str(k): _plain(v) for k, v in value.items()}
  if isinstance(value, np.generic):
    return value.item()
  return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def as_dict(config: BenchmarkConfig) -> dict[str, Any]:
  """config.json: the config as JSON values, your own data and models by their names."""
  out = {name: _plain(getattr(config, name)) for name in _NAMES
         if name not in ('datasets', 'model_fns')}
  out.update({name: sorted(getattr(config, name)) for name in ('datasets', 'model_fns')
              if getattr(config, name)})
  out['tuning'] = {name: out.pop(name) for name in TUNING_SETTINGS}
  return dict(out, experiment_name=config.experiment_name, protocol=PROTOCOL)

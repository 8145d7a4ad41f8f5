"""The settings of an experiment as typed values, each field declaring its flag and check; a bad
value raises `ConfigError`, the library's `ArgumentError` naming the flag and the value."""

import dataclasses
import functools
import os
import re
import types
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from tff_conflict import _checks
from tff_conflict import hparams as hparams_lib

# The datasets of --dataset, each with the flags it reads besides --num_clients and --data_seed.
DATASETS = {
    'digits': ('alpha',), 'emnist': ('cache_dir', 'emnist_only_digits'),
    'synthetic': ('synthetic_alpha', 'synthetic_beta'), 'mnist': ('alpha', 'data_dir'),
    'fashion_mnist': ('alpha', 'data_dir'), 'cifar10': ('alpha', 'data_dir'),
    'cifar100': ('alpha', 'data_dir'), 'leaf': ('leaf_dir', 'leaf_name', 'cache_dir'),
}
EXECUTORS = ('inline', 'local', 'ray')   # experiments.executors
CUSTOM_ALGORITHM = 'custom'


class ConfigError(_checks.ArgumentError):
  """`argument` (the flag) must be `requirement`, or failed for the library's or data's `reason`."""

  def __init__(self, argument: str, value: Any, requirement: Optional[str] = None, *,
               reason: Optional[str] = None):
    if (requirement is None) == (reason is None):
      raise TypeError('ConfigError takes exactly one of requirement and reason')
    shown = list(value) if isinstance(value, tuple) else value   # strings quoted, tuples as lists
    shown = repr(shown) if isinstance(shown, str) else str(shown)
    super().__init__(f'{argument} must be {requirement}, got {shown}' if reason is None
                     else f'{argument}={value}: {" ".join(str(reason).split())}',
                     argument=argument, value=value, requirement=requirement)

  def flag_message(self) -> str:
    """`--flag must be ..., got value`."""
    return f'--{self}'


def from_library_error(error: Exception, argument: str, value: Any, *,
                       arguments: Mapping[str, str] = types.MappingProxyType({})) -> ConfigError:
  """`error` as a `ConfigError` naming its argument's flag (`arguments`), in its words when it
  states a requirement; else naming `argument`, the setting being used."""
  if getattr(error, 'argument', None) in arguments:
    argument, value = arguments[error.argument], getattr(error, 'value', value)
    if getattr(error, 'requirement', None) is not None:
      return ConfigError(argument, value, error.requirement)
  return ConfigError(argument, value, reason=str(error) or type(error).__name__)


def parse_numbers(argument: str, values: Sequence[Any], cast: type = int) -> tuple:
  """A list flag's `values` as `cast`s (int or float); raises `ConfigError` naming `argument`."""
  try:
    return tuple(cast(v) for v in values)
  except (TypeError, ValueError):
    raise ConfigError(argument, values, 'integers' if cast is int else 'numbers') from None


# A check, `check(name, value)`, returns the value or raises the error naming both.
Checker = Callable[[str, Any], Any]


def must(requirement: str, test: Callable[[Any], bool]) -> Checker:
  """The check that `test(value)` holds; else `ConfigError(name, value, requirement)`."""
  def check(name: str, value: Any) -> Any:
    try:
      ok = bool(test(value))
    except (TypeError, ValueError):
      ok = False
    if not ok:
      raise ConfigError(name, value, requirement)
    return value
  return check


def library(check: Checker) -> Checker:
  """A check of `tff_conflict._checks` raising a `ConfigError` in its words (the value kept)."""
  def checker(name: str, value: Any) -> Any:
    try:
      check(name, value)
    except _checks.ArgumentError as e:
      raise from_library_error(e, name, value, arguments={name: name}) from None
    return value
  return checker


is_real, is_int = _checks.is_finite_number, _checks.is_int   # booleans are not numbers
POSITIVE = library(_checks.check_positive)
NON_NEGATIVE = library(_checks.check_nonnegative)
RATIO = library(_checks.check_ratio)
FRACTION = library(_checks.check_fraction)
MOMENTUM = must('a number in [0, 1)', lambda v: is_real(v) and 0 <= v < 1)
BOOL = library(_checks.check_bool)


def at_least(minimum: int) -> Checker:
  return library(functools.partial(_checks.check_int, minimum=minimum))


def one_of(choices: Sequence[Any]) -> Checker:
  return must(_checks.one_of(choices), lambda v: v in choices)


def optional(check: Checker) -> Checker:
  """`check`, or None (the setting left unset)."""
  return lambda name, value: value if value is None else check(name, value)


NON_EMPTY_STRING = must('a non-empty string', lambda v: isinstance(v, str) and bool(v))


def setting(default: Any = dataclasses.MISSING, *, flag: Optional[str] = None,
            check: Optional[Checker] = None, choices: Optional[Sequence[str]] = None,
            help: Optional[str] = None, parse: Optional[Callable[[str, Any], Any]] = None,
            **kwargs) -> Any:  # pylint: disable=redefined-builtin
  """A dataclass field set by `--flag` (default: its name when it has a `help`), checked by `check`,
  else `choices` (None too when that is the default); `parse(flag, text or list)` reads the flag."""
  if choices is not None and check is None:
    check = optional(one_of(choices)) if default is None else one_of(choices)
  metadata = {k: v for k, v in (('flag', flag), ('check', check), ('choices', choices),
                                ('help', help), ('parse', parse)) if v is not None}
  return dataclasses.field(default=default, metadata=metadata, **kwargs)


def flag_of(field: dataclasses.Field) -> Optional[str]:
  """The flag setting `field` (see `setting`); None: none does."""
  return field.metadata.get('flag', field.name if 'help' in field.metadata else None)


def check_fields(instance: Any, prefix: str = '') -> None:
  """Runs the `check` of every field of a dataclass instance, naming it `prefix + flag`."""
  for field in dataclasses.fields(instance):
    if 'check' in field.metadata:
      field.metadata['check'](prefix + (flag_of(field) or field.name),
                              getattr(instance, field.name))


METHOD_HPARAMS = tuple(h for h in hparams_lib.HPARAMS if h.flag is not None and h.flag != 'seed')
METHOD_FLAGS = frozenset(h.flag for h in METHOD_HPARAMS)


class AlgorithmConfig:
  """Which method runs (`name`, or 'custom': `client_loss` with `aggregator`; `aggregator` also
  on a baseline that takes one), one field per method flag of `tff_conflict.hparams`;
  `proximal_term` adds FedProx's term to a method without its own."""
  name: str = setting('fedavg', flag='algorithm', check=NON_EMPTY_STRING)
  client_loss: Optional[str] = setting(None, flag='client_loss')
  aggregator: Optional[str] = setting(None, flag='aggregator')
  proximal_term: bool = setting(False, check=BOOL)

  def __post_init__(self):
    check_fields(self)
    own = hparams_lib.PROXIMAL_STRENGTH in hparams_lib.ALGORITHM_HPARAMS.get(self.name, ())
    object.__setattr__(self, 'proximal_term', self.proximal_term and not own)
    if self.name == CUSTOM_ALGORITHM:
      for field in ('client_loss', 'aggregator'):
        if getattr(self, field) is None:
          raise ConfigError(field, None, f'given when the algorithm is {CUSTOM_ALGORITHM!r}')
    elif self.client_loss is not None:
      raise ConfigError('client_loss', self.client_loss, f'left unset unless the algorithm is '
                        f'{CUSTOM_ALGORITHM!r} (it composes a method; the algorithm is '
                        f'{self.name!r})')

  @property
  def label(self) -> str:
    """'fedgh', 'focal+fedgh' for a composition, 'fedgh+proximal' with the proximal term added."""
    if self.name == CUSTOM_ALGORITHM:
      return f'{self.client_loss}+{self.aggregator}'
    name = f'{self.name}+{self.aggregator}' if self.aggregator else self.name
    return f'{name}+proximal' if self.proximal_term else name

  def hparam_flags(self) -> Optional[tuple[str, ...]]:
    """The method flags this method reads (`tff_conflict.hparams`); None for an unknown name."""
    custom = self.name == CUSTOM_ALGORITHM
    tables = [hparams_lib.LOSS_HPARAMS.get(self.client_loss) if custom
              else hparams_lib.ALGORITHM_HPARAMS.get(self.name)]
    if self.aggregator is not None or custom:
      tables.append(hparams_lib.AGGREGATOR_HPARAMS.get(self.aggregator))
    if None in tables:
      return None
    own = sum(tables, hparams_lib.PROCESS_HPARAMS if custom else ())
    own += (hparams_lib.PROXIMAL_STRENGTH,) if self.proximal_term else ()
    return tuple(dict.fromkeys(h.flag for h in own if h.flag in METHOD_FLAGS))

  def describe(self) -> str:
    """'--algorithm=custom --client_loss=focal --aggregator=...'."""
    return ' '.join(f'--{flag}={value}' for flag, value in (
        ('algorithm', self.name), ('client_loss', self.client_loss),
        ('aggregator', self.aggregator)) if value is not None)


for _h in METHOD_HPARAMS:
  AlgorithmConfig.__annotations__[_h.flag] = (str if _h.choices else bool
                                              if _h.kind == hparams_lib.BOOL else float)
  setattr(AlgorithmConfig, _h.flag, setting(_h.default, flag=_h.flag, choices=_h.choices or None,
                                            check=library(lambda n, v, h=_h: h.check(v, n))))
AlgorithmConfig = dataclasses.dataclass(frozen=True)(AlgorithmConfig)


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """The federated dataset (`experiments.datasets`)."""
  dataset: str = setting('digits', choices=DATASETS, help='Federated dataset: digits (scikit-learn '
      'digits, Dirichlet label skew, offline), emnist (TFF\'s, by writer), synthetic (LEAF '
      'Synthetic(alpha, beta)), mnist and fashion_mnist (their IDX files, --data_dir), '
      'cifar10/cifar100 (tensorflow-datasets), each Dirichlet-split, leaf (LEAF\'s FEMNIST, '
      'Synthetic, CelebA or Shakespeare JSON files, --leaf_dir).')
  num_clients: Optional[int] = setting(
      None, check=optional(at_least(1)), help='Clients in the population (emnist, leaf: the '
      'first N writers or users). Default: the dataset\'s (digits 20, synthetic 30, fashion_mnist '
      'and tfds 100, else all).')
  alpha: float = setting(0.1, check=POSITIVE, help='Dirichlet concentration of the label-skew '
                         'split (digits, fashion_mnist, tfds datasets); smaller is more skewed.')
  data_seed: int = setting(0, check=at_least(0), help='Seed of the partition (Synthetic: of its '
                           'clients\' training examples, its clients and test examples fixed, as '
                           'the benchmark\'s regime), apart from --seed: seeds share the data.')
  cache_dir: Optional[str] = setting(None, help='emnist: directory of emnist_all.sqlite (default '
      'TFF\'s ~/.tff); leaf: where the converted cache goes (default: next to the data).')
  data_dir: Optional[str] = setting(
      None, help='mnist, fashion_mnist: the folder of its four IDX files (default: mnist '
      '~/.keras/datasets/mnist.npz; fashion_mnist /usr/share/datasets/fashion-mnist, then '
      '~/.keras/datasets/fashion-mnist); cifar10, cifar100: tensorflow-datasets data_dir.')
  emnist_only_digits: bool = setting(False, check=BOOL,
                                     help='emnist: the 10-class digits-only version.')
  synthetic_alpha: float = setting(1.0, check=NON_NEGATIVE,
                                   help='synthetic: LEAF alpha (model heterogeneity).')
  synthetic_beta: float = setting(1.0, check=NON_NEGATIVE,
                                  help='synthetic: LEAF beta (data heterogeneity).')
  leaf_dir: Optional[str] = setting(None, help='leaf: LEAF\'s dataset folder data/<name> '
      '(data/train/*.json, data/test/*.json) or its data/ folder; the splits are the files\' own.')
  leaf_name: Optional[str] = setting(
      None, choices=('femnist', 'synthetic', 'celeba', 'shakespeare'),
      help='leaf: which LEAF dataset --leaf_dir holds. Default: the name of its folder.')

  def __post_init__(self):
    check_fields(self)
    if self.dataset == 'leaf' and not self.leaf_dir:
      raise ConfigError('leaf_dir', self.leaf_dir, "given with dataset 'leaf' (LEAF's dataset "
                        'folder data/<name>)')


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """The run loop's settings (`tff_conflict.simulation.training_loop`); `seed` also seeds the
  model and randomized aggregators."""
  rounds: int = setting(check=at_least(1), help='Federated rounds.')
  clients_per_round: int = setting(check=at_least(1), help='Clients sampled per round without '
      'replacement (the sample of round r depends only on --seed and r).')
  client_epochs: int = setting(1, check=at_least(1), help='Local epochs per round.')
  batch_size: int = setting(20, flag='client_batch_size', check=at_least(1),
                            help='Local batch size (also --batch_size).')
  shuffle_buffer: int = setting(1000, flag='client_shuffle_buffer', check=at_least(0),
                                help='Shuffle buffer of each client dataset (0: none); its seed '
                                'comes from --seed, the round and the client.')
  seed: int = setting(0, flag='seed', check=at_least(0))
  eval_every: int = setting(1, check=at_least(0), help='Evaluate on the test split every N '
                            'rounds and after the last; 0: only after the last.')
  eval_train_loss: bool = setting(False, check=BOOL, help='Also evaluate the global model on the '
                                  'union of the clients\' training data (global_train_loss, '
                                  'global_train_accuracy: FedProx\'s training loss).')
  checkpoint_every: int = setting(1, check=at_least(0), help='Save the server state every N '
                                  'rounds, after the last and on Ctrl-C or SIGTERM; 0: never.')
  keep_checkpoints: int = setting(3, check=at_least(0), help='Checkpoints to keep; 0 keeps all.')
  resume: bool = setting(True, check=BOOL, help='Continue from the latest checkpoint of the same '
                         'experiment; --noresume starts over (deleting its old outputs).')
  weighting: Optional[str] = setting(
      None, flag='client_weighting', choices=('num_examples', 'uniform', 'loss'),
      help='Client weighting of the aggregate. Default: the method\'s own (FedMGC: loss, others: '
      'num_examples).')

  __post_init__ = check_fields

  def is_eval_round(self, round_num: int) -> bool:
    return round_num == self.rounds or (self.eval_every > 0 and round_num % self.eval_every == 0)

  def is_checkpoint_round(self, round_num: int) -> bool:
    return self.checkpoint_every > 0 and (round_num == self.rounds
                                          or round_num % self.checkpoint_every == 0)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """The client's or the server's optimizer (`--client_*`, `--server_*`), checked by its config."""
  learning_rate: float = setting(check=POSITIVE, help='learning rate.')
  optimizer: str = setting('sgd', choices=('sgd', 'adam', 'adagrad', 'rmsprop', 'yogi'),
                           help='optimizer (tff.learning.optimizers).')
  momentum: float = setting(0.0, check=MOMENTUM, help='momentum in [0, 1) (sgd only).')


def check_parts(config: Any) -> None:
  """Checks the types of `config`'s sections and its `--client_*` and `--server_*` optimizers."""
  for field in dataclasses.fields(config):
    part = getattr(config, field.name)
    if dataclasses.is_dataclass(field.type) and not isinstance(part, field.type):
      raise _checks.ArgumentTypeError.must_be(f'{type(config).__name__}.{field.name}', part,
                                              f'a {field.type.__name__}')
  for side in ('client', 'server'):
    optimizer = getattr(config, side)
    check_fields(optimizer, f'{side}_')
    if optimizer.momentum and optimizer.optimizer != 'sgd':
      raise ConfigError(f'{side}_momentum', optimizer.momentum, f'0 with optimizer '
                        f'{optimizer.optimizer!r} (momentum applies to sgd only)')


@dataclasses.dataclass(frozen=True)
class OutputConfig:
  """Where results go (`<output_dir>/<experiment_name>/`) and the execution backend."""
  output_dir: str = setting('results', check=NON_EMPTY_STRING, help='Root of the outputs; each '
                            'experiment writes under <output_dir>/<experiment_name>/.')
  experiment_name: Optional[str] = setting(
      None, check=optional(must('a relative name without ".."', lambda v: bool(v) and not (
          os.path.isabs(v) or '..' in v.replace('\\', '/').split('/')))),
      help='The experiment\'s directory. Default: from the algorithm(s) and dataset.')
  progress: bool = setting(True, check=BOOL, help='Show a progress bar (plain lines when stdout '
                           'is not a terminal).')
  runtime: str = setting('inprocess', choices=('inprocess', 'cpp'), help='inprocess '
                         '(tff_conflict.runtime\'s runner of the MapReduceForm graphs) or cpp '
                         '(TFF\'s worker_binary, needed for --workers).')
  workers: tuple[str, ...] = setting((), flag='tff_workers', check=must(
      'a list of distinct host:port entries (port 1-65535)', lambda v: len(set(v)) == len(v)
      and all(re.fullmatch(r'.+:[0-9]+', a) and 0 < int(a.rpartition(':')[2]) < 65536
              for a in v)), help='host:port of remote TFF workers (worker_binary) to run each '
      'run\'s rounds on; empty: local.')
  executor: str = setting('inline', choices=EXECUTORS, help='Where the runs of compare and the '
                          'benchmark run: inline (in turn, in this process), local (--workers '
                          'processes here) or ray (tasks on the Ray cluster of --ray_address); '
                          'the same numbers on each (docs/experiments.md, "Parallel runs").')
  executor_workers: Optional[int] = setting(None, flag='workers', check=optional(at_least(1)),
                                            help='Worker processes of --executor=local (default: '
                                            'the cores / --worker_cpus) or Ray actors of ray '
                                            '(default, and at most: what the cluster places).')
  ray_address: Optional[str] = setting(
      None, check=optional(NON_EMPTY_STRING), help='The Ray cluster of --executor=ray: auto (the '
      'cluster this machine belongs to, `ray start`) or HOST:PORT of its head, joined within 30 s '
      'or refused; unset: a cluster of this machine, started and ended with the command.')
  worker_cpus: float = setting(1.0, check=POSITIVE, help='CPUs each worker takes: a Ray actor\'s '
                               'num_cpus; --executor=local starts the cores / it by default.')
  worker_gpus: float = setting(0.0, check=NON_NEGATIVE, help='The GPUs (a fraction allowed) each '
                               'Ray actor takes (num_gpus); 0 unless --executor=ray.')

  def __post_init__(self):
    object.__setattr__(self, 'workers', tuple(self.workers or ()))
    check_fields(self)
    if self.workers and self.runtime != 'cpp':
      raise ConfigError('runtime', self.runtime,
                        "'cpp' with tff_workers (remote workers run TFF's C++ runtime)")
    check_executor(self.executor, self.executor_workers, self.ray_address, self.worker_cpus,
                   self.worker_gpus)


def check_executor(executor: str, workers: Optional[int], ray_address: Optional[str],
                   worker_cpus: float, worker_gpus: float) -> None:
  """Refuses (`ConfigError`) executor settings (`experiments.executors.Options`) that clash."""
  one_of(EXECUTORS)('executor', executor)
  if workers is not None and executor == 'inline':
    raise ConfigError('workers', workers, 'unset with --executor=inline (it runs in this '
                      'process); use --executor=local or ray')
  if worker_cpus != 1 and executor == 'inline':
    raise ConfigError('worker_cpus', worker_cpus, '1 with --executor=inline (it runs in this '
                      'process)')
  if worker_gpus and executor != 'ray':
    raise ConfigError('worker_gpus', worker_gpus, '0 unless --executor=ray (Ray actors take a '
                      'fraction of a GPU; local workers take none)')
  if ray_address is not None and executor != 'ray':
    raise ConfigError('ray_address', ray_address, 'unset unless --executor=ray')


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Everything one training run depends on (the seed is `training.seed`)."""
  algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
  data: DataConfig = dataclasses.field(default_factory=DataConfig)
  model: Optional[str] = setting(None, help='Model (tff_conflict.models.MODELS). Default: '
                                 'the dataset\'s (docs/experiments.md).')
  training: LoopConfig = dataclasses.field(
      default_factory=lambda: LoopConfig(rounds=50, clients_per_round=10))
  client: OptimizerConfig = dataclasses.field(default_factory=lambda: OptimizerConfig(0.05))
  server: OptimizerConfig = dataclasses.field(default_factory=lambda: OptimizerConfig(1.0))
  output: OutputConfig = dataclasses.field(default_factory=OutputConfig)

  def __post_init__(self):
    check_parts(self)
    training = self.training
    if training.eval_every > training.rounds:
      raise ConfigError('eval_every', training.eval_every,
                        f'at most rounds={training.rounds} (0 evaluates only after the last '
                        'round)')
    if self.data.num_clients is not None and training.clients_per_round > self.data.num_clients:
      raise ConfigError('clients_per_round', training.clients_per_round,
                        f'at most num_clients={self.data.num_clients}')

  seed = property(lambda self: self.training.seed)

  @property
  def hparams(self) -> types.SimpleNamespace:
    """The method hyperparameters (fields of `algorithm`) by flag name."""
    return types.SimpleNamespace(**{h.flag: getattr(self.algorithm, h.flag)
                                    for h in METHOD_HPARAMS})

  def with_seed(self, seed: int) -> 'ExperimentConfig':
    return dataclasses.replace(self, training=dataclasses.replace(self.training, seed=seed))

  @property
  def experiment_name(self) -> str:
    """`output.experiment_name`, or `<dataset>_<algorithm label>_seed<seed>`, a LEAF dataset as
    `leaf_<data.leaf_name, else the name of data.leaf_dir's folder>`."""
    dataset = self.data.dataset
    if dataset == 'leaf':
      name = self.data.leaf_name or os.path.basename(os.path.normpath(self.data.leaf_dir))
      name = re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('._')
      dataset = f'leaf_{name}' if name else 'leaf'
    return self.output.experiment_name or f'{dataset}_{self.algorithm.label}_seed{self.seed}'

  @property
  def experiment_dir(self) -> str:
    return os.path.join(self.output.output_dir, self.experiment_name)

  def flag_values(self) -> dict[str, Any]:
    """flag -> value of every setting (for hparams.csv), of the method flags those the method
    reads; `proximal_term` for 'custom' or where the term is added."""
    values: dict[str, Any] = {}
    applied = self.algorithm.hparam_flags()
    for section, flag, field in flag_fields():
      if flag not in METHOD_FLAGS or applied is None or flag in applied:
        value = getattr(getattr(self, section) if section else self, field.name)
        values[flag] = list(value) if isinstance(value, tuple) else value
    if self.algorithm.name == CUSTOM_ALGORITHM or self.algorithm.proximal_term:
      values['proximal_term'] = self.algorithm.proximal_term
    return values


_SECTIONS = {f.name: f.type for f in dataclasses.fields(ExperimentConfig)
             if dataclasses.is_dataclass(f.type)}


def flag_fields() -> Iterator[tuple[Optional[str], str, dataclasses.Field]]:
  """(section or None for `ExperimentConfig`'s own, flag, field) of every setting a flag sets;
  an optimizer's flags are prefixed by its side (`--client_learning_rate`)."""
  for section in dataclasses.fields(ExperimentConfig):
    if section.name not in _SECTIONS:
      yield None, flag_of(section), section
      continue
    prefix = f'{section.name}_' if _SECTIONS[section.name] is OptimizerConfig else ''
    for field in dataclasses.fields(_SECTIONS[section.name]):
      if flag_of(field):
        yield section.name, prefix + flag_of(field), field


def from_flag_values(values: Mapping[str, Any], *, proximal_term: bool = False
                     ) -> ExperimentConfig:
  """An `ExperimentConfig` from flag -> value (flags absent keep defaults)."""
  settings: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
  own = {}
  for section, flag, field in flag_fields():
    if flag in values:
      (settings[section] if section else own)[field.name] = values[flag]
  settings['algorithm']['proximal_term'] = bool(proximal_term)
  defaults = ExperimentConfig()
  return ExperimentConfig(**own, **{name: dataclasses.replace(getattr(defaults, name), **kwargs)
                                    for name, kwargs in settings.items()})

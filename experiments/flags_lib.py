"""Flags shared by the experiment binaries, in recorded groups, each defaulting to the config field
it sets and validated by that field's check; `experiment_config()` makes the `ExperimentConfig`."""

import contextlib
from typing import Any, Iterator, Optional, Sequence

from absl import flags

from experiments import config
from experiments import metrics_io
from tff_conflict import hparams as hparams_lib

FLAGS = flags.FLAGS
_GROUPS: dict[str, list[str]] = {}


@contextlib.contextmanager
def record_group(group: str) -> Iterator[None]:
  """Records the flags defined inside the block as members of `group`."""
  before = set(FLAGS)
  yield
  names = _GROUPS.setdefault(group, [])
  # FLAGS iterates over long and short names; keep the long ones, in definition order.
  for name in FLAGS:
    if name not in before and name not in names and FLAGS[name].name == name:
      names.append(name)


def groups() -> dict[str, list[str]]:
  """group -> flag names, for every recorded group."""
  return {g: list(names) for g, names in _GROUPS.items()}


DATASETS = config.DATASETS
OPTIMIZERS = config.OPTIMIZERS

_DEFAULTS = config.ExperimentConfig()  # each flag defaults to the setting it sets

with record_group('data'):
  flags.DEFINE_enum('dataset', _DEFAULTS.data.dataset, DATASETS,
                    'Federated dataset. digits: scikit-learn digits split by Dirichlet label skew '
                    '(offline); emnist: TFF federated EMNIST by writer; synthetic: LEAF '
                    'Synthetic(alpha, beta); mnist/fashion_mnist/cifar10/cifar100: Dirichlet '
                    'label-skew splits of the tensorflow-datasets data; leaf: LEAF\'s FEMNIST, '
                    'Synthetic or CelebA from the JSON files of LEAF\'s preprocess.sh '
                    '(--leaf_dir).')
  flags.DEFINE_integer('num_clients', _DEFAULTS.data.num_clients,
                       'Clients in the population. Default: the dataset\'s (digits 20, synthetic '
                       '30, tfds datasets 100, emnist and leaf every writer or user). For emnist '
                       'and leaf, the first N writers or users (sorted ids).')
  flags.DEFINE_float('alpha', _DEFAULTS.data.alpha,
                     'Dirichlet concentration of the label-skew split (digits and tfds datasets); '
                     'smaller is more skewed.')
  flags.DEFINE_integer('data_seed', _DEFAULTS.data.data_seed,
                       'Seed of the data partition (and of Synthetic\'s generative process). Kept '
                       'apart from --seed so that runs with several seeds share the same data.')
  flags.DEFINE_string('cache_dir', _DEFAULTS.data.cache_dir,
                      'emnist: directory holding emnist_all.sqlite. leaf: where to keep the '
                      'converted cache (default: next to the data).')
  flags.DEFINE_string('data_dir', _DEFAULTS.data.data_dir,
                      'tfds datasets: tensorflow-datasets data_dir.')
  flags.DEFINE_bool('emnist_only_digits', _DEFAULTS.data.emnist_only_digits,
                    'emnist: the 10-class digits-only version.')
  flags.DEFINE_float('synthetic_alpha', _DEFAULTS.data.synthetic_alpha,
                     'synthetic: LEAF alpha (model heterogeneity).')
  flags.DEFINE_float('synthetic_beta', _DEFAULTS.data.synthetic_beta,
                     'synthetic: LEAF beta (data heterogeneity).')
  flags.DEFINE_string('leaf_dir', _DEFAULTS.data.leaf_dir,
                      'leaf: LEAF\'s dataset folder data/<name> (holding data/train/*.json and '
                      'data/test/*.json), or its data/ folder. Converted once into a cache; the '
                      'splits are the files\' own.')
  flags.DEFINE_enum('leaf_name', _DEFAULTS.data.leaf_name, list(config.LEAF_NAMES),
                    'leaf: which LEAF dataset --leaf_dir holds. Default: the name of its folder.')

with record_group('model'):
  flags.DEFINE_string('model', _DEFAULTS.model,
                      'Model (experiments.architectures.ARCHITECTURES). Default per dataset: digits_cnn for '
                      'digits, emnist_cnn for emnist, logistic_regression for synthetic, '
                      'fedavg_cnn for mnist/fashion_mnist, cifar_cnn for cifar10/cifar100; for '
                      'leaf, LEAF\'s models: leaf_femnist_cnn, logistic_regression for '
                      'Synthetic, leaf_celeba_cnn.')

_LOOP = _DEFAULTS.training  # the loop's flag defaults

with record_group('training'):
  flags.DEFINE_integer('rounds', _LOOP.rounds, 'Federated rounds.')
  flags.DEFINE_integer('clients_per_round', _LOOP.clients_per_round,
                       'Clients sampled per round (without replacement; the sample of round r '
                       'depends only on --seed and r).')
  flags.DEFINE_integer('client_epochs', _LOOP.client_epochs, 'Local epochs per round.')
  flags.DEFINE_integer('client_batch_size', _LOOP.batch_size, 'Local batch size.')
  flags.DEFINE_integer('client_shuffle_buffer', _LOOP.shuffle_buffer,
                       'Shuffle buffer of each client dataset (0: no shuffling). The shuffle seed '
                       'is derived from --seed, the round and the client.')
  flags.DEFINE_integer('eval_every', _LOOP.eval_every,
                       'Evaluate the global model on the test split every N rounds (and after the '
                       'last round); 0: only after the last round.')
  flags.DEFINE_bool('eval_train_loss', _LOOP.eval_train_loss,
                    'Also evaluate the global model on the union of the clients\' training data '
                    'on evaluation rounds (columns global_train_loss, global_train_accuracy: the '
                    'FedProx paper\'s training loss).')
  flags.DEFINE_integer('checkpoint_every', _LOOP.checkpoint_every,
                       'Save the server state every N rounds, after the last round, and when '
                       'Ctrl-C or SIGTERM stops the run; 0: never. The default, 1, keeps every '
                       'finished round even when the process is killed (a save costs a few '
                       'milliseconds, BENCHMARKS.md).')
  flags.DEFINE_integer('keep_checkpoints', _LOOP.keep_checkpoints,
                       'Checkpoints to keep; 0 keeps all.')

# `--batch_size` is another name of `--client_batch_size`.
flags.DEFINE_alias('batch_size', 'client_batch_size')

with record_group('client'):
  flags.DEFINE_enum('client_optimizer', _DEFAULTS.client.optimizer, OPTIMIZERS,
                    'Client optimizer (tff.learning.optimizers).')
  flags.DEFINE_float('client_learning_rate', _DEFAULTS.client.learning_rate,
                     'Client learning rate.')
  flags.DEFINE_float('client_momentum', _DEFAULTS.client.momentum,
                     'Client momentum in [0, 1) (sgd only).')
  flags.DEFINE_enum('client_weighting', _LOOP.weighting,
                    list(config.CLIENT_WEIGHTINGS),
                    'Client weighting of the aggregate. Default: the method\'s own (FedMGC: '
                    'loss, others: num_examples).')

with record_group('server'):
  flags.DEFINE_enum('server_optimizer', _DEFAULTS.server.optimizer, OPTIMIZERS,
                    'Server optimizer; the aggregate delta is applied as its gradient.')
  flags.DEFINE_float('server_learning_rate', _DEFAULTS.server.learning_rate,
                     'Server learning rate.')
  flags.DEFINE_float('server_momentum', _DEFAULTS.server.momentum,
                     'Server momentum in [0, 1) (sgd only).')


def _method_flag_help(hparam, extra: str = '') -> str:
  """Help text of a method flag, as sentences: the component and its method, what it does, its
  range (tff_conflict.hparams), e.g. 'Focal loss (FedMGC): focusing exponent ...'."""
  component = hparam.component[:1].upper() + hparam.component[1:]
  if hparam.method.lower() not in hparam.component.lower():
    component += f' ({hparam.method})'
  description = hparam.description.rstrip('.')
  return f'{component}: {description}.{extra} Must be {hparam.valid_range}.'


# Each method hyperparameter's default, range and description come from tff_conflict.hparams
# (through config.MethodHparams, whose fields take the same defaults and checks).
_METHOD_FLAG_EXTRA_HELP = {
    'proximal_strength': ' Used by fedprox; given with another algorithm, its client training '
                         'adds the proximal term (e.g. --algorithm=fedgh: FedProx\'s local '
                         'objective with FedGH\'s aggregation).',
    'fedgh_order': ' The seed is --seed.',
    'client_clip_norm': ' Every algorithm takes it.',
}
METHOD_HPARAMS = config.METHOD_HPARAMS

with record_group('method'):
  for _hparam in METHOD_HPARAMS:
    _help = _method_flag_help(_hparam, _METHOD_FLAG_EXTRA_HELP.get(_hparam.flag, ''))
    if _hparam.kind == hparams_lib.CHOICE:
      flags.DEFINE_enum(_hparam.flag, _hparam.default, list(_hparam.choices), _help)
    elif _hparam.kind == hparams_lib.BOOL:
      flags.DEFINE_bool(_hparam.flag, _hparam.default, _help)
    else:
      flags.DEFINE_float(_hparam.flag, _hparam.default, _help)

with record_group('output'):
  flags.DEFINE_string('output_dir', _DEFAULTS.output.output_dir,
                      'Root of the outputs; each experiment writes under '
                      '<output_dir>/<experiment_name>/.')
  flags.DEFINE_string('experiment_name', _DEFAULTS.output.experiment_name,
                      'Name of the experiment directory. Default: derived from the algorithm(s) '
                      'and dataset.')
  flags.DEFINE_bool('resume', _LOOP.resume,
                    'Continue from the latest checkpoint of an earlier run of the same '
                    'experiment; --noresume starts over (deleting its old outputs).')
  flags.DEFINE_bool('progress', _DEFAULTS.output.progress,
                    'Show a progress bar (plain lines when stdout is not a terminal).')

with record_group('preset'):
  flags.DEFINE_string('preset', None, 'A named set of flag values; flags given explicitly win. '
                      'Each binary has its own: compare: readme; benchmark: smoke, results.')

with record_group('runtime'):
  flags.DEFINE_enum('runtime', _DEFAULTS.runtime.runtime, list(config.RUNTIMES),
                    'Execution backend: inprocess (tff_conflict.runtime\'s in-process runner of '
                    'the MapReduceForm graphs) or cpp (TFF\'s worker_binary, needed for '
                    '--workers).')
  flags.DEFINE_list('workers', list(_DEFAULTS.runtime.workers),
                    'host:port of remote TFF workers (worker_binary) to run on; empty: local.')


def _validator(name: str, check: config.Checker):
  """absl lets the validator's `ConfigError` through: `cli.run` prints it like any other."""
  return lambda value: check(name, value) or True


def register_validators(names: Optional[Sequence[str]] = None) -> None:
  """Registers, for each defined flag among `names` (default: all), the check of the config
  field it sets (`config.field_checks()`; for the method flags, `tff_conflict.hparams`), so that a
  bad value fails while flags are parsed: `--focal_gamma must be a finite number >= 0, got nan`.
  Flags already registered are skipped, so a binary calls it again after defining its own flags.
  """
  for name, check in config.field_checks().items():
    if (names is None or name in names) and name in FLAGS and name not in _VALIDATED:
      flags.register_validator(name, _validator(name, check))
      _VALIDATED.add(name)


_VALIDATED: set[str] = set()
register_validators()

# The flags each dataset reads besides --num_clients and --data_seed.
DATASET_FLAGS = {
    'digits': ('alpha',),
    'emnist': ('cache_dir', 'emnist_only_digits'),
    'synthetic': ('synthetic_alpha', 'synthetic_beta'),
    'mnist': ('alpha', 'data_dir'),
    'fashion_mnist': ('alpha', 'data_dir'),
    'cifar10': ('alpha', 'data_dir'),
    'cifar100': ('alpha', 'data_dir'),
    'leaf': ('leaf_dir', 'leaf_name', 'cache_dir'),
}
_ALL_DATASET_FLAGS = sorted({f for names in DATASET_FLAGS.values() for f in names})


def apply_preset(presets: dict[str, dict[str, Any]]) -> None:
  """Sets the values of `presets[--preset]` on every flag not given on the command line; no-op
  without --preset.

  Raises:
    config.ConfigError: an unknown --preset.
  """
  if FLAGS.preset is None:
    return
  config.require('preset', FLAGS.preset, config.one_of(sorted(presets)))
  for name, value in presets[FLAGS.preset].items():
    if not FLAGS[name].present:
      FLAGS[name].value = value


def check_common_flags(algorithms: Optional[Sequence[str]] = None) -> config.ExperimentConfig:
  """Cross-flag checks shared by the binaries, then the typed config of the flags.

  Args:
    algorithms: the methods the binary runs (compare's --algorithms); default the config's
      algorithm (train's --algorithm, --client_loss, --aggregator). A method flag given that
      none of them reads is refused (`config.check_method_flags_apply`).

  Returns:
    `experiment_config()`.

  Raises:
    config.ConfigError: a flag given for a dataset or method that does not read it, or a value
      or combination the config refuses, naming the flag and the value.
  """
  for name in _ALL_DATASET_FLAGS:
    if FLAGS[name].present and name not in DATASET_FLAGS[FLAGS.dataset]:
      users = sorted(d for d, names in DATASET_FLAGS.items() if name in names)
      raise config.ConfigError(name, FLAGS[name].value, reason='applies only to --dataset in '
                               f'{users}, not --dataset={FLAGS.dataset}')
  experiment = experiment_config()
  methods = ([experiment.algorithm] if algorithms is None
             else [config.AlgorithmConfig(name) for name in algorithms])
  from experiments import experiment_lib  # pylint: disable=g-import-not-at-top
  experiment_lib.check_composition(experiment.algorithm)
  check_method_flags_apply(methods)
  return experiment


def check_method_flags_apply(algorithms: Sequence[config.AlgorithmConfig]) -> None:
  """Refuses a method flag given that none of `algorithms` reads; raises `config.ConfigError`."""
  config.check_method_flags_apply(
      {h.flag: FLAGS[h.flag].value for h in METHOD_HPARAMS if FLAGS[h.flag].present}, algorithms)


def experiment_config(**overrides: Any) -> config.ExperimentConfig:
  """The `ExperimentConfig` of the parsed flags: the one place flags become typed settings.

  Flags a binary does not define keep the config's defaults (e.g. `--algorithm` in compare).
  `overrides` (flag name -> value) replace flag values. `AlgorithmConfig.proximal_term` is
  whether `--proximal_strength` was given (to a method that does not declare it).

  Raises:
    config.ConfigError: naming the flag and the value.
  """
  values = {name: FLAGS[name].value for name in FLAGS if FLAGS[name].name == name}
  values.update(overrides)
  return config.from_flag_values(values, proximal_term=FLAGS['proximal_strength'].present)


COMMON_GROUPS = ('data', 'model', 'training', 'client', 'server', 'method', 'output', 'runtime')


def hparams(groups: Sequence[str] = COMMON_GROUPS, **extra: Any) -> dict[str, Any]:
  """The values of the flags of `groups` (in order), then `extra`, package versions and the git
  commit."""
  values: dict[str, Any] = {}
  for group in groups:
    for name in _GROUPS[group]:
      values[name] = FLAGS[name].value
  values.update(extra)
  values.update(metrics_io.provenance())
  return values


def quiet_logs() -> None:
  """Lowers absl's logging to warnings, unless `--verbosity` is given (the binaries call
  `tff_conflict.quiet()` for TensorFlow's and TFF's own logs before importing TensorFlow)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)

"""The flags the experiment binaries share: one per setting of `config.ExperimentConfig`, with its
default, choices and check (a method flag's from `tff_conflict.hparams`), in recorded groups."""

import contextlib
from typing import Any, Iterator, Optional, Sequence

from absl import flags

from experiments import config
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


# Extra sentences of method flags, after their spec's description.
_EXTRA_HELP = {
    'proximal_strength': ' Used by fedprox; given with another algorithm, its client training '
                         'adds the proximal term (e.g. --algorithm=fedgh: FedProx\'s local '
                         'objective with FedGH\'s aggregation).',
    'fedgh_order': ' The seed is --seed.',
    'client_clip_norm': ' Every algorithm takes it.',
}


def _method_flag_help(hparam: hparams_lib.Hparam) -> str:
  """'Focal loss (FedMGC): focusing exponent .... Must be <range>.' (`tff_conflict.hparams`)."""
  component = hparam.component[:1].upper() + hparam.component[1:]
  if hparam.method.lower() not in hparam.component.lower():
    component += f' ({hparam.method})'
  extra = _EXTRA_HELP.get(hparam.flag, '')
  return f'{component}: {hparam.description.rstrip(".")}.{extra} Must be {hparam.valid_range}.'


_DEFINE = {int: flags.DEFINE_integer, Optional[int]: flags.DEFINE_integer,
           float: flags.DEFINE_float, bool: flags.DEFINE_bool, str: flags.DEFINE_string,
           Optional[str]: flags.DEFINE_string, tuple[str, ...]: flags.DEFINE_list}
_DEFAULTS = config.ExperimentConfig()
# Defined by the binaries themselves (train: --algorithm, ..., --seed; compare: --seeds).
_BINARY_FLAGS = ('algorithm', 'client_loss', 'aggregator', 'seed')
METHOD_HPARAMS = config.METHOD_HPARAMS
_METHOD = {h.flag: h for h in METHOD_HPARAMS}

for _section, _flag, _field in config.flag_fields():
  if _flag in _BINARY_FLAGS:
    continue
  _default = getattr(getattr(_DEFAULTS, _section) if _section else _DEFAULTS, _field.name)
  with record_group('method' if _flag in _METHOD else _section or _flag):
    if _flag in _METHOD:
      _h = _METHOD[_flag]
      if _h.kind == hparams_lib.CHOICE:
        flags.DEFINE_enum(_flag, _default, list(_h.choices), _method_flag_help(_h))
      else:
        (flags.DEFINE_bool if _h.kind == hparams_lib.BOOL else flags.DEFINE_float)(
            _flag, _default, _method_flag_help(_h))
      continue
    _help = _field.metadata['help']
    if _section in ('client', 'server'):
      _help = f'{_section.capitalize()} {_help}'
    if 'choices' in _field.metadata:
      flags.DEFINE_enum(_flag, _default, list(_field.metadata['choices']), _help)
    else:
      _DEFINE[_field.type](_flag, list(_default) if isinstance(_default, tuple) else _default,
                           _help)

flags.DEFINE_alias('batch_size', 'client_batch_size')   # another name of --client_batch_size

with record_group('preset'):
  flags.DEFINE_string('preset', None, 'A named set of flag values; flags given explicitly win. '
                      'Each binary has its own: compare: readme; benchmark: experiments.presets.')


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


def quiet_logs() -> None:
  """Lowers absl's logging to warnings, unless `--verbosity` is given (the binaries call
  `tff_conflict.quiet()` for TensorFlow's and TFF's own logs before importing TensorFlow)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)

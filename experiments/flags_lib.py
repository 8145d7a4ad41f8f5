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
                      'Each binary has its own (experiments.presets.COMPARE, BENCHMARK).')


def register_validators() -> None:
  """Registers, for each defined flag not yet registered, the check of the setting it sets
  (`config.field_checks()`); absl lets its `ConfigError` through for `cli.run` to print."""
  for name, check in config.field_checks().items():
    if name in FLAGS and name not in _VALIDATED:
      flags.register_validator(name, lambda value, name=name, check=check: check(name, value)
                               or True)
      _VALIDATED.add(name)


_VALIDATED: set[str] = set()
register_validators()

_DATASET_FLAGS = sorted({f for names in config.DATASETS.values() for f in names})


def apply_preset(presets: dict[str, dict[str, Any]]) -> None:
  """Sets the values of `presets[--preset]` (if given) on every flag not given explicitly."""
  if FLAGS.preset is None:
    return
  config.require('preset', FLAGS.preset, config.one_of(sorted(presets)))
  for name, value in presets[FLAGS.preset].items():
    if not FLAGS[name].present:
      FLAGS[name].value = value


def refuse_flags(reasons: dict[str, str]) -> None:
  """Refuses (`config.ConfigError`) the first flag of `reasons` given, naming its reason."""
  for name, reason in reasons.items():
    if name in FLAGS and FLAGS[name].present:
      raise config.ConfigError(name, FLAGS[name].value, reason=reason)


def check_common_flags(algorithms: Optional[Sequence[str]] = None) -> config.ExperimentConfig:
  """`experiment_config()` after refusing a flag of another dataset or a method flag that none
  of `algorithms` (default: the config's algorithm) reads; raises `config.ConfigError`."""
  refuse_flags({name: f'applies only to --dataset in '
                f'{sorted(d for d, names in config.DATASETS.items() if name in names)}, not '
                f'--dataset={FLAGS.dataset}' for name in _DATASET_FLAGS
                if name not in config.DATASETS[FLAGS.dataset]})
  experiment = experiment_config()
  methods = ([experiment.algorithm] if algorithms is None
             else [config.AlgorithmConfig(name) for name in algorithms])
  from experiments import experiment_lib  # pylint: disable=g-import-not-at-top
  experiment_lib.check_composition(experiment.algorithm)
  check_method_flags_apply(methods)
  return experiment


def check_method_flags_apply(algorithms: Sequence[config.AlgorithmConfig]) -> None:
  """Refuses (`config.ConfigError`) a method flag given that none of `algorithms` reads
  (`AlgorithmConfig.hparam_flags`; none when a table does not know a method)."""
  tables = [a.hparam_flags() for a in algorithms]
  if None in tables:
    return
  names = ', '.join(a.describe() for a in algorithms)
  reads = ', '.join(sorted({f'--{f}' for t in tables for f in t})) or 'no method flag'
  hint = (' (a loss and an aggregator compose with --algorithm=custom --client_loss=... '
          '--aggregator=...)') if len(algorithms) == 1 else ''
  refuse_flags({h.flag: f'does not apply to {names}, which reads {reads}{hint}'
                for h in METHOD_HPARAMS if not any(h.flag in t for t in tables)})


def experiment_config(**overrides: Any) -> config.ExperimentConfig:
  """The `ExperimentConfig` of the parsed flags with `overrides` (flag -> value); flags a binary
  does not define keep their defaults; `proximal_term` is whether --proximal_strength is given."""
  values = {name: FLAGS[name].value for name in FLAGS if FLAGS[name].name == name}
  values.update(overrides)
  return config.from_flag_values(values, proximal_term=FLAGS['proximal_strength'].present)


def quiet_logs() -> None:
  """Lowers absl's logging to warnings, unless `--verbosity` is given (the binaries call
  `tff_conflict.quiet()` for TensorFlow's and TFF's own logs before importing TensorFlow)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)

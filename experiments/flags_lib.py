"""The flags the experiment binaries share, one per setting of `config.ExperimentConfig` (a method
flag's from `tff_conflict.hparams`) with its check, and reading them back."""

import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

from absl import flags

from experiments import config
from tff_conflict import hparams as hparams_lib

FLAGS = flags.FLAGS

# Extra sentences of method flags, after their spec's description.
_EXTRA_HELP = {
    'proximal_strength': ' Read by fedprox and by --algorithm=custom, whose clients then add '
                         'the proximal term (e.g. --client_loss=ce --aggregator=fedgh: FedProx\'s '
                         'local objective with FedGH\'s aggregation); refused with any other '
                         'algorithm, in train, compare and the benchmark alike.',
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
           float: flags.DEFINE_float, bool: flags.DEFINE_bool}


def definer(field: Any, default: Any) -> tuple[Callable[..., Any], Any]:
  """(absl's DEFINE function, flag default) of a setting, for its caller to call (absl records
  the module defining a flag): an enum of its choices, a list for a tuple, else by its type."""
  if 'choices' in field.metadata:
    return functools.partial(flags.DEFINE_enum,
                             enum_values=list(field.metadata['choices'])), default
  if isinstance(default, tuple):
    return flags.DEFINE_list, [f'{v:g}' if isinstance(v, float) else str(v) for v in default]
  return _DEFINE.get(field.type, flags.DEFINE_string), default


_DEFAULTS = config.ExperimentConfig()
_METHOD = {h.flag: h for h in config.METHOD_HPARAMS}

for _section, _flag, _field in config.flag_fields():
  if _flag not in ('algorithm', 'client_loss', 'aggregator', 'seed'):   # the binaries' own
    _define, _default = definer(_field, getattr(
        getattr(_DEFAULTS, _section) if _section else _DEFAULTS, _field.name))
    _define(_flag, _default, help=_method_flag_help(_METHOD[_flag]) if _flag in _METHOD else
            f'{_section.capitalize()} {_field.metadata["help"]}' if _section in ('client', 'server')
            else _field.metadata['help'])

flags.DEFINE_alias('batch_size', 'client_batch_size')   # another name of --client_batch_size

flags.DEFINE_string('preset', None, 'A named set of flag values; flags given explicitly win. '
                    'Each binary has its own (experiments.presets.COMPARE, BENCHMARK).')


def register_validators() -> None:
  """Registers on each defined flag its setting's check (its `ConfigError` reaches `cli`)."""
  for _, name, field in config.flag_fields():
    if 'check' in field.metadata and name in FLAGS and name not in _VALIDATED:
      flags.register_validator(name, lambda value, name=name, check=field.metadata['check']:
                               check(name, value) or True)
      _VALIDATED.add(name)


_VALIDATED: set[str] = set()
register_validators()


def apply_preset(presets: dict[str, dict[str, Any]]) -> None:
  """Sets the values of `presets[--preset]` (if given) on every flag not given explicitly."""
  if FLAGS.preset is None:
    return
  config.one_of(sorted(presets))('preset', FLAGS.preset)
  for name, value in presets[FLAGS.preset].items():
    if not FLAGS[name].present:
      FLAGS[name].value = value


def refuse_flags(reasons: dict[str, str]) -> None:
  """Refuses (`config.ConfigError`) the first flag of `reasons` given, naming its reason."""
  for name, reason in reasons.items():
    if name in FLAGS and FLAGS[name].present:
      raise config.ConfigError(name, FLAGS[name].value, reason=reason)


def check_common_flags(algorithms: Optional[Sequence[str]] = None) -> config.ExperimentConfig:
  """`experiment_config()`, refusing a flag of another dataset, a method flag none of `algorithms`
  (default: the config's) reads, and settings their builders refuse (`check_method`)."""
  refuse_flags({name: f'applies only to --dataset in '
                f'{sorted(d for d, names in config.DATASETS.items() if name in names)}, not '
                f'--dataset={FLAGS.dataset}' for name in sorted(
                    set().union(*config.DATASETS.values()) - set(config.DATASETS[FLAGS.dataset]))})
  experiment = experiment_config()
  methods = ([experiment.algorithm] if algorithms is None else [
      config.AlgorithmConfig(name, **vars(experiment.hparams)) for name in algorithms])
  from experiments import experiment_lib  # pylint: disable=g-import-not-at-top
  experiment_lib.check_composition(experiment.algorithm)
  check_method_flags_apply(methods)
  for method in methods:   # the library's checks of each (compare refuses an unknown one itself)
    if algorithms is None or method.name in experiment_lib.ALGORITHM_HPARAMS:
      experiment_lib.check_method(dataclasses.replace(experiment, algorithm=method))
  return experiment


def check_method_flags_apply(algorithms: Sequence[config.AlgorithmConfig]) -> None:
  """Refuses a method flag given that none of `algorithms` reads (unless one is unknown)."""
  tables = [a.hparam_flags() for a in algorithms]
  if None in tables:
    return
  names = ', '.join(a.describe() for a in algorithms)
  reads = ', '.join(sorted({f'--{f}' for t in tables for f in t})) or 'no method flag'
  hint = (' (a loss and an aggregator compose with --algorithm=custom --client_loss=... '
          '--aggregator=...)') if len(algorithms) == 1 else ''
  refuse_flags({h.flag: f'does not apply to {names}, which reads {reads}{hint}'
                for h in config.METHOD_HPARAMS if not any(h.flag in t for t in tables)})


def experiment_config(**overrides: Any) -> config.ExperimentConfig:
  """The `ExperimentConfig` of the parsed flags with `overrides` (flag -> value); 'custom' adds the
  proximal term when --proximal_strength is given."""
  values = {name: FLAGS[name].value for name in FLAGS if FLAGS[name].name == name}
  values.update(overrides)
  return config.from_flag_values(values, proximal_term=FLAGS['proximal_strength'].present and (
      values.get('algorithm') == config.CUSTOM_ALGORITHM))


def quiet_logs() -> None:
  """Lowers absl's logging to warnings, unless `--verbosity` is given."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)

"""The methods a benchmark compares: `tff_conflict.hparams.METHODS` with their grids
(`Hparam.grid`) and diagnosis variants (`VARIANTS`), compositions `BASELINE+AGGREGATOR` and
variants `METHOD[key=value,...]`; docs/design.md, "The method comparison"."""

import dataclasses
import functools
import inspect
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from tff_conflict import _checks
from tff_conflict import hparams as hparams_lib

CUSTOM = 'custom'
RATES = ('client_lr', 'server_lr')

# Builder arguments a run's seed must not be baked into: FedGH's seed lives in the server state,
# set to each run's seed (`engine`); the process is built with seed 0.
SEEDED = {'fedgh': {'seed': 0}}


@dataclasses.dataclass(frozen=True)
class Method:
  """One compared method: its `algorithm` (`CUSTOM`: `build_process`), builder arguments `fixed`
  and tuned on `grid`, learning rates it fixes, and the `parent` it is a variant of."""
  name: str
  algorithm: str
  fixed: tuple = ()
  grid: tuple = ()
  client_lr: Optional[float] = None
  server_lr: Optional[float] = None
  parent: Optional[str] = None

  def __post_init__(self):
    object.__setattr__(self, 'fixed', tuple(sorted(dict(self.fixed).items())))
    object.__setattr__(self, 'grid', tuple((k, tuple(v)) for k, v in self.grid))
    overlap = set(dict(self.fixed)) & set(dict(self.grid))
    if overlap:
      raise ValueError(f'method {self.name!r} both fixes and tunes '
                       f'{", ".join(map(repr, sorted(overlap)))}')

  def with_grid(self, grid: Mapping[str, Sequence[Any]]) -> 'Method':
    return dataclasses.replace(self, grid=tuple(grid.items()))


def _grid(hparams) -> tuple:
  return tuple((h.keyword, h.grid) for h in hparams if h.grid)


METHODS: dict[str, Method] = {name: Method(name, name, grid=_grid(hparams))
                              for name, hparams in hparams_lib.ALGORITHM_HPARAMS.items()}

# name -> (the method it diagnoses, its `tff_conflict.hparams.Variant`); docs/experiments.md.
VARIANTS = hparams_lib.VARIANTS


def described(variant: str) -> str:
  """What `VARIANTS[variant]` changes: 'form=paper', 'fedga_clip with form=paper', 'custom[...]'."""
  diagnoses, v = VARIANTS[variant]
  items = [f'{k}={x}' for k, x in v.changes]
  if v.ablation:
    return f'{CUSTOM}[{",".join(items)}]'
  parent = v.parent or diagnoses
  return ', '.join(items) if parent == diagnoses else f'{parent} with {", ".join(items)}'


def parse_value(text: str) -> Any:
  """'5' -> 5, '0.1' -> 0.1, 'true'/'false' -> bool, 'none' -> None, anything else a string."""
  text = text.strip()
  if text.lower() in ('true', 'false', 'none'):
    return {'true': True, 'false': False}.get(text.lower())
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return text


_VARIANT = re.compile(r'^([A-Za-z0-9_+]+)\[(.*)\]$')
_COMPOSITION = re.compile(r'^([A-Za-z0-9_]+)\+([A-Za-z0-9_]+)$')
_KEY = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def composition_parts(name: str) -> Optional[tuple[str, str]]:
  """(baseline, aggregator) of a composition's name (ad-hoc arguments ignored), else None."""
  match = _COMPOSITION.match(name.split('[', 1)[0])
  return (match[1], match[2]) if match else None


def _compose(baseline: str, aggregator: str) -> Method:
  """`baseline+aggregator`: the baseline's builder with `aggregator` fixed, tuned on both grids."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  name = f'{baseline}+{aggregator}'
  baselines = [n for n, build in learning.ALGORITHMS.items()
               if 'aggregator' in inspect.signature(build).parameters]
  if baseline not in baselines:
    raise ValueError(f'method {name!r}: {baseline!r} is no baseline that takes an aggregator; '
                     f'{_checks.one_of(baselines)}')
  if aggregator not in learning.AGGREGATORS:
    raise ValueError(f'method {name!r}: unknown aggregator {aggregator!r}; '
                     f'{_checks.one_of(sorted(learning.AGGREGATORS))}')
  grid = dict(METHODS[baseline].grid,
              **dict(_grid(hparams_lib.AGGREGATOR_HPARAMS.get(aggregator, ()))))
  return Method(name, baseline, fixed=(('aggregator', aggregator),), grid=tuple(grid.items()))


def parse_method(text: str) -> Method:
  """A method of `METHODS` or `VARIANTS`, a composition, or `METHOD[key=value,...]` (that method
  with the given builder arguments or learning rates fixed), named as written without spaces;
  `ValueError` for an unknown name, algorithm, loss or aggregator or a malformed variant."""
  text = text.strip().replace(' ', '')
  if text in METHODS:
    return METHODS[text]
  if text in VARIANTS:
    return _variant(text)
  if composition_parts(text) and '[' not in text:
    return _compose(*composition_parts(text))
  match = _VARIANT.match(text)
  if not match:
    raise ValueError(f'unknown method {text!r}: use '
                     f'{_checks.one_of(sorted(METHODS) + sorted(VARIANTS))}, '
                     'BASELINE+AGGREGATOR or ALGORITHM[key=value,...]')
  known = match[1] in METHODS or match[1] in VARIANTS or composition_parts(match[1])
  base = parse_method(match[1]) if known else Method(match[1], match[1])
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  if base.algorithm != CUSTOM and base.algorithm not in learning.ALGORITHMS:
    raise ValueError(f'method {text!r}: unknown algorithm {base.algorithm!r}; '
                     f'{_checks.one_of(list(learning.ALGORITHMS) + [CUSTOM])}')
  fixed, rates = dict(base.fixed), {}
  for item in filter(None, match[2].split(',')):
    key, sep, value = item.partition('=')
    if not sep or not _KEY.match(key):
      raise ValueError(f'method {text!r}: expected key=value inside [...], got {item!r}')
    (rates if key in RATES else fixed)[key] = parse_value(value)
  for key, table in (('loss', hparams_lib.LOSS_HPARAMS),
                     ('aggregator', hparams_lib.AGGREGATOR_HPARAMS)):
    if base.algorithm == CUSTOM and isinstance(fixed.get(key), str) and fixed[key] not in table:
      raise ValueError(f'method {text!r}: {key} must be {_checks.one_of(sorted(table))}, got '
                       f'{fixed[key]!r}')
  for key, value in rates.items():
    if not isinstance(value, (int, float)) or isinstance(value, bool):
      raise ValueError(f'method {text!r}: {key} must be a number, got {value!r}')
  return _changed(base, text, {**fixed, **rates},
                  parent=base.name if known and not composition_parts(base.name) else None)


def _changed(base: Method, name: str, changes: Mapping[str, Any], parent: Optional[str]) -> Method:
  """`base` named `name` with `changes` (builder arguments or `RATES`) fixed and off its grid."""
  fixed = {k: v for k, v in changes.items() if k not in RATES}
  rates = {k: float(v) for k, v in changes.items() if k in RATES}
  return Method(name, base.algorithm, fixed=tuple(dict(base.fixed, **fixed).items()),
                grid=tuple((k, v) for k, v in base.grid if k not in fixed),
                **{'client_lr': base.client_lr, 'server_lr': base.server_lr, **rates},
                parent=parent)


@functools.cache
def _variant(name: str) -> Method:
  """`VARIANTS[name]`: its parent (`custom` for an ablation) with what it changes."""
  diagnoses, v = VARIANTS[name]
  if v.ablation:
    return _changed(Method(CUSTOM, CUSTOM), name, dict(v.changes), parent=diagnoses)
  base = parse_method(v.parent or diagnoses)
  return _changed(base, name, dict(v.changes), parent=base.name)


def given_kwargs(given: Mapping[str, Mapping[str, Any]], method: Method) -> dict[str, Any]:
  """Builder arguments where nothing is tuned: `given[algorithm]`, `given[name]`, the fixed."""
  return {**given.get(method.algorithm, {}), **given.get(method.name, {}), **dict(method.fixed)}


def _composed(method: Method) -> Optional[str]:
  """The aggregator a named algorithm's method fixes by name (a composition), else None."""
  aggregator = dict(method.fixed).get('aggregator')
  return aggregator if method.algorithm != CUSTOM and isinstance(aggregator, str) else None


def hparam_ranges(method: Method) -> dict[str, Any]:
  """keyword -> `tff_conflict.hparams.Hparam` of `method`'s algorithm and composed aggregator."""
  return {h.keyword: h for h in (hparams_lib.ALGORITHM_HPARAMS.get(method.algorithm, ())
                                 + hparams_lib.AGGREGATOR_HPARAMS.get(_composed(method), ()))}


def builder_kwargs(method: Method, tuned: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
  """The builder's arguments: `SEEDED`, fixed, `tuned`, a composition's in `aggregator_kwargs`."""
  kwargs = {**SEEDED.get(method.algorithm, {}), **dict(method.fixed), **(tuned or {})}
  aggregator = _composed(method)
  if aggregator:
    own = {h.keyword for h in hparams_lib.AGGREGATOR_HPARAMS.get(aggregator, ())}
    packed = {**SEEDED.get(aggregator, {}), **(kwargs.pop('aggregator_kwargs', None) or {})}
    packed.update({k: kwargs.pop(k) for k in list(kwargs) if k in own})
    if packed:
      kwargs['aggregator_kwargs'] = packed
  return kwargs


# Why a method's runs can equal another's in every seed (the report's "identical"), by pair.
IDENTICAL_REASONS = {
    ('fedavg+fedgh', 'fedgh'): 'the same computation: FedGH is FedAvg with the fedgh aggregator',
    ('fednova', 'fedavg'): 'FedNova is FedAvg when every client takes the same number of local '
                           'steps',
    ('feddecorr', 'fedavg'): 'FedDecorr is FedAvg on a model without a hidden layer, where its '
                             'term has no gradient; such runs are refused now',
}


def identical_reason(method: str, other: str) -> Optional[str]:
  """Why `method`'s runs can equal `other`'s in every seed (`IDENTICAL_REASONS`), else None."""
  return IDENTICAL_REASONS.get((method, other)) or IDENTICAL_REASONS.get((other, method))


def model_refusal(method: Method, build_model: Callable[[], Any]) -> Optional[str]:
  """Why `method` cannot train the model `build_model()` builds, else None (FedDecorr's term
  without a gradient: `tff_conflict.learning.check_trained_representation`)."""
  if method.algorithm != 'feddecorr':
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default():
    model = build_model()
    try:
      learning.check_trained_representation(model)
    except ValueError as e:
      return str(e)
  return None

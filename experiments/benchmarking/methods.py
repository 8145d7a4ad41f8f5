"""The methods a benchmark compares: `tff_conflict.learning.ALGORITHMS` builders (or 'custom'),
compositions `BASELINE+AGGREGATOR` and variants, with their default tuning grids from
`tff_conflict.hparams` (`Hparam.grid`); docs/design.md, "The method comparison"."""

import dataclasses
import functools
import re
from typing import Any, Mapping, Optional, Sequence, Union

from tff_conflict import hparams as hparams_lib

CUSTOM = 'custom'

# Builder keyword arguments of each algorithm that a run's seed must not be baked into: FedGH's
# aggregator draws its partner order from a seed held in the server state, which the benchmark
# sets to each run's seed (see `engine`); the process is built with seed 0.
SEEDED_KWARGS = {'fedgh': {'seed': 0}}
# The same for an aggregator composed with a baseline (its `aggregator_kwargs`).
SEEDED_AGGREGATOR_KWARGS = {'fedgh': {'seed': 0}}

COMPOSITION_SEPARATOR = '+'


@dataclasses.dataclass(frozen=True)
class Method:
  """One compared method.

  Attributes:
    name: its name in the report and on the command line.
    algorithm: the `tff_conflict.learning.ALGORITHMS` builder, or `CUSTOM`
      (`tff_conflict.learning.build_process`: `fixed` holds its `loss`, `loss_kwargs`,
      `aggregator`, `aggregator_kwargs`, ...).
    fixed: builder keyword arguments fixed for this method, as sorted (name, value) pairs.
    grid: builder keyword arguments tuned, as (name, candidate values) pairs.
    client_lr, server_lr: learning rates fixed for this method (None: searched on the table's
      grids like every other method's, or the given one without tuning).
    parent: the method this one is a variant of (its algorithm's registered method, or for a
      'custom' diagnosis variant the method it diagnoses); None for a method of its own. With
      its parent in the table, a variant runs at the parent's tuned values and changes only
      what it fixes (`plan`).
  """
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
      raise ValueError(f'method {self.name!r} both fixes and tunes {sorted(overlap)}')

  @property
  def fixed_kwargs(self) -> dict[str, Any]:
    return dict(self.fixed)

  def with_grid(self, grid: Mapping[str, Sequence[Any]]) -> 'Method':
    return dataclasses.replace(self, grid=tuple((k, tuple(v)) for k, v in grid.items()))


def default_grid(algorithm: str) -> tuple:
  """(keyword, values) of each hyperparameter of `algorithm` with a tuning grid
  (`tff_conflict.hparams`, `Hparam.grid`)."""
  return tuple((h.keyword, h.grid) for h in hparams_lib.ALGORITHM_HPARAMS.get(algorithm, ())
               if h.grid)


_DEFAULTS = tuple(Method(name, name, grid=default_grid(name))
                  for name in hparams_lib.ALGORITHM_HPARAMS)

METHODS: dict[str, Method] = {m.name: m for m in _DEFAULTS}


def _algorithms() -> list[str]:
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  return list(learning.ALGORITHMS)


def _check_algorithm(algorithm: str, name: str) -> None:
  if algorithm != CUSTOM and algorithm not in _algorithms():
    raise ValueError(f'method {name!r}: unknown algorithm {algorithm!r}; one of '
                     f'{_algorithms() + [CUSTOM]}')


def _check_registered(text: str, algorithm: str, fixed: Mapping[str, Any]) -> None:
  """Refuses, before anything runs, a custom variant's loss or aggregator that is not registered
  (`tff_conflict.hparams`' tables of `tff_conflict.learning.LOSSES` and `AGGREGATORS`); the
  builder arguments themselves are checked by `config.BenchmarkConfig`."""
  if algorithm != CUSTOM:
    return
  for key, table in (('loss', hparams_lib.LOSS_HPARAMS),
                     ('aggregator', hparams_lib.AGGREGATOR_HPARAMS)):
    value = fixed.get(key)
    if isinstance(value, str) and value not in table:
      raise ValueError(f'method {text!r}: {key} must be one of {sorted(table)}, got {value!r}')


def parse_value(text: str) -> Any:
  """'5' -> 5, '0.1' -> 0.1, 'true'/'false' -> bool, 'none' -> None, anything else a string."""
  text = text.strip()
  lowered = text.lower()
  if lowered in ('true', 'false'):
    return lowered == 'true'
  if lowered == 'none':
    return None
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return text


_VARIANT = re.compile(r'^([A-Za-z0-9_+]+)\[(.*)\]$')
_COMPOSITION = re.compile(r'^([A-Za-z0-9_]+)\+([A-Za-z0-9_]+)$')


def composable_algorithms() -> list[str]:
  """The algorithms whose builder takes `aggregator=` (the baselines)."""
  import inspect  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  return [name for name, build in learning.ALGORITHMS.items()
          if 'aggregator' in inspect.signature(build).parameters]


def aggregator_grid(aggregator: str) -> dict[str, tuple]:
  """The default grid of `aggregator`'s own hyperparameters (`Hparam.grid`)."""
  return {h.keyword: h.grid for h in hparams_lib.AGGREGATOR_HPARAMS.get(aggregator, ())
          if h.grid}


def compose(baseline: str, aggregator: str) -> Method:
  """The method `baseline+aggregator`: the baseline's builder with `aggregator` fixed, tuned on
  the baseline's grid plus `aggregator_grid(aggregator)`.

  Raises:
    ValueError: a baseline whose builder takes no aggregator, or an unknown aggregator.
  """
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  name = f'{baseline}{COMPOSITION_SEPARATOR}{aggregator}'
  base = METHODS.get(baseline) or Method(baseline, baseline)
  if base.algorithm not in composable_algorithms():
    raise ValueError(f'method {name!r}: {baseline!r} is no baseline that takes an aggregator; '
                     f'one of {composable_algorithms()}')
  if aggregator not in learning.AGGREGATORS:
    raise ValueError(f'method {name!r}: unknown aggregator {aggregator!r}; one of '
                     f'{sorted(learning.AGGREGATORS)}')
  grid = dict(base.grid)
  grid.update(aggregator_grid(aggregator))
  return Method(name, base.algorithm, fixed=tuple(base.fixed) + (('aggregator', aggregator),),
                grid=tuple(grid.items()), client_lr=base.client_lr, server_lr=base.server_lr)


def composition_parts(name: str) -> Optional[tuple[str, str]]:
  """(baseline, aggregator) of a composition's name (ad-hoc arguments ignored), else None."""
  match = _COMPOSITION.match(name.split('[', 1)[0])
  return (match[1], match[2]) if match else None


def _registered(name: str) -> Optional[Method]:
  if name in METHODS:
    return METHODS[name]
  parts = composition_parts(name)
  return compose(*parts) if parts and '[' not in name else None


def parse_method(text: str) -> Method:
  """A method from `METHODS` or `VARIANTS` by name, or an ad-hoc variant
  `algorithm[key=value,...]`.

  An ad-hoc variant starts from the algorithm's registered method (its grid, minus the keys it
  fixes) and is named as written (spaces removed).

  Raises:
    ValueError: an unknown name or a malformed variant.
  """
  text = text.strip()
  registered = _registered(text.replace(' ', ''))
  if registered is not None:
    return registered
  if text in VARIANTS:
    return _variant_method(text)
  match = _VARIANT.match(text.replace(' ', ''))
  if not match:
    raise ValueError(f'unknown method {text!r}: use one of {sorted(METHODS) + sorted(VARIANTS)}, '
                     'BASELINE+AGGREGATOR or ALGORITHM[key=value,...]')
  algorithm, body = match[1], match[2]
  base = _registered(algorithm) or Method(algorithm, algorithm)
  _check_algorithm(base.algorithm, text)
  fixed = dict(base.fixed)
  for item in filter(None, body.split(',')):
    key, sep, value = item.partition('=')
    if not sep or not re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', key):
      raise ValueError(f'method {text!r}: expected key=value inside [...], got {item!r}')
    fixed[key] = parse_value(value)
  _check_registered(text, base.algorithm, fixed)
  grid = tuple((k, v) for k, v in base.grid if k not in fixed)
  return Method(text.replace(' ', ''), base.algorithm, fixed=tuple(fixed.items()), grid=grid,
                client_lr=base.client_lr, server_lr=base.server_lr,
                parent=base.name if base.name in METHODS else None)


@dataclasses.dataclass(frozen=True)
class Variant:
  """A method with one cause changed, to test a diagnosis (`parse_method` makes it a `Method`).

  Attributes:
    name: the method name it runs under in a runs table (e.g. 'fedga_paper').
    diagnoses: the method whose result it explains (e.g. 'fedga').
    changes: what differs from its parent, in builder terms: keyword arguments (`Method.fixed`)
      and fixed learning rates (`client_lr`, `server_lr`), e.g. `{'form': 'paper'}`; or, for
      another algorithm, a method as `parse_method` reads it, e.g.
      'custom[loss=margin,aggregator=measured_mean]' (run instead of the parent).
    question: what its result answers.
    baseline: the method its gap is measured against (e.g. 'fedavg_clip' for a clipped
      variant); None: the report's baseline.
    parent: the method (or variant) it changes; None: `diagnoses`.
  """
  name: str
  diagnoses: str
  changes: Union[Mapping[str, Any], str]
  question: str
  baseline: Optional[str] = None
  parent: Optional[str] = None

  @property
  def described(self) -> str:
    """`changes` as the report shows them: 'form=paper', 'fedga_clip with form=paper' (a
    parent other than `diagnoses`), 'custom[loss=ce,aggregator=dgc]'."""
    text = (self.changes if isinstance(self.changes, str)
            else ', '.join(f'{k}={v}' for k, v in self.changes.items()))
    return text if self.parent in (None, self.diagnoses) else f'{self.parent} with {text}'


# The diagnosis variants: each changes one cause of its method's result (the report's Diagnosis).
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant('fedga_paper', 'fedga', {'form': 'paper'},
            'Does the paper\'s eq. (8) taken literally (gradient p - q: classes absent from a '
            'batch muted, logits free to drift) lose what the authors\' soft-target form '
            '(the default) keeps?'),
    Variant('fedga_paper_clip', 'fedga', {'form': 'paper'},
            'Does the authors\' gradient clipping at 5.0 tame the paper\'s form? (compared '
            'with FedAvg clipped alike, `fedavg_clip`)', baseline='fedavg_clip',
            parent='fedga_clip'),
    Variant('fedga_clip', 'fedga', {'clip_norm': 5.0},
            'FedGA as the authors\' code trains it (soft-target form, clipping at 5.0), '
            'compared with FedAvg clipped alike (`fedavg_clip`).', baseline='fedavg_clip'),
    Variant('fedavg_clip', 'fedavg', {'clip_norm': 5.0},
            'FedAvg with the clients\' gradients clipped at 5.0: the baseline of the clipped '
            'variants (the authors\' code clips every method).'),
    Variant('fedga_dataset', 'fedga', {'counts': 'dataset'},
            'Do counts over the client\'s whole dataset (fewer absent classes than a '
            'mini-batch) help?'),
    Variant('fedld_server_lr', 'fedld', {'server_lr': 4.0},
            'Does a server learning rate that compensates the shorter server step close the '
            'gap?'),
    Variant('fedld_preserve_norms', 'fedld', {'preserve_norms': True},
            'Does keeping each revised update at its original length (the paper\'s stated '
            'intent for eq. (7)) close the gap without tuning a server learning rate?'),
    Variant('fedld_projection', 'fedld', {'revision': 'projection'},
            'Is eq. (7)\'s re-weighting what loses? The plain orthogonal projection on the same '
            'principal directions instead (no lambda_l / S weights).'),
    Variant('fedld_model', 'fedld', {'granularity': 'model'},
            'Does one principal decomposition of the whole-model updates (the paper\'s text) '
            'differ from the per-tensor one (the default, the authors\' code)?'),
    Variant('fedld_authors', 'fedld',
            {'first_round_plain_mean': True, 'margin_form': 'batch_probabilities',
             'client_weighting': 'uniform'},
            'FedLD as the authors\' code runs it: the first round a plain mean, the margin on '
            'the batch\'s probabilities, the unweighted mean of the revised updates.'),
    Variant('fedld_margin_only', 'fedld', 'custom[loss=margin,aggregator=measured_mean]',
            'What does margin control alone (FedAvg aggregation) cost or gain?'),
    Variant('fedld_principal_only', 'fedld', 'custom[loss=ce,aggregator=principal]',
            'What does principal-gradient aggregation alone (cross-entropy) cost or gain?'),
    Variant('fedmgc_focal_only', 'fedmgc', 'custom[loss=focal,aggregator=measured_mean]',
            'What does the focal loss alone (FedAvg aggregation) cost or gain?'),
    Variant('fedmgc_dgc_only', 'fedmgc', 'custom[loss=ce,aggregator=dgc]',
            'What does dominant gradient correction alone (cross-entropy) cost or gain?'),
    Variant('fedavg_uniform', 'fedmgc', {'client_weighting': 'uniform'},
            'Is the cost of dominant gradient correction its unweighted mean of the clients '
            '(Algorithm 2, line 9) rather than the correction?', parent='fedavg'),
    Variant('fedavg_measured', 'fedavg', 'custom[loss=ce,aggregator=measured_mean]',
            'FedAvg with the conflict diagnostics: the regime\'s conflict fraction and client '
            'step length.'),
    Variant('fedprox_mu1', 'fedprox', {'proximal_strength': 1.0},
            'Does the strongest proximal pull of the paper\'s grid change anything?'),
    Variant('fed_corrective_alpha1', 'fed_corrective', {'alpha': 1.0},
            'Does the largest alpha change anything?'),
)}


@functools.cache
def _variant_method(name: str) -> Method:
  """`VARIANTS[name]` as a method: its parent's (grid minus what it fixes) with `changes`."""
  v = VARIANTS[name]
  parent = v.parent or v.diagnoses
  if isinstance(v.changes, str):
    return dataclasses.replace(parse_method(v.changes), name=name, parent=parent)
  base = _variant_method(parent) if parent in VARIANTS else METHODS[parent]
  changes = dict(v.changes)
  rates = {k: float(changes.pop(k)) for k in ('client_lr', 'server_lr') if k in changes}
  fixed = dict(base.fixed, **changes)
  return dataclasses.replace(base, name=name, fixed=tuple(fixed.items()), parent=parent,
                             grid=tuple((k, g) for k, g in base.grid if k not in fixed), **rates)


def given_kwargs(given: Mapping[str, Mapping[str, Any]], method: Method) -> dict[str, Any]:
  """Builder arguments used where nothing is tuned: `given[algorithm]`, then `given[name]`,
  then the method's fixed ones."""
  kwargs = dict(given.get(method.algorithm, {}))
  kwargs.update(given.get(method.name, {}))
  kwargs.update(method.fixed_kwargs)
  return kwargs


def composed_aggregator(method: Method) -> Optional[str]:
  """The aggregator a named algorithm's method fixes by name (a composition), else None."""
  aggregator = method.fixed_kwargs.get('aggregator')
  return aggregator if method.algorithm != CUSTOM and isinstance(aggregator, str) else None


def aggregator_keywords(method: Method) -> set[str]:
  """The keywords of the composed aggregator's hyperparameters (they go to
  `aggregator_kwargs`)."""
  from tff_conflict import hparams  # pylint: disable=g-import-not-at-top
  aggregator = composed_aggregator(method)
  if not aggregator:
    return set()
  return {h.keyword for h in hparams.AGGREGATOR_HPARAMS.get(aggregator, ())}


def hparam_ranges(method: Method) -> dict[str, Any]:
  """keyword -> `tff_conflict.hparams.Hparam` of every hyperparameter `method`'s builder takes
  by name: its algorithm's, and for a composition its aggregator's."""
  from tff_conflict import hparams  # pylint: disable=g-import-not-at-top
  ranges = {h.keyword: h for h in hparams.ALGORITHM_HPARAMS.get(method.algorithm, ())}
  aggregator = composed_aggregator(method)
  if aggregator:
    ranges.update({h.keyword: h for h in hparams.AGGREGATOR_HPARAMS.get(aggregator, ())})
  return ranges


def builder_kwargs(method: Method, tuned: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
  """The builder's keyword arguments: the seeded defaults, the method's fixed ones, `tuned`;
  for a composition, the aggregator's own arguments gathered into `aggregator_kwargs`."""
  kwargs = dict(SEEDED_KWARGS.get(method.algorithm, {}))
  kwargs.update(method.fixed_kwargs)
  kwargs.update(tuned or {})
  aggregator = composed_aggregator(method)
  if aggregator:
    own = aggregator_keywords(method)
    packed = dict(SEEDED_AGGREGATOR_KWARGS.get(aggregator, {}))
    packed.update(kwargs.pop('aggregator_kwargs', None) or {})
    packed.update({k: kwargs.pop(k) for k in list(kwargs) if k in own})
    if packed:
      kwargs['aggregator_kwargs'] = packed
  return kwargs

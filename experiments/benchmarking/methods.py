"""The methods a benchmark compares: named algorithms, variants with fixed extra hyperparameters,
and the small grids their own hyperparameters are tuned on.

A method is a `tff_conflict.learning.ALGORITHMS` builder plus keyword arguments fixed for it:

    METHODS['fedga']                      # build_fedga, tuned over counts in {batch, dataset}
    register(Method('fedga_soft', 'fedga', fixed=(('form', 'soft_target'),)))
    parse_method('fedga[form=soft_target,clip_norm=5]')   # an ad-hoc variant, named as written

The client learning rate (every method, from one shared grid) and the server learning rate (the
methods whose `tune_server_lr` is set) are not builder arguments: the benchmark sets them in each
run's initial server state (`process.set_hparams`), so one built process serves every rate.

Default grids (`Method.grid`; the benchmark's `--grids` flag overrides them):

| method | tuned builder arguments | server lr |
|---|---|---|
| fedavg, fedgh | - | - |
| fedprox | proximal_strength (mu) in {0.001, 0.01, 0.1, 1} (FedProx's grid) | - |
| fedmgc | gamma in {0.5, 1, 2}, selection_ratio in {0.3, 0.5, 0.7} | - |
| fedga | counts in {batch, dataset} | - |
| fedld | margin_weight (lambda) in {0.01, 0.1}, component_ratio (rho) in {0.5, 0.8} | yes |
| fed_corrective | alpha in {0.1, 0.3, 0.5} | - |
"""

import dataclasses
import re
from typing import Any, Mapping, Optional, Sequence

# Builder keyword arguments of each algorithm that a run's seed must not be baked into: FedGH's
# aggregator draws its partner order from a seed held in the server state, which the benchmark
# sets to each run's seed (see `engine`); the process is built with seed 0.
SEEDED_KWARGS = {'fedgh': {'seed': 0}}


@dataclasses.dataclass(frozen=True)
class Method:
  """One compared method.

  Attributes:
    name: its name in the report and on the command line.
    algorithm: the `tff_conflict.learning.ALGORITHMS` builder.
    fixed: builder keyword arguments fixed for this method, as sorted (name, value) pairs.
    grid: builder keyword arguments tuned, as (name, candidate values) pairs.
    tune_server_lr: whether the server learning rate is tuned too (`--server_lr_grid`).
  """
  name: str
  algorithm: str
  fixed: tuple = ()
  grid: tuple = ()
  tune_server_lr: bool = False

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


_DEFAULTS = (
    Method('fedavg', 'fedavg'),
    Method('fedprox', 'fedprox', grid=(('proximal_strength', (0.001, 0.01, 0.1, 1.0)),)),
    Method('fedgh', 'fedgh'),
    Method('fedmgc', 'fedmgc', grid=(('gamma', (0.5, 1.0, 2.0)),
                                     ('selection_ratio', (0.3, 0.5, 0.7)))),
    Method('fedga', 'fedga', grid=(('counts', ('batch', 'dataset')),)),
    Method('fedld', 'fedld', grid=(('margin_weight', (0.01, 0.1)),
                                   ('component_ratio', (0.5, 0.8))), tune_server_lr=True),
    Method('fed_corrective', 'fed_corrective', grid=(('alpha', (0.1, 0.3, 0.5)),)),
)

METHODS: dict[str, Method] = {m.name: m for m in _DEFAULTS}


def register(method: Method) -> Method:
  """Adds a named variant to `METHODS` (e.g. one with a fixed loss option); returns it.

  Raises:
    ValueError: the name is taken by another definition, or the algorithm is unknown.
  """
  _check_algorithm(method.algorithm, method.name)
  existing = METHODS.get(method.name)
  if existing is not None and existing != method:
    raise ValueError(f'method {method.name!r} is already registered as {existing}')
  METHODS[method.name] = method
  return method


def _algorithms() -> list[str]:
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  return list(learning.ALGORITHMS)


def _check_algorithm(algorithm: str, name: str) -> None:
  if algorithm not in _algorithms():
    raise ValueError(f'method {name!r}: unknown algorithm {algorithm!r}; one of {_algorithms()}')


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


_VARIANT = re.compile(r'^([A-Za-z0-9_]+)\[(.*)\]$')


def parse_method(text: str) -> Method:
  """A method from `METHODS` by name, or an ad-hoc variant `algorithm[key=value,...]`.

  An ad-hoc variant starts from the algorithm's registered method (its grid, minus the keys it
  fixes) and is named as written (spaces removed).

  Raises:
    ValueError: an unknown name or a malformed variant.
  """
  text = text.strip()
  if text in METHODS:
    return METHODS[text]
  match = _VARIANT.match(text.replace(' ', ''))
  if not match:
    raise ValueError(f'unknown method {text!r}: use one of {sorted(METHODS)} or '
                     'ALGORITHM[key=value,...]')
  algorithm, body = match[1], match[2]
  base = METHODS.get(algorithm) or Method(algorithm, algorithm)
  _check_algorithm(base.algorithm, text)
  fixed = dict(base.fixed)
  for item in filter(None, body.split(',')):
    key, sep, value = item.partition('=')
    if not sep or not re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', key):
      raise ValueError(f'method {text!r}: expected key=value inside [...], got {item!r}')
    fixed[key] = parse_value(value)
  grid = tuple((k, v) for k, v in base.grid if k not in fixed)
  return Method(text.replace(' ', ''), base.algorithm, fixed=tuple(fixed.items()), grid=grid,
                tune_server_lr=base.tune_server_lr)


def builder_kwargs(method: Method, tuned: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
  """The builder's keyword arguments: the seeded defaults, the method's fixed ones, `tuned`."""
  kwargs = dict(SEEDED_KWARGS.get(method.algorithm, {}))
  kwargs.update(method.fixed_kwargs)
  kwargs.update(tuned or {})
  return kwargs

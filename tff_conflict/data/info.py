"""What a data set of `tff_conflict.data` is: its elements (`DatasetInfo`), its entry in the
registry (`Dataset`: loader, population, source argument, default model; `registry.DATASETS`),
and a split of it over clients (`Regime`, named as `regimes.parse_regime` reads it)."""

import dataclasses
import re
from typing import Any, Callable, Optional


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What one element `OrderedDict(x=..., y=...)` of a data set looks like.

  `x` is float32 with shape `element_shape` (LEAF Shakespeare's: int32 character ids); `y` is an
  int32 scalar in `[0, num_classes)`.
  """
  name: str
  element_shape: tuple
  num_classes: int
  loader: str


@dataclasses.dataclass(frozen=True)
class Dataset:
  """One data set as `load_regime` reads it: declared once, in its own module.

  Attributes:
    name: the name in regimes (`'mnist'` in `'mnist:dir(0.1)'`).
    element_shape, num_classes: its elements (`DatasetInfo`); None where only its files tell
      (LEAF Synthetic).
    loader: the public call that loads it, as `DatasetInfo.loader` shows it.
    model: the name of its default model (`tff_conflict.models.MODELS`).
    source: the argument of `load_regime` naming where its files are ('data_dir', 'leaf_dir' or
      'cache_dir'), which its errors name; None for data that needs no files.
    num_clients: the default population (`@K` absent); None: all of its own clients.
    arrays: array data sets (every NIID-Bench split): `arrays(source)` is
      `((x_train, y_train), (x_test, y_test))`, x uint8 pixels (scaled by `transform`) or float32,
      y int32; the test split is never trained on.
    transform: the elementwise map of stored x to the elements' x (None: a float32 cast).
    load: the other data sets (their own clients, `natural`, or Synthetic):
      `load(regime, seed=, data_dir=, leaf_dir=, cache_dir=) -> (train, test)`.
    files: `files(source) -> (location, paths)`: the folder (absolute) or 'bundled' /
      'generated' it is read from, and the files read (`registry.source_fingerprint`).
    tuning_regime: the regime the benchmark tunes this data set's methods on by default.
  """
  name: str
  element_shape: Optional[tuple]
  num_classes: Optional[int]
  loader: str
  model: str
  files: Callable[[Optional[str]], tuple[str, list]]
  source: Optional[str] = None
  num_clients: Optional[int] = None
  arrays: Optional[Callable[[Optional[str]], Any]] = None
  transform: Optional[Callable[[Any], Any]] = None
  load: Optional[Callable[..., tuple]] = None
  tuning_regime: Optional[str] = None

  @property
  def info(self) -> Optional[DatasetInfo]:
    if self.element_shape is None or self.num_classes is None:
      return None
    return DatasetInfo(self.name, self.element_shape, self.num_classes, self.loader)


def _fmt(value: float) -> str:
  return f'{float(value):g}'


@dataclasses.dataclass(frozen=True)
class Regime:
  """A dataset split over clients.

  Attributes:
    dataset: a name of `registry.DATASETS`.
    split: 'iid', 'dir' (Dirichlet label skew, `param` = (alpha,)), '#C' (`param` = (k,)),
      'qty' (quantity skew, `param` = (beta,)), 'client_dir' (per-client Dirichlet class mix,
      equal sizes, `param` = (alpha,)), 'synthetic' (`param` = (alpha, beta)) or 'natural'
      (the dataset's own clients; LEAF's may have `param` = (max_examples,) or (max_examples,
      max_test_examples): each client keeps at most that many training (and test) examples,
      `leaf_data.first_users`).
    param: the split's parameters.
    num_clients: the population size; None for the dataset's default.
  """
  dataset: str
  split: str
  param: tuple = ()
  num_clients: Optional[int] = None

  @property
  def name(self) -> str:
    """The canonical name, e.g. 'digits:dir(0.1)', 'digits:#C=2@100', 'synthetic(1,1)'."""
    if self.split == 'synthetic':
      text = f'synthetic({_fmt(self.param[0])},{_fmt(self.param[1])})'
    elif self.split in ('dir', 'qty', 'client_dir'):
      text = f'{self.dataset}:{self.split}({_fmt(self.param[0])})'
    elif self.split == '#C':
      text = f'{self.dataset}:#C={self.param[0]}'
    elif self.split == 'natural' and self.param:
      test = f',test={self.param[1]}' if len(self.param) > 1 else ''
      text = f'{self.dataset}:natural(max={self.param[0]}{test})'
    else:
      text = f'{self.dataset}:{self.split}'
    return text if self.num_clients is None else f'{text}@{self.num_clients}'

  @property
  def slug(self) -> str:
    """`name` as a file name: letters, digits, '.', '-' and '_' only."""
    return re.sub(r'[^A-Za-z0-9.=-]+', '_', self.name.replace('#C=', 'C')).strip('_')

  def __str__(self) -> str:
    return self.name

"""Name registries: `LOSSES[name](**kwargs)` -> a Keras loss, `AGGREGATORS[name](**kwargs)` -> a
weighted aggregation factory; each entry is its class bound to the keywords and defaults of
`tff_conflict.hparams`."""

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Generic, Optional, TypeVar

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import aggregators
from tff_conflict import hparams as hparams_lib
from tff_conflict import losses

T = TypeVar('T')


@dataclasses.dataclass(frozen=True)
class Entry(Generic[T]):
  """A registry entry: `entry(**kwargs)` is `make(**kwargs)` with each hyperparameter of
  `hparams` at its default unless given; `TypeError` on a keyword it does not take.

  Attributes:
    kind: 'loss' or 'aggregator' (for messages).
    name: its name in the registry.
    make: the class (or function) it builds; it checks the values.
    hparams: the method hyperparameters it takes (`tff_conflict.hparams`).
    settings: further keywords of `make` it passes on when given (not method hyperparameters).
  """
  kind: str
  name: str
  make: Callable[..., T]
  hparams: tuple[hparams_lib.Hparam, ...]
  settings: tuple[str, ...] = ()

  @property
  def keywords(self) -> tuple[str, ...]:
    return tuple(h.keyword for h in self.hparams) + self.settings

  @property
  def method(self) -> Optional[str]:
    """The method whose hyperparameters it takes ('FedMGC'), or None."""
    return self.hparams[0].method if self.hparams else None

  @property
  def __signature__(self) -> inspect.Signature:
    """Its keywords and their defaults, for `inspect.signature` and `help`."""
    return inspect.Signature(
        [inspect.Parameter(h.keyword, inspect.Parameter.KEYWORD_ONLY, default=h.default)
         for h in self.hparams]
        + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None)
           for k in self.settings])

  def __call__(self, **kwargs: Any) -> T:
    hparams_lib.check_keywords(f'{self.kind} {self.name!r}', kwargs, self.keywords)
    return self.make(**dict({h.keyword: h.default for h in self.hparams}, **kwargs))


def cross_entropy_loss() -> tf.keras.losses.Loss:
  """Sparse softmax cross-entropy on logits (FedAvg, McMahan et al. 2017)."""
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


_LOSS_CLASSES: dict[str, Callable[..., tf.keras.losses.Loss]] = {
    'ce': cross_entropy_loss,
    'focal': losses.FocalLoss,                   # FedMGC, eq. 10
    'margin': losses.MarginControlLoss,          # FedLD, eq. 3
    'calibrated': losses.CalibratedLabelLoss,    # FedGA, eq. 8
}

# name -> the Keras loss of `hparams.LOSS_HPARAMS[name]`.
LOSSES: dict[str, Entry[tf.keras.losses.Loss]] = {
    name: Entry('loss', name, _LOSS_CLASSES[name], table)
    for name, table in hparams_lib.LOSS_HPARAMS.items()}

_AGGREGATOR_CLASSES: dict[str, Callable[..., tff.aggregators.WeightedAggregationFactory]] = {
    'mean': tff.aggregators.MeanFactory,                           # FedAvg
    'measured_mean': aggregators.MeasuredMeanFactory,              # FedAvg, measured
    'fedgh': aggregators.GradientHarmonizationFactory,             # FedGH
    'dgc': aggregators.DominantGradientCorrectionFactory,          # FedMGC
    'principal': aggregators.PrincipalGradientFactory,             # FedLD
    'corrective': aggregators.CorrectiveGradientFactory,           # corrective weights
}

# name -> the weighted aggregation factory of `hparams.AGGREGATOR_HPARAMS[name]`; the factories
# of the package also take `max_gather_bytes` (the memory limit of their gather).
AGGREGATORS: dict[str, Entry[tff.aggregators.WeightedAggregationFactory]] = {
    name: Entry('aggregator', name, _AGGREGATOR_CLASSES[name], table,
                settings=() if name == 'mean' else ('max_gather_bytes',))
    for name, table in hparams_lib.AGGREGATOR_HPARAMS.items()}


def is_corrective_factory(factory) -> bool:
  """Whether `factory` is a `tff_conflict.aggregators.CorrectiveGradientFactory`."""
  return isinstance(factory, aggregators.CorrectiveGradientFactory)


def weights_are_losses(factory) -> bool:
  """Whether `factory`, or a factory it wraps, reads its weight channel as client losses (the
  public `weights_are_losses` property, e.g. DGC's); such a factory needs
  `client_weighting="loss"`. TFF's wrappers (`tff.aggregators.clipping_factory`,
  `zeroing_factory`, ...) hold their inner factory as an attribute or in the closure of their
  `create`; both are searched."""
  seen = set()
  pending = [factory]
  while pending:
    current = pending.pop()
    if id(current) in seen:
      continue
    seen.add(id(current))
    if getattr(current, 'weights_are_losses', False) is True:
      return True
    cells = getattr(getattr(type(current), 'create', None), '__closure__', None) or ()
    inner = list(vars(current).values()) if hasattr(current, '__dict__') else []
    for value in inner + [c.cell_contents for c in cells if _cell_is_set(c)]:
      if isinstance(value, (tff.aggregators.WeightedAggregationFactory,
                            tff.aggregators.UnweightedAggregationFactory)):
        pending.append(value)
  return False


def _cell_is_set(cell) -> bool:
  try:
    cell.cell_contents  # pylint: disable=pointless-statement
  except ValueError:
    return False
  return True

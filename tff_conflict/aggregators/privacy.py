"""Privacy and the conflict aggregators: they read every client's update in the clear, so they
refuse central differential privacy and secure aggregation (docs/methods.md, "Privacy")."""

from typing import Any, Optional

import tensorflow_federated as tff

from tff_conflict.aggregators.corrective import CorrectiveGradientFactory
from tff_conflict.aggregators.dominant import DominantGradientCorrectionFactory
from tff_conflict.aggregators.harmonization import GradientHarmonizationFactory
from tff_conflict.aggregators.mean import MeasuredMeanFactory
from tff_conflict.aggregators.principal import PrincipalGradientFactory

# The factories that gather every client's update at the server.
GATHERING_FACTORIES = (GradientHarmonizationFactory, DominantGradientCorrectionFactory,
                       PrincipalGradientFactory, CorrectiveGradientFactory, MeasuredMeanFactory)

_FACTORY_TYPES = (tff.aggregators.WeightedAggregationFactory,
                  tff.aggregators.UnweightedAggregationFactory)


class PrivacyCompositionError(TypeError):
  """A conflict aggregator given to a privacy mechanism that cannot hold it."""


def gathering_factories_in(factory: Any) -> list[Any]:
  """The conflict aggregators (`GATHERING_FACTORIES`) that `factory` is or wraps; TFF's wrappers
  (`clipping_factory`, `zeroing_factory`, ...) hold their inner factory as an attribute or in
  the closure of their `create`, and both are searched."""
  found, seen, pending = [], set(), [factory]
  while pending:
    current = pending.pop()
    if id(current) in seen:
      continue
    seen.add(id(current))
    if isinstance(current, GATHERING_FACTORIES):
      found.append(current)
      continue
    cells = getattr(getattr(type(current), 'create', None), '__closure__', None) or ()
    inner = list(vars(current).values()) if hasattr(current, '__dict__') else []
    for cell in cells:
      try:
        inner.append(cell.cell_contents)
      except ValueError:
        pass
    pending += [v for v in inner if isinstance(v, _FACTORY_TYPES)]
  return found


def check_private_composition(factory: Any, mechanism: str) -> None:
  """Refuses `factory` for `mechanism` (e.g. 'central differential privacy') when it is or wraps
  a conflict aggregator.

  Raises:
    PrivacyCompositionError: saying why and what composes instead.
  """
  found = gathering_factories_in(factory)
  if found:
    raise PrivacyCompositionError(
        f'{type(found[0]).__name__} cannot be composed with {mechanism}: a conflict aggregator '
        'needs every client\'s update in the clear at the server (it compares each update with '
        'the others), which secure aggregation hides, and each corrected update depends on '
        'every other one, so one client\'s influence on the aggregate is not bounded by the '
        'clipping norm that central differential privacy calibrates its noise to. What '
        'composes: clipping or noise on each client before its update leaves (client-side '
        'privacy), and tff.aggregators.clipping_factory / zeroing_factory around the conflict '
        'aggregator (docs/methods.md, "Privacy").')


def differentially_private_factory(
    query: Any, record_aggregation_factory: Optional[Any] = None
) -> tff.aggregators.DifferentiallyPrivateFactory:
  """`tff.aggregators.DifferentiallyPrivateFactory(query, record_aggregation_factory)`, refusing a
  conflict aggregator as the record aggregation in one sentence that says why (TFF itself raises
  only a `TypeError` about the factory's type).

  Raises:
    PrivacyCompositionError: `record_aggregation_factory` is or wraps a conflict aggregator.
  """
  if record_aggregation_factory is not None:
    check_private_composition(
        record_aggregation_factory,
        'central differential privacy (tff.aggregators.DifferentiallyPrivateFactory)')
  return tff.aggregators.DifferentiallyPrivateFactory(query, record_aggregation_factory)

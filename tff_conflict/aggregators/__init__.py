"""`tff.aggregators` factories for the gradient-conflict server methods.

Each factory plugs into TFF's learning pipelines as a `model_aggregator`, e.g.
`tff.learning.algorithms.build_weighted_fed_avg(model_fn, client_optimizer_fn,
model_aggregator=tff_conflict.aggregators.GradientHarmonizationFactory())`:

  GradientHarmonizationFactory(*, order="random", seed=None)    FedGH (SPEC 1)
  DominantGradientCorrectionFactory(*, selection_ratio=0.5, weights_are_losses=False)
                                                                FedMGC DGC (SPEC 2b)
  PrincipalGradientFactory(*, component_ratio=0.8)              FedLD (SPEC 4b)
  CorrectiveGradientFactory(*, alpha=0.1)                       corrective weights (SPEC 5);
      value OrderedDict(update=..., gradient=..., loss=...), weight = number of examples

All four are weighted factories. `tff.learning.algorithms.build_unweighted_fed_avg` accepts only
`UnweightedAggregationFactory`; the same algorithm with these factories is
`build_weighted_fed_avg(..., client_weighting=tff.learning.ClientWeighting.UNIFORM)` (weight 1 per
client, 0 for a client whose delta was non-finite). TFF's per-client wrappers compose with FedGH,
DGC and FedLD (e.g. `tff.aggregators.clipping_factory(norm, GradientHarmonizationFactory())`); see
each class docstring.

The TFF layer only flattens (`flatten`), gathers the K client rows to the server (`gather`) and
reassembles the result; the math is `tff_conflict.conflict`, called once per round. The gather's
accumulator is a counter of pieces that TFF's C++ runtime can keep without copying, so a round's
memory grows linearly in K (about 5 K x d values in the worker), not quadratically; rounds whose
estimate exceeds `gather.max_gather_bytes()` are refused with an error naming K, d and the limit
(see `gather`).
"""

from tff_conflict.aggregators import flatten
from tff_conflict.aggregators import gather
from tff_conflict.aggregators.corrective import CorrectiveGradientFactory
from tff_conflict.aggregators.dominant import DominantGradientCorrectionFactory
from tff_conflict.aggregators.gather import gather_memory_limit
from tff_conflict.aggregators.gather import max_gather_bytes
from tff_conflict.aggregators.gather import set_max_gather_bytes
from tff_conflict.aggregators.harmonization import GradientHarmonizationFactory
from tff_conflict.aggregators.principal import PrincipalGradientFactory

__all__ = [
    'CorrectiveGradientFactory',
    'DominantGradientCorrectionFactory',
    'GradientHarmonizationFactory',
    'PrincipalGradientFactory',
    'flatten',
    'gather',
    'gather_memory_limit',
    'max_gather_bytes',
    'set_max_gather_bytes',
]

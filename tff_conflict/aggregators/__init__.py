"""`tff.aggregators` factories for the gradient-conflict server methods.

Each factory plugs into TFF's learning pipelines as a `model_aggregator`, e.g.
`tff.learning.algorithms.build_weighted_fed_avg(model_fn, client_optimizer_fn,
model_aggregator=tff_conflict.aggregators.GradientHarmonizationFactory())`:

  GradientHarmonizationFactory(*, order="random", seed=None)            FedGH
  DominantGradientCorrectionFactory(*, selection_ratio=0.5, weights_are_losses=True)
                                                                        FedMGC's DGC
  PrincipalGradientFactory(*, component_ratio=0.8, orientation="mean")  FedLD
  CorrectiveGradientFactory(*, alpha=0.1)                               corrective weights;
      value OrderedDict(update=..., gradient=..., loss=...), weight = number of examples
  MeasuredMeanFactory()                                                 FedAvg's mean, with the
                                                                        same diagnostics

The defaults are the papers' (`tff_conflict.hparams`, which states each source and range); the
math is in docs/methods.md under each method's name. `DominantGradientCorrectionFactory` reads its
weight as each client's mean training loss by default (the method as published); inside
`build_weighted_fed_avg`, whose weights are numbers of examples, pass `weights_are_losses=False`.

All five are weighted factories. `tff.learning.algorithms.build_unweighted_fed_avg` accepts only
`UnweightedAggregationFactory`; the same algorithm with these factories is
`build_weighted_fed_avg(..., client_weighting=tff.learning.ClientWeighting.UNIFORM)` (weight 1 per
client, 0 for a client whose delta was non-finite). TFF's per-client wrappers compose with FedGH,
DGC and FedLD (e.g. `tff.aggregators.clipping_factory(norm, GradientHarmonizationFactory())`); see
each class docstring.

Memory. The client updates reach the server through one gather, called once per round before the
conflict kernel (`tff_conflict.conflict`). Its accumulator is a counter of pieces that TFF's C++
runtime can keep without copying, so a round's memory grows linearly in K (about 5 K x d values in
the worker), not quadratically. A round whose estimate exceeds the limit is refused with an error
naming K, d and the limit. The limit is every factory's `max_gather_bytes` argument (None: the
process-wide value, 0: no check), and process-wide:

  max_gather_bytes()            the limit processes built now use (default half the RAM; None: off)
  set_max_gather_bytes(n)       sets it (None: no check); also env TFF_CONFLICT_MAX_GATHER_BYTES
  gather_memory_limit(n)        the same, as a context manager
"""

from tff_conflict.aggregators._gather import gather_memory_limit
from tff_conflict.aggregators._gather import max_gather_bytes
from tff_conflict.aggregators._gather import set_max_gather_bytes
from tff_conflict.aggregators.corrective import CorrectiveGradientFactory
from tff_conflict.aggregators.dominant import DominantGradientCorrectionFactory
from tff_conflict.aggregators.harmonization import GradientHarmonizationFactory
from tff_conflict.aggregators.mean import MeasuredMeanFactory
from tff_conflict.aggregators.principal import PrincipalGradientFactory

__all__ = [
    'CorrectiveGradientFactory',
    'DominantGradientCorrectionFactory',
    'GradientHarmonizationFactory',
    'MeasuredMeanFactory',
    'PrincipalGradientFactory',
    'gather_memory_limit',
    'max_gather_bytes',
    'set_max_gather_bytes',
]

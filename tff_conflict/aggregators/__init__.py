"""`tff.aggregators` factories for the gradient-conflict server methods (weighted, for TFF's
`model_aggregator=`):

  GradientHarmonizationFactory(*, order="random", seed=None)            FedGH
  DominantGradientCorrectionFactory(*, selection_ratio=0.5, weights_are_losses)  FedMGC DGC
  PrincipalGradientFactory(*, component_ratio=0.8, granularity="tensor")  FedLD, per tensor
  CorrectiveGradientFactory(*, alpha=0.1)          corrective weights (value: update, gradient, loss)
  MeasuredMeanFactory()                            FedAvg's mean, with the same diagnostics

Defaults: `tff_conflict.hparams`; the math: docs/methods.md; the gather that brings the updates
to the server and its memory limit (`max_gather_bytes`, `set_max_gather_bytes`,
`gather_memory_limit`): docs/design.md, "The gather".
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

"""`tff.aggregators` factories for the gradient-conflict server methods, weighted, for TFF's
`model_aggregator=` (docs/design.md, "The gather"; docs/methods.md for the math)."""

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

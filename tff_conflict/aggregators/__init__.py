"""`tff.aggregators` factories for the gradient-conflict server methods, weighted, for TFF's
`model_aggregator=` (docs/design.md, "The gather"; docs/methods.md for the math); they read every
client's update in the clear, so central DP and secure aggregation refuse them (`privacy`)."""

from tff_conflict.aggregators._gather import gather_memory_limit
from tff_conflict.aggregators._gather import max_gather_bytes
from tff_conflict.aggregators._gather import set_max_gather_bytes
from tff_conflict.aggregators.corrective import CorrectiveGradientFactory
from tff_conflict.aggregators.dominant import DominantGradientCorrectionFactory
from tff_conflict.aggregators.harmonization import GradientHarmonizationFactory
from tff_conflict.aggregators.mean import MeasuredMeanFactory
from tff_conflict.aggregators.principal import PrincipalGradientFactory
from tff_conflict.aggregators.privacy import check_private_composition
from tff_conflict.aggregators.privacy import differentially_private_factory
from tff_conflict.aggregators.privacy import PrivacyCompositionError

__all__ = [
    'CorrectiveGradientFactory',
    'DominantGradientCorrectionFactory',
    'GradientHarmonizationFactory',
    'MeasuredMeanFactory',
    'PrincipalGradientFactory',
    'PrivacyCompositionError',
    'check_private_composition',
    'differentially_private_factory',
    'gather_memory_limit',
    'max_gather_bytes',
    'set_max_gather_bytes',
]

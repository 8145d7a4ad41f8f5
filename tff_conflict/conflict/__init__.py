"""Server-side conflict math as plain TensorFlow on a `[K, d]` stack of client updates: each kernel
returns `[d]` (or with diagnostics), eagerly, in a `tf.function` or under XLA. Signatures and
conventions: docs/design.md, "Kernels"; docs/methods.md, "Conventions"."""

from tff_conflict.conflict.corrective import corrective_aggregate
from tff_conflict.conflict.corrective import corrective_aggregate_with_diagnostics
from tff_conflict.conflict.corrective import corrective_weights
from tff_conflict.conflict.dominant import dominant_correction
from tff_conflict.conflict.dominant import dominant_correction_with_diagnostics
from tff_conflict.conflict.geometry import conflict_stats
from tff_conflict.conflict.geometry import pairwise_cosine
from tff_conflict.conflict.harmonization import harmonize
from tff_conflict.conflict.harmonization import harmonize_with_diagnostics
from tff_conflict.conflict.harmonization import projection_order
from tff_conflict.conflict.mean import weighted_mean_with_diagnostics
from tff_conflict.conflict.principal import principal_aggregate
from tff_conflict.conflict.principal import principal_aggregate_with_diagnostics

__all__ = [
    'conflict_stats',
    'corrective_aggregate',
    'corrective_aggregate_with_diagnostics',
    'corrective_weights',
    'dominant_correction',
    'dominant_correction_with_diagnostics',
    'harmonize',
    'harmonize_with_diagnostics',
    'pairwise_cosine',
    'principal_aggregate',
    'principal_aggregate_with_diagnostics',
    'projection_order',
    'weighted_mean_with_diagnostics',
]

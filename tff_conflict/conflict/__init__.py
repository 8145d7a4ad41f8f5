"""Server-side conflict math as plain TensorFlow on a `[K, d]` stack of client updates.

    harmonize(updates, weights, *, order="random", seed=None)               -> [d]  FedGH
    dominant_correction(updates, losses, *, selection_ratio=0.5)            -> [d]  FedMGC's DGC
    principal_aggregate(updates, weights, *, component_ratio=0.8, tensor_sizes=None,
                        granularity="tensor")                               -> [d]  FedLD
    corrective_weights(gradients, losses, *, alpha=0.1)                     -> [K]
    corrective_aggregate(updates, gradients, losses, weights, *, alpha=0.1) -> [d]
    weighted_mean_with_diagnostics(updates, weights) -> ([d], diagnostics)  FedAvg, measured
    pairwise_cosine(updates) -> [K, K];  conflict_stats(updates) -> diagnostics
    <kernel>_with_diagnostics(...) -> (aggregate [d], OrderedDict of diagnostics)

`updates`/`gradients` are float32 or float64 [K, d] (the result keeps the dtype), `weights` and
`losses` real [K]; every kernel also takes `include=None` (a bool [K] mask) and `validate=True`,
runs eagerly, inside `tf.function` with unknown K, and under XLA. Who takes part in a round, the
validation contract and the diagnostics: docs/methods.md, "Conventions" and "Diagnostics"; cost
and eager calls: docs/design.md, "Kernels".
"""

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

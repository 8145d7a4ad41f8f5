"""Server-side conflict math as plain TensorFlow: FedGH, FedMGC's dominant gradient correction,
FedLD's principal-gradient aggregation and corrective gradient weights (docs/methods.md: FedGH,
FedMGC, FedLD, "Corrective gradient weights" and "Diagnostics").

Public API:

    harmonize(updates, weights, *, order="random", seed=None)             -> [d]  FedGH
    dominant_correction(updates, losses, *, selection_ratio=0.5)          -> [d]  FedMGC DGC
    principal_aggregate(updates, weights, *, component_ratio=0.8)         -> [d]  FedLD
    corrective_weights(gradients, losses, *, alpha=0.1)                   -> [K]
    corrective_aggregate(updates, gradients, losses, weights, *, alpha=0.1) -> [d]
    weighted_mean_with_diagnostics(updates, weights) -> ([d], OrderedDict)  FedAvg, measured
    pairwise_cosine(updates)                                              -> [K, K]
    conflict_stats(updates)                                               -> OrderedDict
    harmonize_with_diagnostics, dominant_correction_with_diagnostics,
    principal_aggregate_with_diagnostics, corrective_aggregate_with_diagnostics
        (same arguments as their base function) -> (aggregate [d], OrderedDict of diagnostics)

Every kernel also takes the keywords `include=None` (an optional bool [K] mask; a False row takes no
part in the round) and `validate=True` (see "Validation"). `principal_aggregate*` also takes
`orientation="mean"` (or "majority", docs/methods.md, FedLD; provably without effect, see
`principal`).

Inputs. `updates` and `gradients` are float32 or float64 tensors (or arrays) of shape [K, d]; the
result keeps their dtype. `weights` and `losses` are real [K]. All functions work eagerly and
inside `tf.function`, including with an unknown number of clients (`input_signature` with
`tf.TensorSpec([None, d])`), as TFF's `tff.tensorflow.computation` traces them.

How (docs/methods.md, "Conventions"): each kernel computes ONE Gram matrix (`U U^T`, or
`D D^T` for the corrective weights), runs all per-pair and sequential logic on K x K numbers in
float64, and forms the aggregate with one weighted sum of the original rows (two for the
corrective aggregate: `w^T U + x^T D`). Extra memory is O(K^2 + d); nothing of size K x K x d,
d x d or a second K x d is created, except that a round containing a non-finite row zeroes those
rows in a copy (only then).

Who takes part. A client (row) takes part in a round when it is finite (see `geometry`: a
NaN/Inf row, or one whose squared norm overflows), `include[k]` is True, and, for the weighted
kernels, its weight is > 0. A client that does not take part is not combined, is never a
projection partner, is not dominant, does not enter FedLD's eigendecomposition or the corrective
sums, and is not counted in pair statistics. With no client taking part the aggregate is all zeros
(never NaN). A non-finite client is counted in the diagnostic `num_excluded_nonfinite`; for DGC and
the corrective weights a client with a non-finite loss is treated as non-finite too.

Validation (the contract for TFF layers):
* Structural errors always raise, before any work: a wrong dtype or rank, d = 0, mismatched K
  between arguments, ratios outside (0, 1], alpha outside [0, 1], a bad `order`/`orientation`
  string, a bad `seed`. What is known at call/trace time raises `ValueError` naming the argument
  and value; what is only known when a graph runs (unknown K or d) raises
  `tf.errors.InvalidArgumentError` from a `tf.debugging` assertion with the same wording.
* `validate=True` (the default, for direct calls) also checks values: K >= 1, `include` not all
  False, `weights` finite, non-negative and with a positive sum over included clients. Violations
  raise `ValueError` eagerly and `tf.errors.InvalidArgumentError` inside a graph.
* `validate=False` (for aggregators, where a round may legitimately exclude every client) skips
  the value checks: a zero, negative or non-finite weight simply excludes that client, and a round
  with no client taking part (including K = 0) returns an all-zero aggregate.

Randomness. `harmonize(order="random")` draws each client's partner order with
`tf.random.stateless_uniform` from `seed`: None (fresh, not reproducible), a Python int s (the
stateless seed [s, 0]), or an integer tensor of shape [] or [2] (e.g. a per-round seed from TFF
server state). The same seed and K give the same result.

Diagnostics (docs/methods.md, "Diagnostics"): `num_clients` (int32; clients taking part),
`num_excluded_nonfinite` (int32), `conflict_fraction_before`, `conflict_fraction_after`,
`min_cosine`, `mean_cosine`, `aggregate_norm`, `norm_ratio` (float32; the aggregate's norm over
the norm of the plain mean of the clients taking part, `geometry.norm_ratio`: 1 where both are
0, capped at the largest float32), then FedGH `num_projections` (int32);
DGC `num_dominant`, `num_projections` (int32); FedLD `num_components` (int32),
`explained_variance` (float32); corrective `corrective_weights` (float32 [K]). Dtypes do not
depend on K or on the input dtype. Over fewer than two clients the fractions and `mean_cosine`
are 0 and `min_cosine` is 1. Conflicts are cosines below `-100 eps(dtype)` (see `geometry`).
`num_excluded_nonfinite` counts every non-finite row, also one that was excluded anyway (weight 0
or `include` False). The corrective kernel's pair statistics are of the gradients `D_i` (the Gram
matrix it has), and its "after" fraction of the correction terms `x_i D_i` (see `corrective`).

XLA: every kernel (and its diagnostics companion) compiles and runs under
`tf.function(jit_compile=True)`, also with input signature [None, d] (checked in
tests/conflict/test_graph.py; results equal the non-XLA ones to float rounding, except that
FedGH's random order is drawn by XLA's lowering of the stateless generator, which gives other
orders for the same seed: reproducible, but not equal to the non-XLA draw). Two caveats: XLA
ignores the `tf.debugging` assertions (it logs "Ignoring Assert operator"), so the graph-time
checks above do not fire inside an XLA-compiled function (static checks still raise at trace time); and XLA
compiles one executable per distinct K, so a TFF round with a new number of clients pays a new
compilation (seconds). Without `jit_compile` the kernels need no compilation and, at K = 50,
d = 1e6, already run at about the floor (BENCHMARKS.md, "Kernels"), so XLA is not needed for
speed on CPU.

Eager calls. Called with eager tensors (or arrays), a kernel converts and checks its arguments
eagerly, raising the `ValueError`s above before any work, then runs as a cached traced function
(one trace per kernel, dtypes, ranks and hyperparameter values, with every dimension unknown, so
that a new K or d reuses the trace; `_eager`). The result is the same as op-by-op execution, bit
for bit, and costs what the kernel costs inside a graph (docs/design.md, "Kernels");
`tf.config.run_functions_eagerly(True)` runs it op by op.
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

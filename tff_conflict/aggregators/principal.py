"""FedLD principal-gradient aggregation as a WeightedAggregationFactory (docs/methods.md, FedLD).

Paper: Zeng, Guo, Wang, Wang, Zhou, Qu, "Tackling Data Heterogeneity in Federated Learning via
Loss Decomposition", MICCAI 2024, arXiv:2408.12300 (the fedld paper), eqs. 4-7.
"""

from typing import Optional

import tensorflow_federated as tff

from tff_conflict import hparams
from tff_conflict.aggregators import _common
from tff_conflict.aggregators import _gather
from tff_conflict.aggregators import _process


class PrincipalGradientFactory(tff.aggregators.WeightedAggregationFactory):
  """Principal-gradient aggregation (FedLD) of the client updates.

  `Gamma = U U^T / K` (U: the updates as rows), eigenpairs in descending order, principal
  directions `v_z = U^T e_z` oriented towards the mean update (eq. 6), the top
  `L = max(1, floor(component_ratio * K))` kept; each update is revised to
  `sum_l |u_i| / |g'_il| * lambda_l / S * g'_il` with `g'_il` its projection on `v_l` and `S` the
  sum of all K eigenvalues (eqs. 4-7); result `sum_i w_i u_i`, `w_i = n_i / sum n` over
  the clients that take part. The math is
  `tff_conflict.conflict.principal_aggregate_with_diagnostics`, called once per round at the
  server on the `[K, d]` stack of flattened updates; the result has exactly the value's type.
  K here is the number of clients that take part: clients with weight 0 and clients whose update
  or weight holds NaN or Inf are left out (and counted) before the eigen-decomposition.

  Composition: the method is homogeneous and sign-equivariant, so per-client wrappers such as
  `tff.aggregators.clipping_factory(norm, PrincipalGradientFactory())` compose with it.

  Measurements (`OrderedDict`, under `aggregator` in a learning process's metrics):
  `num_clients` (all clients of the round), `num_excluded_nonfinite`, `num_excluded_zero_weight`,
  `num_participating`,
  `conflict_fraction_before`, `conflict_fraction_after`, `min_cosine`, `mean_cosine`,
  `aggregate_norm`, `norm_ratio` (below 1: the revised updates shorten the server step),
  `num_components`, `explained_variance` (kept eigenvalues over all; docs/methods.md,
  "Diagnostics").
  """

  def __init__(self, *, component_ratio: float = hparams.PRINCIPAL_COMPONENT_RATIO.default,
               orientation: str = hparams.PRINCIPAL_ORIENTATION.default,
               max_gather_bytes: Optional[int] = None,
               preserve_norms: bool = hparams.PRINCIPAL_PRESERVE_NORMS.default):
    """Args:
      component_ratio: rho in (0, 1], default 0.8 (`hparams.PRINCIPAL_COMPONENT_RATIO`).
      orientation: "mean" (default, eq. (6)) or "majority" (the authors' code); both give the
        same aggregate (`tff_conflict.conflict.principal_aggregate`).
        `hparams.PRINCIPAL_ORIENTATION`.
    max_gather_bytes: the memory limit of this factory's gather in TFF's C++ runtime (bytes):
      None (default) uses the process-wide `tff_conflict.aggregators.max_gather_bytes()` when
      `create` runs, 0 builds without the check, a positive int is the limit.
    preserve_norms: rescale each revised update to the original's length (default False, eq. 7
      as the authors' code computes it; `hparams.PRINCIPAL_PRESERVE_NORMS`).

    Raises:
      ValueError: on a bad argument, naming it and the value.
    """
    self._component_ratio = hparams.PRINCIPAL_COMPONENT_RATIO.check(component_ratio)
    self._orientation = hparams.PRINCIPAL_ORIENTATION.check(orientation)
    self._preserve_norms = hparams.PRINCIPAL_PRESERVE_NORMS.check(preserve_norms)
    self._max_gather_bytes = _gather.check_factory_limit(max_gather_bytes)

  @property
  def component_ratio(self) -> float:
    return self._component_ratio

  @property
  def orientation(self) -> str:
    return self._orientation

  @property
  def preserve_norms(self) -> bool:
    return self._preserve_norms

  @property
  def max_gather_bytes(self) -> Optional[int]:
    return self._max_gather_bytes

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    _common.check_types(value_type, weight_type)
    ratio, orientation, preserve = (self._component_ratio, self._orientation,
                                    self._preserve_norms)

    def combine(state, stacks):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      padded, include = _process.empty_safe(stacks, 'update')
      aggregate, diagnostics = conflict.principal_aggregate_with_diagnostics(
          padded['update'], padded['weight'], component_ratio=ratio, orientation=orientation,
          include=include, validate=False, preserve_norms=preserve)
      return state, aggregate, diagnostics

    return _process.build_process(
        value_type, weight_type, row_type=_common.update_row_type(value_type),
        make_row=_common.make_update_row(value_type), combine=combine,
        max_gather_bytes=self._max_gather_bytes)

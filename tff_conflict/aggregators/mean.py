"""The weighted mean (FedAvg) as a WeightedAggregationFactory that reports the conflict
diagnostics, the reference the conflict methods are measured against."""

from typing import Optional

import tensorflow_federated as tff

from tff_conflict.aggregators import _common
from tff_conflict.aggregators import _gather
from tff_conflict.aggregators import _process


class MeasuredMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """FedAvg's weighted mean `sum_k w_k u_k`, `w_k = n_k / sum n`, with diagnostics.

  The aggregate equals `tff.aggregators.MeanFactory()`'s (to float rounding: it is formed as one
  weighted sum at the server from the gathered `[K, d]` stack, at the gather's memory cost); the
  math is `tff_conflict.conflict.weighted_mean_with_diagnostics`. Use it to measure a regime's
  gradient conflict under FedAvg, or the length of the client steps a client loss or a proximal
  term produces.

  Clients with weight 0 take no part; a client whose update or weight holds NaN or Inf is
  excluded and counted.

  Measurements (`OrderedDict`, under `aggregator` in a learning process's metrics):
  `num_clients` (all clients of the round), `num_excluded_nonfinite`, `num_excluded_zero_weight`,
  `num_participating`, `conflict_fraction_before`, `conflict_fraction_after` (equal: nothing is
  corrected), `min_cosine`, `mean_cosine`, `aggregate_norm`, `mean_update_norm` (the weighted
  mean of the clients' update norms) and `mean_norm_ratio` (`aggregate_norm / mean_update_norm`).
  """

  def __init__(self, *, max_gather_bytes: Optional[int] = None):
    """Args:
      max_gather_bytes: the memory limit of this factory's gather in TFF's C++ runtime (bytes):
        None (default) uses the process-wide `tff_conflict.aggregators.max_gather_bytes()` when
        `create` runs, 0 builds without the check, a positive int is the limit.

    Raises:
      ValueError: on a bad argument, naming it and the value.
    """
    self._max_gather_bytes = _gather.check_factory_limit(max_gather_bytes)

  @property
  def max_gather_bytes(self) -> Optional[int]:
    return self._max_gather_bytes

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    _common.check_types(value_type, weight_type)

    def combine(state, stacks):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      padded, include = _process.empty_safe(stacks, 'update')
      aggregate, diagnostics = conflict.weighted_mean_with_diagnostics(
          padded['update'], padded['weight'], include=include, validate=False)
      return state, aggregate, diagnostics

    return _process.build_process(
        value_type, weight_type, row_type=_common.update_row_type(value_type),
        make_row=_common.make_update_row(value_type), combine=combine,
        max_gather_bytes=self._max_gather_bytes)

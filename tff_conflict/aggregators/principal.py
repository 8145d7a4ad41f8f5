"""FedLD's principal-gradient aggregation as a `tff.aggregators.WeightedAggregationFactory`."""

import collections
import math
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import hparams
from tff_conflict.aggregators import _common
from tff_conflict.aggregators import _flatten
from tff_conflict.aggregators import _gather
from tff_conflict.aggregators import _process


def tensor_sizes(value_type) -> tuple[int, ...]:
  """The number of elements of each tensor of `value_type`, in the flattening order."""
  return tuple(int(math.prod(t.shape)) for t in _flatten.leaf_types(value_type))


class PrincipalGradientFactory(tff.aggregators.WeightedAggregationFactory):
  """Principal-gradient aggregation (FedLD) of the client updates.

  Zeng, Guo, Wang, Wang, Zhou, Qu, "Tackling Data Heterogeneity in Federated Learning via Loss
  Decomposition", MICCAI 2024, arXiv:2408.12300, eqs. 4-7: the server side of
  `tff_conflict.conflict.principal_aggregate_with_diagnostics`, on each tensor of the value
  separately by default (the authors' code) or once on the whole flattened value.

  For each tensor of the value (`granularity="tensor"`, default) or once for the whole flattened
  value (`"model"`): `Gamma = U U^T / K` (U: the clients' slices as rows), eigenpairs in
  descending order, principal directions `v_z = U^T e_z`, the top
  `L = max(1, floor(component_ratio * K))` kept; each slice is revised to
  `sum_l |u_i| / |g'_il| * lambda_l / S * g'_il` with `g'_il` its projection on `v_l` and `S` the
  sum of all K eigenvalues (eqs. 4-7); result `sum_i w_i u_i`, `w_i = n_i / sum n` over the
  clients that take part (`client_weighting="uniform"` in the builders gives the authors'
  uniform mean). The math runs once per round at the server on the `[K, d]` stack of flattened
  updates; the result has exactly the value's type. K is the number of clients that take part:
  clients with weight 0 and clients whose update or weight holds NaN or Inf are left out (and
  counted) before the eigen-decompositions.

  Composition: the method is homogeneous and sign-equivariant, so per-client wrappers such as
  `tff.aggregators.clipping_factory(norm, PrincipalGradientFactory())` compose with it.

  Measurements (`OrderedDict`, under `aggregator` in a learning process's metrics):
  `num_clients` (all clients of the round), `num_excluded_nonfinite`, `num_excluded_zero_weight`,
  `num_participating`, `conflict_fraction_before`, `conflict_fraction_after`, `min_cosine`,
  `mean_cosine`, `aggregate_norm`, `norm_ratio` (below 1: the revised updates shorten the server
  step), `num_components` (L; 0 in a plain-mean round), `explained_variance` (kept eigenvalues
  over all, pooled over the tensors; 0 in a plain-mean round); docs/methods.md, "Diagnostics".
  """

  def __init__(self, *, component_ratio: float = hparams.PRINCIPAL_COMPONENT_RATIO.default,
               max_gather_bytes: Optional[int] = None,
               preserve_norms: bool = hparams.PRINCIPAL_PRESERVE_NORMS.default,
               granularity: str = hparams.PRINCIPAL_GRANULARITY.default,
               first_round_plain_mean: bool = hparams.PRINCIPAL_FIRST_ROUND_PLAIN_MEAN.default,
               revision: str = hparams.PRINCIPAL_REVISION.default):
    """Args:
      component_ratio: rho in (0, 1], default 0.8 (`hparams.PRINCIPAL_COMPONENT_RATIO`).
      max_gather_bytes: the memory limit of this factory's gather in TFF's C++ runtime (bytes):
        None (default) uses the process-wide `tff_conflict.aggregators.max_gather_bytes()` when
        `create` runs, 0 builds without the check, a positive int is the limit.
      preserve_norms: rescale each revised update to the original's length (default False, eq. 7
        as the authors' code computes it; `hparams.PRINCIPAL_PRESERVE_NORMS`).
      granularity: "tensor" (default: each tensor of the value separately, the authors'
        `pcgrad_svd`) or "model" (the whole flattened value, the paper's text);
        `hparams.PRINCIPAL_GRANULARITY`.
      first_round_plain_mean: aggregate the process's first round with the plain weighted mean
        (default False; True as the authors' code; `hparams.PRINCIPAL_FIRST_ROUND_PLAIN_MEAN`).
        The state is then a round counter (int64).
      revision: "eigenvalue_share" (default, eq. (7)) or "projection" (the plain orthogonal
        projection on the kept directions, a diagnosis; `hparams.PRINCIPAL_REVISION`).

    Raises:
      ValueError: on a bad argument, naming it and the value.
    """
    self._component_ratio = hparams.PRINCIPAL_COMPONENT_RATIO.check(component_ratio)
    self._preserve_norms = hparams.PRINCIPAL_PRESERVE_NORMS.check(preserve_norms)
    self._granularity = hparams.PRINCIPAL_GRANULARITY.check(granularity)
    self._revision = hparams.PRINCIPAL_REVISION.check(revision)
    self._first_round_plain_mean = hparams.PRINCIPAL_FIRST_ROUND_PLAIN_MEAN.check(
        first_round_plain_mean)
    self._max_gather_bytes = _gather.check_factory_limit(max_gather_bytes)

  @property
  def component_ratio(self) -> float:
    return self._component_ratio

  @property
  def preserve_norms(self) -> bool:
    return self._preserve_norms

  @property
  def granularity(self) -> str:
    return self._granularity

  @property
  def revision(self) -> str:
    return self._revision

  @property
  def first_round_plain_mean(self) -> bool:
    return self._first_round_plain_mean

  @property
  def max_gather_bytes(self) -> Optional[int]:
    return self._max_gather_bytes

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    _common.check_types(value_type, weight_type)
    kwargs = dict(component_ratio=self._component_ratio, preserve_norms=self._preserve_norms, granularity=self._granularity,
                  tensor_sizes=tensor_sizes(value_type), revision=self._revision,
                  validate=False)
    plain_first = self._first_round_plain_mean

    def principal(padded, include):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      return conflict.principal_aggregate_with_diagnostics(
          padded['update'], padded['weight'], include=include, **kwargs)

    def plain_mean(padded, include):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      aggregate, diagnostics = conflict.weighted_mean_with_diagnostics(
          padded['update'], padded['weight'], include=include, validate=False)
      out = collections.OrderedDict(
          (key, value) for key, value in diagnostics.items()
          if key not in ('mean_update_norm', 'mean_norm_ratio'))
      out['num_components'] = tf.constant(0, tf.int32)
      out['explained_variance'] = tf.constant(0.0, tf.float32)
      return aggregate, out

    if not plain_first:
      def combine(state, stacks):
        padded, include = _process.empty_safe(stacks, 'update')
        aggregate, diagnostics = principal(padded, include)
        return state, aggregate, diagnostics

      initial_state = None
    else:
      def combine(state, stacks):
        padded, include = _process.empty_safe(stacks, 'update')
        aggregate, diagnostics = tf.cond(state['round'] < 1,
                                         lambda: plain_mean(padded, include),
                                         lambda: principal(padded, include))
        return collections.OrderedDict(round=state['round'] + 1), aggregate, diagnostics

      def initial_state():
        return collections.OrderedDict(round=tf.constant(0, tf.int64))

    return _process.build_process(
        value_type, weight_type, row_type=_common.update_row_type(value_type),
        make_row=_common.make_update_row(value_type), combine=combine,
        initial_state=initial_state, max_gather_bytes=self._max_gather_bytes)

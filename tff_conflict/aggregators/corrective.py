"""Corrective gradient weights as a `tff.aggregators.WeightedAggregationFactory`."""

import collections
from collections.abc import Mapping
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import hparams
from tff_conflict._checks import ArgumentTypeError
from tff_conflict.aggregators import _process
from tff_conflict.aggregators import _flatten as flatten
from tff_conflict.aggregators import _gather as gather

FIELDS = ('update', 'gradient', 'loss')


def _field(value, name):
  return value[name] if isinstance(value, Mapping) else getattr(value, name)


def check_corrective_value_type(value_type) -> None:
  """`ArgumentTypeError` (a `TypeError`) unless `value_type` is `<update=S, gradient=S,
  loss=float scalar>` (this order)."""
  message = ('value_type must be <update=S, gradient=S, loss=float32> (in this order) with S a '
             f'structure of float tensors, got {value_type}')
  if not isinstance(value_type, tff.StructType):
    raise ArgumentTypeError(argument='value_type', value=value_type, message=message)
  names = tuple(tff.structure.name_list_with_nones(value_type))
  if names != FIELDS:
    raise ArgumentTypeError(argument='value_type', value=value_type, message=message)
  flatten.check_value_type(value_type.update, 'value_type.update')
  if not value_type.gradient.is_equivalent_to(value_type.update):
    raise ArgumentTypeError(argument='value_type', value=value_type, message=message)
  loss = value_type.loss
  if (not isinstance(loss, tff.TensorType) or tuple(loss.shape) != ()
      or not np.issubdtype(loss.dtype, np.floating)):
    raise ArgumentTypeError(argument='value_type', value=value_type, message=message)


class CorrectiveGradientFactory(tff.aggregators.WeightedAggregationFactory):
  """Corrective gradient weights: FedAvg plus a correction along the clients' loss gradients.

  Mousazadeh, Khodadadi, Salehi, "A Novel Approach for Improving Generalization in Federated
  Learning Through Corrective Gradient Weights" (2023), eqs. 3-8, 13, 24-29; docs/methods.md.

  Each client sends `OrderedDict(update=u_i, gradient=D_i, loss=L_i)` with weight `n_i` (number of
  examples), e.g. from `tff_conflict.learning.build_corrective_client_work`. With
  `S = sum_j D_j`, `m_i = D_i . S`, `c = min_i alpha L_i / |D_i|` and
  `x_i = c / sqrt(sum_j (m_j / |D_j|)^2) * m_i / |D_i|^2` (corrective paper, eqs. 13, 24-29;
  docs/methods.md), the aggregate is `sum_k w_k u_k + sum_i x_i D_i`, `w_k = n_k / sum n` (the delta
  convention of `W_FedAvg - sum_i x_i D_i`). `alpha = 0` is exactly FedAvg. The math is
  `tff_conflict.conflict.corrective_aggregate_with_diagnostics`, called once per round at the
  server on the `[K, d]` stacks of flattened updates and gradients.

  The result has the value's type: `update` holds the aggregate, `gradient` the weighted mean
  `sum_k w_k D_k` and `loss` the weighted mean loss `sum_k w_k L_k` (both informative only; a
  finalizer such as `tff_conflict.learning.build_update_field_finalizer` applies `update`).
  Because the value is not a model delta, the factory is used through
  `tff.learning.templates.compose_learning_process`, not `build_weighted_fed_avg`; TFF's
  per-client wrappers (clipping, zeroing) would clip the concatenation of update and gradient
  together, which the method does not define, so composing with them is not supported.

  Clients with weight 0 take no part (TFF-style client work sends weight 0 for a non-finite
  update); a client whose update, gradient, loss or weight holds NaN or Inf is excluded and
  counted.

  Measurements (`OrderedDict`, under `aggregator` in a learning process's metrics):
  `num_clients` (all clients of the round), `num_excluded_nonfinite`, `num_excluded_zero_weight`,
  `num_participating`,
  `conflict_fraction_before`, `conflict_fraction_after`, `min_cosine`, `mean_cosine`,
  `aggregate_norm`, `norm_ratio` (against the FedAvg part `sum_k w_k u_k`),
  `corrective_weights` (the weights `x`, float32 `[K]`, K the clients that take part, in client
  order; docs/methods.md, "Diagnostics").
  """

  def __init__(self, *, alpha: float = hparams.CORRECTIVE_ALPHA.default,
               max_gather_bytes: Optional[int] = None):
    """Args:
      alpha: in [0, 1] (the paper's eq. (12)), default 0.1 (`hparams.CORRECTIVE_ALPHA`); 0 is
        FedAvg.
    max_gather_bytes: the memory limit of this factory's gather in TFF's C++ runtime (bytes):
      None (default) uses the process-wide `tff_conflict.aggregators.max_gather_bytes()` when
      `create` runs, 0 builds without the check, a positive int is the limit.

    Raises:
      ValueError: on a bad argument, naming it and the value.
    """
    self._alpha = hparams.CORRECTIVE_ALPHA.check(alpha)
    self._max_gather_bytes = gather.check_factory_limit(max_gather_bytes)

  @property
  def alpha(self) -> float:
    return self._alpha

  @property
  def max_gather_bytes(self) -> Optional[int]:
    return self._max_gather_bytes

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    check_corrective_value_type(value_type)
    _process.check_weight_type(weight_type)
    alpha = self._alpha
    update_type = value_type.update
    dtype = flatten.stack_dtype(update_type)
    np_dtype = dtype.as_numpy_dtype
    d = flatten.flat_size(update_type)
    row_type = collections.OrderedDict(
        update=tff.TensorType(np_dtype, [d]), gradient=tff.TensorType(np_dtype, [d]),
        loss=tff.TensorType(np_dtype), weight=tff.TensorType(np_dtype))

    def make_row(value, weight):
      update = flatten.flatten(_field(value, 'update'), update_type)
      gradient = flatten.flatten(_field(value, 'gradient'), update_type)
      loss = tf.cast(_field(value, 'loss'), dtype)
      weight = tf.cast(weight, dtype)
      row = collections.OrderedDict(update=update, gradient=gradient, loss=loss, weight=weight)
      return row, gather.row_status(weight, update, gradient, loss)

    def combine(state, stacks):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      padded, include = _process.empty_safe(stacks, 'update')
      weights = padded['weight']
      aggregate, diagnostics = conflict.corrective_aggregate_with_diagnostics(
          padded['update'], padded['gradient'], padded['loss'], weights, alpha=alpha,
          include=include, validate=False)
      w = tf.where(include, weights, tf.zeros_like(weights))
      w = tf.math.divide_no_nan(w, tf.reduce_sum(w))
      mean_gradient = tf.linalg.matvec(padded['gradient'], w, transpose_a=True)
      mean_loss = tf.reduce_sum(w * padded['loss'])
      vector = tf.concat([aggregate, mean_gradient, [mean_loss]], axis=0)
      return state, vector, diagnostics

    return _process.build_process(value_type, weight_type, row_type=row_type,
                                  make_row=make_row, combine=combine,
                                  max_gather_bytes=self._max_gather_bytes)

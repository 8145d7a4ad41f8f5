"""FedNova's parts: the local solver's normalisation `||a_i||_1`, the client value
`OrderedDict(update=d_i, normalizer=||a_i||_1, nonfinite=0|1)` and the server wrapper that runs
any aggregator on the `d_i` and multiplies its result by `tau_eff`. docs/methods.md, "FedNova".
"""

import collections
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict.learning import _validation


def check_optimizer(name: str, optimizer: tff.learning.optimizers.Optimizer) -> None:
  """Refuses a client optimizer whose local-solver normalisation is not known in closed form.

  FedNova's `||a_i||_1` is derived for (momentum) SGD, `tff.learning.optimizers.build_sgdm`;
  adaptive optimizers (Adam, Adagrad, Yogi, RMSprop, ...) scale each coordinate by its own
  history, so their update is no fixed combination of the local gradients.
  """
  if not _validation.is_sgdm(optimizer):
    raise _checks.ArgumentError(argument=name, value=optimizer, message=(
        f'{name}: FedNova normalises each client update by the local solver\'s ||a_i||_1, '
        'known for SGD with or without momentum (tff.learning.optimizers.build_sgdm); got '
        f'{type(optimizer).__name__.lstrip("_")}, whose normalisation is unknown'))


def local_solver_norm(num_steps: tf.Tensor, learning_rate: Any, momentum: Any = 0.0,
                      proximal_strength: float = 0.0) -> tf.Tensor:
  """`||a_i||_1` of `num_steps` local steps of heavy-ball SGD on a proximal objective (float64).

  Wang et al., "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
  Optimization", NeurIPS 2020 (arXiv 2007.07481), eqs. 6-7 and Sec. 4: the local update is
  `x - x_i = eta sum_j a_{i,j} g_j`, linear in the local gradients g_j, and `||a_i||_1` is the sum
  of its coefficients' magnitudes. The coefficient of g_j is the response h(tau - j) of the
  solver (`m <- rho m + g + mu (y - x)`, `y <- y - eta m`, TFF's `build_sgdm`) to a unit
  gradient at one step, so `||a_i||_1 = sum_{s=1..tau} |h(s)|`, computed here by running that
  scalar recurrence. Closed forms it equals: plain SGD `tau`; momentum rho
  `(tau - rho (1 - rho^tau) / (1 - rho)) / (1 - rho)`; proximal mu with lr eta
  `sum_{k<tau} (1 - eta mu)^k`. 0 for 0 steps, >= 1 otherwise (h(1) = 1).

  Args:
    num_steps: the client's number of local steps tau (integer scalar tensor).
    learning_rate: eta (only the proximal term reads it).
    momentum: rho in [0, 1].
    proximal_strength: mu >= 0.
  """
  eta = _float64(learning_rate)
  rho = _float64(momentum)
  mu = tf.constant(float(proximal_strength), tf.float64)
  steps = tf.cast(num_steps, tf.int64)

  def body(s, m, e, total):
    # A unit gradient at the first step. (Not tf.where of two constants: inside a while loop,
    # TFF 0.87's C++ runtime returned 0 for it.)
    g = tf.cast(tf.equal(s, 0), tf.float64)
    # e = (x - y) / eta, the response in units of eta; mu (y - x) = -mu eta e.
    m = rho * m + g - mu * eta * e
    e = e + m
    return s + 1, m, e, total + tf.abs(e)

  zero = tf.constant(0.0, tf.float64)
  _, _, _, total = tf.while_loop(lambda s, *_: s < steps, body,
                                 (tf.constant(0, tf.int64), zero, zero, zero))
  return total


def _float64(value) -> tf.Tensor:
  """float64 of a tensor or of a Python number (without a float32 detour)."""
  return tf.cast(tf.convert_to_tensor(value, dtype_hint=tf.float64), tf.float64)


def client_value(delta, num_steps: tf.Tensor, optimizer_hparams, proximal_strength: float):
  """(value, has_non_finite): FedNova's client value from the model delta `u_i` and tau_i.

  `value = OrderedDict(update=u_i / ||a_i||_1, normalizer=||a_i||_1, nonfinite=0)`; a delta
  with NaN or Inf, or 0 steps, sends a zero update (and `nonfinite=1` for the former); the
  caller gives both weight 0.
  """
  momentum = optimizer_hparams.get('momentum', 0.0)
  norm = local_solver_norm(num_steps, optimizer_hparams['learning_rate'], momentum,
                           proximal_strength)
  flat = tf.nest.flatten(delta)
  finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in flat])
  keep = finite & (num_steps > 0)
  update = tf.nest.map_structure(
      lambda t: tf.where(keep, t / tf.cast(tf.maximum(norm, 1.0), t.dtype), tf.zeros_like(t)),
      delta)
  has_non_finite = tf.cast(~finite, tf.int32)
  value = collections.OrderedDict(update=update, normalizer=tf.cast(norm, tf.float32),
                                  nonfinite=has_non_finite)
  return value, has_non_finite


def value_type(trainable_type: tff.Type) -> tff.StructWithPythonType:
  """`OrderedDict(update=<trainable>, normalizer=float32, nonfinite=int32)` as a TFF type."""
  return tff.StructWithPythonType(
      [('update', trainable_type), ('normalizer', tff.TensorType(np.float32)),
       ('nonfinite', tff.TensorType(np.int32))], collections.OrderedDict)


class NormalizedAveragingFactory(tff.aggregators.WeightedAggregationFactory):
  """FedNova's server step around any weighted aggregator of the normalised updates.

  Takes client values of `value_type` with weights `p_i` (numbers of examples, 0 for a client
  that trained no step or sent NaN/Inf) and returns `tau_eff * inner(d_i; p_i)` with
  `tau_eff = sum_i p_i ||a_i||_1 / sum_i p_i` (Wang et al., NeurIPS 2020, eq. 7; with the plain
  weighted mean as `inner` this is `tau_eff sum_i p_i d_i`). When every weight is 0 the result is
  all zeros (the model is unchanged).

  Measurements: the inner aggregator's, plus `tau_eff` and `num_excluded_nonfinite_clients`
  (clients whose delta held NaN or Inf).
  """

  def __init__(self, inner: tff.aggregators.WeightedAggregationFactory):
    if not isinstance(inner, tff.aggregators.WeightedAggregationFactory):
      raise _checks.ArgumentTypeError.must_be('inner', inner,
                                      'a tff.aggregators.WeightedAggregationFactory')
    self._inner = inner

  @property
  def inner(self) -> tff.aggregators.WeightedAggregationFactory:
    return self._inner

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    # pylint: disable=redefined-outer-name
    update_type = value_type['update']
    inner = self._inner.create(update_type, weight_type)

    @tff.tensorflow.computation(value_type)
    def select_update(value):
      return value['update']

    @tff.tensorflow.computation(value_type, weight_type)
    def weighted_normalizer(value, weight):
      return value['normalizer'] * tf.cast(weight, tf.float32)

    @tff.tensorflow.computation(value_type)
    def select_nonfinite(value):
      return value['nonfinite']

    @tff.tensorflow.computation(weight_type)
    def as_float(weight):
      return tf.cast(weight, tf.float32)

    @tff.tensorflow.computation(update_type, tf.float32, tf.float32)
    def scale(aggregate, normalizer_sum, weight_sum):
      tau_eff = tf.math.divide_no_nan(normalizer_sum, weight_sum)
      return tf.nest.map_structure(
          lambda t: tf.where(tau_eff > 0, t * tf.cast(tau_eff, t.dtype), tf.zeros_like(t)),
          aggregate), tau_eff

    inner_measurements_type = inner.next.type_signature.result.measurements.member

    @tff.tensorflow.computation(inner_measurements_type, tf.float32, tf.int32)
    def merge(inner_measurements, tau_eff, nonfinite):
      out = collections.OrderedDict()
      for name, value in _items(inner_measurements):
        out[name] = value
      out['tau_eff'] = tau_eff
      out['num_excluded_nonfinite_clients'] = nonfinite
      return out

    @tff.federated_computation(inner.initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      inner_output = inner.next(state, tff.federated_map(select_update, value), weight)
      normalizer_sum = tff.federated_sum(tff.federated_map(weighted_normalizer, (value, weight)))
      weight_sum = tff.federated_sum(tff.federated_map(as_float, weight))
      nonfinite = tff.federated_sum(tff.federated_map(select_nonfinite, value))
      result, tau_eff = tff.federated_map(
          scale, (inner_output.result, normalizer_sum, weight_sum))
      measurements = tff.federated_map(merge, (inner_output.measurements, tau_eff, nonfinite))
      return tff.templates.MeasuredProcessOutput(inner_output.state, result, measurements)

    return tff.templates.AggregationProcess(inner.initialize, next_fn)


def _items(structure):
  """(name, value) pairs of a measurements structure; a non-struct becomes ('inner', value)."""
  if isinstance(structure, collections.abc.Mapping):
    return list(structure.items())
  return [('inner', structure)]

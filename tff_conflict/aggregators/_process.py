"""The AggregationProcess every conflict factory shares: clients flatten a row, one gather, one
server kernel, unflatten to the value's type; typed so that it compiles to MapReduceForm."""

import collections
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict._checks import ArgumentTypeError
from tff_conflict.aggregators import _flatten as flatten
from tff_conflict.aggregators import _gather as gather


def check_weight_type(weight_type, name: str = 'weight_type') -> None:
  """Raises `ArgumentTypeError` (a `TypeError`) unless `weight_type` is a real scalar tensor
  type."""
  if (not isinstance(weight_type, tff.TensorType) or tuple(weight_type.shape) != ()
      or not (np.issubdtype(weight_type.dtype, np.floating)
              or np.issubdtype(weight_type.dtype, np.integer))):
    raise ArgumentTypeError.must_be(name, weight_type, 'a scalar float or integer tff.TensorType')


def empty_safe(stacks, first_field: str):
  """(stacks, include): a round with no stacked row gets one all-zero row that takes no part.

  The kernels then see K >= 1 with every row excluded and return their all-excluded result (zero
  aggregate, zero diagnostics) with the same structure as in any other round.
  """
  k = tf.shape(stacks[first_field])[0]
  padded = collections.OrderedDict(
      (name, tf.cond(k > 0, lambda s=s: s,
                     lambda s=s: tf.zeros(tf.concat([[1], tf.shape(s)[1:]], 0), s.dtype)))
      for name, s in stacks.items())
  include = tf.range(tf.shape(padded[first_field])[0]) < k
  return padded, include


def round_measurements(counts, diagnostics: collections.OrderedDict) -> collections.OrderedDict:
  """The kernel's diagnostics (docs/methods.md, "Diagnostics") with the round's client counts.

  `num_clients`: every client of the round; `num_excluded_nonfinite`: clients whose row held NaN
  or Inf (left out by the gather) plus any the kernel excluded; `num_excluded_zero_weight`:
  clients with weight 0 (e.g. TFF zeroed their non-finite delta); `num_participating`: the
  kernel's `num_clients`, the clients that took part. The kernel's other
  diagnostics follow unchanged (their pair statistics cover the clients that took part).
  """
  out = collections.OrderedDict()
  out['num_clients'] = tf.reduce_sum(counts)
  out['num_excluded_nonfinite'] = counts[gather.NON_FINITE] + tf.cast(
      diagnostics.get('num_excluded_nonfinite', 0), tf.int32)
  out['num_excluded_zero_weight'] = counts[gather.ZERO_WEIGHT]
  out['num_participating'] = tf.cast(diagnostics['num_clients'], tf.int32)
  for key, val in diagnostics.items():
    if key not in out and key != 'num_clients':
      out[key] = val
  return out


def build_process(value_type, weight_type, *, row_type: collections.OrderedDict,
                  make_row: Callable, combine: Callable,
                  initial_state: Optional[Callable] = None,
                  max_gather_bytes: Optional[int] = None) -> tff.templates.AggregationProcess:
  """Builds the AggregationProcess.

  Args:
    value_type, weight_type: as given to `create`.
    row_type: `OrderedDict` name -> `tff.TensorType` of one client's row (no `status`).
    make_row: `(value, weight) -> (row OrderedDict, status)`, pure TF.
    combine: `(state, stacks) -> (new_state, vector [d], diagnostics OrderedDict)`, pure TF;
      `state` is None for a stateless factory; `stacks` hold only the clients that take part.
    initial_state: `() -> state` (pure TF) or None for no state.
    max_gather_bytes: the factory's memory limit argument: None (the process-wide
      `max_gather_bytes()`, read now), 0 (no check) or a number of bytes.
  """
  d = flatten.flat_size(value_type)
  row_in_type = gather.row_with_status_type(row_type)
  acc_type = gather.gathered_type(row_type)
  limit = gather.resolve_factory_limit(max_gather_bytes)

  @tff.tensorflow.computation(value_type, weight_type)
  def client_row(value, weight):
    row, status = make_row(value, weight)
    out = collections.OrderedDict((name, row[name]) for name in row_type)
    out['status'] = status
    return out

  if initial_state is None:
    @tff.tensorflow.computation(acc_type)
    def server_step(gathered):
      _, vector, diagnostics = combine(None, gathered['stacks'])
      return collections.OrderedDict(
          result=flatten.unflatten(vector, value_type),
          measurements=round_measurements(gathered['counts'], diagnostics))

    @tff.federated_computation()
    def init_fn():
      return tff.federated_value((), tff.SERVER)
  else:
    init_tf = tff.tensorflow.computation(initial_state)
    state_type = init_tf.type_signature.result

    @tff.tensorflow.computation(state_type, acc_type)
    def server_step(state, gathered):
      new_state, vector, diagnostics = combine(state, gathered['stacks'])
      return collections.OrderedDict(
          state=new_state,
          result=flatten.unflatten(vector, value_type),
          measurements=round_measurements(gathered['counts'], diagnostics))

    @tff.federated_computation()
    def init_fn():
      return tff.federated_eval(init_tf, tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(value_type, tff.CLIENTS),
                             tff.FederatedType(weight_type, tff.CLIENTS))
  def next_fn(state, value, weight):
    rows = tff.federated_map(client_row, (value, weight))
    gathered = gather.federated_gather(rows, row_type, vector_size=d, limit_bytes=limit)
    if initial_state is None:
      out = tff.federated_map(server_step, gathered)
      new_state = state
    else:
      out = tff.federated_map(server_step, tff.federated_zip((state, gathered)))
      new_state = out.state
    return tff.templates.MeasuredProcessOutput(
        state=new_state, result=out.result, measurements=out.measurements)

  return tff.templates.AggregationProcess(init_fn, next_fn)

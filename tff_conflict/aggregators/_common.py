"""Type checks and the shared `[d]` update row of the factories in this package."""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.aggregators import _process
from tff_conflict.aggregators import _flatten as flatten
from tff_conflict.aggregators import _gather as gather


def check_types(value_type, weight_type) -> None:
  """TypeError (as TFF's factories raise) unless value_type is floats and weight a real scalar."""
  flatten.check_value_type(value_type)
  _process.check_weight_type(weight_type)


def update_row_type(value_type) -> collections.OrderedDict:
  """Row of a plain (update, weight) factory: `update` [d] and `weight` in the stack dtype."""
  dtype = flatten.stack_dtype(value_type).as_numpy_dtype
  return collections.OrderedDict(
      update=tff.TensorType(dtype, [flatten.flat_size(value_type)]),
      weight=tff.TensorType(dtype))


def make_update_row(value_type):
  """`(value, weight) -> (row, status)` for `update_row_type`."""
  dtype = flatten.stack_dtype(value_type)

  def make_row(value, weight):
    update = flatten.flatten(value, value_type)
    weight = tf.cast(weight, dtype)
    return (collections.OrderedDict(update=update, weight=weight),
            gather.row_status(weight, update))

  return make_row

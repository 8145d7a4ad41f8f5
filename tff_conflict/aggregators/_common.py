"""Argument checks and the shared `[d]` update row of the factories in this package."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.aggregators import _process
from tff_conflict.aggregators import flatten
from tff_conflict.aggregators import gather


def check_ratio(name: str, value) -> float:
  """A float in (0, 1]; ValueError naming the argument and the value otherwise."""
  if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
    raise ValueError(f'{name} must be a number in (0, 1], got {value!r}')
  value = float(value)
  if not 0.0 < value <= 1.0:
    raise ValueError(f'{name} must be in (0, 1], got {value!r}')
  return value


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

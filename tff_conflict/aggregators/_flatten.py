"""`flatten` / `unflatten`: a structure of float tensors to one `[d]` vector and back, in TFF's type
order (not `tf.nest`'s sorted keys), so the result has exactly the value's type. The vector is
float64 if any leaf is, else float32 (`stack_dtype`).
"""

import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict._checks import ArgumentTypeError


def check_value_type(value_type, name: str = 'value_type') -> None:
  """Raises `ArgumentTypeError` (a `TypeError`) unless `value_type` is a non-empty structure of
  fully defined float tensors.

  TFF's own factories raise `TypeError` for an unusable type (`MeanFactory.create`); so does this.
  """
  if not isinstance(value_type, (tff.TensorType, tff.StructType)):
    raise ArgumentTypeError(argument=name, value=value_type, message=(
        f'{name} must be a tff.TensorType or tff.StructType of float tensors, '
        f'got {value_type!r}'))
  leaves = leaf_types(value_type)
  if not leaves:
    raise ArgumentTypeError(argument=name, value=value_type, message=(
        f'{name} must contain at least one float tensor, got {value_type}'))
  for leaf in leaves:
    if not np.issubdtype(leaf.dtype, np.floating):
      raise ArgumentTypeError(argument=name, value=value_type, message=(
          f'{name} must contain only float tensors, got {value_type}'))
    if leaf.shape is None or any(dim is None for dim in leaf.shape):
      raise ArgumentTypeError(argument=name, value=value_type, message=(
          f'{name} must contain only tensors of fully defined shape, got {value_type}'))


def leaf_types(value_type) -> list:
  """The `tff.TensorType` leaves of `value_type`, in TFF type order."""
  if isinstance(value_type, tff.TensorType):
    return [value_type]
  if isinstance(value_type, tff.StructType):
    leaves = []
    for _, element in tff.structure.iter_elements(value_type):
      leaves.extend(leaf_types(element))
    return leaves
  raise TypeError(f'expected a structure of tensors, got {value_type!r}')


def _leaf_size(leaf) -> int:
  return int(math.prod(leaf.shape))


def flat_size(value_type) -> int:
  """d: the number of scalars in one value of `value_type`."""
  return sum(_leaf_size(leaf) for leaf in leaf_types(value_type))


def stack_dtype(value_type) -> tf.DType:
  """float64 if any leaf is float64, else float32."""
  if any(np.dtype(leaf.dtype) == np.float64 for leaf in leaf_types(value_type)):
    return tf.float64
  return tf.float32


def _leaves_of_value(value) -> list:
  """Leaves of a value TFF passed into a TF computation, in TFF type order."""
  if tf.is_tensor(value) or isinstance(value, (np.ndarray, np.generic, float, int)):
    return [value]
  return tff.structure.flatten(tff.structure.from_container(value, recursive=True))


def flatten(value, value_type) -> tf.Tensor:
  """Concatenates the leaves of `value` (of type `value_type`) into one `[d]` vector.

  Args:
    value: A value of `value_type`, as TFF passes it into a `tff.tensorflow.computation`
      (a tensor, a Python container or a `tff.structure.Struct` of tensors).
    value_type: Its `tff.Type`, which fixes the order of the leaves.

  Returns:
    A rank-1 tensor of length `flat_size(value_type)` and dtype `stack_dtype(value_type)`.
  """
  dtype = stack_dtype(value_type)
  leaves = _leaves_of_value(value)
  types = leaf_types(value_type)
  if len(leaves) != len(types):
    raise ValueError(f'value has {len(leaves)} tensors but value_type {value_type} has '
                     f'{len(types)}')
  parts = [tf.reshape(tf.cast(leaf, dtype), [_leaf_size(t)]) for leaf, t in zip(leaves, types)]
  return tf.concat(parts, axis=0) if len(parts) > 1 else parts[0]


def unflatten(vector: tf.Tensor, value_type):
  """Inverse of `flatten`: splits a `[d]` vector into a value of exactly `value_type`.

  Each piece is reshaped to its leaf's shape and cast to its leaf's dtype; the Python containers
  are those of `value_type`.
  """
  types = leaf_types(value_type)
  sizes = [_leaf_size(t) for t in types]
  pieces = iter(tf.split(vector, sizes, axis=0) if len(sizes) > 1 else [vector])

  def _leaf(tensor_type):
    return tf.cast(tf.reshape(next(pieces), tensor_type.shape), tensor_type.dtype)

  return tff.types.structure_from_tensor_type_tree(_leaf, value_type)

"""Argument checks shared by the learning builders; each raises ValueError before anything is built.

Every check names the argument and the offending value, as the project's rules require.
"""

import collections
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff


def _is_real(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive(name: str, value: Any) -> float:
  """`value` is a finite real number > 0."""
  if not _is_real(value) or not math.isfinite(value) or value <= 0:
    raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
  return float(value)


def check_non_negative(name: str, value: Any) -> float:
  """`value` is a finite real number >= 0."""
  if not _is_real(value) or not math.isfinite(value) or value < 0:
    raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
  return float(value)


def check_ratio(name: str, value: Any) -> float:
  """`value` is a real number in (0, 1]."""
  if not _is_real(value) or not math.isfinite(value) or not 0 < value <= 1:
    raise ValueError(f'{name} must be a number in (0, 1], got {value!r}')
  return float(value)


def check_choice(name: str, value: Any, choices) -> Any:
  if value not in choices:
    raise ValueError(f'{name} must be one of {sorted(choices)}, got {value!r}')
  return value


def resolve_optimizer(name: str, optimizer: Any) -> tff.learning.optimizers.Optimizer:
  """Accepts a `tff.learning.optimizers.Optimizer` or a no-argument callable returning one.

  Its `learning_rate` hyperparameter (when it has one) must be > 0. Keras optimizers are refused
  (TFF 0.87's learning templates accept only TFF optimizers).
  """
  opt = optimizer
  if not isinstance(opt, tff.learning.optimizers.Optimizer) and callable(opt) and not isinstance(
      opt, tf.keras.optimizers.Optimizer):
    opt = opt()
  if not isinstance(opt, tff.learning.optimizers.Optimizer):
    raise ValueError(f'{name} must be a tff.learning.optimizers.Optimizer (e.g. '
                     f'tff.learning.optimizers.build_sgdm(learning_rate=0.1)) or a no-argument '
                     f'callable returning one, got {optimizer!r}')
  hparams = opt.get_hparams(opt.initialize(tf.TensorSpec([], tf.float32)))
  if 'learning_rate' in hparams:
    lr = float(tf.get_static_value(hparams['learning_rate']))
    if not math.isfinite(lr) or lr <= 0:
      raise ValueError(f'{name}: learning_rate must be a finite number > 0, got {lr!r}')
  return opt


def check_input_spec(input_spec: Any) -> collections.OrderedDict:
  """`input_spec` is a mapping with keys `x` and `y` of `tf.TensorSpec`s (a client batch)."""
  if not isinstance(input_spec, Mapping) or set(input_spec) != {'x', 'y'}:
    raise ValueError('input_spec must be a mapping with exactly the keys "x" and "y" (the element '
                     f'spec of a client batch), got {input_spec!r}')
  for key in ('x', 'y'):
    if not isinstance(input_spec[key], tf.TensorSpec):
      raise ValueError(f'input_spec[{key!r}] must be a tf.TensorSpec, got {input_spec[key]!r}')
  if not input_spec['y'].dtype.is_integer:
    raise ValueError('input_spec["y"] must hold integer class labels (sparse labels), got '
                     f'{input_spec["y"]!r}')
  return collections.OrderedDict(x=input_spec['x'], y=input_spec['y'])


def check_keras_model_fn(keras_model_fn: Callable[[], tf.keras.Model],
                         input_spec: Mapping[str, tf.TensorSpec]) -> int:
  """Calls `keras_model_fn` once, in a throwaway graph, and returns the number of classes.

  The model must be a new, uncompiled `tf.keras.Model` whose output is `[batch, num_classes]`
  logits. Building it inside a separate `tf.Graph` keeps the eager context clean (a Keras model
  created eagerly before TFF traces a model_fn is invalidated, see BUILD_NOTES.md).
  """
  if not callable(keras_model_fn):
    raise ValueError(f'keras_model_fn must be a no-argument callable returning a new uncompiled '
                     f'tf.keras.Model, got {keras_model_fn!r}')
  with tf.Graph().as_default():
    model = keras_model_fn()
    if not isinstance(model, tf.keras.Model):
      raise ValueError(f'keras_model_fn must return a tf.keras.Model, got {model!r}')
    if getattr(model, '_is_compiled', False) or getattr(model, 'optimizer', None) is not None:
      raise ValueError('keras_model_fn must return an uncompiled tf.keras.Model (TFF trains it '
                       f'with its own optimizers), got a compiled model {model.name!r}')
    x = tf.compat.v1.placeholder(input_spec['x'].dtype, input_spec['x'].shape)
    try:
      out = model(x)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'keras_model_fn\'s model cannot be applied to input_spec["x"] = '
                       f'{input_spec["x"]!r}: {e}') from e
    shape = out.shape
    if shape.rank != 2 or shape[-1] is None or shape[-1] < 2:
      raise ValueError('keras_model_fn\'s model must output logits of shape [batch, num_classes] '
                       f'with num_classes >= 2, got output shape {shape}')
    return int(shape[-1])

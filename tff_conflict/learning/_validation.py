"""Optimizer argument checks of the learning builders: an `ArgumentError` before anything is built
(scalar checks: `tff_conflict._checks`; model functions: `tff_conflict.learning.models`)."""

import math
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict._checks import ArgumentError


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
    raise ArgumentError.must_be(name, optimizer, 'a tff.learning.optimizers.Optimizer (e.g. '
                                'tff.learning.optimizers.build_sgdm(learning_rate=0.1)) or a '
                                'no-argument callable returning one')
  hparams = opt.get_hparams(opt.initialize(tf.TensorSpec([], tf.float32)))
  if 'learning_rate' in hparams:
    lr = float(tf.get_static_value(hparams['learning_rate']))
    if not math.isfinite(lr) or lr <= 0:
      raise ArgumentError(argument=name, value=lr, message=(
          f'{name}: learning_rate must be a finite number > 0, got {lr!r}'))
  return opt


# The class of TFF's (momentum) SGD, by a public call: `tff.learning.optimizers` exports none.
_SGDM_TYPE = type(tff.learning.optimizers.build_sgdm(learning_rate=1.0))


def is_sgdm(optimizer: Any) -> bool:
  """Whether `optimizer` is `tff.learning.optimizers.build_sgdm`'s (SGD with or without
  momentum), the local solver whose update is a fixed combination of the local gradients."""
  return type(optimizer) is _SGDM_TYPE  # pylint: disable=unidiomatic-typecheck

"""Client work and finalizer for corrective gradient weights (docs/methods.md, "Corrective gradient
weights").
"""

import collections
from collections.abc import Callable

import numpy as np
import tensorflow_federated as tff

from tff_conflict import hparams
from tff_conflict.learning import _validation
from tff_conflict.learning import client_work as client_work_lib


def corrective_value_type(trainable_type: tff.Type) -> tff.StructWithPythonType:
  """`OrderedDict(update=<trainable>, gradient=<trainable>, loss=float32)` as a TFF type."""
  return tff.StructWithPythonType(
      [('update', trainable_type), ('gradient', trainable_type),
       ('loss', tff.TensorType(np.float32))], collections.OrderedDict)


def build_corrective_client_work(model_fn: Callable[[], tff.learning.models.VariableModel],
                                 optimizer: tff.learning.optimizers.Optimizer, *,
                                 proximal_strength: float = 0.0, metrics_aggregator=None,
                                 clip_norm=None) -> tff.learning.templates.ClientWorkProcess:
  """Client work sending `OrderedDict(update, gradient, loss)` with weight = number of examples.

  Each client trains as in FedAvg, then sends `OrderedDict(update=u_i, gradient=D_i, loss=L_i)`
  with weight `n_i`, `D_i` the gradient of its mean local loss `L_i` at its trained model (one
  more pass, `training=False`); a non-finite client sends zeros and weight 0 (docs/methods.md,
  "Corrective gradient weights"). The local training is exactly that of
  `tff.learning.templates.build_model_delta_client_work` (same data order, same optimizer), so
  the `update` field equals FedAvg's delta.

  Args:
    model_fn: no-argument callable returning a new `tff.learning.models.VariableModel`.
    optimizer: the client optimizer, a `tff.learning.optimizers.Optimizer`.
    proximal_strength: optional FedProx mu >= 0 during local training (0 by default).
    metrics_aggregator: as in TFF.
    clip_norm: None or c > 0: clip each local training step's gradient to global L2 norm c (as
      `client_work.build_client_work`; the gradient pass at the trained model is not clipped).
  """
  mu = hparams.PROXIMAL_STRENGTH.check(proximal_strength)
  clip = hparams.CLIENT_CLIP_NORM.check(clip_norm)
  optimizer = _validation.resolve_optimizer('optimizer', optimizer)
  return client_work_lib._build_client_work_process(  # pylint: disable=protected-access
      model_fn, optimizer,
      update_kwargs=dict(weighting='num_examples', proximal_strength=mu, corrective=True,
                         clip_norm=clip),
      metrics_aggregator=metrics_aggregator)


def build_update_field_finalizer(server_optimizer: tff.learning.optimizers.Optimizer,
                                 model_weights_type: tff.Type, field: str = 'update'
                                 ) -> tff.learning.templates.FinalizerProcess:
  """A finalizer that applies `value[field]` with the server optimizer (`w <- opt(w, update)`).

  The adapter between an aggregator whose result is a structure holding the aggregate delta in
  one field (CorrectiveGradientFactory: `update`) and TFF's
  `build_apply_optimizer_finalizer`, which it wraps: state, measurements and hyperparameters are
  the wrapped finalizer's; a non-finite aggregate is rejected as there.
  """
  inner = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                 model_weights_type)
  trainable_type = model_weights_type.trainable
  value_type = corrective_value_type(trainable_type)

  @tff.tensorflow.computation(value_type)
  def select_update(value):
    return value[field]

  @tff.federated_computation(inner.initialize.type_signature.result,
                             tff.FederatedType(model_weights_type, tff.SERVER),
                             tff.FederatedType(value_type, tff.SERVER))
  def next_fn(state, weights, value):
    return inner.next(state, weights, tff.federated_map(select_update, value))

  return tff.learning.templates.FinalizerProcess(
      inner.initialize, next_fn, get_hparams_fn=inner.get_hparams,
      set_hparams_fn=inner.set_hparams)

"""Client work: local training that returns a model delta and a weight, one loop for every method
(docs/design.md, "Models and client work")."""

import collections
import enum
from collections.abc import Callable
from typing import Any, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.learning import _validation
from tff_conflict.learning import fednova as fednova_lib
from tff_conflict.learning import models as models_lib

WEIGHTINGS = ('num_examples', 'uniform', 'loss')

# A true mean loss of exactly 0 is sent as this value, so that it is not read as "no loss
# reported" (weight 0) by a loss-weighted aggregator (DGC clamps losses below at 1e-12;
# docs/methods.md, FedMGC).
MIN_REPORTED_LOSS = 1e-12

WeightingArg = Optional[Union[str, tff.learning.ClientWeighting]]


def resolve_weighting(client_weighting: WeightingArg, default: str = 'num_examples') -> str:
  """'num_examples', 'uniform' or 'loss' from a string or a `tff.learning.ClientWeighting`."""
  if client_weighting is None:
    return default
  if isinstance(client_weighting, enum.Enum):
    mapping = {tff.learning.ClientWeighting.NUM_EXAMPLES: 'num_examples',
               tff.learning.ClientWeighting.UNIFORM: 'uniform'}
    if client_weighting in mapping:
      return mapping[client_weighting]
  elif isinstance(client_weighting, str) and client_weighting.lower() in WEIGHTINGS:
    return client_weighting.lower()
  raise _checks.ArgumentError.must_be('client_weighting', client_weighting, (
      f'{_checks.one_of(WEIGHTINGS)}, tff.learning.ClientWeighting.NUM_EXAMPLES or '
      'tff.learning.ClientWeighting.UNIFORM'))


def _num_examples(output, batch) -> tf.Tensor:
  if output.num_examples is not None:
    return tf.cast(output.num_examples, tf.int64)
  return tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]


def _assign(targets, values) -> None:
  tf.nest.map_structure(lambda v, t: v.assign(t), targets, values)


def _zeros_for(variables):
  return tuple(tf.zeros(v.shape, v.dtype) for v in tf.nest.flatten(variables))


def count_labels(dataset: tf.data.Dataset, num_classes: int) -> tf.Tensor:
  """float32 `[num_classes]` counts of the labels over a whole dataset (one pass); batches are
  mappings with key "y" or `(x, y)` tuples."""
  def add(counts, batch):
    labels = tf.cast(tf.reshape(models_lib.batch_labels(batch), [-1]), tf.int32)
    return counts + tf.math.bincount(labels, minlength=num_classes, maxlength=num_classes,
                                     dtype=tf.float32)
  return dataset.reduce(tf.zeros([num_classes], tf.float32), add)


def _make_client_update(model_fn: Callable[[], Any], *, weighting: str,
                        proximal_strength: float = 0.0, corrective: bool = False,
                        num_classes_to_count: Optional[int] = None,
                        set_counts: Optional[Callable[[Any, tf.Tensor], Any]] = None,
                        clip_norm: Optional[float] = None, normalized: bool = False,
                        report_non_finite: bool = False):
  """The `tf.function` run on each client: `(ClientResult, unfinalized metrics)`, and with
  `report_non_finite` a third output, int32 1 if the client's update (or its loss, when it is
  the weight) was non-finite and so sent as zeros with weight 0, else 0.

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`, or (when
      `num_classes_to_count` is set) a pair `(VariableModel, loss)`.
    weighting: one of `WEIGHTINGS`.
    proximal_strength: mu >= 0 of the proximal term; 0 disables it.
    corrective: also send the gradient of the mean loss at the trained model over the whole local
      dataset, and that loss (an extra pass; corrective paper eqs. 3-5).
    num_classes_to_count: when set, count labels over the whole dataset before training and call
      `set_counts(loss, counts)`.
    set_counts: see `num_classes_to_count`.
    clip_norm: None (no clipping) or c > 0: each local step's gradient is clipped to global L2
      norm c (after the proximal term is added).
    normalized: send FedNova's `OrderedDict(update=u_i / ||a_i||_1, normalizer=||a_i||_1,
      nonfinite)` (`tff_conflict.learning.fednova`); a client with 0 local steps gets weight 0.
  """
  if num_classes_to_count is not None:
    model, loss_obj = model_fn()
  else:
    model, loss_obj = model_fn(), None
  # The extra corrective pass runs on a second copy, so that its forward passes leave the
  # training metrics of `model` untouched.
  grad_model = model_fn() if corrective else None
  if isinstance(grad_model, tuple):
    grad_model = grad_model[0]
  mu = float(proximal_strength)
  clip = None if clip_norm is None else float(clip_norm)

  @tf.function
  def client_update(optimizer, optimizer_hparams, initial_weights, data):
    model_weights = tff.learning.models.ModelWeights.from_model(model)
    _assign(model_weights, initial_weights)
    if num_classes_to_count is not None:
      set_counts(loss_obj, count_labels(data, num_classes_to_count))

    def reduce_fn(state, batch):
      num_examples, loss_sum, num_steps, optimizer_state = state
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, model_weights.trainable)
      if mu > 0.0:
        # d/dw mu/2 |w - w0|^2 = mu (w - w0)  (FedProx; TFF 0.87 has the opposite sign).
        gradients = tf.nest.map_structure(lambda g, w, w0: g + mu * (w - w0), gradients,
                                          model_weights.trainable, initial_weights.trainable)
      if clip is not None:
        # g * c / max(|g|, c) over all trainable tensors together (one global norm).
        gradients = tf.nest.pack_sequence_as(
            gradients, tf.clip_by_global_norm(tf.nest.flatten(gradients), clip)[0])
      optimizer_state, updated = optimizer.next(
          optimizer_state, tuple(tf.nest.flatten(model_weights.trainable)),
          tuple(tf.nest.flatten(gradients)))
      _assign(model_weights.trainable,
              tf.nest.pack_sequence_as(model_weights.trainable, updated))
      n = _num_examples(output, batch)
      return (num_examples + n, loss_sum + tf.cast(output.loss, tf.float32) *
              tf.cast(n, tf.float32), num_steps + 1, optimizer_state)

    specs = tuple(tf.TensorSpec(v.shape, v.dtype)
                  for v in tf.nest.flatten(model_weights.trainable))
    optimizer_state = optimizer.set_hparams(optimizer.initialize(specs), optimizer_hparams)
    num_examples, loss_sum, num_steps, _ = data.reduce(
        (tf.constant(0, tf.int64), tf.constant(0.0, tf.float32), tf.constant(0, tf.int64),
         optimizer_state), reduce_fn)
    delta = tf.nest.map_structure(tf.subtract, initial_weights.trainable, model_weights.trainable)
    mean_loss = tf.math.divide_no_nan(loss_sum, tf.cast(num_examples, tf.float32))

    if corrective:
      grad_weights = tff.learning.models.ModelWeights.from_model(grad_model)
      _assign(grad_weights, model_weights)

      def grad_reduce_fn(state, batch):
        grad_sum, eval_loss_sum, eval_num = state
        with tf.GradientTape() as tape:
          output = grad_model.forward_pass(batch, training=False)
          n = tf.cast(_num_examples(output, batch), tf.float32)
          scaled_loss = tf.cast(output.loss, tf.float32) * n
        grads = tape.gradient(scaled_loss, grad_weights.trainable,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        grads = tuple(a + g for a, g in zip(grad_sum, tf.nest.flatten(grads)))
        return grads, eval_loss_sum + scaled_loss, eval_num + n

      grad_sum, eval_loss_sum, eval_num = data.reduce(
          (_zeros_for(grad_weights.trainable), tf.constant(0.0), tf.constant(0.0)),
          grad_reduce_fn)
      gradient = tf.nest.pack_sequence_as(
          initial_weights.trainable, [tf.math.divide_no_nan(g, eval_num) for g in grad_sum])
      eval_loss = tf.math.divide_no_nan(eval_loss_sum, eval_num)
      value = collections.OrderedDict(update=delta, gradient=gradient, loss=eval_loss)
      value, has_non_finite = zero_if_any_non_finite(value)
    elif normalized:
      value, has_non_finite = fednova_lib.client_value(delta, num_steps, optimizer_hparams, mu)
    else:
      value, has_non_finite = zero_if_any_non_finite(delta)

    weight, finite_loss = update_weight(weighting, num_examples, mean_loss)
    if weighting == 'loss':
      has_non_finite = tf.maximum(has_non_finite, tf.cast(~finite_loss, has_non_finite.dtype))
      value = tf.nest.map_structure(
          lambda t: tf.where(finite_loss, t, tf.zeros_like(t)), value)
    weight = tf.where(has_non_finite > 0, tf.constant(0.0, tf.float32), weight)
    if normalized:
      weight = tf.where(num_steps > 0, weight, tf.constant(0.0, tf.float32))
    if has_non_finite > 0:
      model.reset_metrics()
    metrics = model.report_local_unfinalized_metrics()
    result = tff.learning.templates.ClientResult(update=value, update_weight=weight)
    if report_non_finite:
      return result, metrics, tf.cast(has_non_finite > 0, tf.int32)
    return result, metrics

  return client_update


def update_weight(weighting: str, num_examples: tf.Tensor, mean_loss: tf.Tensor):
  """(weight, finite_loss) of a client's update under `weighting`: its number of examples, 1, or
  (`'loss'`) its mean training loss, at least `MIN_REPORTED_LOSS`, 0 without examples or with a
  non-finite loss; `finite_loss` is None unless `weighting == 'loss'` (then the caller zeroes the
  update where it is False)."""
  if weighting == 'num_examples':
    return tf.cast(num_examples, tf.float32), None
  if weighting == 'uniform':
    return tf.constant(1.0, tf.float32), None
  finite_loss = tf.math.is_finite(mean_loss)
  weight = tf.where(finite_loss & (num_examples > 0), tf.maximum(mean_loss, MIN_REPORTED_LOSS),
                    0.0)
  return weight, finite_loss


def zero_if_any_non_finite(structure):
  """(structure, 0) if every entry is finite, else (zeros, 1) -- as TFF's `tensor_utils`."""
  flat = tf.nest.flatten(structure)
  all_finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in flat])
  return tf.cond(all_finite, lambda: (structure, tf.constant(0)),
                 lambda: (tf.nest.map_structure(tf.zeros_like, structure), tf.constant(1)))


def _build_client_work_process(model_fn: Callable[[], Any], optimizer, *, update_kwargs,
                               metrics_aggregator=None) -> tff.learning.templates.ClientWorkProcess:
  """A `ClientWorkProcess` around `_make_client_update(model_fn, **update_kwargs)`."""
  if metrics_aggregator is None:
    metrics_aggregator = tff.learning.metrics.sum_then_finalize
  counted = update_kwargs.get('num_classes_to_count') is not None
  with tf.Graph().as_default():
    model = model_fn()[0] if counted else model_fn()
    metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  weights_type = tff.learning.models.weights_type_from_model(model)
  initial_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec(shape=(), dtype=tf.float32)))

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def client_update_computation(hparams, initial_weights, dataset):
    client_update = _make_client_update(model_fn, report_non_finite=True, **update_kwargs)
    return client_update(optimizer, hparams, initial_weights, dataset)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    state_at_clients = tff.federated_broadcast(state)
    client_result, model_outputs, non_finite = tff.federated_map(
        client_update_computation, (state_at_clients, weights, client_data))
    train_metrics = metrics_aggregation_fn(model_outputs)
    # Clients whose update was non-finite (e.g. a NaN in their data): sent as zeros with weight
    # 0, so the aggregator sees only a zero weight; counted here as what they are.
    measurements = tff.federated_zip(collections.OrderedDict(
        train=train_metrics, num_excluded_nonfinite=tff.federated_sum(non_finite)))
    return tff.templates.MeasuredProcessOutput(state, client_result, measurements)

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)


def build_client_work(model_fn: Callable[[], tff.learning.models.VariableModel],
                      optimizer: tff.learning.optimizers.Optimizer, *,
                      client_weighting: WeightingArg = None, proximal_strength: float = 0.0,
                      metrics_aggregator=None, clip_norm: Optional[float] = None
                      ) -> tff.learning.templates.ClientWorkProcess:
  """Model-delta client work with a choice of update weight, an optional proximal term and
  optional gradient clipping.

  With `client_weighting` 'num_examples' or 'uniform' and `proximal_strength=0` it computes
  exactly what `tff.learning.templates.build_model_delta_client_work` computes. A client whose
  update is non-finite sends zeros with weight 0 and is counted in the measurement
  `num_excluded_nonfinite` (beside `train`, the model's metrics).

  Args:
    model_fn: no-argument callable returning a new `tff.learning.models.VariableModel`.
    optimizer: the client optimizer, a `tff.learning.optimizers.Optimizer`.
    client_weighting: 'num_examples' (default), 'uniform', 'loss' (the client's mean training
      loss this round) or a `tff.learning.ClientWeighting`.
    proximal_strength: FedProx's mu >= 0 (0: plain local SGD). The local objective is
      `F_k(w) + mu/2 |w - w0|^2`, w0 the global model received this round (Li et al.,
      "Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127).
    metrics_aggregator: as in TFF (`tff.learning.metrics.sum_then_finalize` by default).
    clip_norm: None (default: no clipping) or a finite c > 0: every local step's gradient
      (proximal term included) is clipped to global L2 norm c, `g * c / max(|g|, c)`.

  Raises:
    ValueError: on an unknown weighting, a negative `proximal_strength`, a `clip_norm` that is
      not None or finite > 0, or an optimizer that is not a TFF optimizer or has a
      non-positive learning rate.
  """
  weighting = resolve_weighting(client_weighting)
  mu = hparams.PROXIMAL_STRENGTH.check(proximal_strength)
  clip = hparams.CLIENT_CLIP_NORM.check(clip_norm)
  optimizer = _validation.resolve_optimizer('optimizer', optimizer)
  return _build_client_work_process(
      model_fn, optimizer,
      update_kwargs=dict(weighting=weighting, proximal_strength=mu, clip_norm=clip),
      metrics_aggregator=metrics_aggregator)


def build_loss_weighted_client_work(model_fn: Callable[[], tff.learning.models.VariableModel],
                                    optimizer: tff.learning.optimizers.Optimizer,
                                    metrics_aggregator=None, *, loop_implementation=None
                                    ) -> tff.learning.templates.ClientWorkProcess:
  """Model-delta client work whose `update_weight` is the client's mean training loss this round.

  Same arguments as `tff.learning.templates.build_model_delta_client_work` minus
  `client_weighting`. The weight is `l_i = (sum over local batches b of loss_b * n_b) / sum n_b`,
  the example-weighted mean of the training losses of the round's local steps (each at the
  weights of that step), as FedMGC's dominant gradient correction needs (fedmgc paper,
  Algorithm 1 line 11, `z_i = p_i / l_i`). Compose it with
  `tff_conflict.aggregators.DominantGradientCorrectionFactory(weights_are_losses=True)` via
  `tff.learning.templates.compose_learning_process` (TFF 0.87's `build_weighted_fed_avg` accepts
  only the `ClientWeighting` enum, so a callable cannot carry the loss there); `build_fedmgc`
  does this.

  A client with a non-finite delta or loss, or with no examples, sends a zero delta and weight
  0 ("no loss reported"); a true mean loss of 0 is sent as `MIN_REPORTED_LOSS` (1e-12).

  Args:
    model_fn: no-argument callable returning a new `tff.learning.models.VariableModel`.
    optimizer: a `tff.learning.optimizers.Optimizer`.
    metrics_aggregator: as in TFF (`tff.learning.metrics.sum_then_finalize` by default).
    loop_implementation: accepted for signature compatibility; only
      `tff.learning.LoopImplementation.DATASET_REDUCE` (the default) is supported.
  """
  if loop_implementation not in (None, tff.learning.LoopImplementation.DATASET_REDUCE):
    raise _checks.ArgumentError(argument='loop_implementation', value=loop_implementation, message=(
        'loop_implementation: only tff.learning.LoopImplementation.DATASET_REDUCE '
        f'is supported, got {loop_implementation!r}'))
  return build_client_work(model_fn, optimizer, client_weighting='loss',
                           metrics_aggregator=metrics_aggregator)



def build_label_counting_client_work(
    model_and_loss_fn: Callable[[], tuple[tff.learning.models.VariableModel, Any]],
    optimizer: tff.learning.optimizers.Optimizer, *, num_classes: int,
    set_counts: Callable[[Any, tf.Tensor], Any], client_weighting: WeightingArg = None,
    proximal_strength: float = 0.0, metrics_aggregator=None, clip_norm: Optional[float] = None
) -> tff.learning.templates.ClientWorkProcess:
  """Client work that counts the labels of its whole local dataset (one extra pass) and hands the
  counts to the loss before training (FedGA with whole-dataset counts, fedga paper eqs. 8-10).

  Args:
    model_and_loss_fn: no-argument callable returning `(VariableModel, loss)`, `loss` the Keras
      loss object the model trains with.
    optimizer: the client optimizer.
    num_classes: number of classes (length of the counts vector).
    set_counts: `set_counts(loss, counts)` installs float32 `[num_classes]` counts in the loss.
    client_weighting, proximal_strength, metrics_aggregator, clip_norm: as in
      `build_client_work`.
  """
  weighting = resolve_weighting(client_weighting)
  mu = hparams.PROXIMAL_STRENGTH.check(proximal_strength)
  clip = hparams.CLIENT_CLIP_NORM.check(clip_norm)
  optimizer = _validation.resolve_optimizer('optimizer', optimizer)
  num_classes = _checks.check_int('num_classes', num_classes, minimum=1)
  return _build_client_work_process(
      model_and_loss_fn, optimizer,
      update_kwargs=dict(weighting=weighting, proximal_strength=mu,
                         num_classes_to_count=int(num_classes), set_counts=set_counts,
                         clip_norm=clip),
      metrics_aggregator=metrics_aggregator)


def build_normalized_client_work(model_fn: Callable[[], tff.learning.models.VariableModel],
                                 optimizer: tff.learning.optimizers.Optimizer, *,
                                 client_weighting: WeightingArg = None,
                                 proximal_strength: float = 0.0, metrics_aggregator=None,
                                 clip_norm: Optional[float] = None
                                 ) -> tff.learning.templates.ClientWorkProcess:
  """FedNova's client work (Wang et al., NeurIPS 2020, eqs. 6-7): local training as
  `build_client_work`, counting its local steps tau_i, then it sends
  `OrderedDict(update=u_i / ||a_i||_1, normalizer=||a_i||_1, nonfinite=0|1)`
  (`tff_conflict.learning.fednova`), with weight 0 for a client that ran no step or whose delta
  held NaN or Inf. `||a_i||_1` follows the optimizer's learning rate and momentum as they are in
  the round (its hyperparameters) and `proximal_strength`.

  Raises:
    ValueError: as `build_client_work`; also for an optimizer other than
      `tff.learning.optimizers.build_sgdm` (FedNova's normalisation is unknown for it) or
      `client_weighting="loss"` (FedNova's weights are the p_i of its `tau_eff`).
  """
  weighting = resolve_weighting(client_weighting)
  if weighting == 'loss':
    raise _checks.ArgumentError.must_be('client_weighting', client_weighting, (
        f"{_checks.one_of(('num_examples', 'uniform'))} for FedNova (its weights p_i also weight "
        'tau_eff)'))
  mu = hparams.PROXIMAL_STRENGTH.check(proximal_strength)
  clip = hparams.CLIENT_CLIP_NORM.check(clip_norm)
  optimizer = _validation.resolve_optimizer('optimizer', optimizer)
  fednova_lib.check_optimizer('client_optimizer_fn', optimizer)
  return _build_client_work_process(
      model_fn, optimizer,
      update_kwargs=dict(weighting=weighting, proximal_strength=mu, clip_norm=clip,
                         normalized=True),
      metrics_aggregator=metrics_aggregator)

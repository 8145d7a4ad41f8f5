"""`build_process`: any client loss with any server aggregator, as one `LearningProcess`."""

from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.learning import _validation
from tff_conflict.learning import checking
from tff_conflict.learning import client_work as client_work_lib
from tff_conflict.learning import corrective as corrective_lib
from tff_conflict.learning import fednova as fednova_lib
from tff_conflict.learning import models as models_lib
from tff_conflict.learning import registry

LossArg = Union[str, tf.keras.losses.Loss]
AggregatorArg = Union[str, tff.aggregators.WeightedAggregationFactory,
                      tff.aggregators.UnweightedAggregationFactory]
_LOSS_REQUIREMENT = f'{_checks.one_of(sorted(registry.LOSSES))} or a tf.keras.losses.Loss'
_AGGREGATOR_REQUIREMENT = (f'{_checks.one_of(sorted(registry.AGGREGATORS))} or a '
                           'tff.aggregators factory')


def _call_with_kwargs(kind: str, name: str, fn: Callable[..., Any], kwargs: Mapping[str, Any]):
  try:
    return fn(**kwargs)
  except TypeError as e:
    raise _checks.ArgumentError(argument=f'{kind}_kwargs', value=dict(kwargs), message=(
        f'{kind} {name!r} does not accept the keyword arguments {dict(kwargs)!r}: '
        f'{e}')) from e


def resolve_loss(loss: LossArg, loss_kwargs: Optional[Mapping[str, Any]] = None
                 ) -> Callable[[], tf.keras.losses.Loss]:
  """A no-argument factory of new loss objects from a name in `LOSSES` or a Keras loss object.

  A name is built with `loss_kwargs`; an object is copied with `from_config(get_config())` for
  every model (TFF builds the model in several graphs). The loss is built once here, in a
  throwaway graph, so that bad hyperparameters fail now.
  """
  kwargs = dict(loss_kwargs or {})
  if isinstance(loss, str):
    if loss not in registry.LOSSES:
      raise _checks.ArgumentError.must_be('loss', loss, _LOSS_REQUIREMENT)
    make = registry.LOSSES[loss]
    with tf.Graph().as_default():
      _call_with_kwargs('loss', loss, make, kwargs)
    return lambda: make(**kwargs)
  if isinstance(loss, tf.keras.losses.Loss):
    if kwargs:
      raise _checks.ArgumentError.must_be('loss_kwargs', kwargs, 'empty when loss is an object')
    cls, config = type(loss), loss.get_config()
    if config.get('from_logits') is False:
      raise _checks.ArgumentError(argument='loss', value=loss, message=(
          f'loss {loss.name!r} ({cls.__name__}) has from_logits=False, so it reads '
          'the model\'s output as probabilities; the models here output logits '
          f'(a softmax output is refused): pass {cls.__name__}(from_logits=True)'))
    if isinstance(loss, (tf.keras.losses.CategoricalCrossentropy,
                         tf.keras.losses.BinaryCrossentropy)):
      raise _checks.ArgumentError(argument='loss', value=loss, message=(
          f'loss {loss.name!r} ({cls.__name__}) takes one-hot or binary labels; '
          'the labels here are sparse class indices: use '
          'tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)'))
    return lambda: cls.from_config(config)
  raise _checks.ArgumentError.must_be('loss', loss, _LOSS_REQUIREMENT)


def resolve_aggregator(aggregator: AggregatorArg,
                       aggregator_kwargs: Optional[Mapping[str, Any]] = None
                       ) -> tff.aggregators.WeightedAggregationFactory:
  """A weighted aggregation factory from a name in `AGGREGATORS` or a factory object.

  An unweighted factory is wrapped with `tff.aggregators.as_weighted_aggregator`.
  """
  kwargs = dict(aggregator_kwargs or {})
  if isinstance(aggregator, str):
    if aggregator not in registry.AGGREGATORS:
      raise _checks.ArgumentError.must_be('aggregator', aggregator, _AGGREGATOR_REQUIREMENT)
    return _call_with_kwargs('aggregator', aggregator, registry.AGGREGATORS[aggregator], kwargs)
  if kwargs:
    raise _checks.ArgumentError.must_be('aggregator_kwargs', kwargs,
                                        'empty when aggregator is an object')
  if isinstance(aggregator, tff.aggregators.WeightedAggregationFactory):
    return aggregator
  if isinstance(aggregator, tff.aggregators.UnweightedAggregationFactory):
    return tff.aggregators.as_weighted_aggregator(aggregator)
  raise _checks.ArgumentError.must_be('aggregator', aggregator, _AGGREGATOR_REQUIREMENT)


def resolve_weighting_for(client_weighting: client_work_lib.WeightingArg, factory, *,
                          default: str) -> str:
  """The client weighting: 'loss' by default and required for an aggregator with
  `weights_are_losses=True` (DGC as published), else `client_weighting` or `default`."""
  weights_are_losses = registry.weights_are_losses(factory)
  weighting = client_work_lib.resolve_weighting(
      client_weighting, default='loss' if weights_are_losses else default)
  if weights_are_losses and weighting != 'loss':
    raise _checks.ArgumentError.must_be('client_weighting', client_weighting,
                                        "'loss' for an aggregator with weights_are_losses=True")
  return weighting


def _dataset_counts_of(loss_fn: Callable[[], tf.keras.losses.Loss]) -> bool:
  with tf.Graph().as_default():
    return getattr(loss_fn(), 'counts', None) == 'dataset'


@tf.autograph.experimental.do_not_convert
def _set_dataset_counts(loss: tf.keras.losses.Loss, counts: tf.Tensor):
  """Installs the client's whole-dataset class counts in a `CalibratedLabelLoss`.

  Not converted by AutoGraph (no control flow here): AutoGraph re-reads a function's source
  file when it converts it, so converting the loss's method would tie a running client update to
  the current text of another module.
  """
  return loss.assign_class_counts(counts)


def build_process(model_fn: models_lib.ModelArg, *,
                  input_spec: models_lib.InputSpecArg = None,
                  client_optimizer_fn: Any,
                  server_optimizer_fn: Any = None,
                  loss: Optional[LossArg] = None,
                  loss_kwargs: Optional[Mapping[str, Any]] = None,
                  aggregator: AggregatorArg = 'mean',
                  aggregator_kwargs: Optional[Mapping[str, Any]] = None,
                  proximal_strength: float = 0.0,
                  normalized_averaging: bool = False,
                  client_weighting: client_work_lib.WeightingArg = None,
                  metrics: models_lib.MetricsArg = None,
                  metrics_aggregator=None,
                  clip_norm: Optional[float] = None) -> tff.learning.templates.LearningProcess:
  """Composes a client loss, optional FedProx term and gradient clipping, and a server
  aggregator into one process.

  `tff.learning.templates.compose_learning_process` of broadcast -> client work (local SGD on
  `loss`, optional proximal term, update weight) -> aggregator (a
  `tff.aggregators.WeightedAggregationFactory`) -> finalizer (the server optimizer applies the
  aggregate as a gradient, `w <- w - server_lr * aggregate`, TFF's convention); the named
  builders (`algorithms.py`) are thin wrappers of it. The client work adapts to the parts
  chosen: `client_weighting="loss"` sends each client's mean training loss as its weight
  (FedMGC's DGC); a `CorrectiveGradientFactory` gets a client work that also sends the gradient
  at the trained model and its loss, and a finalizer that applies the aggregate's `update` field;
  a calibrated loss with `counts="dataset"` gets a client work that counts the labels of the
  whole local dataset before training.

  Args:
    model_fn: a no-argument function returning a new, uncompiled `tf.keras.Model` that maps
      `x` to logits `[batch, num_classes]`; or, as TFF's algorithm builders take, a no-argument
      function returning a new `tff.learning.models.VariableModel`, or a
      `tff.learning.models.FunctionalModel` (these keep their own loss and metrics; see
      `tff_conflict.learning.models`).
    input_spec: element spec of a client batch, `OrderedDict(x=tf.TensorSpec, y=tf.TensorSpec)`
      or a tuple `(x_spec, y_spec)`, with integer labels; required with a Keras model, optional
      (and then equal to the model's) otherwise.
    client_optimizer_fn: a `tff.learning.optimizers.Optimizer` (or a no-argument callable
      returning one) for local training; its learning rate must be > 0.
    server_optimizer_fn: same for the server; default `build_sgdm(learning_rate=1.0)` (plain
      FedAvg: the new model is the old one minus the aggregate delta).
    loss: None (default: cross-entropy for a Keras model, the model's own loss otherwise), a name
      in `LOSSES` ('ce', 'focal', 'margin', 'calibrated') or a `tf.keras.losses.Loss` on (sparse
      labels, logits). Only a Keras model can be given a loss.
    loss_kwargs: keyword arguments of the named loss (e.g. `dict(gamma=0.5, beta=1.0)`).
    aggregator: a name in `AGGREGATORS` ('mean', 'measured_mean', 'fedgh', 'dgc', 'principal',
      'corrective') or a
      `tff.aggregators` factory (weighted, or unweighted: then wrapped).
    aggregator_kwargs: keyword arguments of the named aggregator.
    proximal_strength: FedProx's mu >= 0 (0: none); see `client_work`.
    normalized_averaging: FedNova (Wang et al., NeurIPS 2020, eqs. 6-7): each client sends its
      delta divided by its local solver's `||a_i||_1` (from its number of local steps, the
      client optimizer's learning rate and momentum, and `proximal_strength`), `aggregator`
      combines these with weights p_i, and the result is multiplied by
      `tau_eff = sum_i p_i ||a_i||_1` (`tff_conflict.learning.fednova`). Needs SGD
      (`tff.learning.optimizers.build_sgdm`) as the client optimizer.
    client_weighting: 'num_examples', 'uniform', 'loss' or a `tff.learning.ClientWeighting`.
      Default: 'loss' for an aggregator with `weights_are_losses=True` (DGC as published; also
      inside TFF wrappers such as `tff.aggregators.clipping_factory`, which are looked
      through), else 'num_examples'. A corrective aggregator requires 'num_examples'.
    metrics: None (sparse categorical accuracy for a Keras model; a VariableModel's own metrics;
      loss and number of examples for a FunctionalModel), a no-argument callable returning a
      list of new Keras metrics, or a list of Keras metric objects (not with a VariableModel).
    metrics_aggregator: as in TFF (`tff.learning.metrics.sum_then_finalize` by default).
    clip_norm: None (default) or a finite c > 0: every local step's gradient is clipped to
      global L2 norm c (see `client_work`; the fedga authors' code clips at 5.0).

  Returns:
    A `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: before anything is built, on an unknown loss or aggregator name, bad
      hyperparameters, a non-positive learning rate, a negative `proximal_strength`, a
      `clip_norm` that is not None or finite > 0, an inconsistent weighting, a `model_fn` that is
      none of the above or returns a compiled Keras model, one whose output is not one tensor
      of logits `[batch, num_classes]` (e.g. ends in softmax), or the same model twice (see
      `tff_conflict.learning.models`), a missing or malformed `input_spec` (one-hot labels), a
      loss with `from_logits=False` or on one-hot labels, a loss given with a model that is not
      a Keras model, or metrics given with a VariableModel.
  """
  # ---- validation, before anything is built --------------------------------------------------
  if input_spec is not None:
    input_spec = models_lib.check_input_spec(input_spec)
  client_optimizer = _validation.resolve_optimizer('client_optimizer_fn', client_optimizer_fn)
  if server_optimizer_fn is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  else:
    server_optimizer = _validation.resolve_optimizer('server_optimizer_fn', server_optimizer_fn)
  mu = hparams.PROXIMAL_STRENGTH.check(proximal_strength)
  clip = hparams.CLIENT_CLIP_NORM.check(clip_norm)
  loss_fn = resolve_loss('ce' if loss is None else loss, loss_kwargs)
  factory = resolve_aggregator(aggregator, aggregator_kwargs)
  metrics_fn = models_lib.resolve_metrics(metrics)
  weighting = resolve_weighting_for(client_weighting, factory, default='num_examples')
  corrective = registry.is_corrective_factory(factory)
  if corrective and weighting != 'num_examples':
    raise _checks.ArgumentError.must_be('client_weighting', client_weighting, "'num_examples' "
                                        'with the corrective aggregator (its weights are numbers '
                                        'of examples)')
  dataset_counts = _dataset_counts_of(loss_fn)
  normalized = _checks.check_bool('normalized_averaging', normalized_averaging)
  if normalized:
    fednova_lib.check_optimizer('client_optimizer_fn', client_optimizer)
    if weighting == 'loss':
      reads = (f' (aggregator {aggregator!r} reads its weights as losses when '
               'weights_are_losses=True)') if registry.weights_are_losses(factory) else ''
      raise _checks.ArgumentError(argument='normalized_averaging', value=normalized, message=(
          'normalized_averaging (FedNova) weights clients by examples or uniformly '
          '(its weights p_i also weight tau_eff): it cannot be combined with '
          f'client_weighting "loss"{reads}'))
    if corrective or dataset_counts:
      raise _checks.ArgumentError(argument='normalized_averaging', value=normalized, message=(
          'normalized_averaging (FedNova) cannot be combined with the corrective '
          'aggregator or a loss with counts="dataset"'))
  if dataset_counts and corrective:
    raise _checks.ArgumentError(argument='loss_kwargs', value=loss_kwargs, message=(
        'a loss with counts="dataset" cannot be combined with the corrective '
        'aggregator (its gradient pass would need the counts too); use counts="batch"'))
  model = models_lib.resolve_model(model_fn, input_spec)
  if model.kind != models_lib.KERAS:
    if loss is not None or loss_kwargs:
      name = loss if isinstance(loss, str) else type(loss).__name__
      method = registry.LOSSES[name].method if name in registry.LOSSES else None
      raise _checks.ArgumentError(argument='loss', value=loss, message=(
          f'loss {name!r}{f" ({method})" if method else ""} replaces the model\'s loss and needs '
          f'a Keras model (model_fn returning a tf.keras.Model), got {model.description}, '
          'whose loss cannot be replaced. The server-side methods (FedAvg, FedProx, FedGH, DGC '
          'with the model\'s loss, principal gradients, corrective weights) work with it; '
          'leave loss unset.'))
    if metrics is not None and model.kind == models_lib.VARIABLE:
      raise _checks.ArgumentError(argument='metrics', value=metrics, message=(
          f'metrics cannot be given with {model.description}, which reports its '
          f'own metrics; got metrics={metrics!r}'))

  return _compose(model, loss_fn=loss_fn, metrics_fn=metrics_fn,
                  functional_metrics=metrics is not None, factory=factory, weighting=weighting,
                  corrective=corrective, dataset_counts=dataset_counts,
                  client_optimizer=client_optimizer, server_optimizer=server_optimizer, mu=mu,
                  clip=clip, metrics_aggregator=metrics_aggregator, normalized=normalized)


def variable_model_fn_of(model: models_lib.ResolvedModel, *, loss_fn, metrics_fn,
                         functional_metrics: bool) -> Callable[[], Any]:
  """The no-argument `VariableModel` factory of a resolved model: a Keras model with `loss_fn`
  (label-checked by the caller) and `metrics_fn`, a FunctionalModel with `metrics_fn` when
  metrics were given, else the model's own."""
  if model.kind == models_lib.KERAS:
    return models_lib.build_model_fn(model.keras_model_fn, input_spec=model.input_spec,
                                     loss_fn=loss_fn, metrics_fn=metrics_fn)
  if model.kind == models_lib.FUNCTIONAL and functional_metrics:
    return models_lib.functional_model_fn(model.functional_model, metrics_fn)
  return model.variable_model_fn


def _compose(model: models_lib.ResolvedModel, *, loss_fn, metrics_fn, functional_metrics: bool,
             factory, weighting: str, corrective: bool, dataset_counts: bool, client_optimizer,
             server_optimizer, mu: float, clip, metrics_aggregator, normalized: bool = False
             ) -> tff.learning.templates.LearningProcess:
  """The composition of `build_process`, from checked arguments."""
  checking.stop_if_checking()
  if model.kind == models_lib.KERAS:
    loss_fn = models_lib.label_checked(loss_fn, model.num_classes)
  variable_model_fn = variable_model_fn_of(model, loss_fn=loss_fn, metrics_fn=metrics_fn,
                                           functional_metrics=functional_metrics)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(variable_model_fn())

  model_weights_type = initial_model_weights_fn.type_signature.result
  trainable_type = model_weights_type.trainable
  weight_type = tff.TensorType(tf.float32.as_numpy_dtype)
  distributor = tff.learning.templates.build_broadcast_process(model_weights_type)

  if corrective:
    client_work = corrective_lib.build_corrective_client_work(
        variable_model_fn, client_optimizer, proximal_strength=mu,
        metrics_aggregator=metrics_aggregator, clip_norm=clip)
    aggregation = factory.create(corrective_lib.corrective_value_type(trainable_type),
                                 weight_type)
    finalizer = corrective_lib.build_update_field_finalizer(server_optimizer,
                                                            model_weights_type)
  elif normalized:
    client_work = client_work_lib.build_normalized_client_work(
        variable_model_fn, client_optimizer, client_weighting=weighting, proximal_strength=mu,
        metrics_aggregator=metrics_aggregator, clip_norm=clip)
    aggregation = fednova_lib.NormalizedAveragingFactory(factory).create(
        fednova_lib.value_type(trainable_type), weight_type)
    finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                       model_weights_type)
  else:
    if dataset_counts:
      keras_model_fn = model.keras_model_fn

      def model_and_loss_fn():
        loss_obj = loss_fn()
        return tff.learning.models.from_keras_model(
            models_lib.build_on_input_spec(keras_model_fn(), model.input_spec), loss=loss_obj,
            input_spec=model.input_spec,
            metrics=metrics_fn()), loss_obj
      client_work = client_work_lib.build_label_counting_client_work(
          model_and_loss_fn, client_optimizer, num_classes=model.num_classes,
          set_counts=_set_dataset_counts, client_weighting=weighting, proximal_strength=mu,
          metrics_aggregator=metrics_aggregator, clip_norm=clip)
    else:
      client_work = client_work_lib.build_client_work(
          variable_model_fn, client_optimizer, client_weighting=weighting,
          proximal_strength=mu, metrics_aggregator=metrics_aggregator, clip_norm=clip)
    aggregation = factory.create(trainable_type, weight_type)
    finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                       model_weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, distributor, client_work, aggregation, finalizer)

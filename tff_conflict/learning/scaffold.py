"""SCAFFOLD (Algorithm 1, option II) as one TFF process: clients take `OrderedDict(data, control,
slot)`, the round returns their new controls in `metrics['client_controls']`, the server control
is in the state. docs/methods.md, "SCAFFOLD"; docs/design.md, "Client state".
"""

import collections
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.aggregators import _flatten as flatten
from tff_conflict.aggregators import _gather as gather
from tff_conflict.learning import _validation
from tff_conflict.learning import checking
from tff_conflict.learning import client_work as client_work_lib
from tff_conflict.learning import models as models_lib
from tff_conflict.learning import process as process_lib
from tff_conflict.learning import registry

# The key of the round's metrics that holds the new client controls.
CLIENT_CONTROLS = 'client_controls'
# The fields of a client's input.
DATA, CONTROL, SLOT = 'data', 'control', 'slot'
# The attribute of a process of `build_scaffold` holding its N (`num_clients_of`).
_NUM_CLIENTS = '_scaffold_num_clients'


def plain_sgd_learning_rate(name: str, optimizer: Any) -> tuple[Any, float]:
  """`(optimizer, eta_l)` for plain SGD (`build_sgdm` without momentum); ValueError otherwise.

  SCAFFOLD's local step is `y <- y - eta_l (g - c_i + c)` and its control update divides by
  `K eta_l`: another optimizer (momentum, Adam, ...) would make the controls wrong.
  """
  opt = _validation.resolve_optimizer(name, optimizer)
  hparams_ = opt.get_hparams(opt.initialize(tf.TensorSpec([], tf.float32)))
  momentum = hparams_.get('momentum')
  is_sgd = _validation.is_sgdm(opt)
  plain = is_sgd and set(hparams_) <= {'learning_rate', 'momentum'} and (
      momentum is None or float(tf.get_static_value(momentum)) == 0.0)
  if not plain:
    kind = 'SGD' if is_sgd else type(opt).__name__.lstrip('_')
    values = {k: float(tf.get_static_value(v)) for k, v in hparams_.items()}
    raise _checks.ArgumentError(argument=name, value=optimizer, message=(
        f'{name} must be plain SGD for SCAFFOLD (tff.learning.optimizers.build_sgdm('
        f'learning_rate=..., momentum=None)): its local step is y <- y - lr (g - c_i + c) and '
        f'its control update divides by K lr; got {kind} with hyperparameters {values!r}'))
  return opt, float(tf.get_static_value(hparams_['learning_rate']))


def _make_client_update(model_fn, *, weighting: str, clip_norm: Optional[float]):
  """The `tf.function` run on each client (Algorithm 1, lines 7-13, option II).

  `client_update(learning_rate, initial_weights, data, client_control, server_control)` runs
  one local step `y <- y - lr (g(y) - c_i + c)` per batch (g clipped to global norm `clip_norm`
  first, when set), then with K the number of steps and `u = x - y`:
  `dc_i = u / (K lr) - c` (so `c_i+ = c_i + dc_i = c_i - c + u / (K lr)`); K = 0 gives
  `u = 0, dc_i = 0` and weight 0. A non-finite `u` or `dc_i` is replaced by zeros (weight 0,
  `c_i` kept) and flagged. Returns `(OrderedDict(update, weight, control_delta, new_control,
  non_finite), unfinalized metrics)`.
  """
  model = model_fn()
  clip = None if clip_norm is None else float(clip_norm)

  @tf.function
  def client_update(learning_rate, initial_weights, data, client_control, server_control):
    model_weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), model_weights, initial_weights)
    variables = tf.nest.flatten(model_weights.trainable)
    sizes = [int(np.prod(v.shape)) for v in variables]
    dtype = client_control.dtype
    # c - c_i, one tensor per trainable variable.
    pieces = tf.split(server_control - client_control, sizes) if len(sizes) > 1 else [
        server_control - client_control]
    corrections = [tf.cast(tf.reshape(p, v.shape), v.dtype) for p, v in zip(pieces, variables)]

    def reduce_fn(state, batch):
      steps, num_examples, loss_sum = state
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, variables,
                                unconnected_gradients=tf.UnconnectedGradients.ZERO)
      if clip is not None:
        gradients = tf.clip_by_global_norm(gradients, clip)[0]
      for v, g, correction in zip(variables, gradients, corrections):
        v.assign_sub(tf.cast(learning_rate, v.dtype) * (g + correction))
      n = client_work_lib._num_examples(output, batch)  # pylint: disable=protected-access
      return (steps + 1, num_examples + n,
              loss_sum + tf.cast(output.loss, tf.float32) * tf.cast(n, tf.float32))

    steps, num_examples, loss_sum = data.reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64), tf.constant(0.0, tf.float32)),
        reduce_fn)
    delta = tf.nest.map_structure(tf.subtract, initial_weights.trainable,
                                  model_weights.trainable)
    u = tf.concat([tf.reshape(tf.cast(t, dtype), [-1]) for t in tf.nest.flatten(delta)], 0)
    k_lr = tf.cast(steps, dtype) * tf.cast(learning_rate, dtype)
    control_delta = tf.where(steps > 0, u / tf.where(steps > 0, k_lr, tf.ones_like(k_lr))
                             - server_control, tf.zeros_like(u))
    (delta, control_delta), non_finite = client_work_lib.zero_if_any_non_finite(
        (delta, control_delta))
    mean_loss = tf.math.divide_no_nan(loss_sum, tf.cast(num_examples, tf.float32))
    weight, finite_loss = client_work_lib.update_weight(weighting, num_examples, mean_loss)
    if weighting == 'loss':
      non_finite = tf.maximum(non_finite, tf.cast(~finite_loss, tf.int32))
      delta = tf.nest.map_structure(lambda t: tf.where(finite_loss, t, tf.zeros_like(t)), delta)
      control_delta = tf.where(finite_loss, control_delta, tf.zeros_like(control_delta))
    # tf.equal, not ==: in the graphs TFF builds, `tensor == 0` is Python identity (False).
    weight = tf.where((non_finite > 0) | tf.equal(steps, 0), 0.0, weight)
    if non_finite > 0:
      model.reset_metrics()
    result = collections.OrderedDict(
        update=delta, weight=weight, control_delta=control_delta,
        new_control=client_control + control_delta, non_finite=non_finite)
    return result, model.report_local_unfinalized_metrics()

  return client_update


def client_data_type(input_spec, control_size: int, control_dtype) -> tff.StructWithPythonType:
  """The type of one client's input: `OrderedDict(data=<batches>, control=[d], slot=int32)`."""
  return tff.StructWithPythonType(
      [(DATA, tff.SequenceType(tff.types.tensorflow_to_type(input_spec))),
       (CONTROL, tff.TensorType(np.dtype(control_dtype), [control_size])),
       (SLOT, tff.TensorType(np.int32))], collections.OrderedDict)


def control_layout(process) -> Optional[tuple[int, np.dtype]]:
  """`(d, dtype)` of the client controls `process` takes, or None when its clients take no
  control (any process not built by `build_scaffold`)."""
  parameter = getattr(getattr(process, 'next', None), 'type_signature', None)
  parameter = getattr(parameter, 'parameter', None)
  if not isinstance(parameter, tff.types.StructType) or len(parameter) != 2:
    return None
  member = getattr(parameter[1], 'member', None)
  if not isinstance(member, tff.types.StructType):
    return None
  names = [name for name, _ in tff.structure.iter_elements(member)]
  if names != [DATA, CONTROL, SLOT]:
    return None
  control = member[CONTROL]
  return int(control.shape[0]), np.dtype(control.dtype)


def num_clients_of(process) -> Optional[int]:
  """N, the population `process` was built for by `build_scaffold` (its server control divides
  by it); None for any other process."""
  return getattr(process, _NUM_CLIENTS, None)


def build_scaffold(model_fn: models_lib.ModelArg, *,
                   input_spec: models_lib.InputSpecArg = None,
                   client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                   client_weighting: client_work_lib.WeightingArg = None,
                   metrics: models_lib.MetricsArg = None,
                   num_clients: int,
                   aggregator: process_lib.AggregatorArg = 'mean',
                   aggregator_kwargs: Optional[Mapping[str, Any]] = None,
                   clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default
                   ) -> tff.learning.templates.LearningProcess:
  """SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
  Learning", ICML 2020, arXiv:1910.06378, Algorithm 1 with option II; docs/methods.md, SCAFFOLD).

  Server state: model x and control c (zeros at start). Client i, with its control c_i (zeros
  until it first trains), starts at `y = x`, runs K_i local steps `y <- y - eta_l (g_i(y) - c_i
  + c)`, then `c_i+ = c_i - c + (x - y) / (K_i eta_l)`; it sends `u_i = x - y` and
  `dc_i = c_i+ - c_i`. Server: `a = aggregator(u_i)` (default the uniform mean, as the paper),
  `x <- server_optimizer(x, a)` (default SGD lr 1: `x - a`; lr eta_g: `x - eta_g a`),
  `c <- c + (|S| / N) mean_i dc_i = c + sum_i dc_i / N`. A client with 0 steps sends `u_i = 0,
  dc_i = 0` with weight 0 (it takes no part in the mean, as an empty client in every method
  here); one whose `u_i` or `dc_i` is not finite sends zeros with weight 0, keeps its c_i and
  is counted in `metrics['client_work']['num_excluded_nonfinite']`.

  Clients take `OrderedDict(data=dataset, control=c_i, slot=k)` (k its position in the round's
  list) and the round's `metrics['client_controls']` holds `OrderedDict(slot=[K], control=[K, d])`,
  the new c_i: keep them with `tff_conflict.learning.ClientControls` (docs/design.md, "Client
  state").

  Args:
    model_fn, input_spec, server_optimizer_fn, metrics: as `build_process`.
    client_optimizer_fn: plain SGD, `tff.learning.optimizers.build_sgdm(learning_rate=eta_l)`
      (no momentum); eta_l is read from it (and from the state's hparams in each round).
    num_clients: N, the number of clients in the federation (an integer >= 1).
    client_weighting: 'uniform' (default, the paper's mean over the sampled clients),
      'num_examples', or 'loss' (the default for an aggregator that reads losses, e.g. 'dgc').
    aggregator, aggregator_kwargs: what combines the `u_i` (as `build_process`; 'fedgh' etc.);
      the control update stays the plain mean. Not 'corrective' (its clients send gradients).
    clip_norm: None or c > 0: each local step's gradient g is clipped to global L2 norm c before
      the correction `- c_i + c` (so c_i+ is the mean clipped gradient).

  Raises:
    ValueError: before anything is built, on a client optimizer other than plain SGD, a
      `num_clients` that is not an integer >= 1, and the errors of `build_process`.
  """
  if input_spec is not None:
    input_spec = models_lib.check_input_spec(input_spec)
  client_optimizer, _ = plain_sgd_learning_rate('client_optimizer_fn', client_optimizer_fn)
  if server_optimizer_fn is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  else:
    server_optimizer = _validation.resolve_optimizer('server_optimizer_fn', server_optimizer_fn)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  clip = hparams.CLIENT_CLIP_NORM.check(clip_norm)
  factory = process_lib.resolve_aggregator(aggregator, aggregator_kwargs)
  if registry.is_corrective_factory(factory):
    raise _checks.ArgumentError(argument='aggregator', value=aggregator, message=(
        'aggregator: the corrective aggregator cannot be composed with SCAFFOLD '
        '(its clients must send gradients at the trained model), got '
        f'{aggregator!r}'))
  weighting = process_lib.resolve_weighting_for(client_weighting, factory, default='uniform')
  metrics_fn = models_lib.resolve_metrics(metrics)
  model = models_lib.resolve_model(model_fn, input_spec)
  if metrics is not None and model.kind == models_lib.VARIABLE:
    raise _checks.ArgumentError(argument='metrics', value=metrics, message=(
        f'metrics cannot be given with {model.description}, which reports its '
        f'own metrics; got metrics={metrics!r}'))
  loss_fn = process_lib.resolve_loss('ce')
  if model.kind == models_lib.KERAS:
    loss_fn = models_lib.label_checked(loss_fn, model.num_classes)
  variable_model_fn = process_lib.variable_model_fn_of(
      model, loss_fn=loss_fn, metrics_fn=metrics_fn, functional_metrics=metrics is not None)
  process = _compose(variable_model_fn, factory=factory, weighting=weighting,
                     client_optimizer=client_optimizer, server_optimizer=server_optimizer,
                     num_clients=num_clients, clip=clip)
  setattr(process, _NUM_CLIENTS, num_clients)
  return process


def _compose(variable_model_fn, *, factory, weighting: str, client_optimizer, server_optimizer,
             num_clients: int, clip: Optional[float]) -> tff.learning.templates.LearningProcess:
  """The process of `build_scaffold`, from checked arguments."""
  checking.stop_if_checking()
  with tf.Graph().as_default():
    probe = variable_model_fn()
    metrics_aggregation_fn = tff.learning.metrics.sum_then_finalize(probe.metric_finalizers())
    model_input_spec = probe.input_spec

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(variable_model_fn())

  model_weights_type = initial_model_weights_fn.type_signature.result
  trainable_type = model_weights_type.trainable
  flatten.check_value_type(trainable_type, 'the model\'s trainable weights')
  d = flatten.flat_size(trainable_type)
  dtype = flatten.stack_dtype(trainable_type)
  np_dtype = dtype.as_numpy_dtype
  control_type = tff.TensorType(np_dtype, [d])
  data_type = client_data_type(model_input_spec, d, np_dtype)
  initial_hparams = client_optimizer.get_hparams(
      client_optimizer.initialize(tf.TensorSpec([], tf.float32)))
  initial_lr = float(tf.get_static_value(initial_hparams['learning_rate']))

  distributor = tff.learning.templates.build_broadcast_process(model_weights_type)
  aggregation = factory.create(trainable_type, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                     model_weights_type)

  @tff.tensorflow.computation
  def initial_work_state_fn():
    return collections.OrderedDict(learning_rate=tf.constant(initial_lr, tf.float32),
                                   control=tf.zeros([d], dtype))

  work_state_type = initial_work_state_fn.type_signature.result
  lr_type = work_state_type['learning_rate']

  @tff.tensorflow.computation(work_state_type)
  def learning_rate_of(work_state):
    return work_state['learning_rate']

  @tff.tensorflow.computation(work_state_type)
  def control_of(work_state):
    return work_state['control']

  @tff.tensorflow.computation(work_state_type, control_type)
  def updated_work_state(work_state, control_delta_sum):
    # c <- c + (|S| / N) mean_i dc_i = c + sum_i dc_i / N (Algorithm 1, line 17).
    return collections.OrderedDict(
        learning_rate=work_state['learning_rate'],
        control=work_state['control'] + control_delta_sum / tf.constant(num_clients, dtype))

  row_type = collections.OrderedDict(slot=tff.TensorType(np.int32), control=control_type)

  @tff.tensorflow.computation(lr_type, model_weights_type, data_type, control_type)
  def client_fn(learning_rate, initial_weights, client_input, server_control):
    client_update = _make_client_update(variable_model_fn, weighting=weighting, clip_norm=clip)
    result, model_outputs = client_update(learning_rate, initial_weights, client_input[DATA],
                                          client_input[CONTROL], server_control)
    new_control = result['new_control']
    row = collections.OrderedDict(slot=client_input[SLOT], control=new_control,
                                  status=gather.row_status(tf.constant(1.0), new_control))
    return collections.OrderedDict(
        update=result['update'], weight=result['weight'],
        control_delta=result['control_delta'], non_finite=result['non_finite'],
        row=row), model_outputs

  @tff.tensorflow.computation(gather.gathered_type(row_type))
  def controls_of(gathered):
    return collections.OrderedDict(slot=gathered['stacks']['slot'],
                                   control=gathered['stacks']['control'])

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(tff.learning.templates.LearningAlgorithmState(
        global_model_weights=tff.federated_eval(initial_model_weights_fn, tff.SERVER),
        distributor=distributor.initialize(),
        client_work=tff.federated_eval(initial_work_state_fn, tff.SERVER),
        aggregator=aggregation.initialize(),
        finalizer=finalizer.initialize()))

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    distributed = distributor.next(state.distributor, state.global_model_weights)
    learning_rate = tff.federated_broadcast(tff.federated_map(learning_rate_of,
                                                              state.client_work))
    server_control = tff.federated_broadcast(tff.federated_map(control_of, state.client_work))
    client_out, model_outputs = tff.federated_map(
        client_fn, (learning_rate, distributed.result, client_data, server_control))
    aggregated = aggregation.next(state.aggregator, client_out.update, client_out.weight)
    control_delta_sum = tff.federated_sum(client_out.control_delta)
    gathered = gather.federated_gather(client_out.row, row_type, vector_size=d)
    work_state = tff.federated_map(updated_work_state, (state.client_work, control_delta_sum))
    finalized = finalizer.next(state.finalizer, state.global_model_weights, aggregated.result)
    work_measurements = tff.federated_zip(collections.OrderedDict(
        train=metrics_aggregation_fn(model_outputs),
        num_excluded_nonfinite=tff.federated_sum(client_out.non_finite)))
    metrics = tff.federated_zip(collections.OrderedDict(
        distributor=distributed.measurements, client_work=work_measurements,
        aggregator=aggregated.measurements, finalizer=finalized.measurements,
        **{CLIENT_CONTROLS: tff.federated_map(controls_of, gathered)}))
    new_state = tff.federated_zip(tff.learning.templates.LearningAlgorithmState(
        global_model_weights=finalized.result, distributor=distributed.state,
        client_work=work_state, aggregator=aggregated.state, finalizer=finalized.state))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_model_weights_fn(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights_fn(state, model_weights):
    return tff.learning.templates.LearningAlgorithmState(
        global_model_weights=model_weights, distributor=state.distributor,
        client_work=state.client_work, aggregator=state.aggregator, finalizer=state.finalizer)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return collections.OrderedDict(
        client_work=collections.OrderedDict(learning_rate=state.client_work['learning_rate']),
        finalizer=finalizer.get_hparams(state.finalizer))

  hparams_type = get_hparams_fn.type_signature.result

  @tff.tensorflow.computation(state_type, hparams_type)
  def set_hparams_fn(state, hparams_):
    work = collections.OrderedDict(learning_rate=hparams_['client_work']['learning_rate'],
                                   control=state.client_work['control'])
    return tff.learning.templates.LearningAlgorithmState(
        global_model_weights=state.global_model_weights, distributor=state.distributor,
        client_work=work, aggregator=state.aggregator,
        finalizer=finalizer.set_hparams(state.finalizer, hparams_['finalizer']))

  return tff.learning.templates.LearningProcess(
      init_fn, next_fn, get_model_weights_fn, set_model_weights_fn,
      get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)

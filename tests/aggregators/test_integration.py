"""The factories inside TFF's learning pipelines (C++ runtime): build_weighted_fed_avg for two
rounds on a tiny Keras model, compose_learning_process with the loss-weighted and corrective client
work, TFF's clipping wrapper, and compilation to MapReduceForm."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tff_conflict import aggregators

ROUNDS = 2


def _model_fn_for(datasets):
  spec = datasets[0].element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        make_tiny_keras_model(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=spec)

  return model_fn


def _fed_avg(model_fn, factory, **kwargs):
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0), model_aggregator=factory,
      **kwargs)


def _run(process, datasets, rounds=ROUNDS):
  state = process.initialize()
  outputs = []
  for _ in range(rounds):
    out = process.next(state, datasets)
    state = out.state
    outputs.append(out)
  return state, outputs


def _trainable(state):
  return [np.asarray(x) for x in state.global_model_weights.trainable]


def _check_round(outputs, num_clients, extra):
  for out in outputs:
    measurements = out.metrics['aggregator']
    assert measurements['num_clients'] == num_clients
    assert measurements['num_participating'] == num_clients
    for key in ('conflict_fraction_before', 'aggregate_norm', *extra):
      assert key in measurements
    assert np.isfinite(measurements['aggregate_norm']) and measurements['aggregate_norm'] > 0


def test_fedgh_in_build_weighted_fed_avg_two_rounds_and_one_client_equals_fedavg():
  datasets = make_tiny_client_datasets(num_clients=3)
  model_fn = _model_fn_for(datasets)
  process = _fed_avg(model_fn, aggregators.GradientHarmonizationFactory(seed=1))
  state, outputs = _run(process, datasets)
  _check_round(outputs, 3, ['num_projections'])
  initial = _trainable(process.initialize())
  for a, b in zip(_trainable(state), initial):
    assert np.all(np.isfinite(a)) and not np.allclose(a, b)
  # K = 1: FedGH returns the update unchanged, so the run equals FedAvg (sign and plumbing).
  one = datasets[:1]
  gh, _ = _run(process, one)
  mean, _ = _run(_fed_avg(model_fn, tff.aggregators.MeanFactory()), one)
  for a, b in zip(_trainable(gh), _trainable(mean)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize('factory,extra', [
    (aggregators.PrincipalGradientFactory(), ['num_components', 'explained_variance']),
    # Inside build_weighted_fed_avg the weight is a number of examples, not a loss.
    (aggregators.DominantGradientCorrectionFactory(weights_are_losses=False),
     ['num_dominant', 'num_projections']),
])
def test_other_factories_in_build_weighted_fed_avg(factory, extra):
  datasets = make_tiny_client_datasets(num_clients=3)
  model_fn = _model_fn_for(datasets)
  process = _fed_avg(model_fn, factory)
  state, outputs = _run(process, datasets)
  _check_round(outputs, 3, extra)
  # K = 1 returns the update unchanged for both methods: equal to FedAvg.
  one = datasets[:1]
  got, _ = _run(process, one)
  mean, _ = _run(_fed_avg(model_fn, tff.aggregators.MeanFactory()), one)
  for a, b in zip(_trainable(got), _trainable(mean)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert all(np.all(np.isfinite(a)) for a in _trainable(state))


@pytest.mark.slow
def test_uniform_weighting_and_clipping_wrapper():
  # build_unweighted_fed_avg accepts only UnweightedAggregationFactory; the same algorithm with
  # a weighted factory is build_weighted_fed_avg(client_weighting=UNIFORM).
  datasets = make_tiny_client_datasets(num_clients=3)
  factory = tff.aggregators.clipping_factory(0.5, aggregators.GradientHarmonizationFactory())
  process = _fed_avg(_model_fn_for(datasets), factory,
                     client_weighting=tff.learning.ClientWeighting.UNIFORM)
  _, outputs = _run(process, datasets)
  for out in outputs:
    inner = out.metrics['aggregator']['clipping']
    assert inner['num_clients'] == 3 and inner['aggregate_norm'] <= 0.5 + 1e-6


def _compose(model_fn, client_work, factory, weight_type=tff.TensorType(np.float32),
             finalizer=None, value_type=None):
  @tff.tensorflow.computation()
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights_fn.type_signature.result
  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  aggregator = factory.create(value_type or weights_type.trainable, weight_type)
  if finalizer is None:
    finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
        tff.learning.optimizers.build_sgdm(1.0), weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, distributor, client_work, aggregator, finalizer), weights_type


def test_dgc_with_losses_through_loss_weighted_client_work():
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  datasets = make_tiny_client_datasets(num_clients=3)
  model_fn = _model_fn_for(datasets)
  client_work = learning.build_loss_weighted_client_work(
      model_fn, tff.learning.optimizers.build_sgdm(0.1))
  process, _ = _compose(model_fn, client_work,
                        aggregators.DominantGradientCorrectionFactory(weights_are_losses=True))
  state, outputs = _run(process, datasets)
  _check_round(outputs, 3, ['num_dominant', 'num_projections'])
  assert outputs[0].metrics['aggregator']['num_dominant'] == 2
  assert all(np.all(np.isfinite(a)) for a in _trainable(state))


@pytest.mark.slow
def test_corrective_through_compose_alpha_zero_equals_fedavg():
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict.learning import corrective  # pylint: disable=g-import-not-at-top
  datasets = make_tiny_client_datasets(num_clients=3)
  model_fn = _model_fn_for(datasets)
  client_work = corrective.build_corrective_client_work(
      model_fn, tff.learning.optimizers.build_sgdm(0.1))
  value_type = client_work.next.type_signature.result.result.member.update
  results = {}
  for alpha in (0.0, 0.1):
    @tff.tensorflow.computation()
    def init_fn():
      return tff.learning.models.ModelWeights.from_model(model_fn())
    finalizer = corrective.build_update_field_finalizer(
        tff.learning.optimizers.build_sgdm(1.0), init_fn.type_signature.result)
    process, _ = _compose(model_fn, client_work,
                          aggregators.CorrectiveGradientFactory(alpha=alpha),
                          finalizer=finalizer, value_type=value_type)
    state, outputs = _run(process, datasets)
    _check_round(outputs, 3, ['corrective_weights'])
    results[alpha] = _trainable(state)
  mean_state, _ = _run(_fed_avg(model_fn, tff.aggregators.MeanFactory()), datasets)
  for a, b in zip(results[0.0], _trainable(mean_state)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert not all(np.allclose(a, b) for a, b in zip(results[0.1], results[0.0]))
  del learning


def test_fedgh_fed_avg_compiles_to_map_reduce_form():
  datasets = make_tiny_client_datasets(num_clients=2)
  process = _fed_avg(_model_fn_for(datasets), aggregators.GradientHarmonizationFactory())
  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(process.next)
  assert isinstance(form, tff.backends.mapreduce.MapReduceForm)


@pytest.mark.slow
@pytest.mark.parametrize('factory', [
    aggregators.PrincipalGradientFactory(),
    aggregators.DominantGradientCorrectionFactory(weights_are_losses=False)])
def test_other_factories_compile_to_map_reduce_form(factory):
  datasets = make_tiny_client_datasets(num_clients=2)
  process = _fed_avg(_model_fn_for(datasets), factory)
  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(process.next)
  assert isinstance(form, tff.backends.mapreduce.MapReduceForm)

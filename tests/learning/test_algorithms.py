"""Every named builder in TFF's runtime: 3 rounds on tiny easy data lower the loss; `next`
compiles to MapReduceForm (slow selection, except for the corrective process); free compositions
as in the papers' ablations (slow).

A TFF build plus its first round takes tens of seconds on 2 shared cores, so the default
selection builds each named process once (FedAvg's run is shared with the alpha = 0 test).
"""

import collections
import functools
import inspect

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tests.conftest import tiny_model_fn_for
from tests.learning import conftest as h
from tff_conflict import learning

ROUNDS = 3


@functools.lru_cache(maxsize=None)
def _data():
  return make_tiny_client_datasets(num_clients=3, examples_per_client=16, batch_size=8, seed=0)


def _build(name, **kwargs):
  return h.named_process(
      name, tiny_model_fn_for(name), input_spec=h.input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1), **kwargs)


def _run(process, rounds=ROUNDS):
  state = process.initialize()
  losses, metrics = [], []
  for _ in range(rounds):
    output = process.next(state, h.client_inputs(process, _data()))
    state = output.state
    losses.append(float(output.metrics['client_work']['train']['loss']))
    metrics.append(output.metrics)
  return state, losses, metrics


@functools.lru_cache(maxsize=None)
def _fedavg_run():
  process = _build('fedavg')
  return process, _run(process)


@functools.lru_cache(maxsize=None)
def _fedld_process():
  """FedLD with its defaults (per-tensor principal aggregation), built once for two tests."""
  return _build('fedld')


def test_registry_lists_every_method():
  assert set(learning.ALGORITHMS) == {'fedavg', 'fedprox', 'fednova', 'feddecorr', 'fedgh',
                                      'fedmgc', 'fedga', 'fedld', 'fed_corrective', 'scaffold'}
  assert set(learning.LOSSES) == {'ce', 'focal', 'margin', 'calibrated'}
  assert set(learning.AGGREGATORS) == {'mean', 'measured_mean', 'fedgh', 'dgc', 'principal',
                                       'corrective'}


@pytest.mark.parametrize('name', sorted(learning.ALGORITHMS))
def test_builder_runs_three_rounds_and_lowers_the_loss(name):
  if name == 'fedavg':
    process, (state, losses, metrics) = _fedavg_run()
  elif name == 'fedld':
    process = _fedld_process()
    state, losses, metrics = _run(process)
  else:
    process = _build(name)
    state, losses, metrics = _run(process)
  assert isinstance(process, tff.learning.templates.LearningProcess)
  assert all(np.isfinite(losses)), losses
  assert losses[-1] < 0.7 * losses[0], losses
  weights = process.get_model_weights(state)
  assert all(np.all(np.isfinite(w)) for w in weights.trainable)
  if name not in ('fedavg', 'fedprox', 'fednova', 'feddecorr', 'fedga', 'scaffold'):
    # The conflict aggregators report their diagnostics under `aggregator`.
    assert metrics[-1]['aggregator']['num_clients'] == 3
  if name == 'fed_corrective':  # the most composite `next`: corrective work + field finalizer
    _assert_map_reduce_form(process)


def _assert_map_reduce_form(process):
  # The in-process runner of the execution backend needs every `next` in MapReduceForm.
  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(process.next)
  assert isinstance(form, tff.backends.mapreduce.MapReduceForm)


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(learning.ALGORITHMS))
def test_every_builder_compiles_to_map_reduce_form(name):
  _assert_map_reduce_form(_build(name))


def test_corrective_alpha_zero_is_fedavg():
  fedavg, (fedavg_state, fedavg_losses, _) = _fedavg_run()
  corrective = _build('fed_corrective', alpha=0.0)
  state, losses, metrics = _run(corrective)
  np.testing.assert_allclose(losses, fedavg_losses, rtol=1e-6)
  ours = corrective.get_model_weights(state).trainable
  theirs = fedavg.get_model_weights(fedavg_state).trainable
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
  np.testing.assert_array_equal(metrics[-1]['aggregator']['corrective_weights'], 0.0)


@pytest.mark.slow
def test_fedga_with_dataset_counts_runs():
  process = _build('fedga', counts='dataset')
  _, losses, _ = _run(process)
  assert losses[-1] < 0.7 * losses[0], losses


def test_loss_weighted_client_work_in_tff_runtime_sends_mean_losses():
  """The TFF client work's weights equal float64 references of each client's mean loss."""
  model_fn = h.ce_model_fn()
  client_work = learning.build_loss_weighted_client_work(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  weights = h.initial_weights()
  model_weights = tff.learning.models.ModelWeights(trainable=list(weights), non_trainable=[])
  data = _data()
  output = client_work.next(client_work.initialize(), [model_weights] * len(data), data)
  for result, dataset in zip(output.result, data):
    _, _, mean_loss = h.softmax_sgd_reference(weights, h.batches_of(dataset), 0.1)
    assert float(result.update_weight) == pytest.approx(mean_loss, rel=1e-5)


def _sgd(lr=0.1):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.mark.slow
@pytest.mark.parametrize('kwargs', [
    dict(loss='ce', aggregator='dgc', aggregator_kwargs=dict(weights_are_losses=False),
         client_weighting='num_examples'),                              # FedAvg(ce) + DGC
    dict(loss='ce', aggregator='dgc'),                                  # DGC with losses
    dict(loss='ce', aggregator='fedgh', proximal_strength=0.01),        # FedProx + FedGH
    dict(loss='margin', aggregator='mean'),                             # margin only
    dict(loss='ce', aggregator='principal'),                            # principal only
    dict(loss='focal', loss_kwargs=dict(gamma=1.0), aggregator='corrective'),
], ids=['fedavg_dgc', 'dgc_losses', 'fedprox_fedgh', 'margin_only', 'principal_only',
        'focal_corrective'])
def test_free_composition_by_name(kwargs):
  process = learning.build_process(make_tiny_keras_model, input_spec=h.input_spec(),
                                   client_optimizer_fn=_sgd(), **kwargs)
  _, losses, _ = _run(process)
  assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.slow
def test_free_composition_with_objects():
  from tff_conflict import aggregators, losses as losses_lib  # pylint: disable=g-import-not-at-top
  process = learning.build_process(
      make_tiny_keras_model, input_spec=h.input_spec(), client_optimizer_fn=_sgd(),
      loss=losses_lib.FocalLoss(gamma=0.5, beta=1.0),
      aggregator=aggregators.GradientHarmonizationFactory(order='index'),
      metrics=lambda: [tf.keras.metrics.SparseCategoricalAccuracy()])
  _, losses, metrics = _run(process)
  assert losses[-1] < 0.7 * losses[0], losses
  assert 'sparse_categorical_accuracy' in metrics[-1]['client_work']['train']


def test_clipped_client_work_in_tff_runtime_matches_reference():
  """`clip_norm` reaches the TFF client work: its deltas equal a float64 clipped-SGD loop."""
  clip, lr = 0.05, 0.1
  client_work = learning.build_client_work(h.ce_model_fn(), _sgd(lr), clip_norm=clip)
  weights = h.initial_weights()
  model_weights = tff.learning.models.ModelWeights(trainable=list(weights), non_trainable=[])
  data = _data()
  output = client_work.next(client_work.initialize(), [model_weights] * len(data), data)
  for result, dataset in zip(output.result, data):
    kernel, bias = (w.astype(np.float64) for w in weights)
    for x, y in h.batches_of(dataset):
      _, gk, gb = h.ce_loss_and_grads(kernel, bias, x, y)
      scale = min(1.0, clip / float(np.sqrt(np.sum(gk * gk) + np.sum(gb * gb))))
      assert scale < 1.0
      kernel, bias = kernel - lr * scale * gk, bias - lr * scale * gb
    np.testing.assert_allclose(weights[0] - np.asarray(result.update[0]), kernel, atol=2e-6)
    np.testing.assert_allclose(weights[1] - np.asarray(result.update[1]), bias, atol=2e-6)


@pytest.mark.slow
@pytest.mark.parametrize('kwargs', [dict(form='soft_target'), dict(clip_norm=5.0),
                                    dict(form='soft_target', clip_norm=5.0, counts='dataset')])
def test_fedga_author_code_options_run(kwargs):
  _, losses, _ = _run(_build('fedga', **kwargs))
  assert losses[-1] < 0.7 * losses[0], losses


def test_fedld_default_round_is_per_tensor_principal_aggregation_in_tff_runtime():
  """One round of `build_fedld()` in TFF's runtime moves the model by exactly the float64
  per-tensor principal aggregate (the authors' pcgrad_svd) of the clients' deltas."""
  from tests.conflict import references  # pylint: disable=g-import-not-at-top
  from tff_conflict import losses as losses_lib  # pylint: disable=g-import-not-at-top
  process = _fedld_process()
  state = process.initialize()
  w0 = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  data = _data()
  deltas, sizes = [], []
  for dataset in data:
    result, _ = h.run_client_update(h.ce_model_fn(losses_lib.MarginControlLoss), dataset,
                                    tff.learning.optimizers.build_sgdm(learning_rate=0.1), w0,
                                    weighting='num_examples')
    deltas.append(np.concatenate([np.asarray(t, np.float64).ravel() for t in result.update]))
    sizes.append(float(result.update_weight))
  stack = np.stack(deltas)
  tensor_sizes = [w.size for w in w0]
  expected, *_ = references.fedld_per_tensor(stack, sizes, 0.8, tensor_sizes)
  whole, *_ = references.fedld(list(stack), sizes, 0.8)
  assert np.max(np.abs(expected - whole)) > 1e-2 * np.max(np.abs(expected))  # tells them apart
  output = process.next(state, data)
  w1 = process.get_model_weights(output.state).trainable
  moved = np.concatenate([(a - np.asarray(b, np.float64)).ravel() for a, b in zip(w0, w1)])
  np.testing.assert_allclose(moved, expected, rtol=0, atol=1e-5 * np.max(np.abs(expected)))
  assert output.metrics['aggregator']['num_components'] == 2


def test_every_builder_passes_clip_norm_and_method_options_to_build_process(monkeypatch):
  from tff_conflict.learning import process as process_lib  # pylint: disable=g-import-not-at-top
  calls = []
  monkeypatch.setattr(process_lib, 'build_process', lambda *a, **kw: calls.append(kw))
  for name in sorted(set(learning.ALGORITHMS) - {'scaffold'}):  # its own process: test_scaffold
    _build(name, clip_norm=2.5)
    assert calls[-1]['clip_norm'] == 2.5, name
    _build(name)
    assert calls[-1]['clip_norm'] is None, name
  _build('fedld', margin_form='batch_probabilities', granularity='model',
         first_round_plain_mean=True, revision='projection')
  assert calls[-1]['loss_kwargs'] == dict(margin_weight=0.01, margin_form='batch_probabilities')
  assert calls[-1]['aggregator_kwargs'] == dict(
      component_ratio=0.8, preserve_norms=False, granularity='model',
      first_round_plain_mean=True, revision='projection')
  _build('fedld')
  assert calls[-1]['aggregator_kwargs']['granularity'] == 'tensor'
  assert calls[-1]['aggregator_kwargs']['revision'] == 'eigenvalue_share'
  _build('fedga')
  assert calls[-1]['loss_kwargs'] == dict(counts='batch', form='soft_target')
  _build('fedga', form='paper')
  assert calls[-1]['loss_kwargs']['form'] == 'paper'


def test_every_builder_passes_the_proximal_term_to_build_process(monkeypatch):
  from tff_conflict.learning import process as process_lib  # pylint: disable=g-import-not-at-top
  calls = []
  monkeypatch.setattr(process_lib, 'build_process', lambda *a, **kw: calls.append(kw))
  composable = [n for n, b in sorted(learning.ALGORITHMS.items())
                if 'proximal_strength' in inspect.signature(b).parameters]
  assert {'fedavg', 'fedgh', 'fedmgc', 'fedga', 'fedld', 'fed_corrective'} <= set(composable)
  for name in composable:
    _build(name, proximal_strength=0.5)
    assert calls[-1]['proximal_strength'] == 0.5, name
    _build(name)
    expected = 0.01 if name == 'fedprox' else 0.0   # only FedProx adds it by default
    assert calls[-1]['proximal_strength'] == expected, name


def test_fedgh_with_the_proximal_term_is_fedprox_clients_with_fedgh_aggregation():
  runs = {}
  for mu in (0.0, 0.5):
    fedgh = _build('fedgh', order='index', proximal_strength=mu)
    composed = learning.build_process(
        make_tiny_keras_model, input_spec=h.input_spec(),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
        aggregator='fedgh', aggregator_kwargs=dict(order='index'), proximal_strength=mu)
    _, losses, _ = _run(fedgh, rounds=2)
    _, composed_losses, _ = _run(composed, rounds=2)
    np.testing.assert_allclose(losses, composed_losses, rtol=1e-6)
    runs[mu] = losses
  assert abs(runs[0.5][1] - runs[0.0][1]) > 1e-4   # the term changes local training


def _nan_pixel_clients():
  clients = list(_data())
  batches = [b for b in clients[1]]
  x = batches[0]['x'].numpy().copy()
  x[0, 0] = np.nan                       # one NaN feature in one client's data
  batches[0] = collections.OrderedDict(x=tf.constant(x), y=batches[0]['y'])
  bad = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=tf.concat([b['x'] for b in batches], 0),
      y=tf.concat([b['y'] for b in batches], 0))).batch(8)
  return [clients[0], bad, clients[2]]


@pytest.mark.parametrize('name', [n if n in ('fedavg', 'fedga', 'fedgh')
                                  else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(learning.ALGORITHMS)])
def test_a_client_with_a_nan_input_is_counted_as_non_finite_by_every_method(name):
  process = _build(name)
  state = process.initialize()
  output = process.next(state, h.client_inputs(process, _nan_pixel_clients()))
  assert int(output.metrics['client_work']['num_excluded_nonfinite']) == 1, name
  clean = process.next(state, h.client_inputs(process, _data()))
  assert int(clean.metrics['client_work']['num_excluded_nonfinite']) == 0, name

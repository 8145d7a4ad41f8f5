"""SCAFFOLD (`build_scaffold` with `ClientControls`) against a float64 loop of Algorithm 1,
option II, in TFF's C++ runtime and the in-process runner: a changing cohort, a client that leaves
and comes back with its control, K = 1, a client with 0 steps and a non-finite client; a
hand-worked one-dimensional round; argument errors; Keras training with 'mean' and 'fedgh'.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import learning
from tff_conflict import runtime

LR, SERVER_LR, BATCH = 0.1, 0.7, 6
NUM_CLIENTS = 7   # N: one client of the federation never takes part


def _client_arrays():
  """Client id -> (x, y): 4 steps, K = 1, 2 steps, 0 steps (empty), 3 steps, and a client with a
  NaN feature (non-finite update)."""
  rng = np.random.default_rng(7)
  centers = rng.normal(scale=3.0, size=(h.NUM_CLASSES, h.NUM_FEATURES))

  def client(n):
    y = rng.integers(0, h.NUM_CLASSES, size=n).astype(np.int32)
    x = (centers[y] + rng.normal(size=(n, h.NUM_FEATURES))).astype(np.float32)
    return x, y

  arrays = {'a': client(20), 'k1': client(5), 'b': client(12), 'empty': client(0),
            'c': client(16), 'nan': client(10)}
  arrays['nan'][0][3, 1] = np.nan
  return arrays


def _dataset(arrays):
  x, y = arrays
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(BATCH)


# Rounds: 'a' and 'k1' leave after round 1 and come back in round 3 (their controls kept).
COHORTS = [['a', 'k1', 'b'], ['b', 'empty', 'c'], ['c', 'a', 'nan', 'k1'],
           ['k1', 'empty', 'nan', 'b']]
CLIENT_IDS = ['a', 'k1', 'b', 'empty', 'c', 'nan', 'never']


@functools.lru_cache(maxsize=None)
def _process(weighting=None, clip_norm=None):
  return learning.build_scaffold(
      make_tiny_keras_model, input_spec=h.input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=LR),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=SERVER_LR),
      num_clients=NUM_CLIENTS, client_weighting=weighting, clip_norm=clip_norm)


def _check_rounds(runner, process, *, weighting='uniform', clip_norm=None):
  arrays = _client_arrays()
  datasets = {cid: _dataset(a) for cid, a in arrays.items()}
  state = runner.initialize()
  start = [np.asarray(w) for w in runner.get_model_weights(state).trainable]
  expected = h.scaffold_reference(
      start, [[(cid, h.batches_of(datasets[cid])) for cid in cohort] for cohort in COHORTS],
      num_clients=NUM_CLIENTS, lr=LR, server_lr=SERVER_LR, weighting=weighting,
      clip_norm=clip_norm)
  controls = learning.ClientControls.for_process(process, CLIENT_IDS)
  for round_num, (cohort, want) in enumerate(zip(COHORTS, expected), start=1):
    inputs = controls.for_cohort(cohort, [datasets[cid] for cid in cohort])
    output = runner.next(state, inputs)
    state = output.state
    metrics = controls.update(cohort, output)
    assert learning.scaffold.CLIENT_CONTROLS not in metrics
    assert metrics['client_work']['num_excluded_nonfinite'] == want['excluded'], round_num
    kernel, bias = runner.get_model_weights(state).trainable
    np.testing.assert_allclose(kernel, want['kernel'], rtol=0, atol=1e-6)
    np.testing.assert_allclose(bias, want['bias'], rtol=0, atol=1e-6)
    np.testing.assert_allclose(state.client_work['control'], want['c'], rtol=0, atol=1e-6)
    for cid in CLIENT_IDS:
      wanted = want['controls'].get(cid, np.zeros(controls.size))
      np.testing.assert_allclose(controls.control(cid), wanted, rtol=0, atol=1e-6,
                                 err_msg=f'round {round_num}, client {cid}')
      assert np.all(np.isfinite(controls.control(cid)))
    # c stays the mean of all N client controls (each c_i starts at 0, c <- c + sum dc_i / N).
    all_controls = np.stack([controls.control(cid) for cid in CLIENT_IDS])
    np.testing.assert_allclose(state.client_work['control'], all_controls.mean(axis=0),
                               atol=1e-5)
  # The non-finite client kept its control (zero: it never sent a finite one), the never-sampled
  # one too; the client with 0 steps kept zero.
  for cid in ('nan', 'never', 'empty'):
    np.testing.assert_array_equal(controls.control(cid), 0.0)
  assert controls.has_participated('nan') and not controls.has_participated('never')


def test_rounds_equal_the_float64_reference_in_tffs_runtime():
  process = _process()
  _check_rounds(process, process)


@pytest.mark.parametrize('options', [{}, dict(num_threads=2, accumulation='tree')],
                         ids=['buffered', 'two_threads_tree'])
def test_rounds_equal_the_float64_reference_in_the_in_process_runner(options):
  process = _process()
  _check_rounds(runtime.make_runner(process, 'inprocess', **options), process)


@pytest.mark.slow
def test_weighting_by_examples_and_clipping_equal_the_reference():
  process = _process(weighting='num_examples', clip_norm=0.5)
  _check_rounds(runtime.make_runner(process, 'inprocess'), process, weighting='num_examples',
                clip_norm=0.5)


def _one_dimensional_model():
  """w x with one weight w (start 0) and the squared error (w x - y)^2: gradient 2 (w - y) at
  x = 1."""
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(1,)),
      tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros')])
  return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.MeanSquaredError(),
      input_spec=collections.OrderedDict(x=tf.TensorSpec([None, 1], tf.float32),
                                         y=tf.TensorSpec([None, 1], tf.float32)))


def _targets(*ys):
  """One batch of one example `x = 1, y` per target."""
  x = np.ones((len(ys), 1), np.float32)
  y = np.asarray(ys, np.float32).reshape(-1, 1)
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(1)


@pytest.mark.parametrize('kind', ['cpp', 'inprocess'])
def test_a_hand_worked_one_dimensional_round(kind):
  # x = 0, c = 0.5, eta_l = 0.1, eta_g = 1, N = 4. Client A (c_A = 1, two steps on y = 3):
  #   y1 = 0 - 0.1 (2 (0 - 3) - 1 + 0.5) = 0.65; y2 = 0.65 - 0.1 (2 (0.65 - 3) - 1 + 0.5) = 1.17;
  #   u_A = -1.17; c_A+ = 1 - 0.5 + u_A / (2 * 0.1) = -5.35 (the mean of its gradients -6, -4.7).
  # Client B (c_B = 0, one step on y = -1): y1 = 0 - 0.1 (2 - 0 + 0.5) = -0.25; u_B = 0.25;
  #   c_B+ = 0 - 0.5 + 0.25 / 0.1 = 2.
  # Client C (c_C = 0.7) has no batch and client D (c_D = -0.3) a NaN target: both send zeros
  # with weight 0 and keep their controls; D is counted as non-finite.
  # Server: x = 0 - mean(u_A, u_B) = 0.46; c = 0.5 + (-6.35 + 2 + 0 + 0) / 4 = -0.5875.
  process = learning.build_scaffold(
      _one_dimensional_model,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1), num_clients=4)
  runner = runtime.make_runner(process, kind)
  state = runner.initialize()
  state = state._replace(client_work=collections.OrderedDict(
      learning_rate=np.float32(0.1), control=np.array([0.5], np.float32)))
  controls = learning.ClientControls.for_process(process, ['A', 'B', 'C', 'D'])
  controls.restore(dict(controls.arrays(),
                        controls=np.array([[1.0], [0], [0.7], [-0.3]], np.float32)))
  cohort = ['A', 'B', 'C', 'D']
  output = runner.next(state, controls.for_cohort(
      cohort, [_targets(3, 3), _targets(-1), _targets(), _targets(np.nan)]))
  metrics = controls.update(cohort, output)
  assert metrics['client_work']['num_excluded_nonfinite'] == 1
  np.testing.assert_allclose(runner.get_model_weights(output.state).trainable[0], [[0.46]],
                             rtol=1e-6)
  np.testing.assert_allclose(output.state.client_work['control'], [-0.5875], rtol=1e-6)
  np.testing.assert_allclose(controls.control('A'), [-5.35], rtol=1e-6)
  np.testing.assert_allclose(controls.control('B'), [2.0], rtol=1e-6)
  np.testing.assert_allclose(controls.control('C'), [0.7], rtol=1e-7)
  np.testing.assert_allclose(controls.control('D'), [-0.3], rtol=1e-7)


def _build(**kwargs):
  args = dict(input_spec=h.input_spec(),
              client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
              num_clients=3)
  args.update(kwargs)
  return learning.build_scaffold(make_tiny_keras_model, **args)


@pytest.mark.parametrize('optimizer,words', [
    (lambda: tff.learning.optimizers.build_sgdm(learning_rate=0.1, momentum=0.9), 'momentum'),
    (lambda: tff.learning.optimizers.build_adam(learning_rate=0.1), 'beta_1'),
])
def test_only_plain_sgd_is_accepted_locally(optimizer, words):
  with pytest.raises(ValueError, match=r'client_optimizer_fn must be plain SGD') as info:
    _build(client_optimizer_fn=optimizer())
  assert words in str(info.value)


@pytest.mark.parametrize('kwargs,message', [
    (dict(num_clients=0), r'num_clients must be an integer >= 1, got 0'),
    (dict(num_clients=2.5), r'num_clients must be an integer >= 1, got 2.5'),
    (dict(aggregator='corrective'), r'aggregator: the corrective aggregator'),
    (dict(aggregator='nope'), r'aggregator must be one of'),
    (dict(clip_norm=-1.0), r'clip_norm must be None or a finite number > 0, got -1.0'),
    (dict(client_weighting='sometimes'), r'client_weighting must be one of'),
    (dict(aggregator='dgc', client_weighting='uniform'), r"client_weighting must be 'loss'"),
])
def test_bad_arguments_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    _build(**kwargs)


def test_a_process_without_client_controls_has_no_store():
  fedavg = learning.build_fedavg(
      make_tiny_keras_model, input_spec=h.input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  assert learning.control_layout(fedavg) is None
  with pytest.raises(ValueError, match='takes no client controls'):
    learning.ClientControls.for_process(fedavg, ['a'])


@pytest.mark.parametrize('aggregator', ['mean', 'fedgh'])
def test_scaffold_trains_a_keras_model(aggregator):
  datasets = make_tiny_client_datasets(num_clients=4, examples_per_client=16, batch_size=4,
                                       seed=0)
  process = _build(num_clients=4, aggregator=aggregator)
  controls = learning.ClientControls.for_process(process, [0, 1, 2, 3])
  state = process.initialize()
  losses = []
  for cohort in ([0, 1, 2], [1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]):
    output = process.next(state, controls.for_cohort(cohort, [datasets[k] for k in cohort]))
    state = output.state
    metrics = controls.update(cohort, output)
    losses.append(float(metrics['client_work']['train']['loss']))
    if aggregator == 'fedgh':
      assert metrics['aggregator']['num_clients'] == 3
  weights = process.get_model_weights(state).trainable
  assert all(np.all(np.isfinite(w)) for w in weights)
  assert np.all(np.isfinite(state.client_work['control']))
  assert losses[-1] < losses[0], losses

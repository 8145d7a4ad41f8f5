"""FedNova against float64 references written from Wang et al. (NeurIPS 2020), eqs. 6-7.

The local solver's `||a_i||_1` against the closed forms (plain SGD, momentum, proximal) and a
direct expansion of the solver; the client value against plain loops of local (momentum,
proximal) SGD; the server wrapper on Python values; whole rounds of `build_fednova` in TFF's C++
runtime and the in-process runner against `x - tau_eff sum_i p_i (x - x_i) / tau_i`.
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
from tff_conflict import conflict
from tff_conflict import learning
from tff_conflict import runtime
from tff_conflict.learning import fednova

SIZES = (8, 13, 20)   # batch 4: tau = 2, 4, 5 local steps
BATCH = 4


def _sgdm(lr, momentum=None):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr, momentum=momentum)


@functools.lru_cache(maxsize=None)
def _data(sizes=SIZES):
  return tuple(make_tiny_client_datasets(num_clients=1, examples_per_client=n, batch_size=BATCH,
                                         seed=10 + i)[0] for i, n in enumerate(sizes))


# ---- references (float64, from the paper's formulas) --------------------------------------------

def closed_form_norm(tau, lr=0.1, momentum=0.0, mu=0.0):
  """The paper's `||a_i||_1`: tau (SGD), momentum's and the proximal term's closed forms."""
  if momentum and mu:
    raise ValueError('no closed form for both')
  if momentum:
    rho = momentum
    return (tau - rho * (1 - rho ** tau) / (1 - rho)) / (1 - rho)
  if mu:
    return sum((1 - lr * mu) ** k for k in range(tau))
  return float(tau)


def expanded_norm(tau, lr, momentum, mu):
  """`||a||_1` by expanding the solver: run it on the scalar objective whose gradient is g_j at
  step j (a unit vector e_j), read the coefficient of g_j in `(x - y_tau) / lr`."""
  total = 0.0
  for j in range(tau):
    y, m = 0.0, 0.0
    for k in range(tau):
      g = (1.0 if k == j else 0.0) + mu * y
      m = momentum * m + g
      y = y - lr * m
    total += abs(-y / lr)
  return total


def local_sgd(weights, batches, lr, momentum=0.0, mu=0.0):
  """Local (heavy-ball, proximal) SGD on softmax regression, float64; returns (kernel, bias)."""
  k0, b0 = (w.astype(np.float64) for w in weights)
  kernel, bias = k0.copy(), b0.copy()
  mk, mb = np.zeros_like(kernel), np.zeros_like(bias)
  for x, y in batches:
    _, gk, gb = h.ce_loss_and_grads(kernel, bias, x, y)
    mk = momentum * mk + gk + mu * (kernel - k0)
    mb = momentum * mb + gb + mu * (bias - b0)
    kernel, bias = kernel - lr * mk, bias - lr * mb
  return kernel, bias


def flat(arrays):
  return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


def fednova_round(weights, data, lr, aggregate=None, momentum=0.0, mu=0.0):
  """One FedNova round: `x - tau_eff * A(d_i; p_i)`, A the weighted mean unless given."""
  x = flat(weights)
  sizes = np.array([sum(len(b[1]) for b in h.batches_of(ds)) for ds in data], np.float64)
  taus = [len(h.batches_of(ds)) for ds in data]
  norms = np.array([closed_form_norm(t, lr, momentum, mu) for t in taus])
  d = np.stack([(x - flat(local_sgd(weights, h.batches_of(ds), lr, momentum, mu))) / a
                for ds, a in zip(data, norms)])
  p = sizes / sizes.sum()
  tau_eff = float(p @ norms)
  combined = p @ d if aggregate is None else aggregate(d, p)
  return x - tau_eff * combined, tau_eff


# ---- the local solver's normalisation ------------------------------------------------------------

@pytest.mark.parametrize('tau', [0, 1, 2, 7, 40])
@pytest.mark.parametrize('lr,momentum,mu', [(0.1, 0.0, 0.0), (0.1, 0.9, 0.0), (0.05, 0.5, 0.0),
                                            (0.1, 0.0, 0.1), (0.3, 0.0, 1.0), (0.1, 0.0, 10.0)])
def test_local_solver_norm_equals_the_closed_forms(tau, lr, momentum, mu):
  got = float(fednova.local_solver_norm(tf.constant(tau, tf.int64), lr, momentum, mu))
  np.testing.assert_allclose(got, closed_form_norm(tau, lr, momentum, mu), rtol=1e-12)
  np.testing.assert_allclose(got, expanded_norm(tau, lr, momentum, mu), rtol=1e-12)


def test_local_solver_norm_hand_worked_and_momentum_with_proximal():
  # rho = 0.5, tau = 3: h = 1, 1.5, 1.75 -> 4.25 = (3 - 0.5 (1 - 0.125) / 0.5) / 0.5.
  assert float(fednova.local_solver_norm(tf.constant(3, tf.int64), 0.1, 0.5)) == 4.25
  # mu = 1, lr = 0.5, tau = 3: 1 + 0.5 + 0.25.
  assert float(fednova.local_solver_norm(tf.constant(3, tf.int64), 0.5, 0.0, 1.0)) == 1.75
  # momentum 1 (allowed by build_sgdm): h(s) = s.
  assert float(fednova.local_solver_norm(tf.constant(4, tf.int64), 0.1, 1.0)) == 10.0
  for tau in (1, 5, 30):
    np.testing.assert_allclose(
        float(fednova.local_solver_norm(tf.constant(tau, tf.int64), 0.2, 0.9, 0.5)),
        expanded_norm(tau, 0.2, 0.9, 0.5), rtol=1e-12)


# ---- the client value ----------------------------------------------------------------------------

@pytest.mark.parametrize('momentum,mu', [(None, 0.0), (0.9, 0.0), (None, 0.5)])
def test_client_sends_its_delta_over_the_closed_form_norm(momentum, mu):
  lr, weights = 0.1, h.initial_weights()
  dataset = _data()[1]
  result, _ = h.run_client_update(h.ce_model_fn(), dataset, _sgdm(lr, momentum), weights,
                                  weighting='num_examples', proximal_strength=mu,
                                  normalized=True)
  tau = len(h.batches_of(dataset))
  assert tau == 4
  norm = closed_form_norm(tau, lr, momentum or 0.0, mu)
  kernel, bias = local_sgd(weights, h.batches_of(dataset), lr, momentum or 0.0, mu)
  np.testing.assert_allclose(float(result.update['normalizer']), norm, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(result.update['update'][0]), (weights[0] - kernel) / norm,
                             atol=1e-6)
  np.testing.assert_allclose(np.asarray(result.update['update'][1]), (weights[1] - bias) / norm,
                             atol=1e-6)
  assert float(result.update_weight) == 13.0
  assert int(result.update['nonfinite']) == 0


def test_client_with_no_steps_sends_nothing():
  empty = _data()[0].take(0)
  for weighting in ('num_examples', 'uniform'):
    result, _ = h.run_client_update(h.ce_model_fn(), empty, _sgdm(0.1), h.initial_weights(),
                                    weighting=weighting, normalized=True)
    assert float(result.update_weight) == 0.0
    assert float(result.update['normalizer']) == 0.0
    assert all(np.all(np.asarray(t) == 0) for t in result.update['update'])


def test_client_with_non_finite_delta_is_excluded_and_counted():
  weights = h.initial_weights()
  weights = (np.full_like(weights[0], np.inf), weights[1])
  result, _ = h.run_client_update(h.ce_model_fn(), _data()[0], _sgdm(0.1), weights,
                                  weighting='num_examples', normalized=True)
  assert float(result.update_weight) == 0.0
  assert int(result.update['nonfinite']) == 1
  assert all(np.all(np.asarray(t) == 0) for t in result.update['update'])


# ---- the server wrapper --------------------------------------------------------------------------

def _client_values(updates, norms, nonfinite=None):
  nonfinite = nonfinite or [0] * len(updates)
  return [collections.OrderedDict(update=np.asarray(u, np.float32), normalizer=np.float32(a),
                                  nonfinite=np.int32(z))
          for u, a, z in zip(updates, norms, nonfinite)]


@functools.lru_cache(maxsize=None)
def _server(inner='mean', dim=3):
  factory = learning.NormalizedAveragingFactory(learning.registry.AGGREGATORS[inner](
      **({'order': 'index'} if inner == 'fedgh' else {})))
  return factory.create(fednova.value_type(tff.TensorType(np.float32, [dim])),
                        tff.TensorType(np.float32))


def test_server_is_tau_eff_times_the_weighted_mean_of_the_normalised_updates():
  rng = np.random.default_rng(0)
  d = rng.normal(size=(4, 3))
  norms, weights = [2.0, 4.0, 5.0, 0.0], [8.0, 13.0, 20.0, 0.0]   # the last: 0 steps
  process = _server()
  out = process.next(process.initialize(), _client_values(d, norms, [0, 0, 0, 0]), weights)
  p = np.array(weights) / sum(weights)
  tau_eff = float(p @ norms)
  np.testing.assert_allclose(out.measurements['tau_eff'], tau_eff, rtol=1e-6)
  np.testing.assert_allclose(out.result, tau_eff * (p @ d), rtol=1e-5)
  assert out.measurements['num_excluded_nonfinite_clients'] == 0


def test_server_edge_cases():
  process = _server()
  u = np.array([1.0, -2.0, 0.5])
  # K = 1: that client's update, d_1 ||a_1||_1 = u_1.
  out = process.next(process.initialize(), _client_values([u / 4.0], [4.0]), [7.0])
  np.testing.assert_allclose(out.result, u, rtol=1e-6)
  # Equal tau: the weighted mean of the deltas (FedAvg).
  us = np.array([[1.0, 0.0, 2.0], [-3.0, 1.0, 0.0]])
  out = process.next(process.initialize(), _client_values(us / 3.0, [3.0, 3.0]), [1.0, 3.0])
  np.testing.assert_allclose(out.result, 0.25 * us[0] + 0.75 * us[1], rtol=1e-6)
  # Every client excluded (non-finite, weight 0): all zeros, counted; no NaN.
  out = process.next(process.initialize(),
                     _client_values([np.zeros(3)] * 2, [2.0, 0.0], [1, 0]), [0.0, 0.0])
  np.testing.assert_array_equal(out.result, np.zeros(3))
  assert out.measurements['num_excluded_nonfinite_clients'] == 1


def test_server_with_fedgh_harmonizes_the_normalised_updates():
  d = np.array([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [0.5, -2.0, 1.0]])
  norms, weights = [2.0, 4.0, 5.0], [8.0, 13.0, 20.0]
  process = _server('fedgh')
  out = process.next(process.initialize(), _client_values(d, norms), weights)
  p = np.array(weights) / sum(weights)
  expected = float(p @ norms) * np.asarray(conflict.harmonize(d, p, order='index'))
  np.testing.assert_allclose(out.result, expected, rtol=1e-5)
  assert out.measurements['num_projections'] > 0


# ---- whole rounds --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _process(lr=0.1, momentum=None, aggregator='mean'):
  return learning.build_fednova(
      make_tiny_keras_model, input_spec=h.input_spec(), client_optimizer_fn=_sgdm(lr, momentum),
      aggregator=aggregator,
      aggregator_kwargs={'order': 'index'} if aggregator == 'fedgh' else None)


def _weights(process, state):
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


@pytest.mark.parametrize('kind', ['cpp', 'inprocess'])
def test_fednova_rounds_equal_the_papers_aggregate(kind):
  """build_fednova(keras, build_sgdm(lr)) on clients of 2, 4 and 5 local steps moves the model to
  `x - tau_eff sum_i p_i (x - x_i) / tau_i` (x_i by a float64 loop), round after round."""
  lr = 0.1
  process = _process(lr)
  runner = runtime.make_runner(process, kind)
  state = runner.initialize()
  weights = _weights(runner, state)
  data = list(_data())
  for _ in range(2):
    expected, tau_eff = fednova_round(weights, data, lr)
    fedavg = np.average([flat(local_sgd(weights, h.batches_of(ds), lr)) for ds in data],
                        axis=0, weights=SIZES)
    assert np.max(np.abs(expected - fedavg)) > 1e-3   # the test tells FedNova from FedAvg
    output = runner.next(state, data)
    state = output.state
    weights = _weights(runner, state)
    np.testing.assert_allclose(flat(weights), expected, rtol=0, atol=2e-6)
    np.testing.assert_allclose(output.metrics['aggregator']['tau_eff'], tau_eff, rtol=1e-6)
    assert tau_eff == pytest.approx((8 * 2 + 13 * 4 + 20 * 5) / 41)


@pytest.mark.slow
def test_fednova_with_momentum_round_in_tff_runtime():
  lr, rho = 0.05, 0.9
  process = _process(lr, rho)
  state = process.initialize()
  weights = _weights(process, state)
  expected, _ = fednova_round(weights, list(_data()), lr, momentum=rho)
  state = process.next(state, list(_data())).state
  np.testing.assert_allclose(flat(_weights(process, state)), expected, rtol=0, atol=2e-6)


def test_fednova_with_fedgh_round_equals_the_reference():
  """`build_fednova(..., aggregator='fedgh')`: FedGH (index order) on the d_i with weights p_i,
  times tau_eff."""
  lr = 0.1
  process = _process(lr, aggregator='fedgh')
  state = process.initialize()
  weights = _weights(process, state)
  data = list(_data())
  harmonized = lambda d, p: np.asarray(conflict.harmonize(d, p, order='index'), np.float64)
  for _ in range(3):
    expected, _ = fednova_round(weights, data, lr, aggregate=harmonized)
    state = process.next(state, data).state
    weights = _weights(process, state)
    np.testing.assert_allclose(flat(weights), expected, rtol=0, atol=3e-6)
    assert np.all(np.isfinite(flat(weights)))


def test_fednova_with_equal_steps_is_fedavg():
  lr = 0.1
  equal = tuple(make_tiny_client_datasets(num_clients=3, examples_per_client=12, batch_size=4,
                                          seed=5))
  process = _process(lr)
  state = process.initialize()
  weights = _weights(process, state)
  fedavg = np.mean([flat(local_sgd(weights, h.batches_of(ds), lr)) for ds in equal], axis=0)
  state = process.next(state, list(equal)).state
  np.testing.assert_allclose(flat(_weights(process, state)), fedavg, rtol=0, atol=2e-6)


@pytest.mark.parametrize('kwargs,match', [
    (dict(client_optimizer_fn=tff.learning.optimizers.build_adam(0.01)), 'normalisation'),
    (dict(client_optimizer_fn=_sgdm(0.1), client_weighting='loss'), 'client_weighting'),
    (dict(client_optimizer_fn=_sgdm(0.1), aggregator='dgc'), 'loss'),
    (dict(client_optimizer_fn=_sgdm(0.1), aggregator='corrective'), 'corrective'),
    (dict(client_optimizer_fn=_sgdm(0.1), normalized_averaging=1), 'normalized_averaging'),
])
def test_fednova_refuses_what_it_cannot_normalise(kwargs, match):
  with pytest.raises(ValueError, match=match):
    if 'normalized_averaging' in kwargs:
      learning.build_process(make_tiny_keras_model, input_spec=h.input_spec(), **kwargs)
    else:
      learning.build_fednova(make_tiny_keras_model, input_spec=h.input_spec(), **kwargs)


def _with_nan_features(dataset):
  return dataset.map(lambda b: collections.OrderedDict(x=b['x'] * np.float32('nan'), y=b['y']))


@pytest.mark.parametrize('kind', ['cpp', 'inprocess'])
def test_zero_step_and_non_finite_clients_take_no_part(kind):
  """A client with no data (0 steps) and one whose delta is NaN are left out of the p_i and of
  tau_eff, and the NaN one is counted; the round equals FedNova over the other two."""
  lr = 0.1
  process = _process(lr)
  runner = runtime.make_runner(process, kind)
  state = runner.initialize()
  weights = _weights(runner, state)
  good = list(_data())[1:]
  data = good + [_data()[0].take(0), _with_nan_features(_data()[0])]
  expected, tau_eff = fednova_round(weights, good, lr)
  output = runner.next(state, data)
  np.testing.assert_allclose(flat(_weights(runner, output.state)), expected, rtol=0, atol=2e-6)
  assert output.metrics['aggregator']['num_excluded_nonfinite_clients'] == 1
  np.testing.assert_allclose(output.metrics['aggregator']['tau_eff'], tau_eff, rtol=1e-6)


def test_one_client_moves_the_model_to_its_local_model():
  """K = 1: tau_eff = ||a_1||_1, so the aggregate is that client's own delta."""
  lr = 0.1
  process = _process(lr)
  state = process.initialize()
  weights = _weights(process, state)
  dataset = _data()[2]
  state = process.next(state, [dataset]).state
  np.testing.assert_allclose(flat(_weights(process, state)),
                             flat(local_sgd(weights, h.batches_of(dataset), lr)), rtol=0,
                             atol=2e-6)


def test_fednova_with_a_proximal_term_in_tff_runtime():
  """`build_process(proximal_strength=mu, normalized_averaging=True)`: d_i = u_i / sum_k
  (1 - eta mu)^k with the proximal local updates."""
  lr, mu = 0.1, 0.5
  process = learning.build_process(make_tiny_keras_model, input_spec=h.input_spec(),
                                   client_optimizer_fn=_sgdm(lr), proximal_strength=mu,
                                   normalized_averaging=True)
  state = process.initialize()
  weights = _weights(process, state)
  expected, tau_eff = fednova_round(weights, list(_data()), lr, mu=mu)
  output = process.next(state, list(_data()))
  np.testing.assert_allclose(flat(_weights(process, output.state)), expected, rtol=0, atol=2e-6)
  np.testing.assert_allclose(output.metrics['aggregator']['tau_eff'], tau_eff, rtol=1e-6)
  assert tau_eff < (8 * 2 + 13 * 4 + 20 * 5) / 41   # the proximal normalisation is smaller

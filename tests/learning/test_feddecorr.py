"""FedDecorr's wiring: the decorrelated Keras model (same logits and variables, the term on the
classifier's input only in training), one round in TFF's runtime against a float64 loop of local
SGD on `CE + beta L_decorr(z)`, with FedGH on top, and the models it refuses."""

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
from tff_conflict import losses
from tff_conflict import runtime

HIDDEN = 5


def mlp_model_fn():
  """x [4] -> Dense(5, tanh) -> Dense(3) logits (seeded)."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(h.NUM_FEATURES,)),
      tf.keras.layers.Dense(HIDDEN, activation='tanh',
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1)),
      tf.keras.layers.Dense(h.NUM_CLASSES,
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=2)),
  ])


@functools.lru_cache(maxsize=None)
def _data():
  return tuple(make_tiny_client_datasets(num_clients=3, examples_per_client=16, batch_size=8,
                                         seed=2))


def _sgd(lr=0.1):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def test_decorrelated_model_keeps_logits_and_variables_and_adds_the_term_in_training():
  model = mlp_model_fn()
  wrapped = learning.DecorrelatedModel(model, beta=0.3, form='authors')
  x = tf.constant(np.random.default_rng(0).normal(size=(6, h.NUM_FEATURES)), tf.float32)
  np.testing.assert_array_equal(wrapped(x, training=False).numpy(), model(x).numpy())
  assert not wrapped.losses
  assert [v.name for v in wrapped.trainable_variables] == [
      v.name for v in model.trainable_variables]
  assert all(a is b for a, b in zip(wrapped.trainable_variables, model.trainable_variables))
  wrapped(x, training=True)
  z = model.layers[0](x)   # the classifier's input
  expected = 0.3 * losses.decorrelation_loss(z)
  assert len(wrapped.losses) == 1
  np.testing.assert_allclose(float(wrapped.losses[0]), float(expected), rtol=1e-6)
  assert float(expected) > 0


def _reference_round(weights, datasets, lr, beta, form):
  """Local SGD on mean CE + beta L_decorr(z) in float64 (z = tanh(x W1 + b1)), FedAvg weights."""
  new = []
  for dataset in datasets:
    w = [tf.Variable(np.asarray(a, np.float64)) for a in weights]
    for x, y in h.batches_of(dataset):
      with tf.GradientTape() as tape:
        z = tf.tanh(x @ w[0] + w[1])
        logits = z @ w[2] + w[3]
        ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        loss = ce + beta * losses.decorrelation_loss(z, form=form)
      for v, g in zip(w, tape.gradient(loss, w)):
        v.assign_sub(lr * g)
    new.append(np.concatenate([v.numpy().ravel() for v in w]))
  sizes = [sum(len(b[1]) for b in h.batches_of(ds)) for ds in datasets]
  return np.average(new, axis=0, weights=sizes)


@pytest.mark.parametrize('form,kind', [
    ('authors', 'cpp'), ('authors', 'inprocess'),
    pytest.param('paper', 'cpp', marks=pytest.mark.slow)])
def test_feddecorr_round_equals_the_reference(form, kind):
  lr, beta = 0.1, 0.5
  process = learning.build_feddecorr(mlp_model_fn, input_spec=h.input_spec(),
                                     client_optimizer_fn=_sgd(lr), beta=beta, form=form)
  runner = runtime.make_runner(process, kind)
  state = runner.initialize()
  weights = [np.asarray(w) for w in runner.get_model_weights(state).trainable]
  expected = _reference_round(weights, _data(), lr, beta, form)
  plain = _reference_round(weights, _data(), lr, 0.0, form)
  assert np.max(np.abs(expected - plain)) > 1e-4   # the term moves the model
  output = runner.next(state, list(_data()))
  got = np.concatenate([np.asarray(w).ravel()
                        for w in runner.get_model_weights(output.state).trainable])
  np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)


def test_feddecorr_with_fedgh_trains_with_finite_weights():
  process = learning.build_feddecorr(mlp_model_fn, input_spec=h.input_spec(),
                                     client_optimizer_fn=_sgd(0.1), aggregator='fedgh',
                                     aggregator_kwargs=dict(seed=0))
  state = process.initialize()
  first = None
  for _ in range(3):
    output = process.next(state, list(_data()))
    state = output.state
    first = first or float(output.metrics['client_work']['train']['loss'])
    assert output.metrics['aggregator']['num_clients'] == 3
  assert all(np.all(np.isfinite(w)) for w in process.get_model_weights(state).trainable)
  assert float(output.metrics['client_work']['train']['loss']) < first


class _Subclassed(tf.keras.Model):

  def __init__(self):
    super().__init__()
    self.dense = tf.keras.layers.Dense(h.NUM_CLASSES)

  def call(self, x):
    return self.dense(x)


def _ends_in_lambda():
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(h.NUM_FEATURES,)),
                              tf.keras.layers.Dense(h.NUM_CLASSES),
                              tf.keras.layers.Lambda(lambda t: 2.0 * t, name='scale')])


@pytest.mark.parametrize('model_fn,match', [
    (_Subclassed, 'Sequential or functional'),
    (_ends_in_lambda, "'scale' \\(Lambda\\)"),
    (h.ce_model_fn(), 'needs model_fn returning a Keras model'),
])
def test_feddecorr_refuses_a_model_without_a_dense_classifier(model_fn, match):
  with pytest.raises(ValueError, match=match):
    learning.build_feddecorr(model_fn, input_spec=h.input_spec(), client_optimizer_fn=_sgd())


def _flatten_then_dense():
  """Softmax regression on a flattened input: the classifier reads the input."""
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(h.NUM_FEATURES,)),
                              tf.keras.layers.Flatten(),
                              tf.keras.layers.Dense(h.NUM_CLASSES)], name='flat_softmax')


@pytest.mark.parametrize('model_fn', [make_tiny_keras_model, _flatten_then_dense])
def test_feddecorr_refuses_a_model_whose_representation_is_its_input(model_fn):
  # L_decorr(z) of the input has no gradient: FedDecorr would be FedAvg to every digit.
  with pytest.raises(ValueError, match=r"no trainable weight lies before that layer 'dense\w*': "
                     r'z is the input itself') as error:
    learning.build_feddecorr(model_fn, input_spec=h.input_spec(), client_optimizer_fn=_sgd())
  assert error.value.argument == 'model_fn'
  with tf.Graph().as_default():   # a trained layer before the classifier: accepted
    learning.check_trained_representation(mlp_model_fn())


@pytest.mark.parametrize('kwargs', [dict(beta=-0.1), dict(beta=float('nan')), dict(form='text')])
def test_feddecorr_refuses_bad_hyperparameters(kwargs):
  with pytest.raises(ValueError, match=list(kwargs)[0]):
    learning.build_feddecorr(mlp_model_fn, input_spec=h.input_spec(), client_optimizer_fn=_sgd(),
                             **kwargs)

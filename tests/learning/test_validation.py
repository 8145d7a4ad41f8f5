"""Bad input: a clear ValueError, naming argument and value, before anything is built."""

import collections

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import learning
from tff_conflict.learning import process as process_lib


@pytest.fixture(autouse=True)
def nothing_is_built(monkeypatch):
  """Fails the test if validation lets a bad argument through to the composition."""
  def refuse(*args, **kwargs):
    raise AssertionError('build_model_fn reached: validation did not raise')
  monkeypatch.setattr(process_lib.models_lib, 'build_model_fn', refuse)


def _sgd(lr=0.1):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _call(builder, **kwargs):
  kwargs.setdefault('input_spec', h.input_spec())
  kwargs.setdefault('client_optimizer_fn', _sgd())
  model_fn = kwargs.pop('model_fn', make_tiny_keras_model)
  return builder(model_fn, **kwargs)


@pytest.mark.parametrize('builder,kwargs,match', [
    (learning.build_process, dict(loss='hinge'), r"loss must be one of .*'hinge'"),
    (learning.build_process, dict(aggregator='median'), r"aggregator must be one of .*'median'"),
    (learning.build_process, dict(aggregator=tf.keras.losses.MeanSquaredError()),
     'aggregator must be'),
    (learning.build_process, dict(loss=3), 'loss must be'),
    (learning.build_process, dict(loss='focal', loss_kwargs=dict(alpha=1.0)),
     "loss 'focal' does not accept"),
    (learning.build_process, dict(aggregator='dgc', aggregator_kwargs=dict(ratio=0.5)),
     "aggregator 'dgc' does not accept"),
    (learning.build_fedavg, dict(client_optimizer_fn=_sgd(0.0)), 'learning_rate'),
    (learning.build_fedavg,
     dict(client_optimizer_fn=lambda: tff.learning.optimizers.build_adam(learning_rate=0.0)),
     'client_optimizer_fn: learning_rate must be a finite number > 0, got 0.0'),
    (learning.build_fedavg, dict(server_optimizer_fn=_sgd(0.0)), 'server_optimizer_fn'),
    (learning.build_fedavg, dict(client_optimizer_fn='sgd'), 'client_optimizer_fn'),
    (learning.build_fedavg, dict(client_optimizer_fn=tf.keras.optimizers.SGD(0.1)),
     'client_optimizer_fn must be a tff.learning.optimizers.Optimizer'),
    (learning.build_fedavg, dict(client_weighting='by_size'), "client_weighting.*'by_size'"),
    (learning.build_fedprox, dict(proximal_strength=-0.01), 'proximal_strength.*-0.01'),
    (learning.build_fedmgc, dict(gamma=-1.0), 'gamma.*-1.0'),
    (learning.build_fedmgc, dict(beta=-0.5), 'beta.*-0.5'),
    (learning.build_fedmgc, dict(beta=0.0), r'beta must be a finite number > 0, got 0.0'),
    (learning.build_fedmgc, dict(gamma=float('nan')),
     'gamma must be a finite number >= 0, got nan'),
    (learning.build_fedmgc, dict(selection_ratio=0.0), r'selection_ratio must be a number in \(0, 1\], got 0.0'),
    (learning.build_fedmgc, dict(selection_ratio=1.5), 'selection_ratio.*1.5'),
    (learning.build_fedmgc, dict(client_weighting='num_examples'), "client_weighting must be 'loss'"),
    (learning.build_fedld, dict(margin_weight=-0.1), 'margin_weight.*-0.1'),
    (learning.build_fedld, dict(component_ratio=0.0), 'component_ratio.*0.0'),
    (learning.build_fedld, dict(component_ratio=1.01), 'component_ratio.*1.01'),
    (learning.build_fedga, dict(counts='epoch'), "counts.*'epoch'"),
    (learning.build_fedga, dict(form='soft'), "form.*'soft'"),
    (learning.build_fedga, dict(clip_norm=0.0), r'clip_norm must be None or a finite number > 0, got 0.0'),
    (learning.build_fedga, dict(clip_norm=float('inf')), 'clip_norm.*inf'),
    (learning.build_fedga, dict(clip_norm='5'), "clip_norm.*'5'"),
    (learning.build_process, dict(clip_norm=-1.0), 'clip_norm.*-1.0'),
    (learning.build_process, dict(aggregator='corrective', clip_norm=float('nan')),
     'clip_norm.*nan'),
    (learning.build_fed_corrective, dict(alpha=-0.1), 'alpha.*-0.1'),
    (learning.build_fed_corrective, dict(alpha=1.5),
     r'alpha must be a number in \[0, 1\], got 1.5'),
    (learning.build_fed_corrective, dict(client_weighting='uniform'), 'corrective'),
    (learning.build_fedgh, dict(order='sorted'), "order.*'sorted'"),
    (learning.build_fedavg, dict(metrics='accuracy'), 'metrics'),
    (learning.build_fedavg, dict(input_spec=collections.OrderedDict(
        x=tf.TensorSpec([None, 4], tf.float32))), 'input_spec'),
    (learning.build_fedavg, dict(input_spec=collections.OrderedDict(
        x=tf.TensorSpec([None, 4], tf.float32), y=tf.TensorSpec([None], tf.float32))),
     'integer class labels'),
    (learning.build_fedavg, dict(input_spec=(tf.TensorSpec([None, 4], tf.float32),
                                             tf.TensorSpec([None], tf.float32))),
     r'input_spec\[1\] must hold integer class labels'),
    (learning.build_fedavg, dict(input_spec=(tf.TensorSpec([None, 4], tf.float32),)),
     'input_spec must be'),
    (learning.build_fedavg, dict(input_spec=None), 'input_spec is required with a Keras model'),
    (learning.build_fedgh, dict(seed=1.5), 'seed must be None or an integer'),
])
def test_bad_arguments_raise_value_error(builder, kwargs, match):
  with pytest.raises(ValueError, match=match):
    _call(builder, **kwargs)


def _compiled_model():
  model = make_tiny_keras_model()
  model.compile(optimizer='sgd', loss='sparse_categorical_crossentropy')
  return model


def _regression_model():
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                              tf.keras.layers.Dense(1)])


@pytest.mark.parametrize('model_fn,match', [
    (_compiled_model, 'uncompiled'),
    (lambda: 'not a model', "model_fn must be a no-argument function .* returned 'not a model'"),
    (_regression_model, r'num_classes >= 2'),
    (lambda: tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,)),
                                  tf.keras.layers.Dense(3)]), 'cannot be applied'),
    ('model', "model_fn must be a no-argument function .* got 'model'"),
])
def test_bad_model_fn(model_fn, match):
  for builder in (learning.build_fedavg, learning.build_fedld):
    with pytest.raises(ValueError, match=match):
      _call(builder, model_fn=model_fn)


def _dense(activation=None):
  return tf.keras.layers.Dense(3, activation=activation)


def _sequential(*layers):
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)), *layers])


class _SoftmaxInCall(tf.keras.Model):
  """Subclassed: softmax applied inside `call`, invisible to a look at the layers."""

  def __init__(self):
    super().__init__()
    self.dense = tf.keras.layers.Dense(3)

  def call(self, x):
    return tf.nn.softmax(self.dense(x))


def _functional_softmax():
  x = tf.keras.Input([4])
  return tf.keras.Model(x, tf.keras.layers.Activation('softmax')(tf.keras.layers.Dense(3)(x)))


def _two_outputs():
  x = tf.keras.Input([4])
  return tf.keras.Model(x, [tf.keras.layers.Dense(3)(x), tf.keras.layers.Dense(3)(x)])


def _same_object():
  """A model_fn that returns the model of its first call every time."""
  models = []

  def model_fn():
    if not models:
      models.append(make_tiny_keras_model())
    return models[0]
  return model_fn


def _shared_layer():
  """A model_fn whose models share one Dense layer."""
  layers = []

  def model_fn():
    if not layers:
      layers.append(tf.keras.layers.Dense(3))
    return _sequential(layers[0])
  return model_fn


@pytest.mark.parametrize('make_model_fn,match', [
    (lambda: lambda: _sequential(_dense('softmax')), r"ends in softmax \(layer 'dense.*'\)"),
    (lambda: lambda: _sequential(_dense(), tf.keras.layers.Softmax()),
     r"ends in softmax \(layer 'softmax"),
    (lambda: lambda: _sequential(_dense(), tf.keras.layers.Activation('softmax')),
     'ends in softmax'),
    (lambda: _functional_softmax, 'ends in softmax'),
    (lambda: _SoftmaxInCall, r'outputs probabilities \(every output row is >= 0 and sums to 1'),
    (lambda: _two_outputs, 'must have one output, the logits .*; got 2 outputs'),
    (lambda: lambda: _sequential(tf.keras.layers.Dense(3, trainable=False)),
     'no trainable weights'),
    (_same_object, 'model_fn must create a new Keras model on every call .* the same object'),
    (_shared_layer, 'new Keras model on every call .* models sharing variables'),
])
def test_models_that_would_train_silently_wrong_are_refused(make_model_fn, match):
  for builder in (learning.build_fedmgc, learning.build_fedavg, learning.build_fedgh,
                  learning.build_process):
    with pytest.raises(ValueError, match=match):
      _call(builder, model_fn=make_model_fn())


def test_a_model_fn_reusing_a_layer_across_builds_is_refused():
  model_fn = _shared_layer()
  with pytest.raises(ValueError, match='sharing variables'):
    _call(learning.build_fedavg, model_fn=model_fn)
  # The layer was built in the first build's graph.
  with pytest.raises(ValueError, match='model_fn uses a layer or model created outside it'):
    _call(learning.build_fedavg, model_fn=model_fn)


def test_a_variable_model_fn_returning_the_same_model_is_refused():
  model = []

  def model_fn():
    if not model:
      model.append(h.ce_model_fn()())
    return model[0]
  with pytest.raises(ValueError, match='new VariableModel on every call'):
    learning.build_fedavg(model_fn, client_optimizer_fn=_sgd())


@pytest.mark.parametrize('loss,match', [
    (tf.keras.losses.SparseCategoricalCrossentropy(),
     r'from_logits=False.*SparseCategoricalCrossentropy\(from_logits=True\)'),
    (tf.keras.losses.CategoricalCrossentropy(from_logits=True), 'one-hot or binary labels'),
])
def test_a_loss_on_probabilities_or_one_hot_labels_is_refused(loss, match):
  with pytest.raises(ValueError, match=match):
    _call(learning.build_process, loss=loss)


def test_one_hot_label_spec_is_refused():
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 4], tf.float32),
                                 y=tf.TensorSpec([None, 3], tf.int32))
  with pytest.raises(ValueError, match=r'input_spec\["y"\] must hold sparse labels .* got shape '
                                       r'\(None, 3\), which looks like one-hot'):
    _call(learning.build_fedavg, input_spec=spec)
  with pytest.raises(ValueError, match=r'input_spec\[1\] must hold sparse labels'):
    _call(learning.build_fedavg, input_spec=(spec['x'], spec['y']))
  # [batch, 1] labels are sparse labels.
  column = collections.OrderedDict(x=spec['x'], y=tf.TensorSpec([None, 1], tf.int32))
  assert learning.models.check_input_spec(column)['y'].shape.as_list() == [None, 1]


def test_builders_share_core_keywords():
  import inspect  # pylint: disable=g-import-not-at-top
  core = ['model_fn', 'input_spec', 'client_optimizer_fn', 'server_optimizer_fn',
          'client_weighting', 'metrics']
  for name, builder in learning.ALGORITHMS.items():
    params = list(inspect.signature(builder).parameters)
    assert params[:len(core)] == core, name
    for p in list(inspect.signature(builder).parameters.values())[1:]:
      assert p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD), (name, p.name)

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
    (learning.build_fedmgc, dict(client_weighting='num_examples'), 'client_weighting must be "loss"'),
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


def test_builders_share_core_keywords():
  import inspect  # pylint: disable=g-import-not-at-top
  core = ['model_fn', 'input_spec', 'client_optimizer_fn', 'server_optimizer_fn',
          'client_weighting', 'metrics']
  for name, builder in learning.ALGORITHMS.items():
    params = list(inspect.signature(builder).parameters)
    assert params[:len(core)] == core, name
    for p in list(inspect.signature(builder).parameters.values())[1:]:
      assert p.kind == p.KEYWORD_ONLY, (name, p.name)

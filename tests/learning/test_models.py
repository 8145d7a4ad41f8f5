"""The models the builders accept besides a Keras function with an `OrderedDict` input spec: an
`(x, y)` tuple input spec, a function returning a `tff.learning.models.VariableModel`, a
`tff.learning.models.FunctionalModel`. One round each in TFF's runtime, checked against float64
references of local SGD and of the server method; bad combinations fail before anything is built.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conflict import references
from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import aggregators
from tff_conflict import learning
from tff_conflict.learning import process as process_lib

LR = 0.1


def _sgd():
  return tff.learning.optimizers.build_sgdm(learning_rate=LR)


@functools.lru_cache(maxsize=None)
def _data():
  return make_tiny_client_datasets(num_clients=3, examples_per_client=12, batch_size=5, seed=4)


def _as_tuples(datasets):
  return [ds.map(lambda b: (b['x'], b['y'])) for ds in datasets]


def _tuple_spec():
  spec = h.input_spec()
  return (spec['x'], spec['y'])


def _variable_model_fn():
  """A VariableModel (not Keras as far as the builders can tell) on the tiny model, CE loss."""
  return tff.learning.models.from_keras_model(
      make_tiny_keras_model(), loss=tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True), input_spec=h.input_spec())


def _functional_model():
  return tff.learning.models.functional_model_from_keras(
      make_tiny_keras_model, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      h.input_spec())


def _one_round(process, data):
  state = process.initialize()
  initial = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  output = process.next(state, data)
  new = [np.asarray(w) for w in process.get_model_weights(output.state).trainable]
  return initial, new, output.metrics


def _client_deltas(initial, data):
  """Float64 local SGD per client: (flat deltas `initial - trained`, numbers of examples)."""
  deltas, sizes = [], []
  for dataset in data:
    batches = h.batches_of(dataset)
    kernel, bias, _ = h.softmax_sgd_reference(initial, batches, LR)
    deltas.append(np.concatenate([(initial[0] - kernel).ravel(), initial[1] - bias]))
    sizes.append(sum(len(y) for _, y in batches))
  return deltas, np.asarray(sizes, np.float64)


def _apply(initial, aggregate):
  k = initial[0].size
  return [initial[0] - aggregate[:k].reshape(initial[0].shape), initial[1] - aggregate[k:]]


def _fedgh_reference(initial, data):
  deltas, sizes = _client_deltas(initial, data)
  orders = [list(range(len(deltas)))] * len(deltas)
  aggregate, _, _ = references.fedgh(deltas, sizes, orders)
  return _apply(initial, aggregate)


def _assert_weights_close(actual, expected):
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- one round each


def test_fedgh_with_tuple_input_spec_runs_a_round_and_matches_the_reference():
  process = learning.build_fedgh(make_tiny_keras_model, input_spec=_tuple_spec(),
                                 client_optimizer_fn=_sgd(), order='index')
  initial, new, metrics = _one_round(process, _as_tuples(_data()))
  assert metrics['aggregator']['num_participating'] == 3
  assert not np.allclose(new[0], initial[0])
  _assert_weights_close(new, _fedgh_reference(initial, _data()))


def test_fedgh_with_a_variable_model_fn_matches_the_reference():
  process = learning.build_fedgh(_variable_model_fn, client_optimizer_fn=_sgd(), order='index')
  initial, new, metrics = _one_round(process, _data())
  assert metrics['aggregator']['num_participating'] == 3
  _assert_weights_close(new, _fedgh_reference(initial, _data()))


def test_fedavg_with_a_functional_model_and_keras_metrics_matches_the_reference():
  process = learning.build_fedavg(_functional_model(), client_optimizer_fn=_sgd(),
                                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  initial, new, metrics = _one_round(process, _data())
  deltas, sizes = _client_deltas(initial, _data())
  expected = _apply(initial, sum(w * u for w, u in zip(sizes / sizes.sum(), deltas)))
  _assert_weights_close(new, expected)
  train = metrics['client_work']['train']
  assert set(train) == {'sparse_categorical_accuracy', 'loss'}, train
  assert 0.0 <= train['sparse_categorical_accuracy'] <= 1.0 and np.isfinite(train['loss'])


class _SubclassedRegression(tf.keras.Model):
  """The tiny softmax regression as a subclassed model: no weights until it is first called."""

  def __init__(self):
    super().__init__()
    self.dense = tf.keras.layers.Dense(
        h.NUM_CLASSES, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=0))

  def call(self, x):
    return self.dense(x)


def test_fedavg_trains_a_subclassed_keras_model_built_on_the_input_spec():
  process = learning.build_fedavg(_SubclassedRegression, input_spec=h.input_spec(),
                                  client_optimizer_fn=_sgd())
  initial, new, _ = _one_round(process, _data())
  assert [w.shape for w in initial] == [(h.NUM_FEATURES, h.NUM_CLASSES), (h.NUM_CLASSES,)]
  deltas, sizes = _client_deltas(initial, _data())
  expected = _apply(initial, sum(w * u for w, u in zip(sizes / sizes.sum(), deltas)))
  assert not np.allclose(new[0], initial[0])
  _assert_weights_close(new, expected)


def _dgc_reference(initial, data, equal_losses=False):
  """Float64 local SGD per client, then DGC (selection ratio 0.5) on the clients' mean training
  losses (or on equal losses)."""
  deltas, losses = [], []
  for dataset in data:
    kernel, bias, loss = h.softmax_sgd_reference(initial, h.batches_of(dataset), LR)
    deltas.append(np.concatenate([(initial[0] - kernel).ravel(), initial[1] - bias]))
    losses.append(1.0 if equal_losses else loss)
  return _apply(initial, references.dgc(deltas, losses, 0.5)[0])


def _dgc_data(seed=8, num_clients=4, n=12):
  """Label-skewed clients (80% of client k's labels are k mod 3) whose updates conflict; on
  these the clients' losses change DGC's dominant set."""
  rng = np.random.default_rng(seed)
  centers = rng.normal(scale=3.0, size=(h.NUM_CLASSES, h.NUM_FEATURES)).astype(np.float32)
  datasets = []
  for k in range(num_clients):
    y = np.where(rng.uniform(size=n) < 0.8, k % h.NUM_CLASSES,
                 rng.integers(0, h.NUM_CLASSES, size=n)).astype(np.int32)
    x = (centers[y] + rng.normal(size=(n, h.NUM_FEATURES))).astype(np.float32)
    datasets.append(tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(5))
  return datasets


def _differs(a, b):
  return any(not np.allclose(x, y, rtol=1e-3, atol=1e-4) for x, y in zip(a, b))


@pytest.mark.parametrize('wrap', [
    lambda factory: factory,
    lambda factory: tff.aggregators.clipping_factory(1e6, factory),
    pytest.param(lambda factory: tff.aggregators.zeroing_factory(
        1e6, tff.aggregators.clipping_factory(1e6, factory)), marks=pytest.mark.slow),
], ids=['plain', 'clipped', 'zeroed_clipped'])
def test_dgc_with_losses_gets_the_clients_losses_from_build_process(wrap):
  """The published DGC with a TFF model function (what `build_weighted_fed_avg` takes), as is or
  inside TFF's wrappers: `build_process` sends each client's mean training loss as its weight."""
  factory = aggregators.DominantGradientCorrectionFactory(weights_are_losses=True)
  process = learning.build_process(_variable_model_fn, client_optimizer_fn=_sgd(),
                                   aggregator=wrap(factory))
  initial, new, _ = _one_round(process, _dgc_data())
  expected = _dgc_reference(initial, _dgc_data())
  # The losses matter on these data: equal losses would give another round.
  assert _differs(expected, _dgc_reference(initial, _dgc_data(), equal_losses=True))
  _assert_weights_close(new, expected)


@pytest.mark.parametrize('builder', [learning.build_fedavg, learning.build_fedga])
def test_fewer_outputs_than_classes_fails_the_first_batch_with_a_clear_message(builder):
  """The labels exist only at run time. FedGA's calibrated loss would take an out-of-range
  label's one-hot row as all zeros and give a wrong loss without an error."""
  def two_logits():
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(h.NUM_FEATURES,)),
                                tf.keras.layers.Dense(2)])
  process = builder(two_logits, input_spec=h.input_spec(), client_optimizer_fn=_sgd())
  with pytest.raises(Exception, match=r'labels must be class indices in \[0, 2\): the model '
                                      r'outputs 2 logits'):
    process.next(process.initialize(), _data())


def _keras_process(builder_kwargs):
  return learning.build_process(make_tiny_keras_model, input_spec=h.input_spec(),
                                client_optimizer_fn=_sgd(), **builder_kwargs)


@pytest.mark.slow
@pytest.mark.parametrize('kind,builder_kwargs', [
    ('variable', dict(aggregator='dgc')),                   # DGC with the model's loss
    ('variable', dict(aggregator='principal')),
    ('functional', dict(aggregator='corrective')),
    ('functional', dict(aggregator='fedgh', aggregator_kwargs=dict(order='index'),
                        proximal_strength=0.1)),           # FedProx term + FedGH
], ids=['variable_dgc', 'variable_principal', 'functional_corrective', 'functional_fedprox_fedgh'])
def test_server_methods_with_tff_models_equal_the_keras_run(kind, builder_kwargs):
  model = _variable_model_fn if kind == 'variable' else _functional_model()
  process = learning.build_process(model, client_optimizer_fn=_sgd(), **builder_kwargs)
  _, new, metrics = _one_round(process, _data())
  assert metrics['aggregator']['num_participating'] == 3
  _, keras_new, _ = _one_round(_keras_process(builder_kwargs), _data())
  _assert_weights_close(new, keras_new)


@pytest.mark.slow
def test_fedga_dataset_counts_with_tuple_input_spec_runs():
  process = learning.build_fedga(make_tiny_keras_model, input_spec=_tuple_spec(),
                                 client_optimizer_fn=_sgd(), counts='dataset')
  initial, new, _ = _one_round(process, _as_tuples(_data()))
  assert all(np.all(np.isfinite(w)) for w in new) and not np.allclose(new[0], initial[0])


def test_count_labels_reads_tuple_and_mapping_batches():
  from tff_conflict.learning import client_work  # pylint: disable=g-import-not-at-top
  labels = np.concatenate([b['y'].numpy() for ds in _data() for b in ds])
  expected = np.bincount(labels, minlength=3)
  for data in (_data(), _as_tuples(_data())):
    dataset = data[0].concatenate(data[1]).concatenate(data[2])
    np.testing.assert_array_equal(client_work.count_labels(dataset, 3).numpy(), expected)


# ---------------------------------------------------------------- refused before anything is built


class _Built(Exception):
  pass


@pytest.fixture
def stop_at_composition(monkeypatch):
  """Raises `_Built` where the composition would start: validation has passed."""
  def built(*args, **kwargs):
    raise _Built()
  monkeypatch.setattr(process_lib, '_compose', built)


@pytest.mark.parametrize('builder,method,loss', [
    (learning.build_fedmgc, 'FedMGC', 'focal'),
    (learning.build_fedga, 'FedGA', 'calibrated'),
    (learning.build_fedld, 'FedLD', 'margin'),
])
@pytest.mark.parametrize('kind', ['variable', 'functional'])
def test_loss_changing_methods_need_a_keras_model(stop_at_composition, builder, method, loss,
                                                  kind):
  model = _variable_model_fn if kind == 'variable' else _functional_model()
  with pytest.raises(ValueError, match=rf"loss '{loss}' \({method}\) replaces the model's loss "
                                       r'and needs a Keras model'):
    builder(model, client_optimizer_fn=_sgd())


def test_tff_models_refuse_a_loss_and_variable_models_refuse_metrics(stop_at_composition):
  with pytest.raises(ValueError, match="loss 'FocalLoss' replaces the model's loss"):
    learning.build_process(_variable_model_fn, client_optimizer_fn=_sgd(),
                           loss=learning.LOSSES['focal']())
  with pytest.raises(ValueError, match="loss 'ce' replaces"):
    learning.build_process(_functional_model(), client_optimizer_fn=_sgd(), loss='ce')
  with pytest.raises(ValueError, match='metrics cannot be given with a '
                                       'tff.learning.models.VariableModel'):
    learning.build_fedgh(_variable_model_fn, client_optimizer_fn=_sgd(),
                         metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def test_input_spec_of_a_tff_model_is_optional_and_must_match(stop_at_composition):
  for spec in (None, h.input_spec()):
    with pytest.raises(_Built):
      learning.build_fedgh(_variable_model_fn, input_spec=spec, client_optimizer_fn=_sgd())
  with pytest.raises(_Built):
    learning.build_fed_corrective(_functional_model(), client_optimizer_fn=_sgd())
  with pytest.raises(ValueError, match='input_spec must match the input_spec of the model'):
    learning.build_fedgh(_variable_model_fn, input_spec=_tuple_spec(), client_optimizer_fn=_sgd())
  with pytest.raises(ValueError, match='input_spec must match'):
    learning.build_fedgh(_variable_model_fn, client_optimizer_fn=_sgd(),
                         input_spec=collections.OrderedDict(
                             x=tf.TensorSpec([None, 5], tf.float32),
                             y=tf.TensorSpec([None], tf.int32)))


def test_keras_accepts_both_input_spec_forms(stop_at_composition):
  for spec in (h.input_spec(), _tuple_spec(), list(_tuple_spec())):
    with pytest.raises(_Built):
      learning.build_fedmgc(make_tiny_keras_model, input_spec=spec, client_optimizer_fn=_sgd())


def test_a_function_returning_something_else_or_failing_is_refused(stop_at_composition):
  contract = ('model_fn must be a no-argument function returning a new uncompiled tf.keras.Model '
              'or a new tff.learning.models.VariableModel, or a '
              'tff.learning.models.FunctionalModel')
  with pytest.raises(ValueError, match=contract + '; the function returned 3'):
    learning.build_fedavg(lambda: 3, client_optimizer_fn=_sgd())
  # TFF calls model functions inside graphs; a function that works only eagerly fails there.
  with pytest.raises(ValueError, match=contract + r'; calling it \(inside a tf.Graph, as TFF '
                                                  r'does\) raised AttributeError'):
    learning.build_fedavg(_functional_model, client_optimizer_fn=_sgd())

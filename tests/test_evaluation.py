"""tff_conflict.evaluation: metrics against sklearn and hand-worked cases, TFF weights between rounds."""

import collections
import math

import numpy as np
import pytest
import sklearn.metrics
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tff_conflict import evaluation
from tff_conflict import losses

NUM_FEATURES, NUM_CLASSES = 4, 3


# ---------------------------------------------------------------- references (plain loops, float64)
def _ref_logits(x, kernel, bias):
  out = []
  for row in np.asarray(x, np.float64).tolist():
    out.append([sum(row[f] * kernel[f][c] for f in range(len(row))) + bias[c]
                for c in range(len(bias))])
  return np.array(out)


def _ref_cross_entropy(labels, logits):
  total = []
  for y, z in zip(labels, logits.tolist()):
    m = max(z)
    lse = m + math.log(sum(math.exp(v - m) for v in z))
    total.append(lse - z[int(y)])
  return np.array(total)


def _ref_argmax(logits):
  return np.array([max(range(len(z)), key=lambda c, z=z: (z[c], -c)) for z in logits.tolist()])


def _random_weights(seed):
  rng = np.random.default_rng(seed)
  kernel = rng.normal(size=(NUM_FEATURES, NUM_CLASSES)).astype(np.float32)
  bias = rng.normal(size=NUM_CLASSES).astype(np.float32)
  return tff.learning.models.ModelWeights(trainable=[kernel, bias], non_trainable=[]), kernel, bias


def _examples(seed, n):
  rng = np.random.default_rng(seed)
  x = rng.normal(scale=2.0, size=(n, NUM_FEATURES)).astype(np.float32)
  y = rng.integers(0, NUM_CLASSES, size=n).astype(np.int32)
  return x, y


def _dataset(x, y):
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y))


# ---------------------------------------------------------------- classification_metrics
@pytest.mark.parametrize('seed', range(6))
def test_metrics_match_sklearn(seed):
  rng = np.random.default_rng(seed)
  num_classes = 7
  # Classes 5 and 6 never appear as labels; class 6 may be predicted, class 5 never is.
  labels = rng.integers(0, 5, size=40)
  predictions = np.where(rng.random(40) < 0.6, labels, rng.choice([0, 1, 2, 3, 4, 6], size=40))
  got = evaluation.classification_metrics(labels, predictions, num_classes)
  assert got['accuracy'] == pytest.approx(sklearn.metrics.accuracy_score(labels, predictions))
  assert got['macro_f1'] == pytest.approx(
      sklearn.metrics.f1_score(labels, predictions, average='macro'), rel=1e-12)
  present = np.union1d(labels, predictions)
  np.testing.assert_allclose(
      got['per_class_f1'][present],
      sklearn.metrics.f1_score(labels, predictions, labels=present, average=None), rtol=1e-12)
  assert np.isnan(got['per_class_f1'][5])
  recall = sklearn.metrics.recall_score(labels, predictions, labels=np.arange(5), average=None)
  np.testing.assert_allclose(got['per_class_accuracy'][:5], recall, rtol=1e-12)
  assert np.all(np.isnan(got['per_class_accuracy'][5:]))
  np.testing.assert_array_equal(
      got['confusion_matrix'],
      sklearn.metrics.confusion_matrix(labels, predictions, labels=np.arange(num_classes)))
  assert got['num_examples'] == 40
  np.testing.assert_array_equal(got['per_class_num_examples'],
                                np.bincount(labels, minlength=num_classes))


def test_metrics_hand_worked():
  # labels      0 0 1 1 2 .    (4 classes; 3 is neither true nor predicted)
  # predictions 0 1 1 1 0
  # class 0: TP 1, FP 1, FN 1 -> F1 2/4 = 0.5; recall 1/2
  # class 1: TP 2, FP 1, FN 0 -> F1 4/5 = 0.8; recall 2/2
  # class 2: TP 0, FP 0, FN 1 -> F1 0;          recall 0/1
  # class 3: excluded (NaN); macro-F1 = (0.5 + 0.8 + 0) / 3
  got = evaluation.classification_metrics([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], 4)
  assert got['accuracy'] == pytest.approx(3 / 5)
  assert got['macro_f1'] == pytest.approx(1.3 / 3)
  np.testing.assert_allclose(got['per_class_f1'][:3], [0.5, 0.8, 0.0])
  np.testing.assert_allclose(got['per_class_accuracy'][:3], [0.5, 1.0, 0.0])
  assert np.isnan(got['per_class_f1'][3]) and np.isnan(got['per_class_accuracy'][3])
  # A class predicted but never true has F1 0 and counts in the mean; its accuracy is NaN.
  got = evaluation.classification_metrics([0, 0], [0, 1], 3)
  np.testing.assert_allclose(got['per_class_f1'][:2], [2 / 3, 0.0])
  assert got['macro_f1'] == pytest.approx(1 / 3)
  assert np.isnan(got['per_class_accuracy'][1])
  # All correct: macro-F1 1 over the classes present.
  assert evaluation.classification_metrics([2, 2, 0], [2, 2, 0], 5)['macro_f1'] == 1.0


@pytest.mark.parametrize('labels,predictions,num_classes,match', [
    ([], [], 3, 'at least one'), ([0, 3], [0, 1], 3, 'labels'), ([0, 1], [0, -1], 3, 'predictions'),
    ([0, 1], [0], 3, 'same length'), ([0, 1], [0, 1], 0, 'num_classes'),
    ([0.5, 1], [0, 1], 3, 'integer'), ([[0, 1]], [[0, 1]], 3, 'shape')])
def test_metrics_bad_input(labels, predictions, num_classes, match):
  with pytest.raises(ValueError, match=match):
    evaluation.classification_metrics(labels, predictions, num_classes)


# ---------------------------------------------------------------- evaluate / evaluate_arrays
def test_evaluate_dataset_matches_reference():
  weights, kernel, bias = _random_weights(0)
  x, y = _examples(1, 50)
  got = evaluation.evaluate(make_tiny_keras_model, weights, _dataset(x, y), batch_size=7)
  logits = _ref_logits(x, kernel.tolist(), bias.tolist())
  predictions = _ref_argmax(logits)
  assert got['num_examples'] == 50
  assert got['accuracy'] == pytest.approx(np.mean(predictions == y))
  assert got['loss'] == pytest.approx(np.mean(_ref_cross_entropy(y, logits)), rel=1e-5)
  assert got['macro_f1'] == pytest.approx(
      sklearn.metrics.f1_score(y, predictions, average='macro'))
  assert got['per_class_accuracy'].shape == (NUM_CLASSES,)
  assert list(got)[:3] == ['accuracy', 'loss', 'macro_f1']
  # Independent of the evaluation batch size; (x, y) pairs and [n, 1] labels work too.
  again = evaluation.evaluate(make_tiny_keras_model, weights,
                              tf.data.Dataset.from_tensor_slices((x, y[:, None])))
  assert again['accuracy'] == got['accuracy']
  assert again['loss'] == pytest.approx(got['loss'], rel=1e-6)
  # The same through evaluate_arrays with a model built here.
  model = make_tiny_keras_model()
  model.set_weights([kernel, bias])
  arrays = evaluation.evaluate_arrays(model, x, y, num_classes=NUM_CLASSES)
  for key in ('accuracy', 'loss', 'macro_f1', 'num_examples'):
    assert arrays[key] == pytest.approx(got[key], rel=1e-6)


def test_evaluate_with_custom_loss():
  weights, kernel, bias = _random_weights(2)
  x, y = _examples(3, 20)
  got = evaluation.evaluate(make_tiny_keras_model, weights, _dataset(x, y),
                            loss=losses.FocalLoss(gamma=2.0, beta=1.0))
  logits = _ref_logits(x, kernel.tolist(), bias.tolist())
  p_t = np.exp(-_ref_cross_entropy(y, logits))
  expected = np.mean(-(1 - p_t) ** 2 * np.log(p_t))
  assert got['loss'] == pytest.approx(expected, rel=1e-5)


def test_evaluate_client_data_per_client():
  weights, kernel, bias = _random_weights(4)
  clients = collections.OrderedDict()
  for k, n in enumerate([5, 12, 1, 9]):
    x, y = _examples(10 + k, n)
    clients[f'c{k}'] = collections.OrderedDict(x=x, y=y)
  client_data = tff.simulation.datasets.TestClientData(clients)
  got = evaluation.evaluate(make_tiny_keras_model, weights, client_data, per_client=True,
                            batch_size=4)
  x_all = np.concatenate([c['x'] for c in clients.values()])
  y_all = np.concatenate([c['y'] for c in clients.values()])
  central = evaluation.evaluate(make_tiny_keras_model, weights, _dataset(x_all, y_all))
  for key in ('accuracy', 'loss', 'macro_f1', 'num_examples'):
    assert got[key] == pytest.approx(central[key], rel=1e-6)
  per_client = got['per_client']
  assert per_client['client_ids'] == list(clients)
  np.testing.assert_array_equal(per_client['num_examples'], [5, 12, 1, 9])
  expected_acc, expected_loss = [], []
  for c in clients.values():
    logits = _ref_logits(c['x'], kernel.tolist(), bias.tolist())
    expected_acc.append(np.mean(_ref_argmax(logits) == c['y']))
    expected_loss.append(np.mean(_ref_cross_entropy(c['y'], logits)))
  np.testing.assert_allclose(per_client['accuracy'], expected_acc)
  np.testing.assert_allclose(per_client['loss'], expected_loss, rtol=1e-5)
  summary = got['per_client_accuracy_summary']
  assert summary['mean'] == pytest.approx(np.mean(expected_acc))
  assert summary['min'] == min(expected_acc) and summary['max'] == max(expected_acc)
  assert summary['p50'] == pytest.approx(np.median(expected_acc))
  assert summary['p10'] == pytest.approx(np.percentile(expected_acc, 10))
  # A subset of clients.
  subset = evaluation.evaluate(make_tiny_keras_model, weights, client_data, client_ids=['c1'])
  assert subset['num_examples'] == 12
  assert subset['accuracy'] == pytest.approx(expected_acc[1])


def test_evaluate_bad_input():
  weights, _, _ = _random_weights(0)
  x, y = _examples(1, 10)
  data = _dataset(x, y)
  cases = [
      (dict(test_data=data.batch(5)), 'UNBATCHED'),
      (dict(test_data=tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(pixels=x, label=y))), 'keys'),
      (dict(test_data=[x, y]), 'test_data'),
      (dict(num_classes=5), 'num_classes is 5'),
      (dict(num_classes=0), 'num_classes'),
      (dict(batch_size=0), 'batch_size'),
      (dict(per_client=True), 'ClientData'),
      (dict(loss='ce'), 'loss'),
      (dict(model_weights=tff.learning.models.ModelWeights(
          trainable=[np.zeros((4, 3), np.float32)], non_trainable=[])), '1 tensors'),
      (dict(model_weights=tff.learning.models.ModelWeights(
          trainable=[np.zeros((3, 4), np.float32), np.zeros(3, np.float32)], non_trainable=[])),
       'shape'),
      (dict(model_weights=[np.zeros((4, 3))]), 'ModelWeights'),
      (dict(test_data=_dataset(x[:0], y[:0])), 'no examples'),
      (dict(test_data=_dataset(x, y + 3)), r'labels.*\[0, 3\)'),
      (dict(keras_model_fn=None), 'keras_model_fn'),
      (dict(loss=tf.keras.losses.SparseCategoricalCrossentropy()), 'from_logits=False'),
      (dict(keras_model_fn=lambda: tf.keras.Sequential([
          tf.keras.layers.InputLayer(input_shape=(NUM_FEATURES,)),
          tf.keras.layers.Dense(NUM_CLASSES, activation='softmax')])),
       'outputs probabilities .* remove the softmax'),
  ]
  for overrides, match in cases:
    kwargs = dict(keras_model_fn=make_tiny_keras_model, model_weights=weights, test_data=data)
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=match):
      evaluation.evaluate(**kwargs)


@pytest.mark.parametrize('bad', [np.nan, np.inf])
def test_evaluate_non_finite_weights_reports_nan_not_a_chance_accuracy(bad):
  """argmax of NaN logits is class 0: without the check, diverged weights would score the share
  of class 0 (0.100 on a balanced 10-class test set) and a macro-F1 of its F1."""
  weights, kernel, bias = _random_weights(5)
  kernel = kernel.copy()
  kernel[0, 0] = bad
  clients = collections.OrderedDict()
  for k, n in enumerate([6, 4]):
    x, y = _examples(20 + k, n)
    if k == 1:
      x[:, 0] = 0.0   # 0 * inf = nan: this client's logits are all NaN too
    clients[f'c{k}'] = collections.OrderedDict(x=x, y=y)
  client_data = tff.simulation.datasets.TestClientData(clients)
  got = evaluation.evaluate(
      make_tiny_keras_model,
      tff.learning.models.ModelWeights(trainable=[kernel, bias], non_trainable=[]), client_data,
      per_client=True)
  assert math.isnan(got['accuracy']) and math.isnan(got['macro_f1'])
  for key in ('per_class_accuracy', 'per_class_f1', 'confusion_matrix'):
    assert np.all(np.isnan(got[key])), key
  assert np.all(np.isnan(got['per_client']['accuracy']))
  assert math.isnan(got['per_client_accuracy_summary']['mean'])
  assert got['num_examples'] == 10
  # The same weights with finite values give finite metrics (the check is on the logits).
  kernel[0, 0] = 0.0
  finite = evaluation.evaluate(
      make_tiny_keras_model,
      tff.learning.models.ModelWeights(trainable=[kernel, bias], non_trainable=[]), client_data)
  assert math.isfinite(finite['accuracy']) and finite['confusion_matrix'].dtype == np.int64


# ---------------------------------------------------------------- between TFF rounds
def _reference_accuracy(weights, x, y):
  logits = _ref_logits(x, np.asarray(weights.trainable[0]).tolist(),
                       np.asarray(weights.trainable[1]).tolist())
  return np.mean(_ref_argmax(logits) == y), np.mean(_ref_cross_entropy(y, logits))


def test_evaluate_between_rounds_of_a_tff_process():
  train = make_tiny_client_datasets(num_clients=2, examples_per_client=24, seed=5)
  test_x = np.concatenate([b['x'].numpy() for d in make_tiny_client_datasets(
      num_clients=1, examples_per_client=40, seed=5) for b in d])
  test_y = np.concatenate([b['y'].numpy() for d in make_tiny_client_datasets(
      num_clients=1, examples_per_client=40, seed=5) for b in d])
  test_data = _dataset(test_x, test_y)
  spec = train[0].element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        make_tiny_keras_model(), loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), input_spec=spec)

  def check(weights):
    got = evaluation.evaluate(make_tiny_keras_model, weights, test_data)
    accuracy, loss = _reference_accuracy(weights, test_x, test_y)
    assert got['accuracy'] == pytest.approx(accuracy)
    assert got['loss'] == pytest.approx(loss, rel=1e-5)
    return got

  # Evaluating first creates a Keras model eagerly before TFF traces model_fn ...
  initial_weights, _, _ = _random_weights(0)
  check(initial_weights)
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.5))
  state = process.initialize()
  results = [check(process.get_model_weights(state))]
  for _ in range(2):
    state = process.next(state, train).state
    results.append(check(process.get_model_weights(state)))
  # ... and a second process traced between evaluations does not break them either.
  other = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  check(other.get_model_weights(other.initialize()))
  state = process.next(state, train).state
  results.append(check(process.get_model_weights(state)))
  assert results[-1]['loss'] < results[0]['loss']


def test_evaluate_array_client_data_with_an_empty_client():
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  weights, kernel, bias = _random_weights(6)
  x, y = _examples(7, 30)
  partition = [np.arange(0, 10), np.arange(10, 10), np.arange(10, 30)]  # client 1 is empty
  client_data = data.partition_to_client_data(x, y, partition)
  got = evaluation.evaluate(make_tiny_keras_model, weights, client_data, per_client=True,
                            batch_size=8)
  ids = client_data.client_ids
  assert got['per_client']['client_ids'] == [ids[0], ids[2]]
  np.testing.assert_array_equal(got['per_client']['num_examples'], [10, 20])
  logits = _ref_logits(x, kernel.tolist(), bias.tolist())
  correct = _ref_argmax(logits) == y
  np.testing.assert_allclose(got['per_client']['accuracy'],
                             [correct[:10].mean(), correct[10:].mean()])
  assert got['accuracy'] == pytest.approx(correct.mean())


def test_non_trainable_weights_are_assigned_in_keras_order():
  def bn_model_fn():
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(NUM_FEATURES,)),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.Dense(NUM_CLASSES, kernel_initializer='zeros')])

  rng = np.random.default_rng(8)
  source = bn_model_fn()
  source.set_weights([rng.normal(size=w.shape).astype(np.float32) if i != 3 else
                      rng.uniform(0.5, 2.0, size=w.shape).astype(np.float32)  # moving variance
                      for i, w in enumerate(source.get_weights())])
  weights = tff.learning.models.ModelWeights.from_model(source)
  assert len(weights.non_trainable) == 2  # moving mean and variance
  x, y = _examples(9, 25)
  logits = source(x, training=False).numpy().astype(np.float64)
  got = evaluation.evaluate(bn_model_fn, weights, _dataset(x, y))
  assert got['accuracy'] == pytest.approx(np.mean(np.argmax(logits, axis=1) == y))
  assert got['loss'] == pytest.approx(np.mean(_ref_cross_entropy(y, logits)), rel=1e-5)
  swapped = tff.learning.models.ModelWeights(trainable=weights.trainable,
                                             non_trainable=weights.non_trainable[:1])
  with pytest.raises(ValueError, match='non_trainable has 1 tensors'):
    evaluation.evaluate(bn_model_fn, swapped, _dataset(x, y))


# ---- class co-occurrence in a partition and errors split by it ----------------------------------


def _cooccurrence_reference(counts):
  """Loops: s[a][c] = sum_k min(n_ka, n_kc) / min(n_a, n_c); NaN for a class without examples."""
  counts = np.asarray(counts, np.float64)
  num_clients, num_classes = counts.shape
  totals = [sum(counts[k][a] for k in range(num_clients)) for a in range(num_classes)]
  out = np.zeros((num_classes, num_classes))
  for a in range(num_classes):
    for c in range(num_classes):
      rarer = min(totals[a], totals[c])
      shared = sum(min(counts[k][a], counts[k][c]) for k in range(num_clients))
      out[a, c] = shared / rarer if rarer > 0 else np.nan
  return out


def test_class_cooccurrence_hand_worked():
  # Client 0 holds classes 0 and 1, client 1 holds 1 and 2; class 3 has no example.
  counts = [[4, 2, 0, 0],
            [0, 3, 5, 0]]
  s = evaluation.class_cooccurrence(counts)
  assert s[0, 1] == pytest.approx(2 / 4)   # min(4, 2) / min(4, 5)
  assert s[1, 2] == pytest.approx(3 / 5)   # min(3, 5) / min(5, 5)
  assert s[0, 2] == 0.0                    # never on the same client
  np.testing.assert_allclose(np.diag(s)[:3], 1.0)
  assert np.all(np.isnan(s[3])) and np.all(np.isnan(s[:, 3]))
  np.testing.assert_array_equal(s, s.T)


def test_class_cooccurrence_matches_loop_reference():
  rng = np.random.default_rng(5)
  counts = rng.integers(0, 6, size=(7, 5)) * (rng.random((7, 5)) < 0.5)
  np.testing.assert_allclose(evaluation.class_cooccurrence(counts),
                             _cooccurrence_reference(counts), rtol=1e-15, equal_nan=True)


def test_confusion_by_cooccurrence_hand_worked():
  cooccurrence = np.array([[1.0, 0.0, 0.5],
                           [0.0, 1.0, 0.05],
                           [0.5, 0.05, 1.0]])
  confusion = np.array([[6, 3, 1],     # class 0: 10 examples, 3 to the rare partner 1
                        [2, 8, 0],     # class 1: 10 examples
                        [0, 4, 16]])   # class 2: 20 examples, 4 to the rare partner 1
  got = evaluation.confusion_by_cooccurrence(confusion, cooccurrence, threshold=0.1)
  # Rare ordered pairs: (0,1), (1,0), (1,2), (2,1): rates 0.3, 0.2, 0.0, 0.2.
  assert got['num_rare_pairs'] == 4 and got['num_common_pairs'] == 2
  assert got['rare_pair_error'] == pytest.approx((0.3 + 0.2 + 0.0 + 0.2) / 4)
  # Common pairs: (0,2), (2,0): rates 0.1, 0.0.
  assert got['common_pair_error'] == pytest.approx(0.05)
  assert got['rare_error_share'] == pytest.approx((3 + 2 + 0 + 4) / 10)


def test_confusion_by_cooccurrence_edge_cases():
  # A class without test examples takes part in no pair; no rare pair gives NaN; no error too.
  confusion = np.array([[5, 0], [0, 0]])
  got = evaluation.confusion_by_cooccurrence(confusion, np.array([[1.0, 0.0], [0.0, 1.0]]))
  assert got['num_rare_pairs'] == 1 and got['num_common_pairs'] == 0
  assert got['rare_pair_error'] == 0.0 and np.isnan(got['common_pair_error'])
  assert np.isnan(got['rare_error_share'])
  with pytest.raises(ValueError, match='cooccurrence must have the shape'):
    evaluation.confusion_by_cooccurrence(np.eye(3), np.eye(2))
  with pytest.raises(ValueError, match='threshold must be a finite number'):
    evaluation.confusion_by_cooccurrence(np.eye(2), np.eye(2), threshold=float('nan'))
  with pytest.raises(ValueError, match='label_counts must have shape'):
    evaluation.class_cooccurrence([1, 2, 3])
  with pytest.raises(ValueError, match='label_counts must be finite and >= 0'):
    evaluation.class_cooccurrence([[1, -2]])


def test_mean_logit_is_the_mean_of_every_logit():
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(3,)),
                               tf.keras.layers.Dense(4)])
  x = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
  y = np.array([0, 1, 2, 3, 0, 1, 2])
  got = evaluation.evaluate_arrays(model, x, y, batch_size=3)
  logits = model(x).numpy().astype(np.float64)
  # float32 sums in another order: an error relative to the logits' size, not to their mean
  # (which a random initialisation can put near 0)
  assert got['mean_logit'] == pytest.approx(logits.mean(), abs=1e-6 * np.abs(logits).max())
  model.layers[-1].bias.assign(model.layers[-1].bias + 2.5)   # a shift of every logit
  shifted = evaluation.evaluate_arrays(model, x, y, batch_size=3)
  assert shifted['mean_logit'] == pytest.approx(got['mean_logit'] + 2.5, rel=1e-5)
  assert shifted['accuracy'] == got['accuracy']


def test_metrics_row_columns_pair_errors_and_global_training_loss():
  model = make_tiny_keras_model(NUM_FEATURES, NUM_CLASSES)
  (x, y), train = _examples(0, 9), _examples(1, 12)
  cooccurrence = evaluation.class_cooccurrence([[3, 2, 0], [0, 4, 1]])
  row, confusion = evaluation.metrics_row(model, x, y, NUM_CLASSES, prefix='val',
                                          cooccurrence=cooccurrence, train_arrays=train)
  assert tuple(row) == evaluation.metric_columns(NUM_CLASSES, prefix='val', pair_errors=True,
                                                 global_train=True)
  assert tuple(row)[:5] == ('val_accuracy', 'val_loss', 'val_macro_f1', 'val_mean_logit',
                            'val_class_accuracy/0')
  on_test, on_train = (evaluation.evaluate_arrays(model, *xy) for xy in ((x, y), train))
  np.testing.assert_array_equal(confusion, on_test['confusion_matrix'])
  assert row['val_loss'] == on_test['loss'] and row['val_mean_logit'] == on_test['mean_logit']
  pairs = evaluation.confusion_by_cooccurrence(confusion, cooccurrence)
  assert all(row[f'val_{c}'] == pytest.approx(pairs[c], nan_ok=True)
             for c in evaluation.PAIR_ERROR_COLUMNS)
  assert (row['global_train_loss'], row['global_train_accuracy']) == (
      on_train['loss'], on_train['accuracy'])
  plain, _ = evaluation.metrics_row(model, x, y, NUM_CLASSES, per_class=False)
  assert tuple(plain) == ('test_accuracy', 'test_loss', 'test_macro_f1')

"""Evaluation of a global model on a test split, centralized and per client: accuracy, macro-F1,
mean loss, per-class accuracy and label-skew diagnostics (docs/methods.md, "Evaluation")."""

import collections
import weakref
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks

__all__ = ['class_cooccurrence', 'classification_metrics', 'confusion_by_cooccurrence',
           'confusion_matrix', 'evaluate', 'evaluate_arrays', 'metric_columns', 'metrics_row']

DEFAULT_BATCH_SIZE = 1024
SUMMARY_PERCENTILES = (10, 25, 50, 75, 90)
DEFAULT_RARE_PAIR_THRESHOLD = 0.1
# Errors split by class co-occurrence in training (`confusion_by_cooccurrence`).
PAIR_ERROR_COLUMNS = ('rare_pair_error', 'common_pair_error', 'rare_error_share')
GLOBAL_TRAIN_COLUMNS = ('global_train_loss', 'global_train_accuracy')


def _check_num_classes(num_classes) -> int:
  return _checks.check_int('num_classes', num_classes, minimum=1)


def _check_batch_size(batch_size) -> int:
  return _checks.check_int('batch_size', batch_size, minimum=1)


def _check_labels(labels, num_classes: int, name: str = 'labels') -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim == 2 and labels.shape[1] == 1:
    labels = labels[:, 0]
  if labels.ndim != 1:
    raise _checks.ArgumentError(argument=name, value=labels, message=(
        f'{name} must have shape [n] or [n, 1], got shape {labels.shape}'))
  if labels.size and not np.all(np.equal(np.mod(labels, 1), 0)):
    raise _checks.ArgumentError(argument=name, value=labels, message=(
        f'{name} must be integer class indices, got non-integer values'))
  labels = labels.astype(np.int64)
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise _checks.ArgumentError(argument=name, value=labels, message=(
        f'{name} must lie in [0, {num_classes}), got values in '
        f'[{labels.min()}, {labels.max()}]'))
  return labels


def confusion_matrix(labels, predictions, num_classes: int) -> np.ndarray:
  """`[C, C]` int64 counts: row = true class, column = predicted class."""
  num_classes = _check_num_classes(num_classes)
  labels = _check_labels(labels, num_classes)
  predictions = _check_labels(predictions, num_classes, 'predictions')
  if labels.shape != predictions.shape:
    raise _checks.ArgumentError(argument='predictions', value=predictions, message=(
        f'labels and predictions must have the same length, got {labels.shape[0]} '
        f'and {predictions.shape[0]}'))
  matrix = np.zeros((num_classes, num_classes), np.int64)
  np.add.at(matrix, (labels, predictions), 1)
  return matrix


def class_cooccurrence(label_counts) -> np.ndarray:
  """How much two classes share clients, from a partition's `[clients, C]` label counts.

  `s[a, c] = sum_k min(n_ka, n_kc) / min(n_a, n_c)` for classes a != c, `n_ka` the examples of
  class a on client k and `n_a = sum_k n_ka`: the share of the rarer class's examples that sit
  on clients holding at least as many examples of the other class. 0 when no client holds
  both classes, 1 when they always appear together in equal or larger numbers. The diagonal is
  1; rows and columns of a class without examples are NaN.

  Why it matters: with cross-entropy, every example of class a pushes the logit of every other
  class c down, whatever else its client holds. With the fedga paper's calibrated labels
  (eq. 10) the push-down of logit c summed over a client's examples of class a is `N_c` times
  their mean `p_c`: it needs examples of c beside them (in the same mini-batch, with batch
  counts), so pairs with small `s` are almost never contrasted. `confusion_by_cooccurrence`
  splits test errors by `s`.

  Args:
    label_counts: `[K, C]` non-negative counts (e.g.
      `tff_conflict.data.summary.label_counts_of(train_data)`).

  Returns:
    float64 `[C, C]`, symmetric.

  Raises:
    ValueError: for a shape other than `[K, C]` or negative or non-finite counts.
  """
  counts = np.asarray(label_counts, dtype=np.float64)
  if counts.ndim != 2 or counts.shape[0] < 1 or counts.shape[1] < 1:
    raise _checks.ArgumentError(argument='label_counts', value=label_counts, message=(
        f'label_counts must have shape [clients, classes], got shape '
        f'{counts.shape}'))
  if not np.all(np.isfinite(counts)) or np.any(counts < 0):
    raise _checks.ArgumentError(argument='label_counts', value=label_counts, message=(
        'label_counts must be finite and >= 0'))
  shared = np.minimum(counts[:, :, np.newaxis], counts[:, np.newaxis, :]).sum(axis=0)
  totals = counts.sum(axis=0)
  rarer = np.minimum(totals[:, np.newaxis], totals[np.newaxis, :])
  with np.errstate(invalid='ignore', divide='ignore'):
    result = np.where(rarer > 0, shared / rarer, np.nan)
  return result


def confusion_by_cooccurrence(confusion, cooccurrence, *,
                              threshold: float = DEFAULT_RARE_PAIR_THRESHOLD
                              ) -> collections.OrderedDict:
  """Test errors split by whether the true and the predicted class share clients.

  Over the ordered pairs (a, c), a != c, whose true class a has test examples and whose
  `cooccurrence[a, c]` is defined, a pair is *rare* when `cooccurrence[a, c] < threshold` and
  *common* otherwise. The error rate of a pair is `confusion[a, c] / n_a` (the share of class a
  predicted as c).

  Args:
    confusion: `[C, C]` counts, rows true, columns predicted (`confusion_matrix`).
    cooccurrence: `[C, C]` from `class_cooccurrence` on the training partition.
    threshold: pairs below it are rare (default 0.1: less than a tenth of the rarer class's
      examples share a client with the other class).

  Returns:
    OrderedDict of floats: `rare_pair_error` and `common_pair_error` (mean pair error rate over
    rare / common pairs; NaN when there is no such pair), `rare_error_share` (the share of all
    misclassified test examples that fall on rare pairs; NaN without errors),
    `num_rare_pairs`, `num_common_pairs` (ints). If errors ignored the partition, the two rates
    would be about equal; a rare-pair rate far above the common-pair rate means the model
    confuses classes that no client contrasts.

  Raises:
    ValueError: for shapes that differ or are not square, or a threshold that is not finite.
  """
  confusion = np.asarray(confusion, dtype=np.float64)
  cooccurrence = np.asarray(cooccurrence, dtype=np.float64)
  if confusion.ndim != 2 or confusion.shape[0] != confusion.shape[1]:
    raise _checks.ArgumentError(argument='confusion', value=confusion, message=(
        f'confusion must be a square [C, C] matrix, got shape {confusion.shape}'))
  if cooccurrence.shape != confusion.shape:
    raise _checks.ArgumentError(argument='cooccurrence', value=cooccurrence, message=(
        f'cooccurrence must have the shape of confusion {confusion.shape}, got '
        f'{cooccurrence.shape}'))
  _checks.check_finite('threshold', threshold)
  support = confusion.sum(axis=1)
  off_diagonal = ~np.eye(confusion.shape[0], dtype=bool)
  valid = off_diagonal & (support[:, np.newaxis] > 0) & np.isfinite(cooccurrence)
  rare = valid & (cooccurrence < threshold)
  common = valid & ~rare
  with np.errstate(invalid='ignore', divide='ignore'):
    rates = confusion / support[:, np.newaxis]
  errors = float(confusion[off_diagonal].sum())
  return collections.OrderedDict(
      rare_pair_error=float(rates[rare].mean()) if rare.any() else float('nan'),
      common_pair_error=float(rates[common].mean()) if common.any() else float('nan'),
      rare_error_share=float(confusion[rare].sum() / errors) if errors > 0 else float('nan'),
      num_rare_pairs=int(rare.sum()),
      num_common_pairs=int(common.sum()))


def classification_metrics(labels, predictions, num_classes: int) -> collections.OrderedDict:
  """Accuracy, macro-F1, per-class accuracy and F1 from true and predicted class indices.

  Args:
    labels: true classes, shape `[n]` (or `[n, 1]`), integers in `[0, num_classes)`, n >= 1.
    predictions: predicted classes, same shape and range.
    num_classes: C.

  Returns:
    OrderedDict with `accuracy`, `macro_f1` (floats), `per_class_accuracy`, `per_class_f1`
    (float64 `[C]`, NaN where undefined, docs/methods.md, "Evaluation"), `per_class_num_examples`
    (int64 `[C]`), `confusion_matrix` (int64 `[C, C]`, rows true), `num_examples` (int).

  Raises:
    ValueError: for no examples, bad shapes or labels out of range.
  """
  matrix = confusion_matrix(labels, predictions, num_classes)
  total = int(matrix.sum())
  if total == 0:
    raise _checks.ArgumentError(argument='labels', value=labels, message=(
        'labels must hold at least one example, got none'))
  true_positives = np.diag(matrix).astype(np.float64)
  support = matrix.sum(axis=1)
  predicted = matrix.sum(axis=0)
  with np.errstate(invalid='ignore', divide='ignore'):
    per_class_accuracy = np.where(support > 0, true_positives / support, np.nan)
    f1_denominator = support + predicted  # 2 TP + FP + FN
    per_class_f1 = np.where(f1_denominator > 0, 2.0 * true_positives / f1_denominator, np.nan)
  return collections.OrderedDict(
      accuracy=float(true_positives.sum() / total),
      macro_f1=float(np.nanmean(per_class_f1)),
      per_class_accuracy=per_class_accuracy,
      per_class_f1=per_class_f1,
      per_class_num_examples=support,
      confusion_matrix=matrix,
      num_examples=total)


def _resolve_loss(loss) -> tf.keras.losses.Loss:
  if loss is None:
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  if not isinstance(loss, tf.keras.losses.Loss):
    raise _checks.ArgumentError(argument='loss', value=loss, message=(
        f'loss must be a tf.keras.losses.Loss on (sparse labels, logits) or None, '
        f'got {loss!r}'))
  if loss.get_config().get('from_logits') is False:
    raise _checks.ArgumentError(argument='loss', value=loss, message=(
        f'loss {loss.name!r} has from_logits=False, so it reads the model\'s '
        'output as probabilities; the models here output logits: pass '
        f'{type(loss).__name__}(from_logits=True)'))
  return loss


_forward_functions: 'weakref.WeakKeyDictionary[tf.keras.Model, Any]' = weakref.WeakKeyDictionary()


def _forward(keras_model: tf.keras.Model) -> Callable[[np.ndarray], tf.Tensor]:
  """`keras_model(x, training=False)` as a `tf.function` traced once per model (batches of any
  size): an eager Keras call dispatches every layer's ops from Python, which costs more than the
  arithmetic of a small model on a test split."""
  forward = _forward_functions.get(keras_model)
  if forward is None:
    model = weakref.ref(keras_model)  # the cache must not keep the model alive
    forward = tf.function(lambda x: model()(x, training=False), reduce_retracing=True,
                          autograph=False)
    _forward_functions[keras_model] = forward
  return forward


def _evaluate_model(keras_model: tf.keras.Model, x: np.ndarray, y: np.ndarray,
                    num_classes: Optional[int], loss: tf.keras.losses.Loss, batch_size: int):
  """Predictions and metrics of a built model on arrays; returns (result, labels, predictions,
  per-example losses). Labels are checked against the model's output width before the loss runs.
  """
  logits = []
  forward = _forward(keras_model)
  for start in range(0, x.shape[0], batch_size):
    logits.append(np.asarray(forward(x[start:start + batch_size])))
  logits = np.concatenate(logits)
  if logits.ndim != 2:
    raise _checks.ArgumentError(argument='keras_model', value=keras_model, message=(
        'the model must output [batch, num_classes] logits, got shape '
        f'{logits.shape[1:]} per example'))
  if num_classes is None:
    num_classes = logits.shape[1]
  elif num_classes != logits.shape[1]:
    raise _checks.ArgumentError(argument='num_classes', value=num_classes, message=(
        f'num_classes is {num_classes}, but the model outputs {logits.shape[1]} '
        'logits per example'))
  if np.all(logits >= 0) and np.allclose(logits.sum(axis=1), 1.0, rtol=0.0, atol=1e-4):
    raise _checks.ArgumentError(argument='keras_model', value=keras_model, message=(
        'the model outputs probabilities (every output row is >= 0 and sums to 1: '
        'it applies softmax); evaluation takes logits: remove the softmax'))
  labels = _check_labels(y, num_classes, 'labels of the test data')
  per_example = []
  for start in range(0, x.shape[0], batch_size):
    # `Loss.call` is the unreduced per-example loss for Keras' own losses and this project's.
    values = loss.call(tf.constant(labels[start:start + batch_size].astype(np.int32)),
                       tf.constant(logits[start:start + batch_size]))
    per_example.append(np.reshape(np.asarray(values, np.float64), [-1]))
  per_example = np.concatenate(per_example)
  predictions = np.argmax(logits, axis=1)
  result = classification_metrics(labels, predictions, num_classes)
  defined = np.all(np.isfinite(logits), axis=1)
  if not np.all(defined):
    # argmax of NaN is 0: the metrics of undefined predictions would look like a real model's.
    for key in ('accuracy', 'macro_f1'):
      result[key] = float('nan')
    for key in ('per_class_accuracy', 'per_class_f1'):
      result[key] = np.full(num_classes, np.nan)
    result['confusion_matrix'] = np.full((num_classes, num_classes), np.nan)
  result['loss'] = float(np.mean(per_example))
  result['mean_logit'] = float(np.mean(logits, dtype=np.float64))
  result.move_to_end('loss', last=False)
  result.move_to_end('accuracy', last=False)
  return result, labels, np.where(defined, predictions, -1), per_example


def evaluate_arrays(keras_model: tf.keras.Model, x, y, *, num_classes: Optional[int] = None,
                    loss: Optional[tf.keras.losses.Loss] = None,
                    batch_size: int = DEFAULT_BATCH_SIZE) -> collections.OrderedDict:
  """Evaluates a built Keras model (logits output) on arrays `x` `[n, ...]`, `y` `[n]`.

  Args:
    keras_model: a Keras model whose output is `[batch, C]` logits (its weights already set).
    x: inputs, first dimension n >= 1.
    y: integer labels `[n]` or `[n, 1]` in `[0, C)`.
    num_classes: C; None takes the model's output width (given, it must equal it).
    loss: a `tf.keras.losses.Loss` on (sparse labels, logits); None for sparse softmax
      cross-entropy. Its unreduced `call` is averaged over all n examples (a loss that depends on
      the batch, like `CalibratedLabelLoss(counts="batch")`, sees batches of `batch_size`).
    batch_size: examples per forward pass.

  Returns:
    `classification_metrics(...)` plus `loss` and `mean_logit` (floats; see `evaluate`).

  Raises:
    ValueError: for bad arguments, no examples, or labels/outputs of the wrong shape.
  """
  batch_size = _check_batch_size(batch_size)
  loss = _resolve_loss(loss)
  if num_classes is not None:
    num_classes = _check_num_classes(num_classes)
  x = np.asarray(x)
  y = np.asarray(y)
  if x.ndim < 1 or x.shape[0] == 0:
    raise _checks.ArgumentError(argument='x', value=x, message=(
        f'x must hold at least one example, got shape {x.shape}'))
  if y.shape[:1] != x.shape[:1]:
    raise _checks.ArgumentError(argument='y', value=y, message=(
        f'x and y must have the same number of examples, got {x.shape[0]} and '
        f'{y.shape[:1]}'))
  return _evaluate_model(keras_model, x, y, num_classes, loss, batch_size)[0]


def metric_columns(num_classes: int, *, prefix: str = 'test', per_class: bool = True,
                   pair_errors: bool = False, global_train: bool = False) -> tuple[str, ...]:
  """`metrics_row`'s columns: `<prefix>_accuracy`, `_loss`, `_macro_f1`; with `per_class`,
  `_mean_logit`, `_class_accuracy/<k>`; with `pair_errors`, `PAIR_ERROR_COLUMNS` (prefixed);
  with `global_train`, `GLOBAL_TRAIN_COLUMNS`."""
  columns = [f'{prefix}_{c}' for c in ('accuracy', 'loss', 'macro_f1')]
  if per_class:
    columns += [f'{prefix}_mean_logit'] + [f'{prefix}_class_accuracy/{k}'
                                           for k in range(num_classes)]
  if pair_errors:
    columns += [f'{prefix}_{c}' for c in PAIR_ERROR_COLUMNS]
  return tuple(columns) + (GLOBAL_TRAIN_COLUMNS if global_train else ())


def metrics_row(keras_model: tf.keras.Model, x, y, num_classes: int, *, prefix: str = 'test',
                per_class: bool = True, cooccurrence=None,
                train_arrays: Optional[tuple] = None) -> tuple[dict[str, float], Any]:
  """({`metric_columns` column: float}, confusion matrix) of a built model on (x, y)
  (`evaluate_arrays`): class-pair errors by `cooccurrence` (`class_cooccurrence`) where given;
  with `train_arrays` (every client's (x, y)), the objective `sum_k n_k/n F_k(w)` (FedProx's
  "training loss", Li et al., MLSys 2020, Fig. 1-2)."""
  result = evaluate_arrays(keras_model, x, y, num_classes=num_classes)
  values = [result['accuracy'], result['loss'], result['macro_f1']]
  if per_class:
    values += [result['mean_logit'], *np.asarray(result['per_class_accuracy']).reshape(-1)]
  if cooccurrence is not None:
    pairs = confusion_by_cooccurrence(result['confusion_matrix'], cooccurrence)
    values += [pairs[c] for c in PAIR_ERROR_COLUMNS]
  if train_arrays is not None:
    on_train = evaluate_arrays(keras_model, *train_arrays, num_classes=num_classes)
    values += [on_train['loss'], on_train['accuracy']]
  columns = metric_columns(num_classes, prefix=prefix, per_class=per_class,
                           pair_errors=cooccurrence is not None,
                           global_train=train_arrays is not None)
  return ({c: float(v) for c, v in zip(columns, values, strict=True)},
          result['confusion_matrix'])


def _pair_fn(spec, name: str):
  """Checks an element spec of unbatched `OrderedDict(x, y)` or `(x, y)`; returns (to_pair, x_spec)."""
  if isinstance(spec, collections.abc.Mapping):
    if set(spec) != {'x', 'y'}:
      raise _checks.ArgumentError(argument=name, value=spec, message=(
          f'{name} elements must be OrderedDict(x=..., y=...) or (x, y), got keys '
          f'{sorted(spec)}'))
    x_spec, y_spec = spec['x'], spec['y']
    to_pair = lambda e: (e['x'], e['y'])
  elif isinstance(spec, tuple) and len(spec) == 2:
    x_spec, y_spec = spec
    to_pair = lambda x, y: (x, y)
  else:
    raise _checks.ArgumentError(argument=name, value=spec, message=(
        f'{name} elements must be OrderedDict(x=..., y=...) or (x, y), got {spec}'))
  if y_spec.shape.rank not in (0, 1) or (y_spec.shape.rank == 1 and y_spec.shape[0] != 1):
    raise _checks.ArgumentError(argument=name, value=spec, message=(
        f'{name} must hold UNBATCHED examples with scalar labels, got label shape '
        f'{y_spec.shape} (call .unbatch() on a batched dataset)'))
  return to_pair, x_spec


def _collect(batches):
  """Concatenates `(x, y[, ...])` numpy batches; empty arrays of the right shape if none."""
  columns = None
  for batch in batches:
    if columns is None:
      columns = [[] for _ in batch]
    for column, value in zip(columns, batch):
      column.append(value.numpy())
  if columns is None:
    return None
  return [np.concatenate(c) for c in columns]


def _dataset_arrays(dataset: tf.data.Dataset, batch_size: int, name: str):
  """All `(x, y)` of an unbatched dataset of `OrderedDict(x=..., y=...)` (or `(x, y)` pairs)."""
  to_pair, x_spec = _pair_fn(dataset.element_spec, name)
  arrays = _collect(dataset.map(to_pair).batch(batch_size))
  if arrays is None:
    return (np.zeros((0,) + tuple(x_spec.shape), x_spec.dtype.as_numpy_dtype),
            np.zeros((0,), np.int64))
  x, y = arrays
  return x, y.reshape(y.shape[0])


def _client_data_arrays(client_data, ids: list, batch_size: int):
  """All `(x, y)` of the clients `ids` in order, and each client's number of examples.

  One tf.data pipeline over every client (`serializable_dataset_fn` + `flat_map`), batched,
  instead of a Python loop over `create_tf_dataset_for_client`.
  """
  if not ids:
    raise _checks.ArgumentError(argument='test_data', value=client_data, message=(
        'test_data holds no clients'))
  first = client_data.create_tf_dataset_for_client(ids[0])
  to_pair, x_spec = _pair_fn(first.element_spec, f'test_data client {ids[0]!r}')
  dataset_fn = client_data.serializable_dataset_fn

  def tagged(k, cid):
    return dataset_fn(cid).map(lambda *e: (k,) + to_pair(*e))

  pipeline = tf.data.Dataset.from_tensor_slices(tf.constant(ids)).enumerate().flat_map(tagged)
  arrays = _collect(pipeline.batch(batch_size))
  if arrays is None:
    return (np.zeros((0,) + tuple(x_spec.shape), x_spec.dtype.as_numpy_dtype),
            np.zeros((0,), np.int64), np.zeros(len(ids), np.int64))
  k, x, y = arrays
  sizes = np.bincount(k, minlength=len(ids)).astype(np.int64)
  if np.any(np.diff(k) < 0):
    raise _checks.ArgumentError(argument='test_data', value=client_data, message=(
        'test_data: examples of different clients came interleaved'))
  return x, y.reshape(y.shape[0]), sizes


def _assign_weights(keras_model: tf.keras.Model, model_weights) -> None:
  """Checks count and shapes (TFF's `assign_weights_to` zips silently), then assigns."""
  trainable = list(model_weights.trainable)
  non_trainable = list(model_weights.non_trainable)
  for name, variables, values in (('trainable', keras_model.trainable_weights, trainable),
                                  ('non_trainable', keras_model.non_trainable_weights,
                                   non_trainable)):
    if len(variables) != len(values):
      raise _checks.ArgumentError(argument='model_weights', value=model_weights, message=(
          f'model_weights.{name} has {len(values)} tensors, the model from '
          f'keras_model_fn has {len(variables)}'))
    for variable, value in zip(variables, values):
      if tuple(variable.shape) != tuple(np.shape(value)):
        raise _checks.ArgumentError(argument='model_weights', value=model_weights, message=(
            f'model_weights.{name}: shape {tuple(np.shape(value))} does not match '
            f'{variable.name} of shape {tuple(variable.shape)}'))
  for variable, value in zip(keras_model.trainable_weights + keras_model.non_trainable_weights,
                             trainable + non_trainable):
    variable.assign(value)


def _summary(values: np.ndarray) -> collections.OrderedDict:
  summary = collections.OrderedDict(
      mean=float(np.mean(values)), std=float(np.std(values)), min=float(np.min(values)))
  for q in SUMMARY_PERCENTILES:
    summary[f'p{q}'] = float(np.percentile(values, q))
  summary['max'] = float(np.max(values))
  return summary


def evaluate(keras_model_fn: Callable[[], tf.keras.Model], model_weights: Any,
             test_data: Union[tf.data.Dataset, tff.simulation.datasets.ClientData], *,
             num_classes: Optional[int] = None, loss: Optional[tf.keras.losses.Loss] = None,
             batch_size: int = DEFAULT_BATCH_SIZE,
             per_client: bool = False,
             client_ids: Optional[Sequence[str]] = None) -> collections.OrderedDict:
  """Evaluates TFF model weights on a test split, centralized and optionally per client.

  Args:
    keras_model_fn: no-argument callable returning a new Keras model with `[batch, C]` logits
      output (the one the learning process was built with; compiled or not).
    model_weights: `tff.learning.models.ModelWeights`, e.g. `process.get_model_weights(state)`;
      its `trainable` / `non_trainable` lists must match the Keras model's weights in order and
      shape.
    test_data: a `tf.data.Dataset` of UNBATCHED examples `OrderedDict(x=..., y=int scalar)` (or
      `(x, y)` pairs), or a `tff.simulation.datasets.ClientData` of such datasets; centralized
      metrics pool every client's examples.
    num_classes: C; None takes the model's output width.
    loss: a `tf.keras.losses.Loss` on (sparse labels, logits) averaged over examples; None for
      sparse softmax cross-entropy.
    batch_size: examples per forward pass (evaluation only; results do not depend on it unless
      the loss does).
    per_client: with a ClientData, also report each client's metrics.
    client_ids: with a ClientData, the clients to evaluate (default: all, in ClientData order).

  Returns:
    OrderedDict with `accuracy`, `loss`, `macro_f1`, `mean_logit`, `per_class_accuracy`,
    `per_class_f1`, `per_class_num_examples`, `confusion_matrix`, `num_examples` (see
    `classification_metrics` and docs/methods.md, "Evaluation"),
    and, when `per_client=True`:
      `per_client`: OrderedDict(`client_ids` list, `accuracy`, `loss` float64 `[K]`,
        `num_examples` int64 `[K]`) over the clients with at least one example;
      `per_client_accuracy_summary`: OrderedDict(`mean`, `std`, `min`, `p10`, `p25`, `p50`, `p75`,
        `p90`, `max`) of the per-client accuracies (unweighted: each client counts once).

    With non-finite logits the prediction-based metrics are NaN (docs/methods.md, "Evaluation").

  Raises:
    ValueError: for bad arguments (before any model is built), an empty test split, weights that
      do not fit the model, a model that outputs probabilities, or labels out of range.
  """
  if not callable(keras_model_fn):
    raise _checks.ArgumentError(argument='keras_model_fn', value=keras_model_fn, message=(
        f'keras_model_fn must be a callable returning a Keras model, got '
        f'{keras_model_fn!r}'))
  batch_size = _check_batch_size(batch_size)
  loss = _resolve_loss(loss)
  if num_classes is not None:
    num_classes = _check_num_classes(num_classes)
  per_client = _checks.check_bool('per_client', per_client)
  is_client_data = isinstance(test_data, tff.simulation.datasets.ClientData)
  if not is_client_data and not isinstance(test_data, tf.data.Dataset):
    raise _checks.ArgumentError(argument='test_data', value=test_data, message=(
        'test_data must be a tf.data.Dataset or a '
        f'tff.simulation.datasets.ClientData, got {type(test_data).__name__}'))
  if not is_client_data and (per_client or client_ids is not None):
    raise _checks.ArgumentError(argument='per_client', value=per_client, message=(
        'per_client and client_ids need test_data to be a ClientData, got a '
        'tf.data.Dataset'))
  if not hasattr(model_weights, 'trainable') or not hasattr(model_weights, 'non_trainable'):
    raise _checks.ArgumentError(argument='model_weights', value=model_weights, message=(
        'model_weights must be a tff.learning.models.ModelWeights (with trainable '
        f'and non_trainable), got {type(model_weights).__name__}'))

  if is_client_data:
    ids = list(test_data.client_ids) if client_ids is None else list(client_ids)
    unknown = sorted(set(ids) - set(test_data.client_ids))
    if unknown:
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          f'client_ids not in test_data: {unknown[:5]}'))
    x, y, sizes = _client_data_arrays(test_data, ids, batch_size)
  else:
    x, y = _dataset_arrays(test_data, batch_size, 'test_data')
  if y.shape[0] == 0:
    raise _checks.ArgumentError(argument='test_data', value=test_data, message=(
        'test_data holds no examples'))

  # A new model on every call (docs/methods.md, "Evaluation": Keras models and TFF tracing).
  keras_model = keras_model_fn()
  if not isinstance(keras_model, tf.keras.Model):
    raise _checks.ArgumentError(argument='keras_model_fn', value=keras_model_fn, message=(
        f'keras_model_fn must return a tf.keras.Model, got {keras_model!r}'))
  _assign_weights(keras_model, model_weights)
  result, labels, predictions, per_example = _evaluate_model(
      keras_model, x, y, num_classes, loss, batch_size)
  del keras_model

  if per_client:
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    kept = [k for k in range(len(ids)) if sizes[k] > 0]
    correct = np.where(predictions >= 0, predictions == labels, np.nan)
    result['per_client'] = collections.OrderedDict(
        client_ids=[ids[k] for k in kept],
        accuracy=np.array([correct[bounds[k]:bounds[k + 1]].mean() for k in kept], np.float64),
        loss=np.array([per_example[bounds[k]:bounds[k + 1]].mean() for k in kept], np.float64),
        num_examples=sizes[kept])
    result['per_client_accuracy_summary'] = _summary(result['per_client']['accuracy'])
  return result

"""The models the learning builders accept (`resolve_model`), and the `model_fn` TFF's learning
templates need (`build_model_fn`). What is refused: docs/design.md, "Models and client work".
"""

import collections
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import _compat
from tff_conflict.learning import checking

MetricsArg = Optional[Union[Callable[[], Sequence[tf.keras.metrics.Metric]],
                            Sequence[tf.keras.metrics.Metric]]]
ModelArg = Union[Callable[[], tf.keras.Model],
                 Callable[[], tff.learning.models.VariableModel],
                 tff.learning.models.FunctionalModel]
InputSpecArg = Optional[Union[Mapping[str, tf.TensorSpec], Sequence[tf.TensorSpec]]]

KERAS = 'keras'
VARIABLE = 'variable'
FUNCTIONAL = 'functional'

_MODEL_FN_CONTRACT = ('a no-argument function returning a new uncompiled tf.keras.Model or a new '
                      'tff.learning.models.VariableModel, or a '
                      'tff.learning.models.FunctionalModel')


def default_metrics() -> list[tf.keras.metrics.Metric]:
  """The metrics every builder reports unless told otherwise: sparse categorical accuracy."""
  return [tf.keras.metrics.SparseCategoricalAccuracy()]


def resolve_metrics(metrics: MetricsArg) -> Callable[[], list[tf.keras.metrics.Metric]]:
  """A no-argument factory of new Keras metrics from `metrics`.

  Args:
    metrics: None (sparse categorical accuracy), a no-argument callable returning a list of new
      Keras metrics, or a list of Keras metric objects (copied with `from_config` per model).

  Raises:
    ValueError: if `metrics` is none of those.
  """
  if metrics is None:
    return default_metrics
  if callable(metrics) and not isinstance(metrics, tf.keras.metrics.Metric):
    return lambda: list(metrics())
  if isinstance(metrics, Sequence) and not isinstance(metrics, str) and all(
      isinstance(m, tf.keras.metrics.Metric) for m in metrics):
    configs = [(type(m), m.get_config()) for m in metrics]
    return lambda: [cls.from_config(cfg) for cls, cfg in configs]
  raise _checks.ArgumentError(argument='metrics', value=metrics, message=(
      'metrics must be None, a no-argument callable returning a list of Keras '
      f'metrics, or a list of Keras metric objects, got {metrics!r}'))


def check_input_spec(input_spec: Any) -> Union[collections.OrderedDict, tuple]:
  """`input_spec` as TFF takes it: `OrderedDict(x=..., y=...)` or a tuple `(x, y)`.

  Raises:
    ValueError: unless `input_spec` is a mapping with exactly the keys "x" and "y", or a
      two-element tuple or list, of `tf.TensorSpec`s with integer labels `y`.
  """
  if isinstance(input_spec, Mapping) and set(input_spec) == {'x', 'y'}:
    spec = collections.OrderedDict(x=input_spec['x'], y=input_spec['y'])
    names = ('input_spec["x"]', 'input_spec["y"]')
  elif isinstance(input_spec, (tuple, list)) and len(input_spec) == 2 and not hasattr(
      input_spec, '_fields'):
    spec = tuple(input_spec)
    names = ('input_spec[0]', 'input_spec[1]')
  else:
    raise _checks.ArgumentError(argument='input_spec', value=input_spec, message=(
        'input_spec must be the element spec of a client batch: a mapping with '
        'exactly the keys "x" and "y", or a tuple (x, y), of tf.TensorSpec, got '
        f'{input_spec!r}'))
  x, y = split_input_spec(spec)
  for name, value in zip(names, (x, y)):
    if not isinstance(value, tf.TensorSpec):
      raise _checks.ArgumentError(argument=name, value=value, message=(
          f'{name} must be a tf.TensorSpec, got {value!r}'))
  if not y.dtype.is_integer:
    raise _checks.ArgumentError(argument=names[1], value=y, message=(
        f'{names[1]} must hold integer class labels (sparse labels), got {y!r}'))
  if y.shape.rank is not None and y.shape.rank >= 2 and y.shape[1:].as_list() != [1]:
    raise _checks.ArgumentError(argument=names[1], value=y, message=(
        f'{names[1]} must hold sparse labels of shape [batch] (or [batch, 1]), one '
        f'class index per example; got shape {y.shape}, which looks like one-hot '
        'labels: map the data with y = tf.argmax(y, axis=-1)'))
  return spec


def split_input_spec(input_spec) -> tuple[Any, Any]:
  """`(x_spec, y_spec)` of an `OrderedDict(x, y)` or an `(x, y)` input spec."""
  if isinstance(input_spec, Mapping):
    return input_spec['x'], input_spec['y']
  return input_spec[0], input_spec[1]


def batch_labels(batch) -> tf.Tensor:
  """The labels of a client batch, a mapping with key "y" or an `(x, y)` tuple."""
  return batch['y'] if isinstance(batch, Mapping) else batch[1]


@dataclasses.dataclass(frozen=True)
class ResolvedModel:
  """What a builder was given as its model (`resolve_model`).

  Attributes:
    kind: `KERAS`, `VARIABLE` or `FUNCTIONAL`.
    keras_model_fn: the Keras model function (`KERAS` only, else None).
    variable_model_fn: a no-argument function returning a new `VariableModel` (`VARIABLE` and
      `FUNCTIONAL`; for `KERAS` the builder makes one with `build_model_fn`).
    input_spec: the client batch spec (`KERAS`: as given; otherwise the model's).
    num_classes: the number of logits (`KERAS` only, else None).
    functional_model: the `FunctionalModel` (`FUNCTIONAL` only, else None).
  """
  kind: str
  keras_model_fn: Optional[Callable[[], tf.keras.Model]]
  variable_model_fn: Optional[Callable[[], tff.learning.models.VariableModel]]
  input_spec: Any
  num_classes: Optional[int]
  functional_model: Optional[tff.learning.models.FunctionalModel] = None

  @property
  def description(self) -> str:
    return {KERAS: 'a Keras model', VARIABLE: 'a tff.learning.models.VariableModel',
            FUNCTIONAL: 'a tff.learning.models.FunctionalModel'}[self.kind]


def _probe_batch(x_spec: tf.TensorSpec, batch: int) -> tf.Tensor:
  """A fixed batch of `batch` inputs of `x_spec` (unknown dimensions 1): uniform in [0, 1) for
  floats, zeros otherwise."""
  shape = [batch] + [1 if d is None else d for d in x_spec.shape.as_list()[1:]]
  if x_spec.dtype.is_floating:
    values = np.random.default_rng(0).uniform(size=shape)
    return tf.constant(values, dtype=x_spec.dtype)
  return tf.zeros(shape, x_spec.dtype)


def build_on_input_spec(model: tf.keras.Model, input_spec) -> tf.keras.Model:
  """Creates the weights of a Keras model that has none yet (a subclassed model gets its weights
  when first called) by calling it on one zero batch of `input_spec`'s x; returns the model."""
  if not model.built or not model.weights:
    x_spec, _ = split_input_spec(input_spec)
    model(tf.zeros([1 if d is None else d for d in x_spec.shape.as_list()], x_spec.dtype))
  return model


def _softmax_layer(model: tf.keras.Model) -> Optional[str]:
  """The name of the last layer of a Sequential or functional model when it applies softmax
  (a `Softmax` layer, or a layer whose `activation` is softmax), else None."""
  layer = model
  while isinstance(layer, tf.keras.Model) and (
      isinstance(layer, tf.keras.Sequential) or _compat.keras_is_functional(layer)):
    if not layer.layers:
      return None
    layer = layer.layers[-1]
  if isinstance(layer, tf.keras.layers.Softmax):
    return layer.name
  activation = getattr(layer, 'activation', None)
  if activation is not None and getattr(activation, '__name__', '') == 'softmax':
    return layer.name
  return None


_LOGITS_NEEDED = ('the losses and metrics here take logits (softmax is applied inside the loss); '
                  'remove the softmax from the model (its argmax, hence its accuracy, is '
                  'unchanged)')


def _check_keras_model(model: tf.keras.Model, input_spec) -> int:
  """The number of classes of an uncompiled Keras model applied to `input_spec`'s x; refuses a
  model with several outputs, no trainable weights, or probabilities (softmax) as output.

  Runs inside a throwaway graph: the probabilities check runs the model once on a fixed batch in
  a `tf.compat.v1.Session` of that graph.
  """
  if _compat.keras_is_compiled(model) or getattr(model, 'optimizer', None) is not None:
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        'model_fn must return an uncompiled tf.keras.Model (TFF trains it with its '
        f'own optimizers), got a compiled model {model.name!r}'))
  x_spec, _ = split_input_spec(input_spec)
  x = tf.compat.v1.placeholder(x_spec.dtype, x_spec.shape)
  try:
    out = model(x)
  except Exception as e:  # pylint: disable=broad-except
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        f'model_fn\'s Keras model cannot be applied to the input spec\'s x = '
        f'{x_spec!r}: {e}')) from e
  if not isinstance(out, tf.Tensor):
    count = len(out) if isinstance(out, (list, tuple, Mapping)) else type(out).__name__
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        'model_fn\'s Keras model must have one output, the logits [batch, '
        f'num_classes]; got {count} outputs'))
  shape = out.shape
  if shape.rank != 2 or shape[-1] is None or shape[-1] < 2:
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        'model_fn\'s Keras model must output logits of shape [batch, num_classes] '
        f'with num_classes >= 2, got output shape {shape}'))
  if not model.trainable_weights:
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        f'model_fn\'s Keras model {model.name!r} has no trainable weights after '
        'being applied to the input spec\'s x: there is nothing to train'))
  layer = _softmax_layer(model)
  if layer is not None:
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        f'model_fn\'s Keras model ends in softmax (layer {layer!r}) and so outputs '
        f'probabilities; {_LOGITS_NEEDED}'))
  try:
    probe = model(_probe_batch(x_spec, 3), training=False)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.variables_initializer(model.variables))
      values = session.run(probe)
  except Exception:  # pylint: disable=broad-except
    values = None  # e.g. a model with lookup tables: only its last layer is checked
  if values is not None and np.all(values >= 0) and np.allclose(
      values.sum(axis=-1), 1.0, rtol=0.0, atol=1e-4):
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        f'model_fn\'s Keras model {model.name!r} outputs probabilities (every '
        f'output row is >= 0 and sums to 1: it applies softmax); {_LOGITS_NEEDED}'))
  return int(shape[-1])


def _in_current_graph(variable) -> bool:
  try:
    return variable.graph is tf.compat.v1.get_default_graph()
  except (AttributeError, RuntimeError):  # an eager variable
    return False


def _check_new_model_per_call(first, second, kind: str) -> None:
  """Refuses a `model_fn` whose two calls (inside one graph) return the same model, models
  sharing variables, or a model whose variables were created outside the call."""
  if first is second:
    problem = 'two calls returned the same object'
  elif {id(v) for v in first.trainable_variables} & {id(v) for v in second.trainable_variables}:
    problem = 'two calls returned models sharing variables'
  elif not all(_in_current_graph(v) for v in (list(first.trainable_variables) +
                                              list(first.non_trainable_variables))):
    problem = 'it returned a model whose variables were created before the call'
  else:
    return
  raise _checks.ArgumentError(argument='model_fn', value=first, message=(
      f'model_fn must create a new {kind} on every call (TFF calls it several '
      f'times, each time in its own graph); {problem}: build the model (and its '
      'layers) inside model_fn'))


def _same_spec(a, b) -> bool:
  try:
    tf.nest.assert_same_structure(a, b)
  except (TypeError, ValueError):
    return False
  return all(isinstance(s, tf.TensorSpec) and isinstance(t, tf.TensorSpec)
             and s.dtype == t.dtype and s.shape.is_compatible_with(t.shape)
             for s, t in zip(tf.nest.flatten(a), tf.nest.flatten(b)))


def resolve_model(model_fn: ModelArg, input_spec: InputSpecArg = None) -> ResolvedModel:
  """Checks a builder's model argument and `input_spec`; calls `model_fn` once, in a throwaway
  graph (a Keras model created eagerly before TFF traces a model_fn is invalidated; see
  BUILD_NOTES.md).

  Args:
    model_fn: a no-argument function returning a new uncompiled Keras model (`x` to logits, with
      `input_spec`), a function returning a `tff.learning.models.VariableModel`, or a
      `tff.learning.models.FunctionalModel` (docs/design.md, "Models and client work").
    input_spec: required with a Keras model (`check_input_spec`); optional otherwise, and then it
      must match the model's own `input_spec`.

  Raises:
    ValueError: on anything else, naming the argument and the value.
  """
  checking.stop_at_model(model_fn)
  if input_spec is not None:
    input_spec = check_input_spec(input_spec)
  if isinstance(model_fn, tff.learning.models.FunctionalModel):
    resolved = ResolvedModel(FUNCTIONAL, None, functional_model_fn(model_fn),
                             model_fn.input_spec, None, model_fn)
  elif not callable(model_fn):
    raise _checks.ArgumentError(argument='model_fn', value=model_fn, message=(
        f'model_fn must be {_MODEL_FN_CONTRACT}, got {model_fn!r}'))
  else:
    with tf.Graph().as_default():
      try:
        model = model_fn()
      except Exception as e:  # pylint: disable=broad-except
        hint = (' (model_fn uses a layer or model created outside it, in another graph: build '
                'the model and its layers inside model_fn)' if 'same graph' in str(e) else '')
        raise _checks.ArgumentError(argument='model_fn', value=model_fn, message=(
            f'model_fn must be {_MODEL_FN_CONTRACT}; calling it (inside a '
            f'tf.Graph, as TFF does) raised {type(e).__name__}: {e}{hint}')) from e
      if isinstance(model, tf.keras.Model):
        if input_spec is None:
          raise _checks.ArgumentError(argument='input_spec', value=input_spec, message=(
              'input_spec is required with a Keras model (as in '
              'tff.learning.models.from_keras_model): OrderedDict(x=..., y=...) or '
              '(x, y) of tf.TensorSpec'))
        second = model_fn()
        _check_new_model_per_call(model, second, 'Keras model')
        num_classes = _check_keras_model(model, input_spec)
        _check_new_model_per_call(model, build_on_input_spec(second, input_spec), 'Keras model')
        return ResolvedModel(KERAS, model_fn, None, input_spec, num_classes)
      if not isinstance(model, tff.learning.models.VariableModel):
        raise _checks.ArgumentError(argument='model_fn', value=model_fn, message=(
            f'model_fn must be {_MODEL_FN_CONTRACT}; the function returned '
            f'{model!r}'))
      _check_new_model_per_call(model, model_fn(), 'VariableModel')
      resolved = ResolvedModel(VARIABLE, None, model_fn, model.input_spec, None)
  if input_spec is not None and not _same_spec(input_spec, resolved.input_spec):
    raise _checks.ArgumentError(argument='input_spec', value=input_spec, message=(
        f'input_spec must match the input_spec of the model '
        f'({resolved.input_spec!r}) or be left out, got {input_spec!r}'))
  return resolved


def functional_model_fn(
    functional_model: tff.learning.models.FunctionalModel,
    metrics_fn: Optional[Callable[[], list[tf.keras.metrics.Metric]]] = None
) -> Callable[[], tff.learning.models.VariableModel]:
  """A no-argument function returning `functional_model` as a new `VariableModel` with the
  Keras metrics of `metrics_fn` (none by default; loss and number of examples are always
  reported)."""
  constructors = ()
  if metrics_fn is not None:
    with tf.Graph().as_default():
      count = len(metrics_fn())
    constructors = tuple(functools.partial(lambda i: metrics_fn()[i], i) for i in range(count))
  return lambda: tff.learning.models.model_from_functional(functional_model, constructors)


def label_checked(loss_fn: Callable[[], tf.keras.losses.Loss], num_classes: int
                  ) -> Callable[[], tf.keras.losses.Loss]:
  """`loss_fn` whose losses first assert that every label is in `[0, num_classes)`.

  The labels exist only when a round runs, so a model with fewer outputs than the data has
  classes cannot be refused when the process is built; this makes the first batch fail with a
  message that says so, instead of a loss that reads a label out of range (an all-zero one-hot
  row gives a wrong loss without an error). The loss object keeps its type and attributes.
  """
  def make():
    loss = loss_fn()
    call = loss.call

    @tf.autograph.experimental.do_not_convert  # no control flow; see process._set_dataset_counts
    def checked_call(y_true, y_pred):
      labels = tf.cast(tf.reshape(y_true, [-1]), tf.int64)
      message = (f'labels must be class indices in [0, {num_classes}): the model outputs '
                 f'{num_classes} logits, and the data hold a label outside that range (fewer '
                 'outputs than classes?)')
      checks = [tf.debugging.assert_non_negative(labels, message=message),
                tf.debugging.assert_less(labels, tf.constant(num_classes, tf.int64),
                                         message=message)]
      with tf.control_dependencies(checks):
        return call(tf.identity(y_true), y_pred)

    loss.call = checked_call
    return loss

  return make


def build_model_fn(keras_model_fn: Callable[[], tf.keras.Model], *,
                   input_spec: Any,
                   loss_fn: Callable[[], tf.keras.losses.Loss],
                   metrics_fn: Callable[[], list[tf.keras.metrics.Metric]] = default_metrics
                   ) -> Callable[[], tff.learning.models.VariableModel]:
  """A TFF `model_fn`: a new `VariableModel` from new Keras model, loss and metrics objects.

  Args:
    keras_model_fn: no-argument callable returning a new, uncompiled Keras model (logits).
    input_spec: the element spec of a client batch, `OrderedDict(x=..., y=...)` or `(x, y)`.
    loss_fn: no-argument callable returning a new `tf.keras.losses.Loss` on (labels, logits).
    metrics_fn: no-argument callable returning a list of new Keras metrics.
  """
  def model_fn():
    model = tff.learning.models.from_keras_model(
        build_on_input_spec(keras_model_fn(), input_spec), loss=loss_fn(),
        input_spec=input_spec, metrics=metrics_fn())
    return model

  return model_fn

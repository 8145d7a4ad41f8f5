"""The models the learning builders accept, and the `model_fn` TFF's learning templates need.

The builders take what TFF's own algorithm builders take, plus Keras:

* a no-argument function returning a new, uncompiled `tf.keras.Model` mapping `x` to logits
  `[batch, num_classes]` (then `input_spec` is required, as for
  `tff.learning.models.from_keras_model`, and the method chooses the loss);
* a no-argument function returning a new `tff.learning.models.VariableModel`;
* a `tff.learning.models.FunctionalModel`.

A `VariableModel` or `FunctionalModel` computes its own loss, which cannot be replaced: methods
that change the client loss (FedMGC's focal loss, FedGA's calibrated labels, FedLD's margin
control) need a Keras model; the server-side methods (FedAvg, FedProx, FedGH, DGC, principal
gradients, corrective weights) work with any of the three. A `VariableModel` reports its own
metrics. A `FunctionalModel` runs as `tff.learning.models.model_from_functional(model,
metric_constructors)`: it reports its loss and number of examples, plus the Keras metrics passed
as `metrics` (its functional metrics are not carried over).

`input_spec` is the element spec of a client batch, as `from_keras_model` accepts it:
`OrderedDict(x=tf.TensorSpec, y=tf.TensorSpec)` (batches are mappings) or a tuple `(x_spec,
y_spec)` (batches are tuples), with integer labels `y`.

`build_model_fn` wraps `tff.learning.models.from_keras_model`; each call builds a new Keras model,
a new loss and new metrics (TFF traces `model_fn` several times, each time in its own graph).
"""

import collections
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

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
  raise ValueError('metrics must be None, a no-argument callable returning a list of Keras '
                   f'metrics, or a list of Keras metric objects, got {metrics!r}')


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
    raise ValueError('input_spec must be the element spec of a client batch: a mapping with '
                     'exactly the keys "x" and "y", or a tuple (x, y), of tf.TensorSpec, got '
                     f'{input_spec!r}')
  x, y = split_input_spec(spec)
  for name, value in zip(names, (x, y)):
    if not isinstance(value, tf.TensorSpec):
      raise ValueError(f'{name} must be a tf.TensorSpec, got {value!r}')
  if not y.dtype.is_integer:
    raise ValueError(f'{names[1]} must hold integer class labels (sparse labels), got {y!r}')
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


def _check_keras_model(model: tf.keras.Model, input_spec) -> int:
  """The number of classes of an uncompiled Keras model applied to `input_spec`'s x."""
  if getattr(model, '_is_compiled', False) or getattr(model, 'optimizer', None) is not None:
    raise ValueError('model_fn must return an uncompiled tf.keras.Model (TFF trains it with its '
                     f'own optimizers), got a compiled model {model.name!r}')
  x_spec, _ = split_input_spec(input_spec)
  x = tf.compat.v1.placeholder(x_spec.dtype, x_spec.shape)
  try:
    out = model(x)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'model_fn\'s Keras model cannot be applied to the input spec\'s x = '
                     f'{x_spec!r}: {e}') from e
  shape = out.shape
  if shape.rank != 2 or shape[-1] is None or shape[-1] < 2:
    raise ValueError('model_fn\'s Keras model must output logits of shape [batch, num_classes] '
                     f'with num_classes >= 2, got output shape {shape}')
  return int(shape[-1])


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
    model_fn: see the module docstring.
    input_spec: required with a Keras model (`check_input_spec`); optional otherwise, and then it
      must match the model's own `input_spec`.

  Raises:
    ValueError: on anything else, naming the argument and the value.
  """
  if input_spec is not None:
    input_spec = check_input_spec(input_spec)
  if isinstance(model_fn, tff.learning.models.FunctionalModel):
    resolved = ResolvedModel(FUNCTIONAL, None, functional_model_fn(model_fn),
                             model_fn.input_spec, None, model_fn)
  elif not callable(model_fn):
    raise ValueError(f'model_fn must be {_MODEL_FN_CONTRACT}, got {model_fn!r}')
  else:
    with tf.Graph().as_default():
      try:
        model = model_fn()
      except Exception as e:  # pylint: disable=broad-except
        raise ValueError(f'model_fn must be {_MODEL_FN_CONTRACT}; calling it (inside a '
                         f'tf.Graph, as TFF does) raised {type(e).__name__}: {e}') from e
      if isinstance(model, tf.keras.Model):
        if input_spec is None:
          raise ValueError('input_spec is required with a Keras model (as in '
                           'tff.learning.models.from_keras_model): OrderedDict(x=..., y=...) or '
                           '(x, y) of tf.TensorSpec')
        return ResolvedModel(KERAS, model_fn, None, input_spec,
                             _check_keras_model(model, input_spec))
      if not isinstance(model, tff.learning.models.VariableModel):
        raise ValueError(f'model_fn must be {_MODEL_FN_CONTRACT}; the function returned '
                         f'{model!r}')
      resolved = ResolvedModel(VARIABLE, None, model_fn, model.input_spec, None)
  if input_spec is not None and not _same_spec(input_spec, resolved.input_spec):
    raise ValueError(f'input_spec must match the input_spec of the model '
                     f'({resolved.input_spec!r}) or be left out, got {input_spec!r}')
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
        keras_model_fn(), loss=loss_fn(), input_spec=input_spec, metrics=metrics_fn())
    return model

  return model_fn

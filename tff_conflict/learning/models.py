"""From an uncompiled Keras model to the `model_fn` TFF's learning templates need.

`build_model_fn` wraps `tff.learning.models.from_keras_model`; each call builds a new Keras model,
a new loss and new metrics (TFF traces `model_fn` several times, each time in its own graph).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

MetricsArg = Optional[Union[Callable[[], Sequence[tf.keras.metrics.Metric]],
                            Sequence[tf.keras.metrics.Metric]]]


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


def build_model_fn(keras_model_fn: Callable[[], tf.keras.Model], *,
                   input_spec: Mapping[str, Any],
                   loss_fn: Callable[[], tf.keras.losses.Loss],
                   metrics_fn: Callable[[], list[tf.keras.metrics.Metric]] = default_metrics
                   ) -> Callable[[], tff.learning.models.VariableModel]:
  """A TFF `model_fn`: a new `VariableModel` from new Keras model, loss and metrics objects.

  Args:
    keras_model_fn: no-argument callable returning a new, uncompiled Keras model (logits).
    input_spec: the element spec of a client batch, `OrderedDict(x=..., y=...)`.
    loss_fn: no-argument callable returning a new `tf.keras.losses.Loss` on (labels, logits).
    metrics_fn: no-argument callable returning a list of new Keras metrics.
  """
  def model_fn():
    model = tff.learning.models.from_keras_model(
        keras_model_fn(), loss=loss_fn(), input_spec=input_spec, metrics=metrics_fn())
    return model

  return model_fn

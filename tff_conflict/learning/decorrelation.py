"""FedDecorr's client model: the user model's logits, and in a training call `beta * L_decorr(z)`
as its losses, z the input of its last (Dense) layer. docs/methods.md, "FedDecorr".
"""

import functools
from collections.abc import Callable

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import _compat
from tff_conflict import hparams
from tff_conflict import losses
from tff_conflict.learning import models as models_lib


def classifier_layer(model: tf.keras.Model) -> tf.keras.layers.Dense:
  """The last layer of a Sequential or functional Keras model when it is a `Dense` layer (the
  classifier, whose input is the representation); ValueError otherwise."""
  graph_network = isinstance(model, tf.keras.Sequential) or _compat.keras_is_functional(model)
  if not graph_network or not model.layers:
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        'FedDecorr regularizes the representations feeding the model\'s last (classifier) layer: '
        'model_fn must return a Sequential or functional Keras model whose last layer is '
        f'tf.keras.layers.Dense; got {type(model).__name__} {model.name!r}, whose layers cannot '
        'be read'))
  last = model.layers[-1]
  if not isinstance(last, tf.keras.layers.Dense):
    raise _checks.ArgumentError(argument='model_fn', value=model, message=(
        'FedDecorr regularizes the representations feeding the model\'s last (classifier) layer: '
        'model_fn must return a Sequential or functional Keras model whose last layer is '
        f'tf.keras.layers.Dense; the last layer of {model.name!r} is {last.name!r} '
        f'({type(last).__name__})'))
  return last


class DecorrelatedModel(tf.keras.Model):
  """`model` with FedDecorr's term: `call` returns `model`'s logits and, when `training`, sets
  `self.losses` to `[beta * losses.decorrelation_loss(z, form=form)]`, z the input of
  `model`'s last Dense layer (`[]` after a call that is not training). Its variables are
  `model`'s, in `model`'s order."""

  def __init__(self, model: tf.keras.Model, *, beta: float, form: str):
    super().__init__(name=f'{model.name}_feddecorr')
    head = classifier_layer(model)
    self._beta = hparams.FEDDECORR_BETA.check(beta)
    self._form = hparams.FEDDECORR_FORM.check(form)
    # One graph network with two outputs: the logits and the classifier's input.
    self.network = tf.keras.Model(model.inputs, [model.outputs[0], head.input])

    self._term = None

  def call(self, inputs, training=None):  # pylint: disable=arguments-differ
    logits, representations = self.network(inputs, training=training)
    self._term = None
    if training and self._beta > 0.0:
      self._term = self._beta * losses.decorrelation_loss(
          tf.cast(representations, tf.float32), form=self._form)
    return logits

  @property
  def losses(self):
    """The decorrelation term of the latest call, when it was a training call.

    Not Keras's `add_loss`: in TFF's graph-mode computations Keras keeps every symbolic loss ever
    added, so a later trace would read tensors of an earlier graph.
    """
    return [] if self._term is None else [self._term]


def decorrelated_model_fn(keras_model_fn: Callable[[], tf.keras.Model], input_spec, *,
                          num_classes: int, metrics_fn: Callable[[], list],
                          beta: float = hparams.FEDDECORR_BETA.default,
                          form: str = hparams.FEDDECORR_FORM.default
                          ) -> Callable[[], tff.learning.models.VariableModel]:
  """A TFF `model_fn`: `from_keras_model` of `DecorrelatedModel(keras_model_fn())` with
  cross-entropy (labels checked against `num_classes`) and `metrics_fn()`, whose training loss is
  `CE + beta L_decorr(z)`.

  TFF 0.87's Keras model runs the Keras model inside its own `tf.function`
  (`predict_on_batch`) and then adds `keras_model.losses` to the loss in the caller's graph; a
  tensor made inside that function cannot be read there. The model's `predict_on_batch` is
  therefore the plain call, so that the term is made in the graph that reads it (the forward
  pass is still one `tf.function`, TFF's `forward_pass`).
  """
  beta = hparams.FEDDECORR_BETA.check(beta)
  form = hparams.FEDDECORR_FORM.check(form)
  loss_fn = models_lib.label_checked(
      lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), num_classes)

  def model_fn():
    keras_model = DecorrelatedModel(models_lib.build_on_input_spec(keras_model_fn(), input_spec),
                                    beta=beta, form=form)
    model = tff.learning.models.from_keras_model(keras_model, loss=loss_fn(),
                                                 input_spec=input_spec, metrics=metrics_fn())
    model.predict_on_batch = functools.partial(_predict, keras_model)
    return model

  return model_fn


def _predict(keras_model, x, training=True):
  return keras_model(x, training=training)


def check_trained_representation(model: tf.keras.Model) -> None:
  """ValueError when no trainable weight of `model` lies before its classifier layer (e.g.
  softmax regression, whose z is its flattened input): then `L_decorr(z)` has no gradient with
  respect to the weights, and FedDecorr trains exactly as FedAvg.

  Whether a weight lies before it is read from the gradient of `z` on one zero batch of the
  model's input (None for every trainable weight: z does not depend on them).
  """
  head = classifier_layer(model)
  inputs = model.inputs
  if not inputs or len(inputs) != 1:
    return   # DecorrelatedModel reads z through the model's single input
  upstream = [v for v in model.trainable_variables
              if not any(v is w for w in head.trainable_variables)]
  network = tf.keras.Model(inputs, head.input)
  x = tf.zeros([1 if d is None else d for d in inputs[0].shape], inputs[0].dtype)
  with tf.GradientTape() as tape:
    z = tf.reduce_sum(tf.cast(network(x, training=True), tf.float32))
  if upstream and any(g is not None for g in tape.gradient(z, upstream)):
    return
  raise _checks.ArgumentError(argument='model_fn', value=model, message=(
      'FedDecorr regularizes the representations z feeding the model\'s last (classifier) '
      f'layer, and in {model.name!r} no trainable weight lies before that layer '
      f'{head.name!r}: z is the input itself (up to reshaping), so the term beta L_decorr(z) '
      'has no gradient and FedDecorr would train exactly as FedAvg; use a model with '
      'a trainable layer before the classifier'))


def check_decorrelatable(keras_model_fn: Callable[[], tf.keras.Model], input_spec) -> None:
  """Builds one model in a throwaway graph and checks it has a Dense classifier layer with
  trainable weights before it (`check_trained_representation`)."""
  with tf.Graph().as_default():
    check_trained_representation(models_lib.build_on_input_spec(keras_model_fn(), input_spec))

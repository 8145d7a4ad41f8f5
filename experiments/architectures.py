"""Keras models by name: `MODELS[name](input_shape, num_classes, *, seed=0)` is a new uncompiled
model from inputs to logits, its initializers seeded by `seed`; `DEFAULT_MODELS` per dataset. The
character models take int32 character ids `[L]` and predict the next one of `num_classes`."""

import itertools
import math
from typing import Callable, Iterator, Sequence

import tensorflow as tf

from tff_conflict import _checks
from tff_conflict.data import registry

ModelFn = Callable[..., tf.keras.Model]
_L = tf.keras.layers


def _glorot(seeds: Iterator[int]):
  return tf.keras.initializers.GlorotUniform(seed=next(seeds))


def _dense(seeds, units, activation='relu'):
  return _L.Dense(units, activation=activation, kernel_initializer=_glorot(seeds))


def _torch_dense(seeds, units, fan_in, activation='relu'):
  """PyTorch's default `nn.Linear` initialisation: weights (kaiming_uniform, a = sqrt(5)) and
  biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
  uniform = lambda: tf.keras.initializers.RandomUniform(
      -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in), seed=next(seeds))
  return _L.Dense(units, activation=activation, kernel_initializer=uniform(),
                  bias_initializer=uniform())


def _conv(seeds, filters, size, padding='same'):
  return _L.Conv2D(filters, size, padding=padding, activation='relu',
                   kernel_initializer=_glorot(seeds))


def _image_layers(input_shape):
  """(H, W) or (S*S,) inputs reshaped to (H, W, 1)."""
  if len(input_shape) == 3:
    return []
  if len(input_shape) == 2:
    return [_L.Reshape(input_shape + (1,))]
  side = math.isqrt(input_shape[0])
  if len(input_shape) == 1 and side * side == input_shape[0]:
    return [_L.Reshape((side, side, 1))]
  raise _checks.ArgumentError.must_be('input_shape', input_shape, 'a shape (H, W), (H, W, C) or '
                                     '(S*S,) for an image model')


def _model(name: str, input_shape, num_classes, seed, body, image=True,
           logits=lambda seeds, n: _dense(seeds, n, None)) -> tf.keras.Model:
  """`body(seeds)`'s layers between the input (reshaped to an image, or flattened) and a dense
  layer of logits (`logits(seeds, num_classes)`); the initializers take seeds 1000 seed + 1,
  + 2, ... in layer order."""
  input_shape = tuple(int(d) for d in input_shape)
  if not input_shape or any(d < 1 for d in input_shape):
    raise _checks.ArgumentError.must_be('input_shape', input_shape, 'one or more sizes >= 1')
  _checks.check_int('num_classes', num_classes, minimum=2)
  seeds = itertools.count(int(seed) * 1000 + 1)
  head = _image_layers(input_shape) if image else [_L.Flatten()]
  layers = [*head, *body(seeds), logits(seeds, int(num_classes))]
  if not any(isinstance(layer, _L.BatchNormalization) for layer in layers):
    return tf.keras.Sequential([_L.InputLayer(input_shape=input_shape), *layers], name=name)
  out = inputs = tf.keras.Input(shape=input_shape)  # batch norm: with the batch's statistics
  for layer in layers:
    out = layer(out, training=True) if isinstance(layer, _L.BatchNormalization) else layer(out)
  return tf.keras.Model(inputs, out, name=name)


def logistic_regression(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """Softmax regression, logits = x W + b (x flattened): FedProx's synthetic experiments (Li et
  al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Sec.
  5.1). LEAF's `models/synthetic/log_reg.py` adds a sigmoid before the softmax; this does not."""
  return _model('logistic_regression', input_shape, num_classes, seed, lambda s: [], image=False)


def mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's 2NN, dense(200) - dense(200) (McMahan et al., "Communication-Efficient Learning of
  Deep Networks from Decentralized Data", AISTATS 2017, arXiv:1602.05629, Sec. 3)."""
  return _model('mlp', input_shape, num_classes, seed,
                lambda s: [_dense(s, 200), _dense(s, 200)], image=False)


def small_mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """One hidden layer of 128 ReLU units: the 28x28 datasets' model on a CPU (its round time:
  BENCHMARKS.md)."""
  return _model('small_mlp', input_shape, num_classes, seed, lambda s: [_dense(s, 128)],
                image=False)


def torch_mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """`small_mlp` initialised as PyTorch's `nn.Linear` is: the FedGA authors' MLP 784-128-10
  (github.com/Xiao-Chenguang/FedGA; docs/experiments.md, "FedGA's Table 1 beside ours")."""
  fan_in = math.prod(int(d) for d in input_shape)
  return _model('torch_mlp', input_shape, num_classes, seed,
                lambda s: [_torch_dense(s, 128, fan_in)], image=False,
                logits=lambda s, n: _torch_dense(s, n, 128, None))


def digits_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """A small CNN for 8x8 digits (about 22k parameters, no dropout)."""
  return _model('digits_cnn', input_shape, num_classes, seed, lambda s: [
      _conv(s, 16, 3), _L.MaxPooling2D(2), _conv(s, 32, 3), _L.Flatten(), _dense(s, 64)])


def fedavg_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's CNN for MNIST: two 5x5 convolutions, dense(512) (McMahan et al. 2017, Sec. 3)."""
  return _model('fedavg_cnn', input_shape, num_classes, seed, lambda s: [
      _conv(s, 32, 5), _L.MaxPooling2D(2, padding='same'), _conv(s, 64, 5),
      _L.MaxPooling2D(2, padding='same'), _L.Flatten(), _dense(s, 512)])


def fedmgc_fmnist_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedMGC's Fashion-MNIST CNN: two 5x5 convolutions, each followed by a 2x2 max-pool, then the
  dense layer of logits (Wang et al., "Joint Focal Loss and Dominant Gradient Correction for
  Gradient Conflict in Federated Learning", Sec. V-A). The paper gives no widths; these are
  FedAvg's MNIST CNN's, 32 and 64 filters (`fedavg_cnn` without its dense(512))."""
  return _model('fedmgc_fmnist_cnn', input_shape, num_classes, seed, lambda s: [
      _conv(s, 32, 5), _L.MaxPooling2D(2, padding='same'), _conv(s, 64, 5),
      _L.MaxPooling2D(2, padding='same'), _L.Flatten()])


def emnist_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """TFF's EMNIST CNN (google-research/federated `create_conv_dropout_model`), its dropout
  seeded too."""
  return _model('emnist_cnn', input_shape, num_classes, seed, lambda s: [
      _conv(s, 32, 3, 'valid'), _conv(s, 64, 3, 'valid'), _L.MaxPooling2D(2),
      _L.Dropout(0.25, seed=next(s)), _L.Flatten(), _dense(s, 128),
      _L.Dropout(0.5, seed=next(s))])


def cifar_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's CIFAR CNN: two 5x5 convolutions, dense(384), dense(192) (McMahan et al. 2017)."""
  return _model('cifar_cnn', input_shape, num_classes, seed, lambda s: [
      _conv(s, 64, 5), _L.MaxPooling2D(3, strides=2, padding='same'), _conv(s, 64, 5),
      _L.MaxPooling2D(3, strides=2, padding='same'), _L.Flatten(), _dense(s, 384),
      _dense(s, 192)])


def leaf_femnist_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """LEAF's FEMNIST CNN: two 5x5 convolutions (32, 64) each with a 2x2 max-pool, dense(2048)
  (Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv:1812.01097,
  `models/femnist/cnn.py`)."""
  return _model('leaf_femnist_cnn', input_shape, num_classes, seed, lambda s: [
      _conv(s, 32, 5), _L.MaxPooling2D(2, strides=2), _conv(s, 64, 5),
      _L.MaxPooling2D(2, strides=2), _L.Flatten(), _dense(s, 2048)])


def leaf_celeba_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """LEAF's CelebA CNN (Caldas et al., arXiv:1812.01097, `models/celeba/cnn.py`): four blocks of
  conv3x3(32) - batch norm - 2x2 max-pool - ReLU.

  As LEAF's `batch_normalization(out, training=True)`, batch norm always uses the batch's own
  statistics, in evaluation too; its moving averages (which federated averaging of trainable
  weights would leave stale) are never used.
  """
  return _model('leaf_celeba_cnn', input_shape, num_classes, seed, lambda s: [
      layer for _ in range(4) for layer in (
          _L.Conv2D(32, 3, padding='same', kernel_initializer=_glorot(s)),
          _L.BatchNormalization(), _L.MaxPooling2D(2, strides=2, padding='same'), _L.ReLU())
  ] + [_L.Flatten()])


def _char_model(name: str, input_shape, num_classes, seed, cells) -> tf.keras.Model:
  """int32 ids `[L]` -> an 8-dimensional embedding of the `num_classes` characters -> the
  recurrent layers `cells(seeds)` (the last one's final output) -> a dense layer of logits;
  initializers seeded as `_model`'s."""
  input_shape = tuple(int(d) for d in input_shape)
  if len(input_shape) != 1 or input_shape[0] < 1:
    raise _checks.ArgumentError.must_be('input_shape', input_shape, 'a shape (L,) of L >= 1 '
                                       'character ids for a character model')
  _checks.check_int('num_classes', num_classes, minimum=2)
  seeds = itertools.count(int(seed) * 1000 + 1)
  embedding = _L.Embedding(int(num_classes), 8, embeddings_initializer=(
      tf.keras.initializers.RandomUniform(-0.05, 0.05, seed=next(seeds))))
  return tf.keras.Sequential([
      _L.InputLayer(input_shape=input_shape, dtype=tf.int32), embedding, *cells(seeds),
      _dense(seeds, int(num_classes), None)], name=name)


def _recurrent(layer, seeds, units, last=True):
  return layer(units, return_sequences=not last, kernel_initializer=_glorot(seeds),
               recurrent_initializer=tf.keras.initializers.Orthogonal(seed=next(seeds)))


def leaf_shakespeare_lstm(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """LEAF's Shakespeare model: embedding(8) - LSTM(256) - LSTM(256) - dense on the last step
  (Caldas et al., arXiv:1812.01097, `models/shakespeare/stacked_lstm.py`; FedAvg's character
  LSTM, McMahan et al. 2017). About 820k parameters for 80 characters: a model for a GPU."""
  return _char_model('leaf_shakespeare_lstm', input_shape, num_classes, seed, lambda s: [
      _recurrent(_L.LSTM, s, 256, last=False), _recurrent(_L.LSTM, s, 256)])


# The characters `shakespeare_gru` reads: the last of each window.
SHAKESPEARE_GRU_CONTEXT = 20


def shakespeare_gru(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """A small character model for the CPU grid: embedding(8) of the `SHAKESPEARE_GRU_CONTEXT`
  last characters of the window - GRU(64) - dense on the last step, about 20k parameters for 80
  characters. The recurrence over 20 steps instead of 80 makes a training step about 7 times
  cheaper (BENCHMARKS.md, "Shakespeare models"); the label is still the character after the
  whole window."""
  def cells(seeds):
    crop = max(0, int(input_shape[0]) - SHAKESPEARE_GRU_CONTEXT)
    return [_L.Cropping1D((crop, 0)), _recurrent(_L.GRU, seeds, 64)]
  return _char_model('shakespeare_gru', input_shape, num_classes, seed, cells)


MODELS: dict[str, ModelFn] = {f.__name__: f for f in (
    logistic_regression, mlp, small_mlp, torch_mlp, digits_cnn, fedavg_cnn, fedmgc_fmnist_cnn, emnist_cnn,
    cifar_cnn, leaf_femnist_cnn, leaf_celeba_cnn, leaf_shakespeare_lstm, shakespeare_gru)}

# The model of each dataset of `tff_conflict.data`, declared in its module (`info.Dataset.model`).
DEFAULT_MODELS = {name: entry.model for name, entry in registry.DATASETS.items()}


def get(name: str) -> ModelFn:
  if name not in MODELS:
    raise _checks.ArgumentError.must_be('model', name, _checks.one_of(sorted(MODELS)))
  return MODELS[name]

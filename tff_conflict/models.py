"""Keras models by name: `MODELS[name](input_shape, num_classes, *, seed=0)` is a new uncompiled
model from inputs to logits, its initializers seeded by `seed`; `DEFAULT_MODELS[dataset]` names each
dataset's. The character models take int32 character ids `[L]` and predict the next character."""

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
  """PyTorch's `nn.Linear` initialisation: weights and biases U(+-1/sqrt(fan_in))."""
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
  """input (reshaped to an image, or flattened) -> `body(seeds)` -> `logits(seeds, num_classes)`;
  the initializers take seeds 1000 seed + 1, + 2, ... in layer order."""
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


def _image_model(name: str, body, image: bool = True) -> ModelFn:
  """`MODELS[name]`: `_model` of `body`, on an image (or a flattened input: `image=False`)."""
  def build(input_shape: Sequence[int], num_classes: int, *, seed: int = 0) -> tf.keras.Model:
    return _model(name, input_shape, num_classes, seed, body, image)
  build.__name__ = build.__qualname__ = name
  return build


def _two_convs(pool, dense=()):
  """conv5x5(32) - pool - conv5x5(64) - pool - flatten - dense(units) for each of `dense`."""
  return lambda s: [_conv(s, 32, 5), pool(), _conv(s, 64, 5), pool(), _L.Flatten(),
                    *[_dense(s, units) for units in dense]]


# Softmax regression, logits = x W + b: FedProx's synthetic experiments (Li et al., "Federated
# Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Sec. 5.1); LEAF's
# `models/synthetic/log_reg.py` adds a sigmoid before the softmax, this does not.
logistic_regression = _image_model('logistic_regression', lambda s: [], image=False)
# FedAvg's 2NN (McMahan et al., "Communication-Efficient Learning of Deep Networks from
# Decentralized Data", AISTATS 2017, arXiv:1602.05629, Sec. 3).
mlp = _image_model('mlp', lambda s: [_dense(s, 200), _dense(s, 200)], image=False)
# One hidden layer of 128 ReLU units: the 28x28 datasets' model on a CPU (BENCHMARKS.md).
small_mlp = _image_model('small_mlp', lambda s: [_dense(s, 128)], image=False)


def torch_mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """`small_mlp` initialised as PyTorch's `nn.Linear` is: the FedGA authors' MLP 784-128-10
  (github.com/Xiao-Chenguang/FedGA; docs/experiments.md, "FedGA's Table 1 beside ours")."""
  fan_in = math.prod(int(d) for d in input_shape)
  return _model('torch_mlp', input_shape, num_classes, seed,
                lambda s: [_torch_dense(s, 128, fan_in)], image=False,
                logits=lambda s, n: _torch_dense(s, n, 128, None))


# A small CNN for 8x8 digits (about 22k parameters, no dropout).
digits_cnn = _image_model('digits_cnn', lambda s: [
    _conv(s, 16, 3), _L.MaxPooling2D(2), _conv(s, 32, 3), _L.Flatten(), _dense(s, 64)])
# FedAvg's CNN for MNIST: two 5x5 convolutions, dense(512) (McMahan et al. 2017, Sec. 3).
fedavg_cnn = _image_model('fedavg_cnn', _two_convs(
    lambda: _L.MaxPooling2D(2, padding='same'), dense=(512,)))
# FedMGC's Fashion-MNIST CNN (Wang et al., "Joint Focal Loss and Dominant Gradient Correction for
# Gradient Conflict in Federated Learning", Sec. V-A): the paper gives no widths, these are
# `fedavg_cnn`'s without its dense(512).
fedmgc_fmnist_cnn = _image_model('fedmgc_fmnist_cnn', _two_convs(
    lambda: _L.MaxPooling2D(2, padding='same')))
# TFF's EMNIST CNN (google-research/federated `create_conv_dropout_model`), dropout seeded too.
emnist_cnn = _image_model('emnist_cnn', lambda s: [
    _conv(s, 32, 3, 'valid'), _conv(s, 64, 3, 'valid'), _L.MaxPooling2D(2),
    _L.Dropout(0.25, seed=next(s)), _L.Flatten(), _dense(s, 128),
    _L.Dropout(0.5, seed=next(s))])
# FedAvg's CIFAR CNN: two 5x5 convolutions, dense(384), dense(192) (McMahan et al. 2017).
cifar_cnn = _image_model('cifar_cnn', lambda s: [
    _conv(s, 64, 5), _L.MaxPooling2D(3, strides=2, padding='same'), _conv(s, 64, 5),
    _L.MaxPooling2D(3, strides=2, padding='same'), _L.Flatten(), _dense(s, 384), _dense(s, 192)])
# LEAF's FEMNIST CNN (Caldas et al., "LEAF: A Benchmark for Federated Settings",
# arXiv:1812.01097, `models/femnist/cnn.py`).
leaf_femnist_cnn = _image_model('leaf_femnist_cnn', _two_convs(
    lambda: _L.MaxPooling2D(2, strides=2), dense=(2048,)))
# LEAF's CelebA CNN (`models/celeba/cnn.py`): four blocks of conv3x3(32) - batch norm - 2x2
# max-pool - ReLU. As LEAF's `batch_normalization(out, training=True)`, batch norm always uses
# the batch's own statistics, in evaluation too (its moving averages would go stale).
leaf_celeba_cnn = _image_model('leaf_celeba_cnn', lambda s: [
    layer for _ in range(4) for layer in (
        _L.Conv2D(32, 3, padding='same', kernel_initializer=_glorot(s)),
        _L.BatchNormalization(), _L.MaxPooling2D(2, strides=2, padding='same'), _L.ReLU())
] + [_L.Flatten()])


def _char_model(name: str, input_shape, num_classes, seed, cells) -> tf.keras.Model:
  """int32 ids `[L]` -> embedding(8) of `num_classes` characters -> the recurrent layers
  `cells(seeds)` (the last one's final output) -> dense logits; seeded as `_model`'s."""
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
  """The CPU grid's character model: embedding(8) of the window's `SHAKESPEARE_GRU_CONTEXT` last
  characters - GRU(64) - dense on the last step, about 20k parameters; a step about 7 times
  cheaper than over 80 (BENCHMARKS.md, "Shakespeare models")."""
  def cells(seeds):
    crop = max(0, int(input_shape[0]) - SHAKESPEARE_GRU_CONTEXT)
    return [_L.Cropping1D((crop, 0)), _recurrent(_L.GRU, seeds, 64)]
  return _char_model('shakespeare_gru', input_shape, num_classes, seed, cells)


MODELS: dict[str, ModelFn] = {f.__name__: f for f in (
    logistic_regression, mlp, small_mlp, torch_mlp, digits_cnn, fedavg_cnn, fedmgc_fmnist_cnn,
    emnist_cnn, cifar_cnn, leaf_femnist_cnn, leaf_celeba_cnn, leaf_shakespeare_lstm,
    shakespeare_gru)}

# The model of each dataset of `tff_conflict.data`, declared in its module (`info.Dataset.model`).
DEFAULT_MODELS = {name: entry.model for name, entry in registry.DATASETS.items()}


def get(name: str) -> ModelFn:
  if name not in MODELS:
    raise _checks.ArgumentError.must_be('model', name, _checks.one_of(sorted(MODELS)))
  return MODELS[name]

"""Keras architectures of the experiment binaries, by name (`MODELS`): each returns a new,
uncompiled `tf.keras.Model` from inputs to logits, its initializers seeded by `seed`. The models
and their sources: docs/experiments.md, "Models".
"""

import math
from typing import Callable, Sequence

import tensorflow as tf

ModelFn = Callable[..., tf.keras.Model]


class _Seeds:
  """Hands out distinct, deterministic initializer seeds derived from one base seed."""

  def __init__(self, seed: int):
    self._next = int(seed) * 1000

  def glorot(self):
    self._next += 1
    return tf.keras.initializers.GlorotUniform(seed=self._next)

  def dropout_seed(self):
    self._next += 1
    return self._next


def _check(input_shape, num_classes):
  input_shape = tuple(int(d) for d in input_shape)
  if not input_shape or any(d < 1 for d in input_shape):
    raise ValueError(f'input_shape must be a non-empty tuple of positive sizes, got {input_shape!r}')
  if int(num_classes) < 2:
    raise ValueError(f'num_classes must be at least 2, got {num_classes!r}')
  return input_shape, int(num_classes)


def _image_layers(input_shape):
  """Input layer and, when needed, a reshape to (H, W, C)."""
  if len(input_shape) == 3:
    return [tf.keras.layers.InputLayer(input_shape=input_shape)]
  if len(input_shape) == 2:
    return [tf.keras.layers.InputLayer(input_shape=input_shape),
            tf.keras.layers.Reshape(input_shape + (1,))]
  side = math.isqrt(input_shape[0])
  if len(input_shape) == 1 and side * side == input_shape[0]:
    return [tf.keras.layers.InputLayer(input_shape=input_shape),
            tf.keras.layers.Reshape((side, side, 1))]
  raise ValueError('an image model needs inputs of shape (H, W), (H, W, C) or (S*S,), got '
                   f'input_shape={input_shape!r}')


def logistic_regression(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """Softmax regression: logits = x W + b (x flattened).

  The multinomial logistic regression of FedProx's synthetic experiments (Li et al., "Federated
  Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Sec. 5.1); LEAF's
  `models/synthetic/log_reg.py` adds a sigmoid before the softmax, this does not.
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='logistic_regression')


def mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's 2NN: dense(200, relu) - dense(200, relu) - dense(num_classes).

  McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
  AISTATS 2017, arXiv:1602.05629, Sec. 3.
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(200, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(200, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='mlp')


def digits_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """A small CNN for 8x8 digits (about 22k parameters, no dropout)."""
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential(_image_layers(input_shape) + [
      tf.keras.layers.Conv2D(16, 3, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='digits_cnn')


def fedavg_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's CNN for MNIST: two 5x5 convolutions, dense(512).

  McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
  AISTATS 2017, arXiv:1602.05629, Sec. 3.
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential(_image_layers(input_shape) + [
      tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(2, padding='same'),
      tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(2, padding='same'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(512, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='fedavg_cnn')


def emnist_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """TFF's EMNIST CNN (google-research/federated `create_conv_dropout_model`).

  Dropout layers are seeded, so a run stays reproducible for a fixed seed.
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential(_image_layers(input_shape) + [
      tf.keras.layers.Conv2D(32, 3, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Conv2D(64, 3, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Dropout(0.25, seed=seeds.dropout_seed()),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dropout(0.5, seed=seeds.dropout_seed()),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='emnist_cnn')


def cifar_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's CIFAR CNN: two 5x5 convolutions, dense(384), dense(192).

  McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
  AISTATS 2017, arXiv:1602.05629, Sec. 3.
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential(_image_layers(input_shape) + [
      tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(3, strides=2, padding='same'),
      tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(3, strides=2, padding='same'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(384, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(192, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='cifar_cnn')


def leaf_femnist_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """LEAF's FEMNIST CNN: two 5x5 'same' convolutions (32, 64 filters, ReLU), each followed by a
  2x2 max-pool of stride 2, then dense(2048, ReLU) and the logits.

  Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv:1812.01097
  (github.com/TalwalkarLab/leaf, `models/femnist/cnn.py`).
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential(_image_layers(input_shape) + [
      tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(2, strides=2),
      tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu',
                             kernel_initializer=seeds.glorot()),
      tf.keras.layers.MaxPooling2D(2, strides=2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(2048, activation='relu', kernel_initializer=seeds.glorot()),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='leaf_femnist_cnn')


def leaf_celeba_cnn(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """LEAF's CelebA CNN: four blocks of [conv3x3(32, 'same') - batch norm - 2x2 max-pool of
  stride 2 ('same') - ReLU], then the logits.

  As in LEAF (`tf.layers.batch_normalization(out, training=True)`), batch normalization always
  normalizes with the statistics of the batch at hand, in training and in evaluation alike; its
  moving averages are never used (so TFF's federated averaging, which averages trainable
  weights only, leaves nothing stale).

  Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv:1812.01097
  (github.com/TalwalkarLab/leaf, `models/celeba/cnn.py`).
  """
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  inputs = tf.keras.Input(shape=input_shape)
  out = inputs
  for layer in _image_layers(input_shape)[1:]:
    out = layer(out)
  for _ in range(4):
    out = tf.keras.layers.Conv2D(32, 3, padding='same', kernel_initializer=seeds.glorot())(out)
    out = tf.keras.layers.BatchNormalization()(out, training=True)
    out = tf.keras.layers.MaxPooling2D(2, strides=2, padding='same')(out)
    out = tf.keras.layers.ReLU()(out)
  out = tf.keras.layers.Flatten()(out)
  logits = tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot())(out)
  return tf.keras.Model(inputs, logits, name='leaf_celeba_cnn')


MODELS: dict[str, ModelFn] = {
    'logistic_regression': logistic_regression,
    'mlp': mlp,
    'digits_cnn': digits_cnn,
    'fedavg_cnn': fedavg_cnn,
    'emnist_cnn': emnist_cnn,
    'cifar_cnn': cifar_cnn,
    'leaf_femnist_cnn': leaf_femnist_cnn,
    'leaf_celeba_cnn': leaf_celeba_cnn,
}


def get(name: str) -> ModelFn:
  """The model function registered under `name`."""
  if name not in MODELS:
    raise ValueError(f'model must be one of {sorted(MODELS)}, got {name!r}')
  return MODELS[name]

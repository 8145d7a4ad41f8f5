"""Keras architectures of the experiment binaries: the papers' small networks, by name (`MODELS`).

Every function returns a NEW, uncompiled `tf.keras.Model` that maps a batch of inputs to logits
(no softmax), as `tff.learning.models.from_keras_model` and the project's losses expect. Every
initializer is seeded from `seed`, so the same seed gives the same initial weights.

| name | model | used by default for |
|---|---|---|
| `logistic_regression` | one dense layer (softmax regression) | synthetic (FedProx / LEAF Synthetic(a, b), Li et al. 2020, Sec. 5.1) |
| `mlp` | FedAvg's "2NN": two hidden layers of 200 ReLU units (McMahan et al. 2017, Sec. 3) | - |
| `digits_cnn` | a small CNN for 8x8 images: conv3x3(16) - pool - conv3x3(32) - dense(64) | digits |
| `fedavg_cnn` | FedAvg's MNIST CNN: conv5x5(32) - pool - conv5x5(64) - pool - dense(512) (McMahan et al. 2017, Sec. 3) | mnist, fashion_mnist |
| `emnist_cnn` | TFF's EMNIST CNN (`create_conv_dropout_model` of google-research/federated): conv3x3(32) - conv3x3(64) - pool - dropout(0.25) - dense(128) - dropout(0.5); about 1.2M parameters for 62 classes | emnist |
| `cifar_cnn` | FedAvg's CIFAR CNN: conv5x5(64) - pool - conv5x5(64) - pool - dense(384) - dense(192) (McMahan et al. 2017, Sec. 3) | cifar10, cifar100 |
| `leaf_femnist_cnn` | LEAF's FEMNIST CNN (`models/femnist/cnn.py`): conv5x5(32) - pool - conv5x5(64) - pool - dense(2048); about 6.6M parameters for 62 classes | leaf femnist |
| `leaf_celeba_cnn` | LEAF's CelebA CNN (`models/celeba/cnn.py`): 4 x [conv3x3(32) - batch norm - pool - ReLU] - dense | leaf celeba |

LEAF's models are from Caldas et al., "LEAF: A Benchmark for Federated Settings" (arXiv:1812.01097)
and its repository (github.com/TalwalkarLab/leaf); LEAF Synthetic uses `logistic_regression`
(LEAF's `models/synthetic/log_reg.py` squashes the logits with a sigmoid before the softmax; this
is the plain multinomial logistic regression of the FedProx paper).

Image models accept flat inputs whose length is a square (8x8 digits as 64 features, 28x28 as
784), rank-2 images (H, W) or rank-3 images (H, W, C).
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
  """Softmax regression: logits = x W + b (x flattened)."""
  input_shape, num_classes = _check(input_shape, num_classes)
  seeds = _Seeds(seed)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes, kernel_initializer=seeds.glorot()),
  ], name='logistic_regression')


def mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0):
  """FedAvg's 2NN: dense(200, relu) - dense(200, relu) - dense(num_classes)."""
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
  """FedAvg's CNN for MNIST (McMahan et al. 2017): two 5x5 convolutions, dense(512)."""
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
  """FedAvg's CIFAR CNN (McMahan et al. 2017): two 5x5 convolutions, dense(384), dense(192)."""
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
  2x2 max-pool of stride 2, then dense(2048, ReLU) and the logits."""
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

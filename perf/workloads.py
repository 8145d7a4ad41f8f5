"""Keras models and synthetic client data shared by the speed scripts."""

import collections

import numpy as np
import tensorflow as tf


def _glorot(seed):
  return tf.keras.initializers.GlorotUniform(seed=seed)


# Initializers are seeded (as in experiments.models): an unseeded Keras initializer draws its seed
# in Python when the model is built, so every process would trace a different computation and
# the in-process runner's compile cache could not recognise it.
def emnist_sized_cnn(num_classes=62, seed=0):
  """TFF's EMNIST CNN without dropout: 1,206,590 parameters for 62 classes."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3, activation='relu', kernel_initializer=_glorot(seed)),
      tf.keras.layers.Conv2D(64, 3, activation='relu', kernel_initializer=_glorot(seed + 1)),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu', kernel_initializer=_glorot(seed + 2)),
      tf.keras.layers.Dense(num_classes, kernel_initializer=_glorot(seed + 3)),
  ])


def softmax_regression(num_classes=62, seed=0):
  """A small stand-in for quick runs (--small)."""
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(28, 28, 1)),
                              tf.keras.layers.Flatten(),
                              tf.keras.layers.Dense(num_classes, kernel_initializer=_glorot(seed))])


def random_emnist_clients(num_clients, examples, batch_size, seed=0):
  """`num_clients` datasets of `examples` random 28x28x1 images with labels in [0, 62)."""
  rng = np.random.default_rng(seed)
  data = []
  for _ in range(num_clients):
    x = rng.random((examples, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 62, size=examples).astype(np.int32)
    data.append(tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y))
                .batch(batch_size))
  return data

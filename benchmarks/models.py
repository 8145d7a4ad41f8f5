"""Keras models shared by the benchmarks (new, uncompiled, producing logits)."""

import tensorflow as tf


def emnist_sized_cnn(num_classes=62):
  """TFF's EMNIST CNN without dropout: 1,206,590 parameters for 62 classes."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.Conv2D(64, 3, activation='relu'),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ])


def softmax_regression(num_classes=62):
  """A small stand-in for quick runs (--small)."""
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(28, 28, 1)),
                              tf.keras.layers.Flatten(), tf.keras.layers.Dense(num_classes)])

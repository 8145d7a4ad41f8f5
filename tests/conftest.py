"""Shared fixtures: one TFF context for the whole session, tiny Keras models and client data.

Every test session installs TFF's local C++ context once through `tff_conflict.runtime`, so that
the `worker_binary` it starts is ended when the session ends (and by the kernel if pytest itself
is killed).
"""

import collections
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top


@pytest.fixture(scope='session', autouse=True)
def tff_context():
  """Installs the project's local TFF context once per test session; ends its worker after."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  yield
  runtime.shutdown_workers()


TINY_NUM_FEATURES = 4
TINY_NUM_CLASSES = 3


def make_tiny_keras_model(num_features=TINY_NUM_FEATURES, num_classes=TINY_NUM_CLASSES, seed=0):
  """A new, uncompiled softmax-regression Keras model producing logits."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  initializer = tf.keras.initializers.GlorotUniform(seed=seed)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(num_classes, kernel_initializer=initializer),
  ])


def make_tiny_hidden_keras_model(num_features=TINY_NUM_FEATURES, num_classes=TINY_NUM_CLASSES,
                                 seed=0, hidden=5):
  """`make_tiny_keras_model` with a Dense(`hidden`, tanh) layer before the logits (a model whose
  classifier's input is trained, as FedDecorr needs)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(hidden, activation='tanh',
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed)),
      tf.keras.layers.Dense(num_classes,
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + 1)),
  ])


def tiny_model_fn_for(algorithm: str):
  """The tiny model an algorithm's tests train: softmax regression, or for FedDecorr (whose term
  has no gradient when the classifier reads the input) `make_tiny_hidden_keras_model`."""
  return make_tiny_hidden_keras_model if algorithm == 'feddecorr' else make_tiny_keras_model


def make_tiny_client_datasets(num_clients=3, examples_per_client=16, batch_size=8, seed=0,
                              num_features=TINY_NUM_FEATURES, num_classes=TINY_NUM_CLASSES):
  """Linearly separable client datasets (`OrderedDict(x=float32 [B, F], y=int32 [B])`)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  centers = rng.normal(scale=3.0, size=(num_classes, num_features)).astype(np.float32)
  datasets = []
  for _ in range(num_clients):
    y = rng.integers(0, num_classes, size=examples_per_client).astype(np.int32)
    x = (centers[y] + rng.normal(size=(examples_per_client, num_features))).astype(np.float32)
    datasets.append(tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(batch_size))
  return datasets


@pytest.fixture
def tiny_keras_model_fn():
  return make_tiny_keras_model


@pytest.fixture
def tiny_client_datasets():
  return make_tiny_client_datasets()


_DEFAULT_SIGINT_EXEC = ('import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); '
                        'os.execv(sys.argv[1], sys.argv[1:])')


def with_default_sigint(argv):
  """`argv` (starting with an absolute path) run with SIGINT at its default action.

  A suite started as a background job (`make test &` in a script, nohup, some CI runners)
  inherits SIGINT ignored, and so would every child: Python then never raises
  KeyboardInterrupt and a Ctrl-C test cannot work. This resets SIGINT, as an interactive shell
  does, then execs `argv` in the same process (same PID).
  """
  return [sys.executable, '-c', _DEFAULT_SIGINT_EXEC, *argv]


def wait_until(condition, timeout, interval=0.2):
  """Calls `condition()` until it returns a true value or `timeout` seconds pass; returns the
  last value. The one wait of the process tests (a child or a worker ending takes a moment)."""
  deadline = time.monotonic() + timeout
  while True:
    value = condition()
    if value or time.monotonic() >= deadline:
      return value
    time.sleep(interval)


def workers_left(token, timeout=15):
  """The `worker_binary` processes whose environment holds `TFF_CONFLICT_TEST_TOKEN=token`, once
  they have ended or `timeout` seconds have passed (the kernel's PR_SET_PDEATHSIG kill is not
  instantaneous)."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  workers = lambda: runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token)
  wait_until(lambda: not workers(), timeout)
  return workers()

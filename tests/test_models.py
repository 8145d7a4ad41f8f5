"""tff_conflict.models, the Keras models by name: logits of the right shape, seeded
initialisation, input checks."""

import numpy as np
import pytest
import tensorflow as tf

import tff_conflict
from tff_conflict import models

_SHAPES = {'logistic_regression': (60,), 'mlp': (64,), 'small_mlp': (28, 28, 1),
           'torch_mlp': (28, 28, 1), 'digits_cnn': (64,), 'fedavg_cnn': (28, 28),
           'fedmgc_fmnist_cnn': (28, 28, 1), 'emnist_cnn': (28, 28, 1), 'cifar_cnn': (32, 32, 3),
           'leaf_femnist_cnn': (28, 28, 1), 'leaf_celeba_cnn': (20, 20, 3),
           'leaf_shakespeare_lstm': (12,), 'shakespeare_gru': (12,)}


@pytest.mark.parametrize('name', sorted(models.MODELS))
def test_model_outputs_logits_and_is_seeded(name):
  shape = _SHAPES[name]
  with tf.Graph().as_default():  # keep the eager context clean (BUILD_NOTES.md)
    model = models.get(name)(shape, 7, seed=3)
    assert model.output_shape == (None, 7)
    assert not model._is_compiled  # pylint: disable=protected-access
  a = models.get(name)(shape, 7, seed=3)
  b = models.get(name)(shape, 7, seed=3)
  c = models.get(name)(shape, 7, seed=4)
  for wa, wb in zip(a.get_weights(), b.get_weights()):
    np.testing.assert_array_equal(wa, wb)
  assert any(not np.array_equal(wa, wc) for wa, wc in zip(a.get_weights(), c.get_weights()))


def test_emnist_cnn_has_tffs_size():
  model = models.emnist_cnn((28, 28, 1), 62)
  assert model.count_params() == 1_206_590  # google-research/federated's EMNIST CNN


def test_leaf_femnist_cnn_has_leafs_size():
  # LEAF's models/femnist/cnn.py: conv5x5 1->32, conv5x5 32->64, dense 7*7*64 -> 2048 -> 62.
  expected = (5 * 5 * 1 * 32 + 32) + (5 * 5 * 32 * 64 + 64) + (7 * 7 * 64 * 2048 + 2048) + (
      2048 * 62 + 62)
  assert models.leaf_femnist_cnn((28, 28, 1), 62).count_params() == expected == 6_603_710


def test_fashion_mnist_models_have_their_sizes():
  # FedMGC's: conv5x5 1->32, pool, conv5x5 32->64, pool ('same': 28 -> 14 -> 7), dense 7*7*64 -> 10.
  expected = (5 * 5 * 1 * 32 + 32) + (5 * 5 * 32 * 64 + 64) + (7 * 7 * 64 * 10 + 10)
  assert models.fedmgc_fmnist_cnn((28, 28, 1), 10).count_params() == expected == 83_466
  assert models.small_mlp((28, 28, 1), 10).count_params() == (784 + 1) * 128 + 129 * 10
  assert models.DEFAULT_MODELS['fashion_mnist'] == 'small_mlp'


def test_leaf_celeba_cnn_normalizes_with_batch_statistics_always():
  """LEAF's CelebA CNN, recomputed in numpy: 4 x [conv, batch norm with the batch's own mean and
  variance, 2x2 max-pool ('same'), ReLU], dense; the same in training and in evaluation."""
  model = models.leaf_celeba_cnn((84, 84, 3), 2, seed=1)
  # 84 -> 42 -> 21 -> 11 -> 6 after four 'same' pools; 4 x 32 x (9 C_in + 1) + BN + dense.
  assert model.count_params() == (
      (27 * 32 + 32) + 3 * (288 * 32 + 32) + 4 * 4 * 32 + (6 * 6 * 32 * 2 + 2))
  x = np.random.default_rng(0).uniform(0, 255, (4, 84, 84, 3)).astype(np.float32)
  convs = [l for l in model.layers if isinstance(l, tf.keras.layers.Conv2D)]
  norms = [l for l in model.layers if isinstance(l, tf.keras.layers.BatchNormalization)]
  out = x.astype(np.float64)
  for conv, norm in zip(convs, norms):
    out = conv(out.astype(np.float32)).numpy().astype(np.float64)
    mean, var = out.mean(axis=(0, 1, 2)), out.var(axis=(0, 1, 2))
    out = (out - mean) / np.sqrt(var + norm.epsilon) * norm.gamma.numpy() + norm.beta.numpy()
    out = tf.nn.max_pool2d(out, 2, 2, 'SAME').numpy()
    out = np.maximum(out, 0.0)
  dense = model.layers[-1]
  reference = out.reshape(4, -1) @ dense.kernel.numpy() + dense.bias.numpy()
  for training in (False, True):
    np.testing.assert_allclose(model(x, training=training).numpy(), reference, rtol=1e-4,
                               atol=1e-4)


def _lstm_size(inputs, units):
  return 4 * (inputs * units + units * units + units)


def test_character_models_have_leafs_sizes_and_read_character_ids():
  # LEAF's models/shakespeare/stacked_lstm.py: embedding [80, 8], 2 x LSTM(256), dense 256 -> 80.
  lstm = models.leaf_shakespeare_lstm((80,), 80)
  assert lstm.count_params() == (80 * 8 + _lstm_size(8, 256) + _lstm_size(256, 256) +
                                 256 * 80 + 80) == 817_872
  gru = models.shakespeare_gru((80,), 80)  # Keras' GRU (reset_after): 2 bias rows
  assert gru.count_params() == 80 * 8 + 3 * (8 * 64 + 64 * 64 + 2 * 64) + 64 * 80 + 80 == 20_048
  ids = np.random.default_rng(0).integers(0, 80, (3, 80)).astype(np.int32)

  def changed(position):
    out = ids.copy()
    out[:, position] = (out[:, position] + 1) % 80
    return out
  for model in (lstm, gru):
    assert model.input.dtype == tf.int32 and model(ids).shape == (3, 80)
    assert not np.array_equal(model(ids).numpy(), model(changed(-1)).numpy())
  # LEAF's LSTM carries the whole window; the CPU's GRU reads its last 20 characters.
  assert not np.array_equal(lstm(ids).numpy(), lstm(changed(0)).numpy())
  context = models.SHAKESPEARE_GRU_CONTEXT
  assert context == 20
  np.testing.assert_array_equal(gru(ids).numpy(), gru(changed(80 - context - 1)).numpy())
  assert not np.array_equal(gru(ids).numpy(), gru(changed(80 - context)).numpy())
  assert models.DEFAULT_MODELS['leaf_shakespeare'] == 'shakespeare_gru'


def test_bad_arguments():
  for call, argument, value in ((lambda: models.get('resnet'), 'model', 'resnet'),
                                (lambda: models.mlp((4,), 1), 'num_classes', 1),
                                (lambda: models.digits_cnn((10,), 3), 'input_shape',
                                 (10,)),  # not a square image
                                (lambda: models.shakespeare_gru((8, 8), 80),
                                 'input_shape', (8, 8))):  # not a sequence of ids
    with pytest.raises(tff_conflict.ArgumentError, match=f'{argument} must be') as info:
      call()
    assert (info.value.argument, info.value.value) == (argument, value)


def test_torch_mlp_is_pytorchs_linear_initialisation():
  """Weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)): 784 inputs, then 128."""
  model = models.torch_mlp((28, 28, 1), 10, seed=0)
  kernel, bias, logits_kernel, logits_bias = model.get_weights()
  assert kernel.shape == (784, 128) and logits_kernel.shape == (128, 10)
  for values, fan_in in ((kernel, 784), (bias, 784), (logits_kernel, 128), (logits_bias, 128)):
    bound = 1 / np.sqrt(fan_in)
    assert 0.5 * bound < np.abs(values).max() <= bound
  assert np.std(kernel) == pytest.approx(1 / np.sqrt(3 * 784), rel=0.02)   # U(-b, b): b / sqrt(3)

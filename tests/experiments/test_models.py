"""The experiment models: logits of the right shape, seeded initialisation, input checks."""

import numpy as np
import pytest
import tensorflow as tf

from experiments import models

_SHAPES = {'logistic_regression': (60,), 'mlp': (64,), 'digits_cnn': (64,),
           'fedavg_cnn': (28, 28), 'emnist_cnn': (28, 28, 1), 'cifar_cnn': (32, 32, 3)}


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


def test_bad_arguments():
  with pytest.raises(ValueError, match="model must be one of"):
    models.get('resnet')
  with pytest.raises(ValueError, match='num_classes'):
    models.mlp((4,), 1)
  with pytest.raises(ValueError, match='input_shape'):
    models.digits_cnn((10,), 3)  # not a square image

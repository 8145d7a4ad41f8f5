"""The losses inside `tff.learning.models.from_keras_model` and one TFF FedAvg round."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tff_conflict import losses

_LOSSES = {
    'focal': (lambda: losses.FocalLoss(gamma=0.5, beta=1.2),
              lambda y, z: losses.focal_loss(y, z, gamma=0.5, beta=1.2)),
    'margin': (lambda: losses.MarginControlLoss(margin_weight=0.1),
               lambda y, z: losses.margin_control_loss(y, z, margin_weight=0.1)),
    'calibrated': (losses.CalibratedLabelLoss, losses.calibrated_label_loss),
}


@pytest.mark.parametrize('name', sorted(_LOSSES))
def test_forward_pass_loss_is_kernel_batch_mean(name):
  loss_fn, kernel = _LOSSES[name]
  data = make_tiny_client_datasets(num_clients=1)[0]
  keras_model = make_tiny_keras_model()
  model = tff.learning.models.from_keras_model(keras_model, loss=loss_fn(),
                                               input_spec=data.element_spec)
  batch = next(iter(data))
  output = model.forward_pass(batch, training=False)
  logits = keras_model(batch['x'])
  expected = tf.reduce_mean(kernel(batch['y'], logits))
  np.testing.assert_allclose(output.loss.numpy(), expected.numpy(), rtol=1e-6)


# Slow-marked: each FedAvg process costs about a minute on a shared 2-core CPU; the default
# selection runs these losses inside TFF processes through tests/learning (the method builders).
@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(_LOSSES))
def test_fedavg_rounds_with_loss_lower_training_loss(name):
  datasets = make_tiny_client_datasets(num_clients=2)
  spec = datasets[0].element_spec
  loss_fn, _ = _LOSSES[name]

  def model_fn():
    return tff.learning.models.from_keras_model(make_tiny_keras_model(), loss=loss_fn(),
                                                input_spec=spec)

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  state = process.initialize()
  train_losses = []
  for _ in range(3):
    result = process.next(state, datasets)
    state = result.state
    train_losses.append(float(result.metrics['client_work']['train']['loss']))
  assert all(np.isfinite(train_losses)), train_losses
  assert train_losses[-1] < train_losses[0], train_losses

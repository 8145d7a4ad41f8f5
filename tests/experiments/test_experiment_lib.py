"""experiments.experiment_lib's evaluation: class-pair errors and the global model's training
loss."""

import pytest

from experiments import config as experiment_config
from experiments import experiment_lib
from tff_conflict import evaluation


def test_evaluator_columns_pair_errors_and_global_train_loss():
  config = experiment_config.ExperimentConfig(
      data=experiment_config.DataConfig('digits', num_clients=5),
      model='logistic_regression',
      training=experiment_config.LoopConfig(rounds=1, clients_per_round=2))
  train, test = experiment_lib.load_task(config)
  model_fn, classes = experiment_lib.model_of(config, train)
  runs = experiment_lib.Runs()
  evaluate, columns = runs.evaluator(model_fn, test, classes, train_data=train,
                                     global_train=True)
  assert {f'test_{c}' for c in evaluation.PAIR_ERROR_COLUMNS} <= set(columns)
  assert set(evaluation.GLOBAL_TRAIN_COLUMNS) <= set(columns)
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  model = model_fn()
  weights = tff.learning.models.ModelWeights(
      trainable=[v.numpy() for v in model.trainable_weights],
      non_trainable=[v.numpy() for v in model.non_trainable_weights])
  out = evaluate(weights)
  assert set(out) == set(columns)
  # The global training loss is the model's mean cross-entropy over every client's examples.
  x, y = experiment_lib.pooled_arrays(train)
  expected = evaluation.evaluate_arrays(model, x, y)
  assert out['global_train_loss'] == pytest.approx(expected['loss'], rel=1e-6)
  assert out['global_train_accuracy'] == pytest.approx(expected['accuracy'])
  _, plain = runs.evaluator(model_fn, test, classes, train_data=train)
  assert not set(evaluation.GLOBAL_TRAIN_COLUMNS) & set(plain)

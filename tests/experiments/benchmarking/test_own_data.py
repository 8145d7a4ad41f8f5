"""Your own (train, test) ClientData and Keras model in the benchmark: runs.csv and the report
name them as you do, finished runs are skipped, and bad data or models are refused by name
before anything is written."""

import collections
import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from experiments import config as experiment_config
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import grid
from experiments.benchmarking import plan
from experiments.benchmarking import runs

ConfigError = experiment_config.ConfigError


def _client_data(num_clients, per_client, *, seed, classes=3, x_dtype=np.float32,
                 label_shift=0):
  """TestClientData of 8x8x1 digits-like images whose label shows in their mean brightness."""
  rng = np.random.default_rng(seed)
  clients = {}
  for k in range(num_clients):
    y = rng.integers(0, classes, size=per_client).astype(np.int32)
    x = (y[:, None, None, None] / classes + 0.1 * rng.normal(size=(per_client, 8, 8, 1)))
    clients[f'client{k}'] = collections.OrderedDict(x=x.astype(x_dtype), y=y + label_shift)
  return tff.simulation.datasets.TestClientData(clients)


def _data(**kwargs):
  return _client_data(4, 10, seed=0, **kwargs), _client_data(2, 10, seed=1, **kwargs)


def tiny_mlp(classes=3):
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(8, 8, 1)),
                              tf.keras.layers.Flatten(), tf.keras.layers.Dense(8, 'relu'),
                              tf.keras.layers.Dense(classes)])


def _config(root, **changes):
  args = dict(regimes=('my_digits',), methods=('fedavg',), epochs=(1,),
              report_seeds=(0, 1), datasets={'my_digits': _data()},
              model_fns={'my_mlp': tiny_mlp},
              loop=experiment_config.LoopConfig(rounds=2, clients_per_round=2, batch_size=8),
              output=experiment_config.OutputConfig(output_dir=str(root), experiment_name='own',
                                                    progress=False, runtime='inprocess'),
              tune=False)
  args.update(changes)
  return config_lib.BenchmarkConfig(**args)


def test_your_data_and_model_run_under_your_names_and_resume(tmp_path):
  config = _config(tmp_path)
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert outcome['failures'] == [] and outcome['runs_done'] == 2
  assert outcome['runs_skipped'] == 0
  with open(os.path.join(config.root, 'runs.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [(r['regime'], r['dataset'], r['model'], r['method'], r['seed']) for r in rows] == [
      ('my_digits', 'my_digits', 'my_mlp', 'fedavg', s) for s in '01']
  assert {r['chance_accuracy'] for r in rows} == {str(1 / 3)}
  assert all(len(runs.decode_curve(r['accuracy_curve'])) == 2 for r in rows)
  result = runs.read_result(runs.report_run_dir(config.root, 'my_digits', 1, 'fedavg', 0))
  assert np.asarray(result['confusion_matrix']).shape == (3, 3)
  with open(outcome['report']) as f:
    report = f.read()
  assert 'my_digits' in report and 'leaf_synthetic' not in report
  with open(os.path.join(config.root, 'config.json')) as f:
    recorded = json.load(f)
  assert recorded['datasets'] == ['my_digits'] and recorded['model_fns'] == ['my_mlp']

  again = grid.run_benchmark(_config(tmp_path), stream=open(os.devnull, 'w'))
  assert again['runs_done'] == 0 and again['runs_skipped'] == 2 and len(again['rows']) == 2
  # The model's name is part of a run's identity: another one under the same names is refused.
  other = _config(tmp_path, model_fns={'my_other_mlp': tiny_mlp})
  with pytest.raises(engine_lib.SettingsChangedError, match="model: 'my_mlp' -> 'my_other_mlp'"):
    grid.run_benchmark(other, stream=open(os.devnull, 'w'))
  # So are its fingerprints: other data or another model under the same name are never reused.
  assert set(result['fingerprint']) == {"datasets['my_digits']", "model_fns['my_mlp']"}
  more = (_client_data(4, 11, seed=0), _client_data(2, 10, seed=1))   # one more example each
  with pytest.raises(engine_lib.SettingsChangedError, match=(
      r"datasets\['my_digits'\] train.examples: 40 -> 44; datasets\['my_digits'\] "
      r'train.ids_and_sizes: \w+ -> \w+')):
    grid.run_benchmark(_config(tmp_path, datasets={'my_digits': more}),
                       stream=open(os.devnull, 'w'))
  wider = lambda: tf.keras.Sequential([   # pylint: disable=g-long-lambda
      tf.keras.layers.InputLayer(input_shape=(8, 8, 1)), tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(16, 'relu'), tf.keras.layers.Dense(3)])
  with pytest.raises(engine_lib.SettingsChangedError, match=(
      r"model_fns\['my_mlp'\] layers_and_shapes: \w+ -> \w+; model_fns\['my_mlp'\] "
      r'parameters: 547 -> 1091')):
    grid.run_benchmark(_config(tmp_path, model_fns={'my_mlp': wider}),
                       stream=open(os.devnull, 'w'))
  with open(os.path.join(config.root, 'runs.csv')) as f:
    assert list(csv.DictReader(f)) == rows   # the report's record as it was


def test_your_model_starts_from_the_run_seed(tmp_path):
  config = _config(tmp_path, report_seeds=(0, 1, 2))
  specs = plan.report_specs(plan.make(config), [])
  first, again, other = (
      engine_lib.Engine(config.root, datasets=config.datasets, model_fns=config.model_fns)
      ._initial_weights(s).trainable  # pylint: disable=protected-access
      for s in (specs[0], specs[0], specs[1]))
  assert all(np.array_equal(a, b) for a, b in zip(first, again))
  assert not np.array_equal(first[0], other[0])   # the first kernel (the biases start at 0)


@pytest.mark.slow
def test_tuning_on_your_data_and_a_built_in_model(tmp_path):
  config = _config(tmp_path, methods=('fedavg',), report_seeds=(0,), models={'my_digits': 'mlp'},
                   model_fns={}, tuning_seeds=(9,), client_lr_grid=(0.1, 0.3),
                   server_lr_grid=(1.0,), last_k=1, edge_steps=0, tune=True)
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert outcome['failures'] == [] and [c['regime'] for c in outcome['choices']] == [
      'my_digits']
  assert [(r['regime'], r['model']) for r in outcome['rows']] == [('my_digits', 'mlp')]


def _softmax_mlp():
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(8, 8, 1)),
                              tf.keras.layers.Flatten(),
                              tf.keras.layers.Dense(3, activation='softmax')])


@pytest.mark.parametrize('changes, argument, words', [
    (dict(datasets={'my_digits': [1, 2]}), "datasets['my_digits']", 'a pair (train, test)'),
    (dict(datasets={'my_digits': _data(x_dtype=np.int32)}), "datasets['my_digits'] train",
     'float32'),
    (dict(datasets={'digits': _data()}, regimes=('digits',)), 'datasets', 'built-in'),
    (dict(datasets={'my:data': _data()}, regimes=('my:data',)), 'datasets', 'letters'),
    (dict(model_fns={'mlp': tiny_mlp}), 'model_fns', 'built-in'),
    (dict(model_fns={'my_mlp': 'tiny_mlp'}), "model_fns['my_mlp']", 'no-argument function'),
    (dict(model_fns={'a': tiny_mlp, 'b': tiny_mlp}), 'models', "your dataset 'my_digits'"),
    (dict(models={'my_digits': 'nope'}), 'models', 'one of'),
    (dict(regimes=('digits:iid',)), 'datasets', 'listed in regimes'),
])
def test_bad_data_or_models_are_refused_by_name(tmp_path, changes, argument, words):
  with pytest.raises(ConfigError) as error:
    _config(tmp_path, **changes)
  assert error.value.argument == argument and words in str(error.value)


def test_a_test_split_unlike_the_training_data_is_refused(tmp_path):
  train, _ = _data()
  other = tff.simulation.datasets.TestClientData({'c': collections.OrderedDict(
      x=np.zeros((2, 4), np.float32), y=np.zeros(2, np.int32))})
  with pytest.raises(ConfigError, match=r"datasets\['my_digits'\] test must be examples"):
    _config(tmp_path, datasets={'my_digits': (train, other)})


@pytest.mark.parametrize('changes, argument, words', [
    (dict(model_fns={'my_mlp': lambda: 'not a model'}), "model_fns['my_mlp']",
     'the function returned'),
    (dict(model_fns={'my_mlp': _softmax_mlp}), "model_fns['my_mlp']", 'softmax'),
    (dict(model_fns={'my_mlp': lambda: tiny_mlp(2)}), "model_fns['my_mlp']",
     'labels up to 2, the model gives 2 logits'),
    (dict(datasets={'my_digits': _data(label_shift=-1)}), "datasets['my_digits']", '< 0'),
    (dict(datasets={'my_digits': (_client_data(4, 0, seed=0), _data()[1])}),
     "datasets['my_digits']", 'no examples'),
    (dict(models={'my_digits': 'mlp'}, model_fns={},
          datasets={'my_digits': _data(classes=1)}), "datasets['my_digits']", '2 classes'),
    (dict(models={'digits': 'my_mlp'}, regimes=('my_digits', 'digits:iid@4')),
     "model_fns['my_mlp']", "'digits' has 10 classes"),
])
def test_a_model_that_does_not_fit_the_data_is_refused_before_anything_is_written(
    tmp_path, changes, argument, words):
  config = _config(tmp_path, **changes)
  with pytest.raises(ConfigError) as error:
    grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert error.value.argument == argument and words in str(error.value)
  assert os.listdir(config.root) == []


def test_seeding_a_users_model_leaves_the_global_generators_as_they_were():
  import random  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import engine  # pylint: disable=g-import-not-at-top
  random.seed(7)
  np.random.seed(7)
  expected = (random.random(), np.random.rand(), tf.compat.v1.get_seed(None)[0])
  random.seed(7)
  np.random.seed(7)
  with engine.seeded(3):
    inside = (random.random(), np.random.rand(), tf.compat.v1.get_seed(None)[0])
  assert inside[2] == 3 and inside[:2] != expected[:2]
  assert (random.random(), np.random.rand(), tf.compat.v1.get_seed(None)[0]) == expected

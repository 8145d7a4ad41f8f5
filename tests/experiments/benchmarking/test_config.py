"""BenchmarkConfig: composed of ExperimentConfig's parts, checked when created, every error
naming its flag."""

import dataclasses
import json
import re

import numpy as np
import pytest

from experiments import config as experiment_config
from experiments.benchmarking import config as config_lib
import tff_conflict


def _config(**changes):
  args = dict(regimes=('digits:iid', 'synthetic(1,1)'), methods=('fedavg', 'fedprox'))
  tuning = changes.pop('tuning', {})
  for field in dataclasses.fields(config_lib.BenchmarkConfig):
    if field.name in changes and dataclasses.is_dataclass(field.type):
      changes[field.name] = dataclasses.replace(field.default, **changes[field.name])
  args.update(changes)
  return config_lib.BenchmarkConfig(**tuning, **args)


def test_split_top_level_keeps_brackets_together():
  assert config_lib.split_top_level('digits:dir(0.1), synthetic(1,1) ,fedga[a=1,b=2],,') == [
      'digits:dir(0.1)', 'synthetic(1,1)', 'fedga[a=1,b=2]']


def test_parse_grids_and_mappings():
  assert config_lib.parse_grids('grids', 'fedprox.proximal_strength=0.01/1, fedga.counts=batch') == {
      'fedprox': {'proximal_strength': (0.01, 1)}, 'fedga': {'counts': ('batch',)}}
  assert config_lib.parse_mapping('models', 'digits:mlp, synthetic:logistic_regression') == {
      'digits': 'mlp', 'synthetic': 'logistic_regression'}
  assert config_lib.parse_mapping('detect', 'digits:0.8', float) == {'digits': 0.8}
  for call, message in ((lambda: config_lib.parse_grids('grids', 'fedprox=1'),
                         "--grids must be entries METHOD.ARGUMENT=V1/V2/..., got 'fedprox=1'"),
                        (lambda: config_lib.parse_mapping('models', 'mlp'),
                         "--models must be entries DATASET:VALUE, got 'mlp'"),
                        (lambda: config_lib.parse_mapping('detect', 'digits:x', float),
                         '--detect must be entries DATASET:VALUE with a float value')):
    with pytest.raises(experiment_config.ConfigError) as info:
      call()
    assert info.value.flag_message().startswith(message)


def test_the_parts_and_their_defaults_are_the_experiments():
  config = _config(regimes=('digits:dir(0.10)', 'synthetic( 1 , 1 )'))
  assert config.regimes == ('digits:dir(0.1)', 'synthetic(1,1)')
  defaults = experiment_config.ExperimentConfig()
  assert (config.loop, config.client, config.server) == (
      defaults.training, defaults.client, defaults.server)
  assert (config.data, config.output) == (defaults.data, defaults.output)
  assert config.root.endswith('results/benchmark') and config.experiment_name == 'benchmark'
  flat = config_lib.flat_settings(config_lib.as_dict(config))
  assert flat['rounds'] == defaults.training.rounds
  assert flat['client_learning_rate'] == defaults.client.learning_rate
  assert flat['experiment_name'] == 'benchmark' and flat['methods'] == ['fedavg', 'fedprox']
  # NumPy scalars pass the checks; config.json holds them as JSON values.
  numpy_config = _config(tune=np.True_, last_k=np.int64(3), validation_fraction=np.float32(0.25))
  assert json.loads(json.dumps(config_lib.as_dict(numpy_config)))['tuning'] == dict(
      config_lib.as_dict(config)['tuning'], tune=True, last_k=3, validation_fraction=0.25)
  # config.json of a benchmark run before the config had parts reads the same.
  assert config_lib.flat_settings({'rounds': 20})['rounds'] == 20
  with pytest.raises(TypeError, match='BenchmarkConfig.loop must be a LoopConfig'):
    config_lib.BenchmarkConfig(regimes=('digits:iid',), methods=('fedavg',), loop={'rounds': 3})


@pytest.mark.parametrize('changes,message', [
    (dict(regimes=()), '--regimes must be a non-empty list of regimes'),
    (dict(regimes=('digits:bogus',)), "--regimes=digits:bogus: "),
    (dict(regimes=('digits:iid', 'digits:iid')), '--regimes must be distinct regimes'),
    (dict(methods=('fedavg', 'sgd')), "--methods=sgd: unknown method 'sgd'"),
    (dict(methods=('fedavg', 'fedavg')), '--methods must be distinct methods'),
    (dict(methods=('fedprox',)), "--baseline must be one of 'fedprox', got 'fedavg'"),
    (dict(epochs=(0,)), '--epochs must be a non-empty list of distinct integers >= 1'),
    (dict(epochs=(1, 1)), '--epochs must be a non-empty list of distinct integers >= 1'),
    (dict(report_seeds=()), '--report_seeds must be a non-empty list'),
    (dict(report_seeds=(100,)), '--tuning_seeds must be disjoint from --report_seeds [100]'),
    (dict(tuning=dict(tune_epochs=(3,))), '--tune_epochs must be among --epochs [1, 5]'),
    (dict(loop=dict(rounds=0)), '--rounds must be an integer >= 1, got 0'),
    (dict(loop=dict(clients_per_round=1.5)), '--clients_per_round must be an integer >= 1'),
    (dict(models={'emnist': 'mlp'}), "--models must be entries of the regimes' datasets"),
    (dict(models={'digits': 'resnet'}), "--models must be one of"),
    (dict(detect={'digits': 1.5}), '--detect must be a number in (0, 1), got 1.5'),
    (dict(detect={'mnist': 0.01}), '--detect must be entries of the regimes'),
    (dict(equivalence_margin=0), '--equivalence_margin must be a number in (0, 1)'),
    (dict(primary_statistic='best_accuracy'), '--primary_statistic must be one of'),
    (dict(client=dict(learning_rate=float('inf'))), '--client_learning_rate must be a finite'),
    (dict(server=dict(learning_rate=0)), '--server_learning_rate must be a finite number > 0'),
    (dict(client=dict(momentum=1.0)), '--client_momentum must be a number in [0, 1)'),
    (dict(client=dict(optimizer='adam')), "--client_optimizer must be one of 'sgd'"),
    (dict(loop=dict(weighting='uniform')), '--client_weighting must be unset'),
    (dict(tuning=dict(tuning_regimes={'digits': 'synthetic(1,1)'})),
     '--tuning_regimes must be entries DATASET:REGIME with a regime of that dataset'),
    (dict(tuning=dict(grids={'fedmgc': {'gamma': (1,)}})), "--grids must be one of 'fedavg'"),
    (dict(tuning=dict(client_lr_grid=())), '--client_lr_grid must be a non-empty list'),
    (dict(tuning=dict(strategy='random')), '--tuning_strategy must be one of'),
    (dict(tuning=dict(last_k=0)), '--tuning_last_k must be an integer >= 1'),
    (dict(tuning=dict(validation_fraction=1.0)), '--validation_fraction must be a number in'),
    (dict(tuning=dict(plateau_window=0)), '--plateau_window must be an integer >= 1'),
    (dict(tuning=dict(plateau_tolerance=-0.01)), '--plateau_tolerance must be a finite number'),
    (dict(regimes=('leaf_femnist:natural',)), "--leaf_dir must be LEAF's data/<name> folder"),
    (dict(methods=('fedavg', 'fedga[count=dataset]')),
     "--methods=fedga[count=dataset]: count='dataset': its builder (fedga) takes no argument"),
    (dict(methods=('fedavg', 'fedprox[proximal_strength=-1]')),
     '--methods=fedprox[proximal_strength=-1]: proximal_strength of method'),
    (dict(tuning=dict(grids={'fedprox': {'proximal_strength': (0.1, float('nan'))}})),
     '--grids=fedprox: proximal_strength of method'),
    (dict(output=dict(experiment_name='../x')), '--experiment_name must be a relative name'),
    (dict(tuning=dict(grids={'fedprox': {'proximal_strength': (0.1,)}},
                      tune_method_grids=False)),
     '--grids=fedprox: does not apply with --notune_method_grids'),
    (dict(primary_regimes=('digits:#C=2',)), "--primary_regimes must be one of 'digits:iid'"),
    (dict(data=dict(data_dir='/data/fm')), "--data_dir=/data/fm: no regime reads it (only those "
     "of ['mnist', 'fashion_mnist', 'cifar10', 'cifar100'] do, not of ['digits', "
     "'synthetic']); drop it"),
    (dict(data=dict(cache_dir='/c')), "--cache_dir=/c: no regime reads it (only those of "
     "['emnist', 'emnist_digits', 'leaf_femnist'"),
    (dict(data=dict(leaf_dir='/l')), "--leaf_dir=/l: no regime reads it"),
    (dict(tune=False, dataset_settings={'digits': {'client_lr_grid': (0.1,)}}),
     "--dataset_settings must be an entry of rounds with --notune (only tuning searches a "
     "grid), got 'digits.client_lr_grid=0.1'"),
])
def test_bad_settings_name_the_flag(changes, message):
  with pytest.raises(experiment_config.ConfigError) as info:
    _config(**changes)
  assert info.value.flag_message().startswith(message), info.value.flag_message()


@pytest.mark.parametrize('changes, argument, value', [
    (dict(tuning=dict(validation_fraction=1.0)), 'validation_fraction', 1.0),
    (dict(tuning=dict(client_lr_grid=(0.1, -1))), 'client_lr_grid', (0.1, -1)),
    (dict(report_seeds=(100,)), 'tuning_seeds', [100, 101]),
    (dict(detect={'digits': 1.5}), 'detect', 1.5),
    (dict(loop=dict(weighting='uniform')), 'client_weighting', 'uniform')])
def test_a_bad_setting_is_the_library_error_with_the_flag_and_the_value(changes, argument, value):
  with pytest.raises(tff_conflict.ArgumentError) as info:
    _config(**changes)
  assert (info.value.argument, info.value.value) == (argument, value)


def test_overlapping_seeds_are_fine_without_tuning():
  assert _config(report_seeds=(100,), tuning=dict(tune=False)).report_seeds == (100,)


def test_scaffold_needs_plain_local_sgd():
  assert _config(methods=('fedavg', 'scaffold')).methods == ('fedavg', 'scaffold')
  assert _config(methods=('fedavg',), client=dict(momentum=0.9)).client.momentum == 0.9
  with pytest.raises(experiment_config.ConfigError) as info:
    _config(methods=('fedavg', 'scaffold'), client=dict(momentum=0.9))
  message = info.value.flag_message()   # the library's check, in the benchmark's words
  assert message.startswith('--client_momentum=0.9: not with --methods=scaffold: the client '
                            'optimizer must be plain SGD for SCAFFOLD'), message
  assert 'client_optimizer_fn' not in message and '\n' not in message


@pytest.mark.parametrize('method, message', [
    ('fednova[client_weighting=loss]', "--methods=fednova[client_weighting=loss]: FedNova's "
     'normalised averaging weights clients by examples or uniformly (its weights p_i also '
     'weight tau_eff): it cannot be combined with client_weighting "loss"'),
    ('fedmgc[client_weighting=uniform]', "--methods=fedmgc[client_weighting=uniform]: "
     "client_weighting must be 'loss' for an aggregator with weights_are_losses=True, got "
     "'uniform'"),
    ('fedavg+corrective[client_weighting=uniform]', '--methods=fedavg+corrective['
     "client_weighting=uniform]: client_weighting must be 'num_examples' with the corrective"),
])
def test_a_method_its_builder_refuses_is_refused_before_any_run(method, message):
  with pytest.raises(experiment_config.ConfigError) as info:
    _config(methods=('fedavg', method))
  assert info.value.flag_message().startswith(message), info.value.flag_message()


@pytest.mark.parametrize('methods,models', [
    (('fedavg', 'feddecorr'), {}),                        # synthetic's default: softmax regression
    (('fedavg', 'feddecorr+fedgh[beta=0.05]'), {}),         # its compositions and variants too
    (('fedavg', 'feddecorr'), {'digits': 'logistic_regression', 'synthetic': 'mlp'}),
])
def test_feddecorr_on_a_model_whose_classifier_reads_the_input_is_refused(methods, models):
  # Its term has no gradient there: every run would equal FedAvg's to the last digit.
  with pytest.raises(experiment_config.ConfigError) as info:
    _config(methods=methods, models=models)
  assert info.value.argument == 'methods' and info.value.value == methods[1]
  message = info.value.flag_message()
  assert message.startswith(f'--methods={methods[1]}: cannot run on regime ')
  assert "whose model is 'logistic_regression' (--models)" in message
  assert 'z is the input itself' in message and '\n' not in message
  assert re.search(r'\(e\.g\. --models=(digits|synthetic):mlp\)$', message), message


def test_feddecorr_runs_on_models_with_a_hidden_layer():
  config = _config(methods=('fedavg', 'feddecorr'), models={'synthetic': 'mlp'})
  assert config.methods == ('fedavg', 'feddecorr')


def test_control_config_is_the_fedprox_papers_setting(tmp_path):
  from experiments import benchmark  # pylint: disable=g-import-not-at-top
  outer = config_lib.BenchmarkConfig(
      regimes=('digits:iid',), methods=('fedavg', 'fedgh'), epochs=(1, 5), report_seeds=(3, 4),
      loop=experiment_config.LoopConfig(rounds=20, clients_per_round=5, batch_size=20),
      client=experiment_config.OptimizerConfig(learning_rate=0.1, momentum=0.5),
      models={'digits': 'mlp'},
      output=experiment_config.OutputConfig(output_dir=str(tmp_path), experiment_name='results',
                                            runtime='cpp'),
      tune=True, tuning_seeds=(100,), tune_epochs=(1,), grids={'fedgh': {'order': ('random',)}})
  inner = benchmark.control_config(outer)
  # The outer benchmark's grids name its own methods, not the control's (replace validates).
  assert inner.grids == {}
  assert inner.regimes == ('synthetic(1,1)',)
  assert inner.methods == ('fedavg', 'fedprox_mu1') and inner.baseline == 'fedavg'
  assert inner.epochs == (20,) and inner.loop.rounds == 40 and inner.loop.batch_size == 10
  assert inner.loop.clients_per_round == 10 and inner.client.learning_rate == 0.01
  assert inner.client.momentum == 0.0 and inner.server.learning_rate == 1.0
  assert not inner.tune and inner.loop.eval_train_loss
  # One dataset for every seed, as in the paper: seeds vary the model and the clients sampled.
  assert not inner.vary_partition and inner.data.data_seed == 0
  assert inner.report_seeds == (3, 4) and inner.output.runtime == 'cpp'
  assert inner.root == str(tmp_path / 'results' / 'positive_control')
  assert config_lib.control_root(outer.root) is None
  (tmp_path / 'results' / 'positive_control').mkdir(parents=True)
  (tmp_path / 'results' / 'positive_control' / 'runs.csv').write_text('x\n')
  assert config_lib.control_root(outer.root) == inner.root




def test_the_controls_reading_comes_from_its_config_json(tmp_path):
  from experiments import benchmark  # pylint: disable=g-import-not-at-top
  outer = config_lib.BenchmarkConfig(
      regimes=('digits:iid',), methods=('fedavg',),
      output=experiment_config.OutputConfig(output_dir=str(tmp_path)))
  method, baseline, ran = config_lib.control_reading(
      config_lib.as_dict(benchmark.control_config(outer)))
  assert (method, baseline) == ('fedprox_mu1', 'fedavg')
  assert ran.startswith('fedprox_mu1 against fedavg on `synthetic(1,1)`: E = 20, batch 10, ')
  assert ran.endswith('the global model\'s training loss evaluated every round')


def test_primary_regimes_are_named_as_the_regimes_and_best_of_drops_empty_names():
  config = _config(primary_regimes=('synthetic( 1 , 1 )', ''), best_of=('fedavg', '', 'scaffold'))
  assert config.primary_regimes == ('synthetic(1,1)',)
  assert config.best_of == ('fedavg', 'scaffold')
  assert _config().best_of == config_lib.BASELINES and _config().primary_regimes == ()


def test_a_dataset_sets_its_own_rounds_and_learning_rate_grids():
  assert config_lib.parse_dataset_settings(
      'dataset_settings',
      'synthetic.rounds=7, synthetic.client_lr_grid=1/3,digits.server_lr_grid=2') == {
          'synthetic': {'rounds': 7, 'client_lr_grid': (1.0, 3.0)},
          'digits': {'server_lr_grid': (2.0,)}}
  config = _config(loop=dict(rounds=5), client_lr_grid=(0.1,),
                   dataset_settings={'synthetic': {'rounds': 7, 'client_lr_grid': (1.0, 3.0)}})
  from experiments.benchmarking import plan  # pylint: disable=g-import-not-at-top
  own, other = (plan.make(config).datasets[d] for d in ('synthetic', 'digits'))
  assert (own.rounds, own.client_lr_grid, own.server_lr_grid) == (
      7, (1.0, 3.0), config.server_lr_grid)
  assert (other.rounds, other.client_lr_grid) == (config.loop.rounds, config.client_lr_grid) == (
      5, (0.1,))
  flat = config_lib.flat_settings(config_lib.as_dict(config))
  assert config_lib.per_dataset(flat, 'rounds') == '5 (synthetic: 7)'
  assert config_lib.per_dataset(flat, 'client_lr_grid') == '[0.1] (synthetic: [1.0, 3.0])'
  assert config_lib.per_dataset(flat, 'server_lr_grid') == str(list(config.server_lr_grid))
  assert [config_lib.rounds_of(flat, r) for r in ('synthetic(1,1)', 'digits:iid@8')] == [7, 5]


@pytest.mark.parametrize('text, message', [
    ('synthetic:rounds=7', '--dataset_settings must be entries DATASET.SETTING=VALUE'),
    ('synthetic.epochs=2', "--dataset_settings=synthetic.epochs=2: 'epochs' is not a setting"),
    ('synthetic.rounds=many', '--dataset_settings must be entries DATASET.rounds=INT'),
    ('synthetic.client_lr_grid=1/x', '--dataset_settings must be entries DATASET.rounds=INT'),
    ('synthetic.rounds=3,synthetic.rounds=5',
     '--dataset_settings=synthetic.rounds=5: synthetic.rounds is given twice; give it once')])
def test_bad_dataset_settings_text_names_the_flag(text, message):
  with pytest.raises(experiment_config.ConfigError) as info:
    config_lib.parse_dataset_settings('dataset_settings', text)
  assert info.value.flag_message().startswith(message), info.value.flag_message()


@pytest.mark.parametrize('settings, message', [
    ({'mnist': {'rounds': 3}}, "--dataset_settings must be entries of the regimes' datasets"),
    ({'synthetic': {'rounds': 0}}, '--dataset_settings must be entries with rounds >= 1'),
    ({'digits': {'client_lr_grid': (0.1, -1.0)}},
     "--dataset_settings must be entries with rounds >= 1 or grids of finite numbers > 0, got "
     "'digits.client_lr_grid=0.1/-1.0'")])
def test_bad_dataset_settings_name_the_flag_and_the_entry(settings, message):
  with pytest.raises(experiment_config.ConfigError) as info:
    _config(dataset_settings=settings)
  assert info.value.flag_message().startswith(message), info.value.flag_message()

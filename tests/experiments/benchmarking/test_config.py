"""BenchmarkConfig's checks name the setting (= the flag), and its helpers."""

import pytest

from experiments.benchmarking import config as config_lib


def _config(**changes):
  args = dict(regimes=('digits:iid', 'synthetic(1,1)'), methods=('fedavg', 'fedprox'))
  tuning = changes.pop('tuning', {})
  args.update(changes)
  return config_lib.BenchmarkConfig(tuning=config_lib.TuningConfig(**tuning), **args)


def test_split_top_level_keeps_brackets_together():
  assert config_lib.split_top_level('digits:dir(0.1), synthetic(1,1) ,fedga[a=1,b=2],,') == [
      'digits:dir(0.1)', 'synthetic(1,1)', 'fedga[a=1,b=2]']


def test_parse_grids_and_mappings():
  assert config_lib.parse_grids('fedprox.proximal_strength=0.01/1, fedga.counts=batch') == {
      'fedprox': {'proximal_strength': (0.01, 1)}, 'fedga': {'counts': ('batch',)}}
  assert config_lib.parse_mapping('models', 'digits:mlp, synthetic:logistic_regression') == {
      'digits': 'mlp', 'synthetic': 'logistic_regression'}
  assert config_lib.parse_mapping('targets', 'digits:0.8', float) == {'digits': 0.8}
  with pytest.raises(config_lib.ConfigError, match='grids entries must be'):
    config_lib.parse_grids('fedprox=1')
  with pytest.raises(config_lib.ConfigError, match='models entries must be'):
    config_lib.parse_mapping('models', 'mlp')
  with pytest.raises(config_lib.ConfigError, match='targets has a bad value'):
    config_lib.parse_mapping('targets', 'digits:x', float)


def test_canonical_names_and_defaults():
  config = _config(regimes=('digits:dir(0.10)', 'synthetic( 1 , 1 )'))
  assert config.regimes == ('digits:dir(0.1)', 'synthetic(1,1)')
  assert config.model_for('digits') == 'digits_cnn'
  assert config.model_for('synthetic') == 'logistic_regression'
  assert config.tuning_regime_for('digits') == 'digits:dir(0.1)'
  assert config.root.endswith('results/benchmark')
  assert _config(regimes=('mnist:iid',)).tuning_regime_for('mnist') == 'mnist:iid'
  small = _config(regimes=('digits:iid@8', 'digits:dir(0.1)@8'))
  assert small.tuning_regime_for('digits') == 'digits:dir(0.1)@8'
  assert _config(regimes=('digits:iid@8',)).tuning_regime_for('digits') == 'digits:dir(0.1)'


def test_tuned_epochs_and_given_values():
  config = _config(epochs=(1, 2, 5), tuning=dict(tune_epochs=(1, 5)),
                   given={'fedprox': {'proximal_strength': 0.5}})
  assert [config.tuned_epochs_for(e) for e in (1, 2, 5)] == [1, 1, 5]
  assert config.given_kwargs(config.parsed_methods()[1]) == {'proximal_strength': 0.5}


@pytest.mark.parametrize('changes,message', [
    (dict(regimes=()), 'regimes must not be empty'),
    (dict(regimes=('digits:bogus',)), 'regimes has a bad entry'),
    (dict(regimes=('digits:iid', 'digits:iid')), 'regimes lists a regime twice'),
    (dict(methods=('fedavg', 'sgd')), 'methods has a bad entry'),
    (dict(methods=('fedavg', 'fedavg')), 'methods lists a method twice'),
    (dict(methods=('fedprox',)), 'baseline must be one of --methods'),
    (dict(epochs=(0,)), 'epochs must be integers >= 1'),
    (dict(epochs=(1, 1)), 'epochs lists a value twice'),
    (dict(report_seeds=()), 'report_seeds must not be empty'),
    (dict(report_seeds=(100,)), 'tuning_seeds must be disjoint from --report_seeds'),
    (dict(tuning=dict(tune_epochs=(3,))), 'tune_epochs must be among --epochs'),
    (dict(rounds=0), 'rounds must be an integer >= 1'),
    (dict(clients_per_round=1.5), 'clients_per_round must be an integer >= 1'),
    (dict(models={'emnist': 'mlp'}), "models names dataset 'emnist'"),
    (dict(models={'digits': 'resnet'}), 'models must name models of'),
    (dict(targets={'digits': 1.5}), r'targets must be accuracies in \(0, 1\]'),
    (dict(target_fraction=0), 'target_fraction must be in'),
    (dict(client_learning_rate=float('inf')), 'client_learning_rate must be a finite number'),
    (dict(server_learning_rate=0), 'server_learning_rate must be a finite number > 0'),
    (dict(client_momentum=1.0), r'client_momentum must be in \[0, 1\)'),
    (dict(tuning=dict(tuning_regimes={'digits': 'synthetic(1,1)'})),
     'tuning_regimes maps .digits. to a regime of another dataset'),
    (dict(tuning=dict(grids={'fedmgc': {'gamma': (1,)}})), "grids names method 'fedmgc'"),
    (dict(tuning=dict(client_lr_grid=())), 'client_lr_grid must be a non-empty list'),
    (dict(tuning=dict(strategy='random')), 'tuning_strategy must be'),
    (dict(tuning=dict(last_k=0)), 'tuning_last_k must be an integer >= 1'),
    (dict(tuning=dict(validation_fraction=1.0)), r'validation_fraction must be a number in'),
    (dict(runtime='gpu'), 'runtime must be one of'),
    (dict(regimes=('leaf_femnist:natural',)), 'leaf_dir must name LEAF'),
    (dict(methods=('fedavg', 'fedga[count=dataset]')),
     "methods has count='dataset' for method 'fedga.count=dataset.', but its builder"),
    (dict(methods=('fedavg', 'fedprox[proximal_strength=-1]')),
     'methods has a bad value: proximal_strength of method .* must be a finite number >= 0'),
    (dict(tuning=dict(grids={'fedprox': {'proximal_strength': (0.1, float('nan'))}})),
     'grids has a bad value: proximal_strength'),
    (dict(experiment_name='../x'), 'experiment_name must be a relative name'),
])
def test_bad_settings_name_the_flag(changes, message):
  with pytest.raises(config_lib.ConfigError, match=message) as info:
    _config(**changes)
  assert info.value.flag_message().startswith('--')


def test_overlapping_seeds_are_fine_without_tuning():
  assert _config(report_seeds=(100,), tuning=dict(tune=False)).report_seeds == (100,)

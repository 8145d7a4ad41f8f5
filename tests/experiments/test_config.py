"""experiments.config: typed settings, their checks, the one mapping between flags and fields."""

import dataclasses
import math

from absl import flags
from absl.testing import flagsaver
import pytest

from experiments import config
from experiments import experiment_lib
from experiments import flags_lib
from experiments import train  # pylint: disable=unused-import  (defines --algorithm, --seed)
from tff_conflict.simulation import training_loop
import tff_conflict

FLAGS = flags.FLAGS


def test_every_checked_field_has_a_flag_validator_with_the_same_requirement():
  for _, flag, field in config.flag_fields():
    assert 'check' not in field.metadata or flag in FLAGS, flag
  with pytest.raises(config.ConfigError) as info:
    with flagsaver.as_parsed(component_ratio='0'):
      pass
  assert info.value.flag_message() == '--component_ratio must be a number in (0, 1], got 0.0'


def test_flags_build_the_config_and_its_flag_values_round_trip():
  with flagsaver.as_parsed(algorithm='custom', client_loss='focal', aggregator='fedgh',
                           proximal_strength='0.2', dataset='synthetic', num_clients='8',
                           rounds='7', clients_per_round='3', seed='4', client_optimizer='adam',
                           server_momentum='0.5', runtime='cpp', tff_workers='a:1,b:2',
                           focal_gamma='1.5'):
    experiment = flags_lib.experiment_config()
  assert experiment.algorithm == config.AlgorithmConfig('custom', 'focal', 'fedgh',
                                                        proximal_term=True, focal_gamma=1.5,
                                                        proximal_strength=0.2)
  assert experiment.data.dataset == 'synthetic' and experiment.data.num_clients == 8
  assert experiment.training.rounds == 7 and experiment.seed == 4
  assert experiment.client.optimizer == 'adam' and experiment.server.momentum == 0.5
  assert experiment.output.workers == ('a:1', 'b:2')
  assert experiment.hparams.focal_gamma == 1.5
  assert experiment.experiment_name == 'synthetic_focal+fedgh_seed4'
  values = experiment.flag_values()
  assert values['client_batch_size'] == 20 and values['tff_workers'] == ['a:1', 'b:2']
  assert values['proximal_term'] is True
  assert config.from_flag_values(values, proximal_term=True) == experiment


def test_method_hparams_take_the_specs_defaults_and_checks():
  assert vars(config.ExperimentConfig().hparams) == {
      h.flag: h.default for h in config.METHOD_HPARAMS}
  with pytest.raises(config.ConfigError, match='focal_beta must be a finite number > 0, got 0'):
    config.AlgorithmConfig(focal_beta=0)


def test_proximal_term_only_for_a_composed_method():
  with flagsaver.as_parsed(algorithm='fedprox', proximal_strength='0.2'):
    experiment = flags_lib.experiment_config()
  assert not experiment.algorithm.proximal_term
  assert 'proximal_term' not in experiment.flag_values()
  assert experiment.hparams.proximal_strength == 0.2


@pytest.mark.parametrize('build, field, flag, message', [
    (lambda: config.ExperimentConfig(client=config.OptimizerConfig(math.inf)), 'learning_rate',
     'client_learning_rate', '--client_learning_rate must be a finite number > 0, got inf'),
    (lambda: config.AlgorithmConfig(focal_gamma=math.nan), 'focal_gamma', 'focal_gamma',
     '--focal_gamma must be a finite number >= 0, got nan'),
    (lambda: config.LoopConfig(rounds=3, clients_per_round=1, batch_size=0), 'batch_size',
     'client_batch_size', '--client_batch_size must be an integer >= 1, got 0'),
    (lambda: config.DataConfig(dataset='imagenet'), 'dataset', 'dataset',
     "--dataset must be one of 'digits',"),
    (lambda: config.ExperimentConfig(server=config.OptimizerConfig(1.0, 'adam', momentum=0.9)),
     'momentum', 'server_momentum', "--server_momentum must be 0 with optimizer 'adam'"),
    (lambda: config.AlgorithmConfig('custom', client_loss='ce'), 'aggregator', 'aggregator',
     "--aggregator must be given when the algorithm is 'custom', got None"),
    (lambda: config.OutputConfig(runtime='cpp', workers=('h:1', 'h:1')), 'workers', 'tff_workers',
     '--tff_workers must be a list of distinct host:port'),
    (lambda: config.ExperimentConfig(training=config.LoopConfig(rounds=2, clients_per_round=1,
                                                                eval_every=3)),
     'eval_every', 'eval_every', '--eval_every must be at most rounds=2'),
    (lambda: config.ExperimentConfig(data=config.DataConfig(num_clients=4),
                                     training=config.LoopConfig(rounds=2, clients_per_round=5)),
     'clients_per_round', 'clients_per_round', '--clients_per_round must be at most num_clients=4'),
])
def test_config_errors_name_the_flag_and_the_value(build, field, flag, message):
  del field  # the message names the flag
  with pytest.raises(config.ConfigError) as info:
    build()
  error = info.value
  assert isinstance(error, ValueError) and error.argument == flag
  assert error.flag_message().startswith(message), error.flag_message()
  assert str(error).startswith(f'{flag} must be '), str(error)


def test_a_bad_setting_is_the_library_error_naming_the_flag_and_the_value():
  with pytest.raises(tff_conflict.ArgumentError) as info:
    config.ExperimentConfig(client=config.OptimizerConfig(learning_rate=0.0))
  error = info.value
  assert isinstance(error, config.ConfigError)
  assert (error.argument, error.value) == ('client_learning_rate', 0.0)
  assert error.flag_message() == '--client_learning_rate must be a finite number > 0, got 0.0'


@pytest.mark.parametrize('flag, value, requirement', [
    ('rounds', 0, 'an integer >= 1'), ('num_clients', 0, 'an integer >= 1'),
    ('seed', -1, 'an integer >= 0'), ('client_shuffle_buffer', -1, 'an integer >= 0')])
def test_an_integer_flag_is_refused_by_its_setting_check(flag, value, requirement):
  message = f'--{flag} must be {requirement}, got {value}'
  with pytest.raises(config.ConfigError) as info:   # when parsed
    with flagsaver.as_parsed(**{flag: str(value)}):
      pass
  assert info.value.flag_message() == message
  with flagsaver.flagsaver():   # and by the binaries' config path
    with pytest.raises(tff_conflict.ArgumentError) as info:
      flags_lib.experiment_config(**{flag: value})
  assert (info.value.argument, info.value.value) == (flag, value)
  assert info.value.flag_message() == message


def test_booleans_are_not_numbers_and_sections_are_typed():
  with pytest.raises(config.ConfigError, match='rounds must be an integer >= 1, got True'):
    config.LoopConfig(rounds=True, clients_per_round=1)
  with pytest.raises(TypeError, match='ExperimentConfig.training must be a LoopConfig'):
    config.ExperimentConfig(training={'rounds': 3})


def test_the_runtime_defaults_to_the_in_process_runner():
  assert config.OutputConfig().runtime == 'inprocess' == FLAGS['runtime'].default
  assert config.OutputConfig(runtime='cpp', workers=['h:1']).workers == ('h:1',)
  with pytest.raises(config.ConfigError, match="runtime must be 'cpp' with tff_workers"):
    config.OutputConfig(workers=('h:1',))


def test_a_run_from_a_config_alone(tmp_path):
  experiment = config.ExperimentConfig(
      algorithm=config.AlgorithmConfig('fedprox'),
      data=config.DataConfig(num_clients=6),
      model='logistic_regression',
      training=config.LoopConfig(rounds=1, clients_per_round=3, batch_size=32),
      output=config.OutputConfig(output_dir=str(tmp_path), progress=False, runtime='inprocess'))
  task = experiment_lib.load_task(experiment)
  rows, _, _ = experiment_lib.run_experiment(experiment, task=task)
  assert [r['round_num'] for r in rows] == [1]
  hparams = training_loop.read_hparams(str(tmp_path / 'digits_fedprox_seed0' / 'hparams.csv'))
  assert hparams['algorithm'] == 'fedprox' and hparams['runtime'] == 'inprocess'
  assert hparams['proximal_strength'] == '0.01' and 'version/tensorflow' in hparams


@pytest.mark.parametrize('algorithms', [None, ['fedavg', 'feddecorr']])
def test_load_task_refuses_feddecorr_on_a_model_whose_classifier_reads_the_input(algorithms):
  # Softmax regression: FedDecorr's term has no gradient, it would train exactly as FedAvg.
  experiment = config.ExperimentConfig(
      algorithm=config.AlgorithmConfig('feddecorr' if algorithms is None else 'fedavg'),
      data=config.DataConfig('synthetic', num_clients=4), model='logistic_regression',
      training=config.LoopConfig(rounds=1, clients_per_round=2))
  with pytest.raises(config.ConfigError) as info:
    experiment_lib.load_task(experiment, algorithms)
  assert info.value.argument == 'model' and info.value.value == 'logistic_regression'
  assert info.value.flag_message().startswith(
      '--model=logistic_regression: --algorithm=feddecorr cannot train it: ')
  assert 'z is the input itself' in str(info.value)
  experiment_lib.load_task(dataclasses.replace(experiment, model='mlp'), algorithms)


def test_load_task_refuses_a_model_that_cannot_take_the_inputs():
  experiment = config.ExperimentConfig(
      data=config.DataConfig('synthetic', num_clients=4),
      model='digits_cnn',
      training=config.LoopConfig(rounds=1, clients_per_round=2))
  with pytest.raises(config.ConfigError) as info:
    experiment_lib.load_task(experiment)
  assert info.value.argument == 'model'
  assert info.value.flag_message().startswith(
      '--model=digits_cnn: cannot take the inputs of --dataset=synthetic (shape (60,)): ')
  assert 'for an image model, got (60,)' in info.value.flag_message()


class _ErrorWithArgument(ValueError):

  def __init__(self, argument, value):
    super().__init__(f'{argument} must be positive, got {value}')
    self.argument, self.value = argument, value


def test_library_errors_name_their_own_argument_else_the_setting_being_built():
  error = config.from_library_error(_ErrorWithArgument('alpha', -1.0), 'dataset', 'digits',
                                    arguments={'alpha': 'synthetic_alpha'})
  assert (error.argument, error.value) == ('synthetic_alpha', -1.0)
  assert error.flag_message() == '--synthetic_alpha=-1.0: alpha must be positive, got -1.0'
  # No attribute (or one the table does not know): the setting being built, message unparsed.
  for raised in (ValueError('num_clients=5000 is larger\n than the 3400 writers'),
                 _ErrorWithArgument('unknown', 3)):
    error = config.from_library_error(raised, 'dataset', 'emnist')
    assert (error.argument, error.value) == ('dataset', 'emnist')
    assert error.flag_message() == f"--dataset=emnist: {' '.join(str(raised).split())}"
    assert str(error) == f"dataset=emnist: {' '.join(str(raised).split())}"


def test_a_check_names_the_argument_and_the_value():
  assert config.at_least(1)('rounds', 3) == 3
  with pytest.raises(config.ConfigError) as info:
    config.at_least(1)('client_batch_size', 0)
  assert str(info.value) == 'client_batch_size must be an integer >= 1, got 0'
  assert info.value.flag_message() == '--client_batch_size must be an integer >= 1, got 0'
  with pytest.raises(TypeError, match='exactly one of requirement and reason'):
    config.ConfigError('x', 1)


def test_default_experiment_names_tell_leaf_datasets_apart():
  def name(**data):
    return config.ExperimentConfig(algorithm=config.AlgorithmConfig('fedgh'),
                                   data=config.DataConfig(**data)).experiment_name
  assert name() == 'digits_fedgh_seed0'
  assert name(dataset='leaf', leaf_dir='/data/leaf/data/femnist/') == 'leaf_femnist_fedgh_seed0'
  assert name(dataset='leaf', leaf_dir='/x/celeb a', leaf_name='celeba') == (
      'leaf_celeba_fedgh_seed0')
  assert name(dataset='leaf', leaf_dir='/x/celeb a') == 'leaf_celeb_a_fedgh_seed0'

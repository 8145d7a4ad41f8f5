"""experiments.train: cross-flag checks, and a 2-round smoke run on tiny digits data."""

import os

from absl import flags
from absl.testing import flagsaver
import pytest

from experiments import flags_lib
from experiments import train
from tff_conflict.simulation import training_loop
from tests.experiments import conftest
from tff_conflict.simulation import checkpoints
from tff_conflict.simulation import metrics as metrics_lib


@pytest.mark.parametrize('flag_values, message', [
    (dict(num_clients='5', clients_per_round='6'),
     '--clients_per_round must be at most num_clients=5, got 6'),
    (dict(cache_dir='/tmp'),
     r"--cache_dir=/tmp: applies only to --dataset in \['emnist', 'leaf'\], not --dataset=digits"),
    (dict(leaf_dir='/tmp'), r"--leaf_dir=/tmp: applies only to --dataset in \['leaf'\]"),
    (dict(dataset='leaf'), "--leaf_dir must be given with dataset 'leaf' .*got None"),
    (dict(dataset='synthetic', alpha='0.5'),
     '--alpha=0.5: applies only to --dataset in .*, not --dataset=synthetic'),
    (dict(client_loss='focal'),
     "--client_loss must be left unset unless the algorithm is 'custom'.*got 'focal'"),
    (dict(algorithm='custom', client_loss='focal'),
     "--aggregator must be given when the algorithm is 'custom', got None"),
    (dict(client_optimizer='adam', client_momentum='0.9'),
     "--client_momentum must be 0 with optimizer 'adam' \\(momentum applies to sgd only\\), "
     'got 0.9'),
    (dict(tff_workers='localhost:1', runtime='inprocess'),
     "--runtime must be 'cpp' with tff_workers .*got 'inprocess'"),
    (dict(rounds='3', eval_every='4'), '--eval_every must be at most rounds=3 .*got 4'),
])
def test_cross_flag_checks(flag_values, message):
  with flagsaver.as_parsed(**flag_values):
    with conftest.flag_error(message):
      flags_lib.check_common_flags()


@pytest.mark.parametrize('flag_values, message', [
    (dict(server_learning_rate='0'), '--server_learning_rate must be a finite number > 0, got 0.0'),
    (dict(client_learning_rate='inf'),
     '--client_learning_rate must be a finite number > 0, got inf'),
    (dict(alpha='nan'), '--alpha must be a finite number > 0, got nan'),
    (dict(focal_gamma='nan'), '--focal_gamma must be a finite number >= 0, got nan'),
    (dict(selection_ratio='2'), r'--selection_ratio must be a number in \(0, 1\], got 2.0'),
    (dict(corrective_alpha='1.5'), r'--corrective_alpha must be a number in \[0, 1\], got 1.5'),
    (dict(client_momentum='1'), r'--client_momentum must be a number in \[0, 1\), got 1.0'),
    (dict(tff_workers='localhost'),
     r"--tff_workers must be a list of distinct host:port entries .*, got \['localhost'\]"),
    (dict(experiment_name='../x'), "--experiment_name must be a relative name .*, got '../x'"),
])
def test_single_flag_values_are_refused_when_parsed(flag_values, message):
  with conftest.flag_error(message):
    with flagsaver.as_parsed(**flag_values):
      pass


@pytest.mark.parametrize('flag_values, message', [
    (dict(algorithm='scaffold', client_momentum='0.9'),
     r'^--client_momentum=0.9: not with --algorithm=scaffold: the client optimizer must be plain '
     r'SGD for SCAFFOLD .*got SGD with hyperparameters'),
    (dict(algorithm='scaffold', client_optimizer='adam'),
     r'^--client_optimizer=adam: not with --algorithm=scaffold: the client optimizer must be '
     r'plain SGD'),
    (dict(algorithm='fednova', client_optimizer='adam'),
     r'^--client_optimizer=adam: not with --algorithm=fednova: FedNova normalises each client '
     r'update .*; got Adam, whose normalisation is unknown$'),
    (dict(algorithm='fednova', client_weighting='loss'),
     r'^--client_weighting=loss: not with --algorithm=fednova: FedNova\'s normalised averaging '
     r'weights clients by examples or uniformly .*cannot be combined with --client_weighting '
     r'"loss"$'),
    (dict(algorithm='fedmgc', client_weighting='uniform'),
     r"^--client_weighting must be 'loss' for an aggregator with weights_are_losses=True with "
     r"--algorithm=fedmgc, got 'uniform'$"),
    (dict(algorithm='feddecorr', aggregator='dgc', client_weighting='uniform'),
     r"^--client_weighting must be 'loss' .* with --algorithm=feddecorr --aggregator=dgc, got "
     r"'uniform'$"),
    (dict(algorithm='fednova', aggregator='corrective'),
     r"^--aggregator=corrective: not with --algorithm=fednova: FedNova's normalised averaging "
     r'cannot be combined with the corrective aggregator'),
])
def test_settings_the_library_refuses_for_a_method_are_refused_in_flag_words(flag_values,
                                                                              message):
  with flagsaver.as_parsed(**flag_values):
    with conftest.flag_error(message):
      flags_lib.check_common_flags()


def test_defaults_pass_the_checks():
  with flagsaver.flagsaver():
    flags_lib.check_common_flags()
  with flagsaver.as_parsed(algorithm='fedga', client_clip_norm='5', calibration_form='soft_target'):
    flags_lib.check_common_flags()


def test_a_baseline_with_an_aggregator_on_top(tmp_path, capfd):
  with flagsaver.as_parsed(
      algorithm='fednova', aggregator='fedgh', fedgh_order='index', dataset='digits',
      num_clients='6', clients_per_round='3', model='logistic_regression', rounds='1',
      client_batch_size='32', output_dir=str(tmp_path), experiment_name='nova_gh', seed='3'):
    train.main(['train'])
  assert 'fednova+fedgh on digits' in capfd.readouterr().out
  hparams = training_loop.read_hparams(str(tmp_path / 'nova_gh' / 'hparams.csv'))
  assert hparams['aggregator'] == 'fedgh' and hparams['fedgh_order'] == 'index'
  columns = metrics_lib.read_metrics(str(tmp_path / 'nova_gh' / 'metrics.csv'))[1]
  assert any(c.endswith('tau_eff') for c in columns)   # FedNova's server wrapper ran
  assert any(c.endswith('num_projections') for c in columns)   # FedGH ran inside it


def test_an_aggregator_on_a_builder_that_fixes_its_own_is_refused_before_any_work():
  with flagsaver.as_parsed(algorithm='fedgh', aggregator='dgc'):
    with conftest.flag_error('--aggregator=dgc: does not apply to '
                       '--algorithm=fedgh, whose builder fixes its aggregator'):
      flags_lib.check_common_flags()


def test_two_rounds_on_tiny_digits_with_a_composed_method(tmp_path, capfd):
  with flagsaver.as_parsed(
      algorithm='custom', client_loss='focal', aggregator='fedgh', proximal_strength='0.1',
      dataset='digits', num_clients='6', clients_per_round='3', model='logistic_regression',
      rounds='2', checkpoint_every='1', client_batch_size='32', output_dir=str(tmp_path),
      experiment_name='smoke', seed='3'):
    train.main(['train'])
  out = capfd.readouterr().out
  experiment_dir = tmp_path / 'smoke'
  assert 'focal+fedgh on digits (6 clients, 3 per round, model logistic_regression)' in out
  assert str(experiment_dir / 'metrics.csv') in out
  rows = metrics_lib.read_csv(str(experiment_dir / 'metrics.csv'))
  assert [r['round_num'] for r in rows] == [1, 2]
  columns = metrics_lib.read_metrics(str(experiment_dir / 'metrics.csv'))[1]
  assert columns[:8] == ['round_num', 'train_loss', 'train_accuracy', 'test_accuracy',
                         'test_loss', 'test_macro_f1', 'round_time_s', 'eval_time_s']
  assert 'test_class_accuracy/9' in columns
  # digits stores its partition's label counts: errors split by class co-occurrence.
  assert {'test_rare_pair_error', 'test_common_pair_error', 'test_rare_error_share'} <= set(columns)
  assert any(c.startswith('aggregator/') and c.endswith('conflict_fraction_before')
             for c in columns)
  assert any(c.startswith('aggregator/') and c.endswith('norm_ratio') for c in columns)
  for row in rows:
    assert 0.0 <= row['test_accuracy'] <= 1.0 and row['train_loss'] > 0
  hparams = training_loop.read_hparams(str(experiment_dir / 'hparams.csv'))
  assert hparams['seed'] == '3' and hparams['aggregator'] == 'fedgh'
  assert hparams['proximal_strength'] == '0.1' and hparams['rounds'] == '2'
  assert 'focal_gamma' in hparams and 'corrective_alpha' not in hparams  # what it reads
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  assert hparams['version/tensorflow-federated'] == tff.__version__
  manager = checkpoints.CheckpointManager(str(experiment_dir / 'checkpoints'))
  assert manager.versions() == [1, 2]
  assert not os.path.exists(str(experiment_dir / 'metrics.csv.tmp'))


def test_the_population_size_goes_to_builders_that_take_it():
  from experiments import experiment_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top

  class Population:
    client_ids = ['a', 'b', 'c']

  assert experiment_lib.population_kwargs(learning.build_scaffold, Population()) == {
      'num_clients': 3}
  assert experiment_lib.population_kwargs(learning.build_fedavg, Population()) == {}


@pytest.mark.slow
def test_scaffold_keeps_its_client_controls_in_the_checkpoint_and_resumes(tmp_path, capfd):
  import numpy as np  # pylint: disable=g-import-not-at-top
  flag_values = dict(algorithm='scaffold', dataset='digits', num_clients='6',
                     clients_per_round='3', model='logistic_regression', checkpoint_every='1',
                     client_batch_size='32', output_dir=str(tmp_path), experiment_name='sc')
  with flagsaver.as_parsed(rounds='2', **flag_values):
    train.main(['train'])
  checkpoint = tmp_path / 'sc' / 'checkpoints' / 'round_2.npz'
  with np.load(str(checkpoint)) as saved:
    leaves = [saved[name] for name in saved.files]
  d = 8 * 8 * 10 + 10   # logistic regression on 8x8 digits
  controls = [a for a in leaves if a.shape == (6, d)]          # N = --num_clients
  participated = [a for a in leaves if a.dtype == bool and a.shape == (6,)]
  assert len(controls) == 1 and len(participated) == 1
  assert 3 <= participated[0].sum() <= 6
  assert np.all(np.abs(controls[0][participated[0]]).sum(axis=1) > 0)
  np.testing.assert_array_equal(controls[0][~participated[0]], 0.0)
  with flagsaver.as_parsed(rounds='3', **flag_values):
    train.main(['train'])
  assert 'resuming from round 2' in capfd.readouterr().out
  rows = metrics_lib.read_csv(str(tmp_path / 'sc' / 'metrics.csv'))
  assert [r['round_num'] for r in rows] == [1, 2, 3]
  assert not any(c.startswith('client_controls') for c in rows[0])


@pytest.mark.parametrize('flag_values, message', [
    (dict(algorithm='fedgh', focal_gamma='2'),
     r'--focal_gamma=2.0: does not apply to --algorithm=fedgh, which reads --client_clip_norm, '
     r'--fedgh_order'),
    (dict(algorithm='custom', client_loss='focal', aggregator='corrective',
          calibration_counts='dataset'),
     r"--calibration_counts=dataset: does not apply to --algorithm=custom --client_loss=focal "
     r'--aggregator=corrective, which reads --client_clip_norm, --corrective_alpha, '
     r'--focal_beta, --focal_gamma, --proximal_strength'),
    (dict(algorithm='fedavg', selection_ratio='0.3'),
     '--selection_ratio=0.3: does not apply to --algorithm=fedavg'),
])
def test_a_method_flag_the_method_does_not_read_is_refused(flag_values, message):
  with flagsaver.as_parsed(**flag_values):
    with conftest.flag_error(message):
      flags_lib.check_common_flags()


def test_proximal_strength_is_fedprox_mu_and_a_custom_compositions_term():
  # One meaning in every binary: compare and the benchmark refuse it with fedgh too.
  with flagsaver.as_parsed(algorithm='fedgh', proximal_strength='0.5'):
    with conftest.flag_error(r'--proximal_strength=0.5: does not apply to --algorithm=fedgh, '
                             r'which reads --client_clip_norm, --fedgh_order \(a loss and an '
                             r'aggregator compose with --algorithm=custom'):
      flags_lib.check_common_flags()
  with flagsaver.as_parsed(algorithm='custom', client_loss='ce', aggregator='fedgh',
                           proximal_strength='0.5'):
    composed = flags_lib.check_common_flags()
  assert composed.algorithm.proximal_term and composed.algorithm.label == 'ce+fedgh'
  values = composed.flag_values()
  assert values['proximal_term'] is True and values['proximal_strength'] == 0.5
  # Only the flags the method reads are recorded.
  assert 'focal_gamma' not in values and values['fedgh_order'] == 'random'
  with flagsaver.as_parsed(algorithm='custom', client_loss='ce', aggregator='fedgh'):
    assert flags_lib.check_common_flags().flag_values()['proximal_term'] is False
  with flagsaver.as_parsed(algorithm='fedgh'):
    plain = flags_lib.check_common_flags()
  assert 'proximal_term' not in plain.flag_values()
  assert 'proximal_strength' not in plain.flag_values()
  with flagsaver.as_parsed(algorithm='fedprox', proximal_strength='0.5'):
    fedprox = flags_lib.check_common_flags()
  assert not fedprox.algorithm.proximal_term and fedprox.algorithm.label == 'fedprox'
  assert fedprox.hparams.proximal_strength == 0.5


def test_method_flag_help_reads_as_sentences():
  helps = {name: flags.FLAGS[name].help for name in ('corrective_alpha', 'client_clip_norm',
                                                     'focal_gamma')}
  assert helps['corrective_alpha'].startswith('Corrective gradient weights: alpha of c')
  assert helps['client_clip_norm'].startswith('Client training (every method): global L2 norm')
  assert helps['focal_gamma'].startswith('Focal loss (FedMGC): focusing exponent')
  for text in helps.values():
    assert '..' not in text and text.endswith('.')
  assert 'per_client.csv' not in train.__doc__   # train writes none


@pytest.mark.slow
def test_a_rerun_with_fewer_rounds_keeps_the_finished_run(tmp_path, capfd):
  flag_values = dict(algorithm='fedgh', dataset='digits', num_clients='6', clients_per_round='3',
                     model='logistic_regression', client_batch_size='32',
                     output_dir=str(tmp_path), experiment_name='six')
  with flagsaver.as_parsed(rounds='6', **flag_values):
    train.main(['train'])
  run_dir = tmp_path / 'six'
  before = {p: p.read_bytes() for p in sorted(run_dir.rglob('*')) if p.is_file()}
  assert checkpoints.saved_versions(str(run_dir / 'checkpoints')) == [4, 5, 6]
  capfd.readouterr()
  with flagsaver.as_parsed(rounds='2', **flag_values):
    with pytest.raises(training_loop.ResumeError, match=r'holds a run of 6 rounds .*rounds: '
                       r'6 -> 2.*use --rounds=6 or more'):
      train.main(['train'])
  assert capfd.readouterr().out == ''   # refused before the header
  assert {p: p.read_bytes() for p in sorted(run_dir.rglob('*')) if p.is_file()} == before
  assert len(metrics_lib.read_csv(str(run_dir / 'metrics.csv'))) == 6

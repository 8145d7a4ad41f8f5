"""experiments.diagnosis: per-run summaries, paired gaps, variants, report sections; and the
evaluation columns it reads (class-pair errors, the global training loss)."""

import math
import os

from absl import flags
from absl.testing import flagsaver
import numpy as np
import pytest

from experiments import diagnosis
from experiments import stats
from experiments import config as experiment_config
from experiments import experiment_lib
from experiments import metrics_io
from experiments import files
from experiments import train  # noqa: F401  (defines the flags the variants use)


def _rows(accuracies, losses=None, **columns):
  rows = []
  for k, acc in enumerate(accuracies):
    row = {'round_num': k + 1, 'test_accuracy': acc,
           'train_loss': None if losses is None else losses[k]}
    for name, values in columns.items():
      row[name] = values[k]
    rows.append(row)
  return rows


def test_train_loss_rise():
  assert diagnosis.train_loss_rise([3.0, 2.0, 1.0]) == 0.0
  # Running minimum 1.0 before the rise to 2.5, later 0.5 before 0.7: the largest rise is 1.5.
  assert diagnosis.train_loss_rise([3.0, 1.0, 2.5, 0.5, 0.7]) == pytest.approx(1.5)


def test_summarize_run():
  rows = _rows([0.5, 0.8, 0.7, None], [2.0, 1.0, 1.4, 1.2],
               test_rare_pair_error=[None, 0.1, 0.3, None],
               **{'aggregator/norm_ratio': [0.5, 0.7, 0.6, 0.8],
                  'aggregator/mean_norm_ratio': [9.0, 9.0, 9.0, 9.0],
                  'aggregator/conflict_fraction_before': [0.2, 0.4, None, 0.6]})
  out = diagnosis.summarize_run(rows)
  assert list(out) == list(diagnosis.RUN_COLUMNS)
  assert out['final_accuracy'] == 0.7 and out['best_accuracy'] == 0.8
  assert out['accuracy_drop'] == pytest.approx(0.1)
  assert out['final_train_loss'] == 1.2 and out['train_loss_rise'] == pytest.approx(0.4)
  assert out['final_rare_pair_error'] == 0.3           # the last evaluated round's
  assert out['final_common_pair_error'] is None         # not measured
  assert out['norm_ratio'] == pytest.approx(0.65)  # not the mean_norm_ratio column
  assert out['conflict_before'] == pytest.approx(0.4)
  assert out['mean_update_norm'] is None and out['final_global_train_loss'] is None
  assert out['tail_global_train_loss'] is None
  assert out['final_mean_logit'] is None
  with pytest.raises(ValueError, match='no test_accuracy'):
    diagnosis.summarize_run(_rows([None]))
  # A run that diverged in its first round is recorded, not refused.
  nan = diagnosis.summarize_run(_rows([float('nan'), float('nan')], [float('nan')] * 2))
  assert nan['final_accuracy'] is None and nan['accuracy_drop'] is None
  with pytest.raises(ValueError, match='at least one'):
    diagnosis.summarize_run([])


def test_gap_text_is_the_shared_t_interval():
  d = [0.1, 0.2, 0.15]
  got = stats.t_interval(d)
  sem = np.std(d, ddof=1) / math.sqrt(3)
  assert got.half_width == pytest.approx(4.302652729749464 * sem)  # t(0.975, 2)
  # No significance mark: a diagnosis is exploratory (the Results tables mark what Holm keeps).
  assert diagnosis.fmt_gap(got) == f'+0.150 ± {4.302652729749464 * sem:.3f}'
  assert diagnosis.fmt_gap(stats.t_interval([-0.05])) == '-0.050 (n=1)'
  assert diagnosis.fmt_gap(None) == '-'


def _table():
  """Two regimes, 3 seeds; fedga loses on rare pairs in r1; fedga_paper narrows the gap."""
  runs = []
  for s in range(3):
    for regime in ('r1', 'r2'):
      base = 0.9 + 0.01 * s
      runs.append(dict(regime=regime, method='fedavg', seed=s, final_accuracy=base,
                       accuracy_drop=0.01, final_rare_pair_error=0.01,
                       final_common_pair_error=0.01, final_mean_logit=0.1))
      runs.append(dict(regime=regime, method='fedga', seed=s, final_accuracy=base - 0.1 - 0.01 * s,
                       accuracy_drop=0.1, final_rare_pair_error=0.05 + 0.01 * s,
                       final_common_pair_error=0.012, final_mean_logit=3.1))
      runs.append(dict(regime=regime, method='fedga_paper', seed=s,
                       final_accuracy=base + (0.002 if s == 1 else -0.002),
                       accuracy_drop=0.02))
  runs.append(dict(regime='r1', method='fedld', seed=0, final_accuracy=0.8,
                   norm_ratio=0.5, conflict_before=0.4))
  return runs


def test_gap_is_paired_over_shared_seeds():
  runs = _table() + [dict(regime='r1', method='fedga', seed=9, final_accuracy=0.0)]
  g = diagnosis.gap(runs, 'r1', 'fedga')
  assert g.n == 3 and g.mean == pytest.approx(-0.11)
  assert diagnosis.gap(runs, 'r3', 'fedga') is None


def test_diagnose_fedga_section():
  text = diagnosis.diagnose('fedga', _table())
  assert text.startswith('### FedGA (`fedga`) against FedAvg')
  assert '| r1 | 0.910 ± 0.010 | 0.800 ± 0.000 | -0.110 ± 0.025 |' in text
  # The per-pair excess is on rare pairs (+0.05) far above common pairs (+0.002).
  assert 'r1: the extra errors concentrate on rarely co-located pairs (+0.050' in text
  assert '| fedga_paper | calibration_form=paper |' in text
  assert 'narrows the gap by 0.109' in text
  assert 'closes the gap' not in text and 'beats' not in text
  assert '| r1 | 3.10 ± 0.00 | 0.10 ± 0.00 | +3.000 ± 0.000 |' in text
  assert 'fedga_clip' not in text.split('Variants')[1].split('\n| fedga_paper')[0]


def test_diagnose_fedld_shows_norm_ratio_and_compensating_lr():
  text = diagnosis.diagnose('fedld', _table())
  assert '| r1 | 0.500 | 2.00 | 0.400 |' in text
  assert 'No variant of fedld was run' in text
  with pytest.raises(ValueError, match="'fedmgc' has no run"):
    diagnosis.diagnose('fedmgc', _table())


def test_variants_are_runnable_flag_sets():
  names = set(experiment_lib.ALGORITHM_HPARAMS) | {experiment_lib.CUSTOM_ALGORITHM}
  for variant in diagnosis.VARIANTS.values():
    assert variant.algorithm in names, variant.name
    assert variant.diagnoses in experiment_lib.ALGORITHM_HPARAMS, variant.name
    for flag in variant.flags:
      assert flag in flags.FLAGS, (variant.name, flag)
    # The flag values pass the binary's checks.
    with flagsaver.as_parsed(**{k: str(v) for k, v in
                                dict(variant.flags, algorithm=variant.algorithm).items()}):
      train.check_flags()
  assert diagnosis.VARIANTS['fedga_paper'].command_flags() == [
      '--algorithm=fedga', '--calibration_form=paper']
  # The clipped FedGA variants name a clipped baseline that is itself a variant.
  for name in ('fedga_clip', 'fedga_paper_clip'):
    assert diagnosis.VARIANTS[name].baseline == 'fedavg_clip', name
  assert diagnosis.VARIANTS['fedavg_clip'].flags == {'client_clip_norm': 5.0}


def test_clipped_variants_are_compared_with_the_clipped_baseline():
  runs = _table()
  for s in range(3):
    for regime in ('r1', 'r2'):
      runs.append(dict(regime=regime, method='fedavg_clip', seed=s, final_accuracy=0.7))
      runs.append(dict(regime=regime, method='fedga_clip', seed=s,
                       final_accuracy=0.75 + 0.01 * s))
  # fedga_clip - fedavg_clip = +0.06 (against fedavg it would be -0.14).
  text = diagnosis.diagnose('fedga', runs)
  row = next(line for line in text.splitlines() if line.startswith('| fedga_clip |'))
  assert '| fedavg_clip | +0.060 ± ' in row
  assert '| fedga_paper | calibration_form=paper |' in text and '| fedavg | ' in text
  section = diagnosis.report_section('fedga_clip', 'fedga', runs)
  assert '| r1 | 0.700 ± 0.000 | 0.760 ± 0.010 | +0.060 ± ' in section
  assert diagnosis.diagnose('fedga_clip', runs).startswith(
      '### fedga_clip (`fedga_clip`) against fedavg_clip')
  # Without the clipped baseline's runs, the report's baseline is used.
  alone = [r for r in runs if r['method'] != 'fedavg_clip']
  assert diagnosis.variant_baseline('fedga_clip', alone) == 'fedavg'
  assert '| r1 | 0.910 ± 0.010 | 0.760 ± 0.010 | -0.150 ± ' in diagnosis.report_section(
      'fedga_clip', 'fedga', alone)


def test_a_retired_variant_name_still_renders():
  # Runs tables written before a variant was renamed (e.g. 'fedga_soft', now FedGA's default)
  # report it as a method of its algorithm, against the baseline.
  runs = [dict(r, method='fedga_soft') if r['method'] == 'fedga_paper' else r for r in _table()]
  text = diagnosis.report_section('fedga_soft', 'fedga', runs)
  assert '| r1 | 0.910 ± 0.010 | 0.909 ± 0.010 | -0.001 ± 0.006 |' in text
  assert 'No variant of fedga_soft was run' in text


def test_load_runs_from_compare_and_train_layouts(tmp_path):
  for path in ('cmp/fedavg/seed0', 'cmp/fedga/seed1', 'trn/seed2', 'trn/notes'):
    os.makedirs(tmp_path / path)
    files.write_csv_atomically(
        str(tmp_path / path / 'metrics.csv'), ['round_num', 'test_accuracy'],
        [{'round_num': 1, 'test_accuracy': 0.5}])
  runs = diagnosis.load_runs('r', str(tmp_path / 'cmp'))
  assert sorted((r['method'], r['seed']) for r in runs) == [('fedavg', 0), ('fedga', 1)]
  runs = diagnosis.load_runs('r', str(tmp_path / 'trn'), method='fedga_soft')
  assert [(r['method'], r['seed'], r['final_accuracy']) for r in runs] == [('fedga_soft', 2, 0.5)]


def test_evaluate_fn_columns_pair_errors_and_global_train_loss():
  task = experiment_lib.load_task(experiment_config.ExperimentConfig(
      data=experiment_config.DataConfig('digits', num_clients=5),
      model=experiment_config.ModelConfig('logistic_regression'),
      training=experiment_config.LoopConfig(rounds=1, clients_per_round=2)))
  evaluate, columns = experiment_lib.make_evaluate_fn(task, train_loss=True)
  assert set(experiment_lib.PAIR_ERROR_COLUMNS) <= set(columns)
  assert set(experiment_lib.GLOBAL_TRAIN_COLUMNS) <= set(columns)
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  model = task.keras_model_fn()
  weights = tff.learning.models.ModelWeights(
      trainable=[v.numpy() for v in model.trainable_weights],
      non_trainable=[v.numpy() for v in model.non_trainable_weights])
  out = evaluate(weights)
  assert set(out) == set(columns)
  # The global training loss is the model's mean cross-entropy over every client's examples.
  from tff_conflict import evaluation  # pylint: disable=g-import-not-at-top
  x, y = experiment_lib._test_arrays(task.train_data)  # pylint: disable=protected-access
  expected = evaluation.evaluate_arrays(model, x, y)
  assert out['global_train_loss'] == pytest.approx(expected['loss'], rel=1e-6)
  assert out['global_train_accuracy'] == pytest.approx(expected['accuracy'])
  _, plain = experiment_lib.make_evaluate_fn(task)
  assert not set(experiment_lib.GLOBAL_TRAIN_COLUMNS) & set(plain)


def test_diagnose_with_local_epochs_and_a_variant_method():
  runs = [dict(r, epochs=2) for r in _table()] + [
      dict(regime='r1', epochs=5, method=m, seed=s, final_accuracy=a)
      for s in range(2) for m, a in (('fedavg', 0.9), ('fedga', 0.6))]
  text = diagnosis.diagnose('fedga', runs)
  assert '| r1, E=2 |' in text and '| r1, E=5 | 0.900 ± 0.000 | 0.600 ± 0.000 | -0.300 ' in text
  soft = diagnosis.diagnose('fedga_paper', runs)
  assert soft.startswith('### fedga_paper (`fedga_paper`) against FedAvg')
  assert 'A variant of fedga' in soft and 'Variants (' not in soft


def test_positive_control_section():
  runs = []
  for s in range(3):
    runs.append(dict(regime='syn', method='fedavg', seed=s, tail_global_train_loss=1.4 + 0.01 * s,
                     global_train_loss_rise=0.6 + 0.02 * s, final_accuracy=0.5))
    runs.append(dict(regime='syn', method='fedprox_mu1', seed=s,
                     tail_global_train_loss=1.0 + 0.02 * s, global_train_loss_rise=0.1,
                     final_accuracy=0.6 + 0.01 * s))
  text = diagnosis.positive_control(runs, regime='syn')
  # Sample standard deviations (ddof = 1, experiments.stats): 0.010 and 0.020.
  assert ('| training loss (global model), mean of the last quarter of rounds | 1.410 ± 0.010 '
          '| 1.020 ± 0.020 | -0.390 ') in text
  assert 'reproduced: lower and steadier training loss' in text
  flat = [dict(r, global_train_loss_rise=0.6) for r in runs]
  flat[1]['global_train_loss_rise'] = 0.7   # one seed of the treated method rises more
  assert 'not reproduced' in diagnosis.positive_control(flat, regime='syn')
  # Significantly but only marginally smoother: not the published effect.
  marginal = [dict(r, global_train_loss_rise=0.55 + 0.001 * r['seed'])
              if r['method'] == 'fedprox_mu1' else r for r in runs]
  assert 'not reproduced' in diagnosis.positive_control(marginal, regime='syn')
  with pytest.raises(ValueError, match='--eval_train_loss'):
    diagnosis.positive_control(runs, regime='other')


def test_summarize_run_global_training_loss():
  losses = [3.0, 2.0, 2.5, 1.0, 1.5, 1.2, 1.1, 0.9]
  out = diagnosis.summarize_run(_rows([0.5] * 8, global_train_loss=losses))
  assert out['final_global_train_loss'] == 0.9
  assert out['tail_global_train_loss'] == pytest.approx((1.1 + 0.9) / 2)  # last 8 // 4 rounds
  assert out['global_train_loss_rise'] == pytest.approx(0.5)


def _gap(mean, half_width, n=3):
  return stats.Interval(mean, mean - half_width, mean + half_width, n)


def test_verdicts():
  lose = _gap(-0.1, 0.02)
  # No verdict word against FedAvg: the Results tables' Holm-adjusted comparisons give those.
  assert diagnosis._verdict(lose, _gap(0.001, 0.01)) == 'narrows the gap by 0.101'
  assert diagnosis._verdict(lose, _gap(0.05, 0.01)) == 'narrows the gap by 0.150'
  # An interval that includes 0 only because it is wide is not a closed gap.
  assert diagnosis._verdict(lose, _gap(-0.3, 0.5)) == 'widens the gap by 0.200'
  assert diagnosis._verdict(lose, _gap(-0.05, 0.01)) == 'narrows the gap by 0.050'
  assert diagnosis._verdict(lose, None) == 'not run'


def test_benchmark_calls_without_the_harness():
  rows = _table()
  text = diagnosis.report_section('fedga_paper', 'fedga', rows)
  assert not text.startswith('###') and 'A variant of fedga' in text
  assert diagnosis.report_section('fedavg', 'fedavg', rows) is None
  summary = diagnosis.benchmark_summary(_rows([0.5, 0.7], [1.0, 1.2], test_mean_logit=[0.1, 2.0]))
  assert list(summary) == list(diagnosis.BENCHMARK_SUMMARY_COLUMNS)
  assert summary['final_mean_logit'] == 2.0 and summary['train_loss_rise'] == pytest.approx(0.2)

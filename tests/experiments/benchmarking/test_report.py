"""The report from runs.csv rows made by hand (no TFF): tables, targets, plots, the diagnosis
diagnoses, and RESULTS.md's check."""

import json
import os

import pytest

from experiments import diagnosis
from experiments.benchmarking import report
from experiments.benchmarking import runs

# final accuracy per (regime, E, method, seed)
_FINALS = {
    ('digits:iid', 1): {'fedavg': [0.80, 0.82, 0.84], 'fedgh': [0.82, 0.84, 0.86],
                        'fedld': [0.70, 0.80, 0.90]},
    ('digits:#C=2', 1): {'fedavg': [0.60, 0.62, 0.64], 'fedgh': [0.63, 0.64, 0.68],
                         'fedld': [0.50, 0.51, 0.55]},
    ('digits:iid', 5): {'fedavg': [0.85, 0.86, 0.87], 'fedgh': [0.85, 0.86, 0.87],
                        'fedld': [0.80, 0.81, 0.83]},
}
_CONFIG = {'regimes': ['digits:iid', 'digits:#C=2'], 'methods': ['fedavg', 'fedgh', 'fedld'],
           'baseline': 'fedavg', 'epochs': [1, 5], 'report_seeds': [0, 1, 2],
           'target_fraction': 0.9, 'experiment_name': 'unit',
           'tuning': {'tune': True, 'strategy': 'staged'}}


def _rows():
  rows = []
  for (regime, e), per_method in _FINALS.items():
    for method, finals in per_method.items():
      for seed, final in enumerate(finals):
        curve = [final * r / 4 for r in range(1, 5)]
        rows.append({
            'regime': regime, 'dataset': 'digits', 'method': method,
            'algorithm': method, 'epochs': e, 'seed': seed, 'data_seed': seed, 'model': 'mlp',
            'client_lr': 0.1, 'server_lr': 1.0, 'hparams': '{}', 'final_accuracy': final,
            'best_accuracy': final, 'diverged': False,
            'conflict_before': None if method == 'fedavg' else 0.4,
            'conflict_after': None if method == 'fedavg' else 0.1,
            'norm_ratio': 0.8 if method == 'fedld' else None, 'seconds_per_round': 0.5,
            'run_seconds': 2.0, 'accuracy_curve': runs.encode_curve(curve),
            'train_loss_curve': runs.encode_curve([1.0, 0.8, 0.6, 0.5]),
            'conflict_curve': ''})
  return rows


def test_regime_table_numbers():
  cell = report.group(_rows())[('digits:#C=2', 1)]
  target, how = report.target_accuracy(cell, 'digits', _CONFIG)
  assert target == pytest.approx(0.558) and how == '0.9 x fedavg final'
  table = report.regime_table(cell, ['fedavg', 'fedgh', 'fedld'], baseline='fedavg',
                              target=target).splitlines()
  assert 'Δ final vs fedavg [95% CI]' in table[0]
  assert table[2] == ('| fedavg | 3 | 0.6200 ± 0.0200 | 0.6200 ± 0.0200 | — | 4.0 | - | - | '
                      '0.50 |')
  # fedgh - fedavg = (0.03, 0.02, 0.04): mean 0.03, sd 0.01, half 4.302653 * 0.01 / sqrt 3.
  assert table[3] == ('| fedgh | 3 | 0.6500 ± 0.0265 | 0.6500 ± 0.0265 | '
                      '**+0.0300 [+0.0052, +0.0548]** † | 4.0 | 0.400 → 0.100 | - | 0.50 |')
  # fedld's finals (0.50, 0.51, 0.55) stay below the target 0.558.
  assert table[4].startswith('| fedld | 3 | 0.5200 ± 0.0265 |')
  assert '**-0.1000 [-0.1248, -0.0752]** †' in table[4]
  assert '| not reached |' in table[4] and '| 0.800 |' in table[4]
  partly = report.regime_table(cell, ['fedld'], baseline='fedavg', target=0.51)
  assert '| 4.0 (2/3) |' in partly


def test_given_target_and_rounds_to():
  cell = report.group(_rows())[('digits:iid', 1)]
  assert report.target_accuracy(cell, 'digits', dict(_CONFIG, targets={'digits': 0.5})) == (
      0.5, 'given')
  assert report.rounds_to('0.1;0.6;0.7', 0.6) == 2
  assert report.rounds_to('0.1;nan;0.2', 0.6) is None
  conflict, source = report.regime_conflict(cell, 'fedavg')
  assert conflict == pytest.approx(0.4) and source == 'mean over conflict-aware methods'


def test_epoch_effect_and_losses():
  rows = _rows()
  effect = report.epoch_effect_table(rows, _CONFIG).splitlines()
  assert effect[0] == ('| method | E=1: mean Δ (CI > 0 / CI < 0) | E=5: mean Δ (CI > 0 / CI < '
                       '0) |')
  # fedgh gains exactly 0.02 on every seed of digits:iid (a zero-width interval).
  assert effect[2].startswith('| fedgh | +0.0250 (2 / 0 of 2) | +0.0000 (0 / 0 of 1) |')
  losses = report.losses_list(rows, _CONFIG)
  assert '- fedld, digits:#C=2, E=1: Δ final -0.1000 [-0.1248, -0.0752]' in losses
  assert 'norm ratio 0.800' in losses
  assert 'fedld, digits:iid, E=1' not in losses  # its interval straddles 0


def _write_benchmark(root, rows=None):
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, 'config.json'), 'w') as f:
    json.dump(_CONFIG, f)
  report.write_csv(os.path.join(root, 'runs.csv'), rows or _rows(), runs.RUN_COLUMNS)
  choices = [{'dataset': 'digits', 'regime': 'digits:dir(0.1)', 'epochs': 1, 'method': 'fedld',
              'client_lr': 0.1, 'server_lr': 2.0, 'tuned': {'margin_weight': 0.01},
              'score': 0.8, 'scores': [{'candidate': 'a', 'score': 0.8, 'seeds': 2},
                                       {'candidate': 'b', 'score': 0.7, 'seeds': 2}]}]
  with open(os.path.join(root, 'tuning_choices.json'), 'w') as f:
    json.dump(choices, f)
  with open(os.path.join(root, 'timing.json'), 'w') as f:
    json.dump([{'finished': 'x', 'wall_seconds': 100.0, 'build_seconds': 25.0,
                'processes_built': 3, 'runs_done': 27, 'runs_skipped': 0, 'runs_failed': 0}], f)


def test_write_report_from_files(tmp_path):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  text = open(report.write_report(root)).read()
  assert '| fedld | 0.1 | 2 | margin_weight=0.01 | 0.8000 | b: 0.7000 | 2 |' in text
  assert '0 min 25 s (25.0%) building learning processes' in text
  assert '### `digits:#C=2`, E=1' in text and '### `digits:#C=2`, E=5' not in text
  for name in ('accuracy_digits_C2_E1.png', 'train_loss_digits_iid_E5.png',
               'gain_vs_conflict.png', 'epochs_effect.png'):
    assert os.path.getsize(os.path.join(root, 'plots', name)) > 0
    assert f'plots/{name}' in text
  # experiments.diagnosis explains each method against FedAvg from the runs.csv columns.
  diagnoses = text[text.index('## Diagnosis'):]
  assert '### fedld\n\nThe revised update of client i has norm' in diagnoses
  assert '| digits:#C=2, E=1 | 0.800 ± 0.000 | 1.25 | 0.400 ± 0.000 |' in diagnoses
  assert '### fedavg' not in diagnoses


def test_a_value_at_a_grids_edge_is_flagged():
  choice = {'dataset': 'digits', 'regime': 'digits:dir(0.1)', 'epochs': 1, 'method': 'fedavg',
            'client_lr': 2.7, 'server_lr': 1.0, 'tuned': {}, 'score': 0.8,
            'scores': [{'candidate': 'a', 'score': 0.8, 'seeds': 2}], 'at_edge': ['client_lr']}
  config = dict(_CONFIG, tuning=dict(_CONFIG['tuning'], edge_steps=3, edge_factor=3.0))
  text = report._tuning_section([choice], config)  # pylint: disable=protected-access
  assert '| fedavg (at edge: client_lr) | 2.7 | 1 | - | 0.8000 |' in text
  assert 'x or / 3, at most 3 times per side' in report._setup_section(config)  # pylint: disable=protected-access


def test_a_failing_diagnosis_is_shown_not_raised(tmp_path, monkeypatch):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  real = diagnosis.report_section

  def report_section(method, algorithm, rows, *, baseline):
    if method == 'fedgh':
      raise RuntimeError('no data')
    return real(method, algorithm, rows, baseline=baseline)

  monkeypatch.setattr(diagnosis, 'report_section', report_section)
  text = open(report.write_report(root)).read()
  assert '### fedld\n\nThe revised update of client i has norm' in text
  assert '### fedgh\n\nThe diagnosis failed' in text and 'RuntimeError: no data' in text


def test_results_md_and_its_check(tmp_path):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  results_md = str(tmp_path / 'RESULTS.md')
  target = report.write_results_md(results_md, root, header={'Machine': 'test', 'Command': 'c'})
  assert target == str(tmp_path / 'docs' / 'results')
  text = open(results_md).read()
  assert text.startswith('# Results\n\n- Machine: test\n- Command: c\n')
  assert '## Benchmark `unit`' in text and '### Results' in text
  assert '(docs/results/plots/gain_vs_conflict.png)' in text
  assert os.path.exists(os.path.join(target, 'runs.csv'))
  assert report.check_results_md(results_md) == []
  tampered = text.replace('0.6500 ± 0.0265', '0.6600 ± 0.0265')
  with open(results_md, 'w') as f:
    f.write(tampered)
  missing = report.check_results_md(results_md)
  assert len(missing) == 1 and '| fedgh | 3 | 0.6500 ± 0.0265' in missing[0]


def _control_rows(fedavg_losses, fedprox_losses):
  """Positive-control rows: per seed, the global model's training-loss curve of each method."""
  rows = []
  for method, per_seed in (('fedavg', fedavg_losses), ('fedprox_mu1', fedprox_losses)):
    for seed, curve in enumerate(per_seed):
      quarter = curve[-max(1, len(curve) // 4):]
      rise = max(v - min(curve[:i + 1]) for i, v in enumerate(curve))
      rows.append({
          'regime': 'synthetic(1,1)', 'dataset': 'synthetic', 'method': method,
          'algorithm': 'fedprox' if method != 'fedavg' else 'fedavg', 'epochs': 20, 'seed': seed,
          'data_seed': seed, 'model': 'logistic_regression', 'client_lr': 0.01,
          'server_lr': 1.0, 'hparams': '{}', 'final_accuracy': 0.5 + 0.1 * (method != 'fedavg'),
          'best_accuracy': 0.7, 'diverged': False, 'seconds_per_round': 1.0,
          'run_seconds': 4.0, 'accuracy_curve': runs.encode_curve([0.4, 0.5, 0.5, 0.6]),
          'train_loss_curve': runs.encode_curve(curve),
          'global_train_loss_curve': runs.encode_curve(curve),
          'tail_global_train_loss': sum(quarter) / len(quarter),
          'global_train_loss_rise': rise})
  return rows


def _write_control(root, rows):
  sub = os.path.join(root, 'positive_control')
  os.makedirs(sub)
  columns = list(runs.RUN_COLUMNS) + [c for c in rows[0] if c not in runs.RUN_COLUMNS]
  report.write_csv(os.path.join(sub, 'runs.csv'), rows, columns)
  with open(os.path.join(sub, 'config.json'), 'w') as f:
    json.dump({'baseline': 'fedavg', 'regimes': ['synthetic(1,1)'],
               'methods': ['fedavg', 'fedprox_mu1'], 'epochs': [20]}, f)
  with open(os.path.join(sub, 'timing.json'), 'w') as f:
    json.dump([{'wall_seconds': 61.0}], f)


def test_positive_control_section(tmp_path):
  # FedAvg's loss rises by 1.0 late in every run; FedProx's keeps falling: reproduced.
  oscillating = [[2.0, 1.5, 1.2, 1.0, 2.0 + 0.1 * s, 1.9, 2.0, 2.1] for s in range(4)]
  steady = [[2.0, 1.6, 1.3, 1.1, 1.0, 0.95 - 0.01 * s, 0.9, 0.85] for s in range(4)]
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  _write_control(root, _control_rows(oscillating, steady))
  text = open(report.write_report(root)).read()
  section = text[text.index('## Positive control'):text.index('## Files')]
  assert 'E = 20, batch 10, client learning rate 0.01' in section
  assert 'seeds [0, 1, 2, 3]; 1 min 01 s wall' in section
  assert '| training loss (global model), mean of the last quarter of rounds |' in section
  assert 'the published effect is reproduced' in section
  assert '(positive_control/plots/train_loss_synthetic_1_1_E20.png)' in section
  assert os.path.getsize(os.path.join(root, 'positive_control', 'plots',
                                      'train_loss_synthetic_1_1_E20.png')) > 0
  # RESULTS.md carries the control's files and section, with its plots beside them.
  results_md = str(tmp_path / 'RESULTS.md')
  target = report.write_results_md(results_md, root, header={'Command': 'c'})
  results = open(results_md).read()
  assert '## Positive control' in results and 'effect is reproduced' in results
  assert '(docs/results/positive_control/plots/train_loss_synthetic_1_1_E20.png)' in results
  assert os.path.exists(os.path.join(target, 'positive_control', 'runs.csv'))


def test_positive_control_not_reproduced_and_absent(tmp_path):
  same = [[2.0, 1.5, 1.2, 1.0, 1.4 + 0.1 * s, 1.3, 1.2, 1.1] for s in range(4)]
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  assert '## Positive control' not in open(report.write_report(root)).read()
  _write_control(root, _control_rows(same, same))
  text = open(report.write_report(root)).read()
  assert 'the published effect is not reproduced' in text


def test_composition_table_compares_with_its_baseline_and_with_fedavg():
  finals = {'fedavg': [0.60, 0.62, 0.64], 'fednova': [0.61, 0.62, 0.66],
            'fednova+fedgh': [0.64, 0.64, 0.69]}
  rows = [dict(_rows()[0], method=m, algorithm=m.split('+')[0], final_accuracy=f,
               best_accuracy=f, seed=seed, data_seed=seed)
          for m, fs in finals.items() for seed, f in enumerate(fs)]
  config = dict(_CONFIG, methods=list(finals))
  table = report.composition_table(rows, config).splitlines()
  assert table[0].startswith('| regime | E | composition | its baseline |')
  # fednova+fedgh - fednova = (0.03, 0.02, 0.03); - fedavg = (0.04, 0.02, 0.05);
  # fednova - fedavg = (0.01, 0.00, 0.02).
  assert table[2].startswith('| `digits:iid` | 1 | fednova+fedgh | fednova | **+0.0267 [')
  assert table[2].endswith('| +0.0367 [-0.0013, +0.0746] | +0.0100 [-0.0148, +0.0348] |')
  assert report.composition_table(_rows(), _CONFIG) == ''

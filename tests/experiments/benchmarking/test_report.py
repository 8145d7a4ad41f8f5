"""The report from runs.csv rows made by hand (no TFF): tables, targets, plots, the diagnosis
diagnoses, and RESULTS.md's check."""

import json
import os

import numpy as np
import pytest

from experiments import stats
from experiments.benchmarking import diagnosis
from experiments.benchmarking import report
from experiments.benchmarking import results
from experiments.benchmarking import tables
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
           'experiment_name': 'unit',
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
            'last_k_accuracy': final, 'best_accuracy': final, 'diverged': False,
            'diverged_round': None, 'collapsed': False,
            'conflict_before': None if method == 'fedavg' else 0.4,
            'conflict_after': None if method == 'fedavg' else 0.1,
            'norm_ratio': 0.8 if method == 'fedld' else None, 'seconds_per_round': 0.5,
            'run_seconds': 2.0, 'accuracy_curve': runs.encode_curve(curve),
            'train_loss_curve': runs.encode_curve([1.0, 0.8, 0.6, 0.5]),
            'conflict_curve': ''})
  return rows


def _holm_reference(p_values):
  """Holm's adjustment as a plain loop: p_(i) (m - i + 1), then the running maximum."""
  order = sorted(range(len(p_values)), key=lambda i: p_values[i])
  out, running = [0.0] * len(p_values), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
    out[i] = running
  return out


def test_regime_table_numbers_and_holm_over_every_comparison():
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  rows = _rows()
  found = results.comparisons(rows, _CONFIG)
  assert len(found) == 6  # 3 (regime, E) cells x 2 methods against fedavg: one family
  keys = sorted(found)

  def p_value(r, e, m):
    d = np.subtract(_FINALS[(r, e)][m], _FINALS[(r, e)]['fedavg'])
    if np.std(d) < 1e-12:  # a constant difference: certain (0) unless it is 0 (1)
      return 0.0 if abs(d.mean()) > 1e-12 else 1.0
    return scipy_stats.ttest_rel(_FINALS[(r, e)][m], _FINALS[(r, e)]['fedavg']).pvalue

  holm = dict(zip(keys, _holm_reference([p_value(*k) for k in keys])))
  for key, p in holm.items():
    assert found[key].holm_p == pytest.approx(p)
  cell = results.group(rows)[('digits:#C=2', 1)]
  mine = {m: c for (r, e, m), c in found.items() if (r, e) == ('digits:#C=2', 1)}
  table = tables.regime_table(cell, ['fedavg', 'fedgh', 'fedld'], baseline='fedavg',
                              found=mine, config=_CONFIG).splitlines()
  assert table[0].startswith('| method | seeds | diverged | collapsed | mean accuracy, last 5 '
                             'rounds | Δ vs fedavg [95% CI] | Holm p | last-round accuracy |')
  assert table[2] == ('| fedavg | 3 | 0 | 0 | 0.6200 ± 0.0200 | — | — | 0.6200 ± 0.0200 | — | '
                      '- | - | 0.50 |')
  # fedgh - fedavg = (0.03, 0.02, 0.04): mean 0.03, sd 0.01, half 4.302653 * 0.01 / sqrt 3;
  # raw p 0.035 but Holm's is above 0.05: no mark.
  fedgh = holm[('digits:#C=2', 1, 'fedgh')]
  assert fedgh > 0.05
  assert table[3].startswith(f'| fedgh | 3 | 0 | 0 | 0.6500 ± 0.0265 | +0.0300 [+0.0052, '
                             f'+0.0548] | {fedgh:.3f} | 0.6500 ± 0.0265 | +0.0300 [+0.0052, '
                             '+0.0548] | 0.400 → 0.100 | - | 0.50 |')
  fedld = holm[('digits:#C=2', 1, 'fedld')]
  assert fedld < 0.05 and '**-0.1000 [-0.1248, -0.0752]** †' in table[4]
  assert results.verdict(mine['fedld'], 0.01) == 'loses'
  assert results.verdict(mine['fedgh'], 0.01) == 'inconclusive'


def test_identical_and_all_chance_comparisons_say_so():
  rows = _rows()
  same = results.comparisons(rows, _CONFIG)[('digits:iid', 5, 'fedgh')]
  assert same.identical and '(identical in every seed)' in tables._primary_cell(same)  # pylint: disable=protected-access
  chance = [dict(r, collapsed=True) for r in rows]
  c = results.comparisons(chance, _CONFIG)[('digits:#C=2', 1, 'fedld')]
  assert c.at_chance and not c.significant and results.verdict(c, 0.01) == 'at chance'
  assert 'both at chance: no comparison' in tables._primary_cell(c)  # pylint: disable=protected-access
  assert 'both at chance' in tables._primary_cell(c, secondary=True)  # pylint: disable=protected-access
  cell = results.group(chance)[('digits:#C=2', 1)]
  table = tables.regime_table(cell, ['fedavg', 'fedld'], baseline='fedavg',
                              found={'fedld': c}, config=_CONFIG)
  assert '†' not in table and table.count('both at chance') == 2


def test_ties_only_inside_the_equivalence_margin():
  rows = []
  for seed, (a, b) in enumerate([(0.900, 0.901), (0.910, 0.909), (0.920, 0.921), (0.93, 0.93)]):
    for method, value in (('fedavg', a), ('fedgh', b)):
      rows.append({'regime': 'digits:iid', 'dataset': 'digits', 'method': method, 'epochs': 1,
                   'seed': seed, 'last_k_accuracy': value, 'final_accuracy': value})
  c = results.comparisons(rows, _CONFIG)[('digits:iid', 1, 'fedgh')]
  assert results.verdict(c, 0.01) == 'ties' and results.verdict(c, 0.0005) == 'inconclusive'


def test_power_line_from_the_median_paired_sd():
  cell = results.group(_rows())[('digits:#C=2', 1)]
  line = tables.power_line(cell, 'digits', baseline='fedavg', config=_CONFIG)
  # Paired sds: fedgh 0.01, fedld 0.01 -> median 0.01, 3 seeds.
  mdd = stats.minimal_detectable_difference(0.01, 3)
  assert line.startswith(f'Minimal detectable difference {mdd:.4f} (paired t-test, 3 seeds, '
                         'median paired sd 0.0100')
  assert f'detecting 0.01 at that power takes {stats.seeds_needed(0.01, 0.01)} seeds' in line
  assert results.detect_for('synthetic', _CONFIG) == 0.02
  assert results.detect_for('synthetic', dict(_CONFIG, detect={'synthetic': 0.05})) == 0.05


def test_old_rows_get_the_divergence_rule_from_their_curves():
  nan = float('nan')
  old = {'regime': 'digits:iid', 'dataset': 'digits', 'method': 'fedga', 'epochs': 1, 'seed': 0,
         'final_accuracy': nan, 'last_k_accuracy': nan, 'diverged': False,
         'accuracy_curve': runs.encode_curve([0.5, 0.6, nan, nan]),
         'train_loss_curve': runs.encode_curve([1.0, 1.0, 1.0, 1.0])}
  row, = results.with_divergence_rule([old], dict(_CONFIG, tuning={'last_k': 3}))
  assert row['diverged'] is True and row['diverged_round'] == 3 and row['collapsed'] is True
  assert row['final_accuracy'] == pytest.approx(0.1)
  assert row['last_k_accuracy'] == pytest.approx((0.6 + 0.1 + 0.1) / 3)
  recorded = dict(old, diverged_round=None)
  assert results.with_divergence_rule([recorded], _CONFIG)[0] is recorded


def test_the_protocol_comes_first_and_says_what_the_runs_did():
  rows = _rows()
  old = tables.protocol_section(dict(_CONFIG, plan={'methods': [
      {'name': 'fedavg'}, {'name': 'fedld', 'tune_server_lr': True}]},
      tuning=dict(_CONFIG['tuning'], server_lr_grid=[1.0, 2.0])), rows)
  assert old.startswith('- **Provisional.**')
  assert 'UNEQUAL: fedld searched server learning rates that fedavg did not' in old
  assert '3 reporting seeds (fewer than 10' in old and 'over the 6 comparisons' in old
  new = tables.protocol_section(dict(_CONFIG, protocol=2, plan={'methods': [
      {'name': 'fedavg', 'server_lrs': [1.0, 2.0]},
      {'name': 'fedld', 'server_lrs': [1.0, 2.0]}]}), rows)
  assert new.startswith('- Test split: fixed for every seed and never read by tuning')
  assert 'the baseline included, searched the same' in new
  for symbol in ('"a ± b"', '"Holm p"', '"norm ratio"', '"collapsed"', '"Δ"'):
    assert symbol in new


def test_epoch_effect_and_losses():
  rows = _rows()
  effect = tables.epoch_effect_table(rows, _CONFIG).splitlines()
  assert effect[0] == ('| method | E=1: mean Δ (Holm > 0 / Holm < 0) | E=5: mean Δ (Holm > 0 / '
                       'Holm < 0) |')
  # fedgh gains exactly 0.02 on every seed of digits:iid (a zero-width interval, p = 0).
  assert effect[2].startswith('| fedgh | +0.0250 (1 / 0 of 2) | +0.0000 (0 / 0 of 1) |')
  losses = tables.losses_list(rows, _CONFIG)
  assert '- fedld, digits:#C=2, E=1: Δ -0.1000 [-0.1248, -0.0752], Holm p' in losses
  assert 'norm ratio 0.800' in losses
  assert 'fedld, digits:iid, E=1' not in losses  # its interval straddles 0


def _write_benchmark(root, rows=None):
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, 'config.json'), 'w') as f:
    json.dump(_CONFIG, f)
  results.write_csv(os.path.join(root, 'runs.csv'), rows or _rows(), runs.RUN_COLUMNS)
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
  # The diagnosis explains each method against FedAvg from the runs.csv columns.
  diagnoses = text[text.index('## Diagnosis'):]
  assert '### fedld\n\nThe revised update of client i has norm' in diagnoses
  assert '| digits:#C=2, E=1 | 0.800 ± 0.000 | 1.25 | 0.400 ± 0.000 |' in diagnoses
  assert '### fedavg' not in diagnoses


def test_a_value_at_a_grids_edge_is_flagged():
  choice = {'dataset': 'digits', 'regime': 'digits:dir(0.1)', 'epochs': 1, 'method': 'fedavg',
            'client_lr': 2.7, 'server_lr': 1.0, 'tuned': {}, 'score': 0.8,
            'scores': [{'candidate': 'a', 'score': 0.8, 'seeds': 2}], 'at_edge': ['client_lr']}
  config = dict(_CONFIG, tuning=dict(_CONFIG['tuning'], edge_steps=3, edge_factor=3.0))
  text = tables.tuning_section([choice], config)
  assert '| fedavg (at edge: client_lr) | 2.7 | 1 | - | 0.8000 |' in text
  assert 'x or / 3, at most 3 times per side' in tables.setup_section(config)


def test_a_failing_diagnosis_is_shown_not_raised(tmp_path, monkeypatch):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  real = diagnosis.section

  def section(method, algorithm, rows, *, baseline, statistic):
    if method == 'fedgh':
      raise RuntimeError('no data')
    return real(method, algorithm, rows, baseline=baseline, statistic=statistic)

  monkeypatch.setattr(diagnosis, 'section', section)
  text = open(report.write_report(root)).read()
  assert '### fedld\n\nThe revised update of client i has norm' in text
  assert '### fedgh\n\nThe diagnosis failed' in text and 'RuntimeError: no data' in text


def test_results_md_holds_the_tables_of_its_runs_csv(tmp_path):
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
  assert tables_not_in(results_md) == []
  assert '| fedgh | 3 | 0 | 0 | 0.6500 ± 0.0265' in text


def tables_not_in(results_md: str) -> list[str]:
  """The lines of the result tables, regenerated from the runs.csv published beside
  `results_md` (`report.results_dir_for`), that `results_md` lacks."""
  rows, config = results.load(report.results_dir_for(results_md))
  with open(results_md) as f:
    present = set(f.read().splitlines())
  return [line for _, _, heading, table in tables.result_tables(rows, config)
          for line in [heading] + table.splitlines() if line not in present]


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
  results.write_csv(os.path.join(sub, 'runs.csv'), rows, columns)
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
               last_k_accuracy=f, seed=seed, data_seed=seed)
          for m, fs in finals.items() for seed, f in enumerate(fs)]
  config = dict(_CONFIG, methods=list(finals))
  table = tables.composition_table(rows, config).splitlines()
  assert table[0].startswith('| regime | E | composition | its baseline |')
  # fednova+fedgh - fednova = (0.03, 0.02, 0.03); - fedavg = (0.04, 0.02, 0.05);
  # fednova - fedavg = (0.01, 0.00, 0.02).
  assert table[2].startswith('| `digits:iid` | 1 | fednova+fedgh | fednova | **+0.0267 [')
  assert table[2].endswith('| +0.0367 [-0.0013, +0.0746] | +0.0100 [-0.0148, +0.0348] |')
  # One comparison: Holm's p is the paired t-test's (t = 8.0, 2 df).
  assert '| 0.015 |' in table[2], table[2]
  assert tables.composition_table(_rows(), _CONFIG) == ''


def test_what_a_variant_changes_is_read_from_its_runs():
  rows = []
  for seed in (0, 1):
    for method, hparams, lr in (('fedld', {'margin_weight': 0.9}, 0.1),
                                ('fedld_projection', {'margin_weight': 0.9,
                                                      'revision': 'projection'}, 0.1),
                                ('fedld_model', {'margin_weight': 0.01,
                                                 'granularity': 'model'}, 0.3)):
      rows.append({'regime': 'digits:iid', 'dataset': 'digits', 'method': method, 'epochs': 1,
                   'seed': seed, 'client_lr': lr, 'server_lr': 1.0,
                   'hparams': json.dumps(hparams), 'last_k_accuracy': 0.9})
  config = dict(_CONFIG, methods=['fedld', 'fedld_projection', 'fedld_model'])
  found = {m: (p, d) for m, p, d in tables.variant_differences(rows, config)}
  assert found['fedld_projection'] == ('fedld', ['revision: - -> projection (digits:iid)'])
  assert len(found['fedld_model'][1]) == 3  # client lr, granularity and margin weight
  text = tables.variants_section(rows, config)
  assert '- fedld_model against fedld (3 settings differ, not one):' in text
  assert '- fedld_projection against fedld: revision' in text


def _curve_row(regime, epochs, method, seed, curve):
  return {'dataset': regime.split(':')[0], 'regime': regime, 'epochs': epochs, 'method': method,
          'candidate': 'clr=0.1,slr=1', 'seed': seed, 'accuracy_curve': runs.encode_curve(curve)}


def test_plateau_verdicts_and_validation_plots(tmp_path):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  config = dict(_CONFIG, rounds=8, tuning=dict(_CONFIG['tuning'], plateau_window=3,
                                                plateau_tolerance=0.01))
  with open(os.path.join(root, 'config.json'), 'w') as f:
    json.dump(config, f)
  flat = [0.3, 0.6, 0.80, 0.81, 0.80, 0.81, 0.80, 0.81]  # last 3: 0.8067, 3 before: 0.8033
  climbing = [0.1 * r for r in range(1, 9)]               # last 3: 0.7, 3 before: 0.4
  rows = [_curve_row('digits:dir(0.1)', 1, 'fedavg', s, [v + 0.002 * (s - 100) for v in flat])
          for s in (100, 101)]
  rows += [_curve_row('digits:dir(0.1)', 5, 'fedavg', 100, climbing),
           _curve_row('digits:dir(0.1)', 1, 'fedld', 100, climbing)]
  results.write_csv(os.path.join(root, results.CURVES_FILE), rows)
  verdicts = {(r, e): (p, n) for r, e, p, n in results.plateau_verdicts(rows, config)}
  (p1, n1), (p5, n5) = verdicts[('digits:dir(0.1)', 1)], verdicts[('digits:dir(0.1)', 5)]
  assert p1.plateaued and n1 == 2
  assert p1.last_mean == pytest.approx((0.81 + 0.80 + 0.81) / 3 + 0.001)
  assert not p5.plateaued and n5 == 1 and p5.change == pytest.approx(0.3)
  text = open(report.write_report(root)).read()
  setup = text[text.index('## Setup'):text.index('## Regimes')]
  assert ('the mean of its last 3 rounds within 0.01 of the mean of the 3 before' in setup)
  assert ('`digits:dir(0.1)`, E=1 (2 tuning seeds): plateaued: last 3 rounds 0.8077, the 3 '
          'before 0.8043 (+0.0033)' in setup)
  assert ('`digits:dir(0.1)`, E=5 (1 tuning seeds): NOT plateaued: last 3 rounds 0.7000, the 3 '
          'before 0.4000 (+0.3000, still climbing)' in setup)
  tuning = text[text.index('## Tuning'):text.index('## Results')]
  for name in ('validation_digits_dir_0.1_E1.png', 'validation_digits_dir_0.1_E5.png'):
    assert os.path.getsize(os.path.join(root, 'plots', name)) > 0
    assert f'plots/{name})' in tuning
  # Without the file (a benchmark run before it was written) the report says so.
  os.remove(os.path.join(root, results.CURVES_FILE))
  text = open(report.write_report(root)).read()
  assert 'Not checked: no validation curve of fedavg recorded' in text


def test_excluded_non_finite_updates_shown_beside_the_diverged_count():
  rows = _rows()
  for row in rows:
    if (row['regime'], row['epochs'], row['method']) == ('digits:#C=2', 1, 'fedgh'):
      row['excluded_nonfinite_updates'] = row['seed']  # 0 + 1 + 2 over the seeds
  cell = results.group(rows)[('digits:#C=2', 1)]
  found = {m: c for (r, e, m), c in results.comparisons(rows, _CONFIG).items()
           if (r, e) == ('digits:#C=2', 1)}
  table = tables.regime_table(cell, ['fedavg', 'fedgh', 'fedld'], baseline='fedavg',
                              found=found, config=_CONFIG).splitlines()
  assert table[2].startswith('| fedavg | 3 | 0 | 0 |')  # none excluded: nothing added
  assert table[3].startswith('| fedgh | 3 | 0 (3 updates excluded) | 0 |')

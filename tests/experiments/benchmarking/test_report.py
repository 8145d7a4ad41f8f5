"""The report written from a benchmark's files (no TFF): report.md with its plots, the diagnosis
and positive-control sections, RESULTS.md and its data."""

import json
import os
import subprocess

import pytest

from experiments.benchmarking import diagnosis
from experiments.benchmarking import report
from experiments.benchmarking import results
from experiments.benchmarking import runs
from experiments.benchmarking import tables
from tests.experiments.benchmarking import report_rows


def _write_benchmark(root, rows=None):
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, 'config.json'), 'w') as f:
    json.dump(report_rows.CONFIG, f)
  results.write_csv(os.path.join(root, 'runs.csv'), rows or report_rows.rows(), runs.RUN_COLUMNS)
  choices = [{'dataset': 'digits', 'regime': 'digits:dir(0.1)', 'epochs': 1, 'method': 'fedld',
              'client_lr': 0.1, 'server_lr': 2.0, 'tuned': {'margin_weight': 0.01},
              'score': 0.8, 'scores': [{'candidate': 'a', 'score': 0.8, 'seeds': 2},
                                       {'candidate': 'b', 'score': 0.7, 'seeds': 2}],
              'client_lrs_tried': [0.1], 'server_lrs_tried': [1.0, 2.0]}]
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
  assert "0 min 25 s (25.0% of the workers' 1 min 40 s) building learning processes" in text
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


def test_building_is_a_share_of_the_workers_time(tmp_path):
  """Build time summed over 2 workers (46 s) against 44 s of wall time: 52.3% of 88 s, never
  over 100%."""
  text = tables.time_section([{'finished': 'x', 'wall_seconds': 44.0, 'build_seconds': 46.0,
                               'workers': 2}], [])
  assert ("Total over the 1 invocations recorded: 0 min 44 s; 0 min 46 s (52.3% of the "
          "workers' 1 min 28 s)") in ' '.join(text.split())
  stopped = tables.time_section([{'finished': 'x', 'wall_seconds': 44.0, 'ended': False},
                                 {'finished': 'y', 'wall_seconds': 10.0, 'ended': True}], [])
  assert '| 1 | x (stopped) | 0 min 44 s |' in stopped and '| 2 | y | 0 min 10 s |' in stopped
  assert 'Total over the 2 invocations recorded: 0 min 54 s' in ' '.join(stopped.split())


def test_plots_of_regimes_no_longer_run_are_removed(tmp_path):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  report.write_report(root)
  assert os.path.exists(os.path.join(root, 'plots', 'accuracy_digits_C2_E1.png'))
  with open(os.path.join(root, 'plots', 'accuracy_gone_E1.png'), 'wb') as f:
    f.write(b'old')
  with open(os.path.join(root, 'plots', 'notes.txt'), 'w') as f:
    f.write('mine')
  _write_benchmark(root, [r for r in report_rows.rows() if r['regime'] != 'digits:#C=2'])
  report.write_report(root)
  names = os.listdir(os.path.join(root, 'plots'))
  assert 'accuracy_gone_E1.png' not in names and 'accuracy_digits_C2_E1.png' not in names
  assert 'notes.txt' in names and 'accuracy_digits_iid_E5.png' in names


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
  assert text.startswith('# Results\n\n- Machine: test\n- Command: c\n'
                         '- Primary family (family.json) committed in: ')
  assert '## Benchmark `unit`' in text and '### Results' in text
  assert '(docs/results/plots/gain_vs_conflict.png)' in text
  assert os.path.exists(os.path.join(target, 'runs.csv'))
  assert tables_not_in(results_md) == []
  assert '| fedgh | 3 | 0 | 0 | 0.6500 ± 0.0265' in text


def test_family_commit_names_the_commit_that_holds_family_json_as_it_is(tmp_path):
  git = lambda *a: subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t', *a],
                                  cwd=tmp_path, check=True, capture_output=True, text=True).stdout
  results_dir = tmp_path / 'docs' / 'results'
  results_dir.mkdir(parents=True)
  assert report.family_commit(str(results_dir)) == 'no family.json'
  (results_dir / 'family.json').write_text('{"members": []}\n')
  assert report.family_commit(str(results_dir)) == 'not known (no git history here)'
  git('init', '-q')
  assert report.family_commit(str(results_dir)) == 'not known (no git history here)'
  (tmp_path / 'other').write_text('x')
  git('add', 'other')
  git('commit', '-qm', 'history without the family')
  assert report.family_commit(str(results_dir)) == 'not committed as it is here'
  git('add', '.')
  git('commit', '-qm', 'the family, before the runs')
  named = report.family_commit(str(results_dir))
  assert named == f'{git("log", "-n1", "--format=%h (%cI)").strip()}'
  (results_dir / 'family.json').write_text('{"members": [1]}\n')   # changed after its commit
  assert report.family_commit(str(results_dir)) == 'not committed as it is here'


def tables_not_in(results_md: str) -> list[str]:
  """The lines of the result tables, regenerated from the runs.csv published beside
  `results_md` (`report.results_dir_for`), that `results_md` lacks."""
  rows, config, _ = results.load(report.results_dir_for(results_md))
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
               'methods': ['fedavg', 'fedprox_mu1'], 'epochs': [20],
               'tuning': {'tune': False, 'last_k': 5},
               'description': 'Positive control: fedprox_mu1 against fedavg on `synthetic(1,1)`: '
               'E = 20, batch 10, client learning rate 0.01, untuned.'}, f)
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


def _curve_row(regime, epochs, method, seed, curve):
  return {'dataset': regime.split(':')[0], 'regime': regime, 'epochs': epochs, 'method': method,
          'candidate': 'clr=0.1,slr=1', 'seed': seed, 'accuracy_curve': runs.encode_curve(curve)}


def test_plateau_verdicts_and_validation_plots(tmp_path):
  root = str(tmp_path / 'bench')
  _write_benchmark(root)
  config = dict(report_rows.CONFIG, rounds=8, tuning=dict(
      report_rows.CONFIG['tuning'], plateau_window=3, plateau_tolerance=0.01))
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
  ((last1, _, plateaued1), n1), ((last5, previous5, plateaued5), n5) = (
      verdicts[('digits:dir(0.1)', 1)], verdicts[('digits:dir(0.1)', 5)])
  assert plateaued1 and n1 == 2
  assert last1 == pytest.approx((0.81 + 0.80 + 0.81) / 3 + 0.001)
  assert not plateaued5 and n5 == 1 and last5 - previous5 == pytest.approx(0.3)
  text = open(report.write_report(root)).read()
  setup = text[text.index('## Setup'):text.index('## Regimes')]
  assert ('the mean of its last 3 rounds within 0.01 of the mean of the 3 before' in setup)
  assert ('`digits:dir(0.1)`, E=1, validation (2 tuning seeds): plateaued: last 3 rounds 0.8077, the 3 '
          'before 0.8043 (+0.0033)' in setup)
  assert ('`digits:dir(0.1)`, E=5, validation (1 tuning seeds): NOT plateaued: last 3 rounds 0.7000, the 3 '
          'before 0.4000 (+0.3000, still climbing)' in setup)
  # The reporting runs' test curves (4 rounds each here) are checked alike: too short for 2 x 3.
  assert ('`digits:iid`, E=1, test (3 reporting seeds): not plateaued (fewer than 6 rounds'
          in setup)
  tuning = text[text.index('## Tuning'):text.index('## Results')]
  for name in ('validation_digits_dir_0.1_E1.png', 'validation_digits_dir_0.1_E5.png'):
    assert os.path.getsize(os.path.join(root, 'plots', name)) > 0
    assert f'plots/{name})' in tuning
  # Without the file (a benchmark run before it was written) the report says so.
  os.remove(os.path.join(root, results.CURVES_FILE))
  text = open(report.write_report(root)).read()
  assert 'Not checked: no validation curve of fedavg recorded' in text

"""RESULTS.md at the repository root: its tables match the runs.csv committed beside it
(docs/results/runs.csv), README links it, and the committed runs meet the protocol's checks
(collapse flagged, test splits large enough), read independently of the report's code; BENCHMARKS.md
states the grid's invocations and run times as its files do."""

import csv
import json
import math
import os
import re
import statistics

import pytest

from experiments.benchmarking import report
from experiments.benchmarking import tables
from tests.experiments.benchmarking import test_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_MD = os.path.join(ROOT, 'RESULTS.md')
RESULTS = os.path.join(ROOT, 'docs', 'results')


@pytest.mark.skipif(not os.path.exists(RESULTS_MD), reason='RESULTS.md not generated yet')
def test_results_md_numbers_match_its_runs_csv():
  assert os.path.exists(os.path.join(report.results_dir_for(RESULTS_MD), 'runs.csv')), (
      'RESULTS.md exists but docs/results/runs.csv does not')
  assert test_report.tables_not_in(RESULTS_MD) == []
  text = open(RESULTS_MD).read()
  assert '- Command: `python -m experiments.benchmark ' in text
  for key in ('Date', 'Machine', 'Wall time of this command'):
    assert f'- {key}' in text
  with open(os.path.join(ROOT, 'README.md')) as f:
    assert 'RESULTS.md' in f.read()


def _committed(name):
  with open(os.path.join(RESULTS, name), newline='') as f:
    return list(csv.DictReader(f)) if name.endswith('.csv') else json.load(f)


def test_every_committed_run_at_the_floor_is_flagged_collapsed():
  # The rule, restated: a run is collapsed when its primary statistic is below twice chance or
  # within 0.02 of its test split's majority-class rate (recorded per run), or when it predicts
  # one class for 90% of the test split (its `collapsed` flag, from the confusion matrix).
  rows = _committed('runs.csv')
  config = _committed('config.json')
  assert config['primary_statistic'] == 'last_k_accuracy'
  at_floor = []
  for row in rows:
    majority = float(row['majority_rate'])   # recorded for every run
    assert 0 < majority < 1, row['regime']
    floor = max(2 * float(row['chance_accuracy']), majority + 0.02)
    if float(row['last_k_accuracy']) < floor:
      at_floor.append((row['regime'], row['method'], int(row['seed'])))
      assert row['collapsed'] == 'True', at_floor[-1]
  collapsed = {(r['regime'], r['method'], int(r['seed'])) for r in rows if r['collapsed'] == 'True'}
  # RESULTS.md counts and names each collapsed run: "`regime`, E=1, method: n of N (seed s ...".
  text = ' '.join(open(RESULTS_MD).read().split())
  for regime, method in {(r, m) for r, m, _ in collapsed}:
    seeds = sorted(s for r, m, s in collapsed if (r, m) == (regime, method))
    line = text.split(f'`{regime}`, E=1, {method}: {len(seeds)} of ')[1].split('; ')[0]
    assert [int(s) for s in re.findall(r'seed (\d+) ', line)] == seeds, (regime, method, line)


def test_every_primary_test_split_has_a_sampling_error_at_most_0005():
  # One evaluation's sampling error at accuracy a on n examples is sqrt(a (1 - a) / n), at most
  # sqrt(0.25 / n): 0.005 needs n >= 10,000. regimes.json states each regime's test examples.
  config = _committed('config.json')
  sizes = {r['regime']: r['test_examples'] for r in _committed('regimes.json')}
  assert set(config['primary_regimes']) <= set(sizes)
  for regime in config['primary_regimes']:
    assert math.sqrt(0.25 / sizes[regime]) <= 0.005, (regime, sizes[regime])
  text = open(RESULTS_MD).read()
  for regime, n in sizes.items():
    assert f'{n:,}' in text or str(n) in text, (regime, n)
  # The README's sanity regime: outside the family, its test split too small for 0.005.
  sanity = [r for r in sizes if r not in config['primary_regimes']]
  assert [r.split(':')[0] for r in sanity] == ['digits']
  readme = ' '.join(open(os.path.join(ROOT, 'README.md')).read().split())
  assert f'its test split ({sizes[sanity[0]]} images) is too small for the 0.005' in readme
  assert math.sqrt(0.25 / sizes[sanity[0]]) > 0.005


def test_every_committed_choice_is_inside_its_grid_and_every_candidate_has_a_score():
  # The real-data grid's tuning: no choice at an edge of what was tried (a stated hard bound,
  # `at_bound`, is allowed); each candidate's score at every rung it ran; the choice made at the
  # full horizon among at least 2 finalists; every primary regime tuned on its own validation.
  config = _committed('config.json')
  choices = _committed('tuning_choices.json')
  tuned_on = config['plan']['tuned_on']
  assert {c['regime'] for c in choices} >= set(config['primary_regimes'])
  for regime in config['primary_regimes']:
    assert tuned_on[regime] == regime
  for choice in choices:
    where = (choice['regime'], choice['method'])
    assert choice['at_edge'] == [], where
    assert choice['scores'] and all(s['seeds'] > 0 for s in choice['scores']), where
    full = [s for s in choice['scores'] if s['rounds'] == choice['rounds']]
    finite = [s['score'] for s in full if math.isfinite(s['score'])]
    assert len(full) >= 2 and max(finite) == choice['score'], where


def test_fedavg_test_curve_has_plateaued_in_every_primary_regime():
  # The primary family's rule: the baseline's mean test curve over the reporting seeds gains at
  # most 0.02 over its last 50 rounds against the 50 before (curves: accuracy per round).
  config = _committed('config.json')
  window, tolerance = config['tuning']['plateau_window'], config['tuning']['plateau_tolerance']
  for regime in config['primary_regimes']:
    curves = [[float(v) for v in r['accuracy_curve'].split(';')] for r in _committed('runs.csv')
              if (r['regime'], r['method']) == (regime, config['baseline'])]
    assert len(curves) == len(config['report_seeds']), regime
    mean = [sum(c[i] for c in curves) / len(curves) for i in range(len(curves[0]))]
    last, before = mean[-window:], mean[-2 * window:-window]
    assert sum(last) / window - sum(before) / window <= tolerance, regime


def test_benchmarks_md_states_the_grids_invocations_and_run_times_as_its_files():
  # BENCHMARKS.md's real-data grid: each invocation timing.json records, and the reporting runs'
  # median times per dataset from runs.csv.
  with open(os.path.join(ROOT, 'BENCHMARKS.md'), encoding='utf-8') as f:
    text = ' '.join(f.read().split('## The real-data grid')[1].split('### The pilots')[0].split())
  for entry in _committed('timing.json'):
    cells = [tables.duration(entry[k]) for k in ('wall_seconds', 'tuning_seconds',
                                                 'reporting_seconds')]
    assert (f"| {' | '.join(cells)} | {entry['runs_done']:,} / {entry['runs_skipped']:,} |"
            in text), cells
  by_dataset = {}
  for row in _committed('runs.csv'):
    by_dataset.setdefault(row['dataset'], []).append(row)
  for dataset, rows in by_dataset.items():
    run_s = statistics.median(float(r['run_seconds']) for r in rows)
    round_s = statistics.median(float(r['seconds_per_round']) for r in rows)
    assert (f"{dataset} {run_s:.1f} s for {rows[0]['rounds']} rounds ({round_s:.3f} s a round, "
            f'{len(rows)} runs)') in text, dataset

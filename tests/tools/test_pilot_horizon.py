"""tools/pilot_horizon.py on a hand-made pilot directory."""

import csv
import json
import os
import statistics

import pytest

from tools import pilot_horizon


def _write(root, validation, test, other=None):
  os.makedirs(root, exist_ok=True)
  scores = [dict(candidate='clr=0.1,slr=1', score=0.8, seeds=2),
            dict(candidate='clr=0.3,slr=1', score=0.7, seeds=2)]
  with open(os.path.join(root, 'tuning_choices.json'), 'w') as f:
    json.dump([dict(method='fedavg', regime='digits:dir(0.1)', score=0.8, scores=scores)], f)
  with open(os.path.join(root, 'validation_curves.csv'), 'w', newline='') as f:
    w = csv.DictWriter(f, ['method', 'candidate', 'seed', 'accuracy_curve'])
    w.writeheader()
    for seed, curve in enumerate(validation):
      w.writerow(dict(method='fedavg', candidate='clr=0.1,slr=1', seed=seed,
                      accuracy_curve=';'.join(map(str, curve))))
    if other:   # another candidate's curve: never read
      w.writerow(dict(method='fedavg', candidate='clr=0.3,slr=1', seed=0,
                      accuracy_curve=';'.join(map(str, other))))
  with open(os.path.join(root, 'runs.csv'), 'w', newline='') as f:
    w = csv.DictWriter(f, ['method', 'seed', 'accuracy_curve'])
    w.writeheader()
    for seed, curve in enumerate(test):
      w.writerow(dict(method='fedavg', seed=seed, accuracy_curve=';'.join(map(str, curve))))


def test_the_horizon_ends_the_first_window_that_gains_less_than_the_tolerance(tmp_path):
  # Windows of 2 rounds: means 0.1, 0.5, 0.6, 0.61 -> gains 0.4, 0.1, 0.01.
  curve = [0.0, 0.2, 0.4, 0.6, 0.6, 0.6, 0.6, 0.62, 0.9]   # the odd last round is left out
  _write(tmp_path / 'p', [curve, curve], [curve], other=[0.0] * 9)
  [pilot] = [pilot_horizon.pilot(str(tmp_path / 'p'), window=2, tolerance=0.05)]
  assert pilot['validation']['means'] == pytest.approx([0.1, 0.5, 0.6, 0.61])
  assert pilot['validation']['horizon'] == 8   # 0.61 - 0.6 < 0.05; 0.6 - 0.5 is not
  assert pilot_horizon.horizon([0.1, 0.5, 0.6, 0.61], 2, 0.2) == 6
  assert pilot_horizon.horizon([0.1, 0.5], 2, 0.2) is None
  # The validation curve is the mean over the tuning seeds of the chosen candidate.
  _write(tmp_path / 'q', [[0.0] * 4, [1.0] * 4], [[0.5] * 4])
  q = pilot_horizon.pilot(str(tmp_path / 'q'), window=2, tolerance=0.05)
  assert q['validation']['means'] == [0.5, 0.5] and q['tuning_seeds'] == 2


def test_main_writes_markdown_and_refuses_bad_input_in_one_line(tmp_path, capsys):
  _write(tmp_path / 'p', [[0.1, 0.5, 0.51, 0.53]], [[0.1, 0.4, 0.6, 0.6]])
  out = tmp_path / 'h.md'
  assert pilot_horizon.main([str(tmp_path / 'p'), '--window=1', '--last_k=3',
                             f'--out={out}']) == 0
  text = out.read_text()
  # The test curve's last 3 rounds up to its horizon 4: 0.4, 0.6, 0.6 about the line
  # 0.4333 + 0.1 x leave -0.0333, 0.0667, -0.0333: sqrt(0.00667 / 1 / 3) = 0.0471.
  assert '| `digits:dir(0.1)` | 4 | 3 | 1 | 0.0471 | 0.0471 |' in text
  assert '| `digits:dir(0.1)` | clr=0.1,slr=1 | validation | 1 | 0.100, 0.500, 0.510, 0.530 | 3 |' \
      in text
  assert '| test | 1 | 0.100, 0.400, 0.600, 0.600 | 4 |' in text
  assert pilot_horizon.main([str(tmp_path / 'missing')]) == 1
  assert pilot_horizon.main([str(tmp_path / 'p'), '--window=0']) == 1
  assert pilot_horizon.main([str(tmp_path / 'p'), '--last_k=0']) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 3 and all(line.startswith('pilot_horizon: ') for line in err)


def test_the_committed_pilots_give_the_real_data_presets_rounds():
  """docs/results/pilots/horizons.md is the tool's output on the committed pilots, and each
  dataset of `--preset=real_data` runs the longest horizon of its regimes' pilots."""
  from experiments import presets  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import plan  # pylint: disable=g-import-not-at-top
  from tests.experiments import test_benchmark  # pylint: disable=g-import-not-at-top
  root = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'results', 'pilots')
  pilots = [pilot_horizon.pilot(os.path.join(root, name), 50, 0.02)
            for name in ('fmnist_dir', 'fmnist_c2', 'shakespeare', 'digits')]
  with open(os.path.join(root, 'horizons.md'), encoding='utf-8') as f:
    assert f.read() == pilot_horizon.markdown(pilots, 50, 0.02)
  config = test_benchmark._paper_config('real_data', leaf_dir='/data/shakespeare')  # pylint: disable=protected-access
  made = plan.make(config)
  assert {p['regime'] for p in pilots} == set(config.regimes)
  # docs/experiments.md: the last-20 mean's within-run noise has a median under a quarter of 0.02.
  assert all(statistics.median(p['noise']['values']) < 0.005 for p in pilots)
  for dataset, settings in made.datasets.items():
    horizons = [p[split]['horizon'] for p in pilots if p['regime'] in settings.regimes
                for split in ('validation', 'test')]
    assert settings.rounds == max(horizons), (dataset, horizons)
  assert presets.BENCHMARK['real_data']['plateau_window'] == 50


def test_benchmarks_md_states_the_pilots_costs_as_their_timing_files():
  root = os.path.join(os.path.dirname(__file__), '..', '..')
  with open(os.path.join(root, 'BENCHMARKS.md'), encoding='utf-8') as f:
    text = f.read()
  for name in ('fmnist_dir', 'fmnist_c2', 'shakespeare', 'digits'):
    pilot = os.path.join(root, 'docs', 'results', 'pilots', name)
    with open(os.path.join(pilot, 'timing.json'), encoding='utf-8') as f:
      timing = json.load(f)[-1]
    with open(os.path.join(pilot, 'tuning_choices.json'), encoding='utf-8') as f:
      regime = json.load(f)[0]['regime']
    cells = [f'{round(timing[k]):,} s' for k in ('wall_seconds', 'tuning_seconds',
                                                 'reporting_seconds')]
    assert f"| `{regime}` | {' | '.join(cells)} | {timing['runs_done']} |" in text, name


def test_the_docs_test_split_sizes_are_the_pilots_regimes_json():
  root = os.path.join(os.path.dirname(__file__), '..', '..')
  sizes = {}
  for name in ('fmnist_dir', 'fmnist_c2', 'shakespeare'):
    with open(os.path.join(root, 'docs', 'results', 'pilots', name, 'regimes.json')) as f:
      for entry in json.load(f):
        sizes[entry['regime'].split(':')[0]] = entry['test_examples']
  assert sizes == {'fashion_mnist': 10000, 'leaf_shakespeare': 10230}
  with open(os.path.join(root, 'docs', 'experiments.md'), encoding='utf-8') as f:
    text = ' '.join(f.read().split())
  assert (f'hold {sizes["fashion_mnist"]:,} images (Fashion-MNIST) and '
          f'{sizes["leaf_shakespeare"]:,} windows (Shakespeare)') in text
  assert f'`max=64,test=150` have {sizes["leaf_shakespeare"]:,} test windows' in text

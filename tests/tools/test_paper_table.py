"""tools/paper_table.py: FedGA's Table 1 beside a tiny hand-made benchmark directory, every number
checked against values computed by hand; one line for bad input; no TensorFlow."""

import csv
import os
import subprocess
import sys

import pytest

from experiments.benchmarking import runs as runs_lib
from tools import paper_table

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_REGIME = 'mnist:client_dir(0.05)@100'
# Test accuracy per round (4 rounds), seeds 0-2; F1 is accuracy - 0.1 (FedAvg), - 0.05 (FedGA).
_CURVES = {'fedavg': {0: [.2, .4, .6, .8], 1: [.3, .5, .7, .7], 2: [.1, .3, .6, .9]},
           'fedga': {0: [.4, .6, .8, .9], 1: [.5, .7, .8, .8], 2: [.6, .8, .85, .95]}}
_F1_SHIFT = {'fedavg': 0.1, 'fedga': 0.05}


def _write(root):
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, 'runs.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, ['regime', 'method', 'epochs', 'seed', 'diverged_round',
                                'chance_accuracy', 'accuracy_curve'])
    writer.writeheader()
    for method, by_seed in _CURVES.items():
      for seed, curve in by_seed.items():
        writer.writerow(dict(regime=_REGIME, method=method, epochs=2, seed=seed,
                             diverged_round='', chance_accuracy=0.1,
                             accuracy_curve=';'.join(map(str, curve))))
        run_dir = runs_lib.report_run_dir(str(root), _REGIME, 2, method, seed)
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, 'metrics.csv'), 'w') as m:
          m.write('round_num,test_accuracy,test_macro_f1\n')
          m.writelines(f'{r},{a},{a - _F1_SHIFT[method]}\n' for r, a in enumerate(curve, 1))
  return str(root)


def _row(text, start):
  return next(line for line in text.splitlines() if line.startswith(start))


def test_every_number_is_the_hand_computed_one(tmp_path):
  text = paper_table.render(paper_table.load(_write(tmp_path)), 'x')
  # Final: FedAvg 0.8, 0.7, 0.9 (mean 0.8, sd 0.1); means over rounds 0.5, 0.55, 0.475.
  # F1 0.1 lower. The paper's alpha = 0.05 row: 0.812 (0.016), F1 0.799 (0.020).
  assert _row(text, '| 0.05 | FedAvg |') == (
      '| 0.05 | FedAvg | 0.800 ± 0.100 | 0.508 ± 0.038 | 0.812 (0.016) | 0.700 ± 0.100 | '
      '0.408 ± 0.038 | 0.799 (0.020) |')
  # FedGA final 0.9, 0.8, 0.95 (mean 0.8833, sd 0.0764); means 0.675, 0.7, 0.8 (0.725, 0.0661).
  assert _row(text, '| 0.05 | FedGA |') == (
      '| 0.05 | FedGA | 0.883 ± 0.076 | 0.725 ± 0.066 | 0.859 (0.011) | 0.833 ± 0.076 | '
      '0.675 ± 0.066 | 0.852 (0.013) |')
  # Paired final differences 0.1, 0.1, 0.05: mean 0.0833, sd 0.02887, t(0.975, 2) = 4.3027,
  # half width 4.3027 * 0.02887 / sqrt(3) = 0.0717; over rounds 0.175, 0.15, 0.325: mean
  # 0.2167, sd 0.0946, half 0.2351; F1 each 0.05 higher (same sd). Paper: +0.047, +0.053.
  assert _row(text, '| 0.05 | +') == (
      '| 0.05 | +0.083 [+0.012, +0.155] | +0.217 [-0.018, +0.452] | +0.047 | '
      '+0.133 [+0.062, +0.205] | +0.267 [+0.032, +0.502] | +0.053 |')
  # Target 0.9 * 0.8 = 0.72: FedAvg reaches it at round 4, never, 4; FedGA at 3, 3, 2.
  assert _row(text, '| 0.05 | 0.720 |') == '| 0.05 | 0.720 | 4.0 (1 never) | 2.7 |'
  assert 'arXiv:2412.16582' in text and 'seeds 0, 1, 2; 4 rounds' in text


def test_a_diverged_run_counts_at_chance_from_its_round(tmp_path):
  root = _write(tmp_path)
  with open(os.path.join(root, 'runs.csv')) as f:
    text = f.read().replace(f'{_REGIME},fedga,2,2,,0.1', f'{_REGIME},fedga,2,2,4,0.1')
  with open(os.path.join(root, 'runs.csv'), 'w') as f:
    f.write(text)
  cells = paper_table.load(root)
  assert cells[(0.05, 'fedga')][2]['acc'] == [.6, .8, .85, .1]


def test_bad_input_is_one_line_and_tensorflow_is_not_imported(tmp_path):
  with pytest.raises(SystemExit, match=r'paper_table: .*runs\.csv: No such file'):
    paper_table.load(str(tmp_path))
  root = _write(tmp_path / 'bench')
  os.remove(runs_lib.report_run_dir(root, _REGIME, 2, 'fedga', 1) + '/metrics.csv')
  with pytest.raises(SystemExit, match=r'seed1/metrics\.csv: No such file'):
    paper_table.load(root)
  with pytest.raises(SystemExit, match=r"regime 'digits:dir\(0.1\)' is not a client_dir"):
    paper_table.alpha_of('digits:dir(0.1)')
  out = tmp_path / 'table.md'
  code = ('import sys; from tools import paper_table; '
          f'paper_table.main([{str(tmp_path / "ok")!r}, "--out", {str(out)!r}]); '
          'assert "tensorflow" not in sys.modules')
  _write(tmp_path / 'ok')
  subprocess.run([sys.executable, '-c', code], cwd=_ROOT, check=True)
  assert out.read_text().startswith('Paper: Chenguang Xiao')

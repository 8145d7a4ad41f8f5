"""FedGA's Table 1 (MNIST) beside a `--preset=fedga_table` benchmark: `python -m
tools.paper_table OUTPUT_DIR/fedga_table [--out table.md]` reads runs.csv (`accuracy_curve`) and
each reporting run's metrics.csv (`test_macro_f1`) and writes Markdown. No TensorFlow.

Per alpha and method: the final round's accuracy and macro F1 and their means over every round
(mean +- sd over seeds) beside the paper's; FedGA - FedAvg paired by seed (95% t interval); the
rounds to reach 90% of FedAvg's final accuracy (the paper's speed statistic). Bad input: one line,
exit status 1.
"""

import argparse
import csv
import math
import os
import re
import sys
from typing import Optional, Sequence

import numpy as np

from experiments import stats
from experiments.benchmarking import runs as runs_lib

CITATION = ('Chenguang Xiao, Zheming Zuo, Shuo Wang, "FedGA: Federated Learning with Gradient '
            'Alignment for Error Asymmetry Mitigation", AAAI 2025, arXiv:2412.16582, Table 1 '
            '(MNIST rows: mean (sd) over five runs; the paper does not say which round)')
# (alpha, method) -> (accuracy, its sd, macro F1, its sd), copied from Table 1.
PAPER = {
    (0.05, 'fedavg'): (0.812, 0.016, 0.799, 0.020), (0.05, 'fedprox'): (0.812, 0.016, 0.799, 0.020),
    (0.05, 'fedga'): (0.859, 0.011, 0.852, 0.013),
    (0.1, 'fedavg'): (0.849, 0.005, 0.841, 0.006), (0.1, 'fedprox'): (0.849, 0.005, 0.841, 0.006),
    (0.1, 'fedga'): (0.885, 0.001, 0.880, 0.001),
    (0.5, 'fedavg'): (0.905, 0.002, 0.904, 0.001), (0.5, 'fedprox'): (0.905, 0.002, 0.903, 0.001),
    (0.5, 'fedga'): (0.918, 0.001, 0.917, 0.001),
    (1.0, 'fedavg'): (0.914, 0.001, 0.913, 0.001), (1.0, 'fedprox'): (0.914, 0.001, 0.913, 0.001),
    (1.0, 'fedga'): (0.922, 0.001, 0.921, 0.001),
    (10.0, 'fedavg'): (0.924, 0.001, 0.923, 0.001), (10.0, 'fedprox'): (0.924, 0.001, 0.923, 0.001),
    (10.0, 'fedga'): (0.925, 0.001, 0.923, 0.001),
}
NAMES = {'fedavg': 'FedAvg', 'fedprox': 'FedProx', 'fedga': 'FedGA'}
METHOD, BASELINE = 'fedga', 'fedavg'
TARGET_SHARE = 0.9   # of the baseline's final accuracy (mean over seeds), per alpha
F1_COLUMN = 'test_macro_f1'


def _fail(message: str) -> SystemExit:
  return SystemExit(f'paper_table: {message}')


def alpha_of(regime: str) -> float:
  """'mnist:client_dir(0.05)@100' -> 0.05."""
  match = re.search(r'client_dir\(([^)]*)\)', regime)
  if not match:
    raise _fail(f'regime {regime!r} is not a client_dir(ALPHA) regime')
  return float(match[1])


def _finite(values) -> list[float]:
  return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _read_csv(path: str, hint: str) -> list[dict]:
  """The rows of the CSV file `path`; an unreadable one fails in one line with `hint`."""
  try:
    with open(path, newline='') as f:
      return list(csv.DictReader(f))
  except OSError as e:
    raise _fail(f'{path}: {e.strerror} ({hint})') from None


def f1_curve(root: str, row: dict) -> list[Optional[float]]:
  """The run's `test_macro_f1` per round from its metrics.csv."""
  path = os.path.join(runs_lib.report_run_dir(root, row['regime'], int(row['epochs']),
                                              row['method'], int(row['seed'])), 'metrics.csv')
  rows = _read_csv(path, 'the tool reads the benchmark\'s output directory, whose runs/ hold '
                   'each run\'s metrics.csv')
  if rows and F1_COLUMN not in rows[0]:
    raise _fail(f'{path} has no column {F1_COLUMN}')
  return [float(r[F1_COLUMN]) if r[F1_COLUMN] not in ('', None) else None for r in rows]


def load(root: str) -> dict:
  """(alpha, method) -> seed -> {'acc': curve, 'f1': curve} of every reporting run."""
  path = os.path.join(root, 'runs.csv')
  rows = _read_csv(path, 'pass the benchmark\'s directory, OUTPUT_DIR/fedga_table')
  if not rows:
    raise _fail(f'{path} holds no runs')
  cells: dict = {}
  for row in rows:
    curve = runs_lib.counted_curve({**row, 'diverged_round': _int(row.get('diverged_round')),
                                    'chance_accuracy': _float(row.get('chance_accuracy'))})
    cells.setdefault((alpha_of(row['regime']), row['method']), {})[int(row['seed'])] = {
        'acc': curve, 'f1': f1_curve(root, row)}
  return cells


def _int(text) -> Optional[int]:
  return int(float(text)) if text not in (None, '') else None


def _float(text) -> Optional[float]:
  return float(text) if text not in (None, '') else None


def final(curve) -> Optional[float]:
  return curve[-1] if curve else None


def mean_over_rounds(curve) -> Optional[float]:
  values = _finite(curve)
  return float(np.mean(values)) if values else None


def first_round(curve, target: float) -> Optional[int]:
  """The first round (1, 2, ...) whose value reaches `target`; None if none does."""
  return next((r for r, v in enumerate(curve, start=1) if v is not None and v >= target), None)


def _spread(values) -> str:
  mean, sd = stats.mean_std(values)
  return '—' if math.isnan(mean) else f'{mean:.3f} ± {sd:.3f}'


def _interval(x: dict, y: dict) -> str:
  d = stats.paired_difference(x, y)
  if d is None:
    return '—'
  if math.isnan(d.low):
    return f'{d.mean:+.3f} (n = {d.n})'
  return f'{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]'


def _paper(alpha, method, index) -> str:
  value = PAPER.get((alpha, method))
  return '—' if value is None else f'{value[index]:.3f} ({value[index + 1]:.3f})'


def render(cells: dict, source: str) -> str:
  """The Markdown of `load`'s cells."""
  alphas = sorted({a for a, _ in cells})
  order = {m: i for i, m in enumerate(NAMES)}
  methods = sorted({m for _, m in cells}, key=lambda m: (order.get(m, len(order)), m))
  seeds = sorted({s for by_seed in cells.values() for s in by_seed})
  rounds = max(len(run['acc']) for by_seed in cells.values() for run in by_seed.values())
  name = lambda m: NAMES.get(m, m)
  per = lambda a, m, statistic, what: {s: statistic(run[what])
                                       for s, run in cells.get((a, m), {}).items()}
  out = [f'Paper: {CITATION}.', '',
         f'Here: `{source}`, seeds {", ".join(map(str, seeds))}; {rounds} rounds; mean ± sd over '
         f'seeds. "final": round {rounds}; "mean r1-{rounds}": each run\'s mean over its rounds.',
         '', f'| α | method | final acc. | mean r1-{rounds} acc. | paper acc. | final F1 | '
         f'mean r1-{rounds} F1 | paper F1 |', '|---|---|---|---|---|---|---|---|']
  for a in alphas:
    for m in methods:
      if (a, m) in cells:
        out.append(f'| {a:g} | {name(m)} | ' + ' | '.join([
            _spread(per(a, m, final, 'acc').values()),
            _spread(per(a, m, mean_over_rounds, 'acc').values()), _paper(a, m, 0),
            _spread(per(a, m, final, 'f1').values()),
            _spread(per(a, m, mean_over_rounds, 'f1').values()), _paper(a, m, 2)]) + ' |')
  out += ['', f'{name(METHOD)} - {name(BASELINE)}, paired by seed, 95% t interval:', '',
          f'| α | final acc. | mean r1-{rounds} acc. | paper acc. | final F1 | '
          f'mean r1-{rounds} F1 | paper F1 |', '|---|---|---|---|---|---|---|']
  for a in alphas:
    paper = [PAPER.get((a, METHOD)), PAPER.get((a, BASELINE))]
    gap = lambda i: '—' if None in paper else f'{paper[0][i] - paper[1][i]:+.3f}'
    out.append(f'| {a:g} | ' + ' | '.join([
        _interval(per(a, METHOD, final, 'acc'), per(a, BASELINE, final, 'acc')),
        _interval(per(a, METHOD, mean_over_rounds, 'acc'),
                  per(a, BASELINE, mean_over_rounds, 'acc')), gap(0),
        _interval(per(a, METHOD, final, 'f1'), per(a, BASELINE, final, 'f1')),
        _interval(per(a, METHOD, mean_over_rounds, 'f1'),
                  per(a, BASELINE, mean_over_rounds, 'f1')), gap(2)]) + ' |')
  out += ['', f'Rounds to reach {TARGET_SHARE:.0%} of {name(BASELINE)}\'s final accuracy (mean '
          'over seeds) at that alpha: mean over the seeds that reach it; "k never": seeds that '
          'do not within the run.', '',
          '| α | target | ' + ' | '.join(map(name, methods)) + ' |',
          '|---|---|' + '---|' * len(methods)]
  for a in alphas:
    base = _finite(per(a, BASELINE, final, 'acc').values())
    if not base:
      continue
    target = TARGET_SHARE * float(np.mean(base))
    row = []
    for m in methods:
      reached = [first_round(run['acc'], target) for run in cells.get((a, m), {}).values()]
      hit = [r for r in reached if r is not None]
      never = len(reached) - len(hit)
      text = f'{np.mean(hit):.1f}' if hit else '—'
      row.append(text + (f' ({never} never)' if never else ''))
    out.append(f'| {a:g} | {target:.3f} | ' + ' | '.join(row) + ' |')
  return '\n'.join(out) + '\n'


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('root', help='the benchmark\'s directory (OUTPUT_DIR/fedga_table)')
  parser.add_argument('--out', help='write the Markdown here (default: standard output)')
  args = parser.parse_args(argv)
  text = render(load(args.root), args.root)
  if args.out:
    with open(args.out, 'w') as f:
      f.write(text)
  else:
    sys.stdout.write(text)
  return 0


if __name__ == '__main__':
  sys.exit(main())

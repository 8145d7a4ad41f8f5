"""A regime's horizon from its pilot: `python -m tools.pilot_horizon PILOT_DIR... [--out FILE]`
reads each pilot benchmark's validation_curves.csv (the baseline's chosen candidate, mean over
the tuning seeds) and runs.csv (its reporting runs' test curves, mean over seeds) and writes
Markdown: the means of consecutive windows, the first window within the tolerance of the one
before (the horizon: that window's last round), and the within-run noise of the last-K mean of the
test curves at that horizon. No TensorFlow. Bad input: one line, exit 1.
"""

import argparse
import csv
import json
import math
import os
import statistics
import sys
from typing import Optional, Sequence

from experiments import stats

csv.field_size_limit(1 << 30)


def _curve(text: str) -> list[float]:
  return [float(v) if v else math.nan for v in text.split(';')] if text else []


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
  """The round-by-round mean of equally long curves (the shortest length)."""
  n = min(len(c) for c in curves)
  return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def window_means(curve: Sequence[float], window: int) -> list[float]:
  """The means of the consecutive `window`-round windows of `curve` (a partial last one left
  out)."""
  return [sum(curve[i:i + window]) / window for i in range(0, len(curve) - window + 1, window)]


def horizon(means: Sequence[float], window: int, tolerance: float) -> Optional[int]:
  """The last round of the first window whose mean is within `tolerance` of the one before
  (gains less than it); None when no window does."""
  for k in range(1, len(means)):
    if means[k] - means[k - 1] < tolerance:
      return (k + 1) * window
  return None


def _rows(path: str) -> list[dict]:
  with open(path, newline='', encoding='utf-8') as f:
    return list(csv.DictReader(f))


def pilot(root: str, window: int, tolerance: float, last_k: int = 20) -> dict:
  """The pilot in `root`: its regime, chosen candidate, window means and horizons, and each test
  run's `stats.window_noise` of its last `last_k` rounds up to the test horizon (else the end)."""
  with open(os.path.join(root, 'tuning_choices.json'), encoding='utf-8') as f:
    [choice] = [c for c in json.load(f) if not c.get('incomplete')]
  name = next(s['candidate'] for s in choice['scores'] if s['score'] == choice['score'])
  validation = [_curve(r['accuracy_curve']) for r in _rows(os.path.join(
      root, 'validation_curves.csv')) if r['method'] == choice['method']
                and r['candidate'] == name]
  test = [_curve(r['accuracy_curve']) for r in _rows(os.path.join(root, 'runs.csv'))
          if r['method'] == choice['method']]
  if not validation or not test:
    raise ValueError(f'{root}: no validation curve of {name!r} or no reporting run')
  out = dict(regime=choice['regime'], method=choice['method'], candidate=name,
             tuning_seeds=len(validation), report_seeds=len(test))
  for split, curves in (('validation', validation), ('test', test)):
    means = window_means(mean_curve(curves), window)
    out[split] = dict(means=means, horizon=horizon(means, window, tolerance))
  end = out['test']['horizon'] or min(len(c) for c in test)
  out['noise'] = dict(rounds=end, last_k=last_k, values=sorted(
      stats.window_noise(c[:end][-last_k:]) for c in test))
  return out


def markdown(pilots: Sequence[dict], window: int, tolerance: float) -> str:
  lines = [f'Horizon: the last round of the first {window}-round window whose mean accuracy '
           f'gains less than {tolerance:g} over the window before.', '',
           '| regime | FedAvg at | split | seeds | window means | horizon |',
           '|---|---|---|---|---|---|']
  for p in pilots:
    for split in ('validation', 'test'):
      seeds = p['tuning_seeds'] if split == 'validation' else p['report_seeds']
      means = ', '.join(f'{m:.3f}' for m in p[split]['means'])
      lines.append(f"| `{p['regime']}` | {p['candidate']} | {split} | {seeds} | {means} | "
                   f"{p[split]['horizon'] or 'none'} |")
  lines += ['', 'Within-run noise of the primary statistic: each test run\'s last K rounds up to '
            'the test horizon, their sd about their least-squares line over sqrt(K) '
            '(`experiments.stats.window_noise`).', '',
            '| regime | rounds | K | seeds | within-run noise (median) | (max) |',
            '|---|---|---|---|---|---|']
  for p in pilots:
    noise = p['noise']
    lines.append(f"| `{p['regime']}` | {noise['rounds']} | {noise['last_k']} | "
                 f"{len(noise['values'])} | {statistics.median(noise['values']):.4f} | "
                 f"{noise['values'][-1]:.4f} |")
  return '\n'.join(lines) + '\n'


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('pilots', nargs='+', help='pilot benchmark directories')
  parser.add_argument('--window', type=int, default=50)
  parser.add_argument('--tolerance', type=float, default=0.02)
  parser.add_argument('--last_k', type=int, default=20, help='rounds the primary statistic '
                      'averages')
  parser.add_argument('--out', help='write the Markdown here (default: stdout)')
  args = parser.parse_args(argv)
  try:
    for name in ('window', 'last_k'):
      if getattr(args, name) < 1:
        raise ValueError(f'--{name} must be >= 1, got {getattr(args, name)}')
    text = markdown([pilot(p, args.window, args.tolerance, args.last_k) for p in args.pilots],
                    args.window, args.tolerance)
    if args.out:
      with open(args.out, 'w', encoding='utf-8') as f:
        f.write(text)
    else:
      sys.stdout.write(text)
  except (OSError, ValueError, KeyError) as e:
    print(f'pilot_horizon: {e}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())

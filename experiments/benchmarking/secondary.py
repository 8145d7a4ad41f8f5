"""The report's sections beside the Results tables: the noise against the effects, each primary
comparison's detectable difference, the collapsed runs, the rounds each method takes to a target
(no test)."""

import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from experiments import stats
from experiments.benchmarking import results
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking.tables import fmt, fmt_difference, fmt_p, markdown_table, text


def power_table(rows, config: Mapping[str, Any]) -> str:
  """Each primary comparison's `results.detectable` at `holm_level`, "underpowered" above its
  dataset's target; a row per (regime, E, method), a column per reference; '' without one."""
  found, level = results.family(rows, config), results.holm_level(rows, config)
  datasets, table, weak = results.regime_datasets(rows), {}, 0
  against = list(dict.fromkeys(b for *_, b in found))
  for (regime, e, method, b), d in found.items():
    mdd, target = results.detectable(d, level), results.detect_for(datasets[regime], config)
    weak += mdd is not None and mdd > target
    table.setdefault((regime, e, method), {})[b] = (
        'identical' if results.identical(d) else fmt(mdd, 4) + (
            f' **underpowered** (sd {d.sd:.4f})' if mdd is not None and mdd > target else ''))
  return text('power_intro', level=level, power=results.POWER, weak=weak,
              total=results.family_size(found)) + '\n\n' + markdown_table(
      ['regime', 'E', 'method', *[f'vs {b}' for b in against]],
      [[f'`{r}`', e, m, *[per.get(b, '-') for b in against]]
       for (r, e, m), per in table.items()]) if table else ''


def speed_table(rows, config: Mapping[str, Any]) -> str:
  """`results.speed` per regime, E and method, with the paired difference in rounds (no test)."""
  baseline = config['baseline']
  out = [[f'`{regime}`', e, f'{target:.4f}', method, f'{sum(rounds.values()) / len(rounds):.1f}',
          f'{never} of {len(rounds)}', '—' if method == baseline else fmt_difference(
              stats.paired_difference(rounds, per[baseline][0]), digits=1)]
         for (regime, e), (target, per) in results.speed(rows, config).items()
         for method, (rounds, never) in per.items()]
  return text('speed_intro', fraction=results.speed_target(config), baseline=baseline,
              label=results.statistic_label(results.primary_statistic(config), config)
              ) + '\n\n' + markdown_table(
      ['regime', 'E', 'target', 'method', 'rounds (mean)', 'never reached',
       f'Δ rounds vs {baseline} [95% CI]'], out) if out else ''


def collapse_section(rows, config: Mapping[str, Any]) -> str:
  """The collapsed runs per regime, E and method, each count against the baseline's (Fisher's
  exact test, two-sided, unadjusted), and how many runs' majority rate is unknown."""
  key, baseline, lines = results.primary_statistic(config), config['baseline'], []
  for regime, e, cell in results.cells(rows, config):
    base = cell.get(baseline, {})
    base_n = sum(results.is_true(r.get('collapsed')) for r in base.values())
    for method, per_seed in cell.items():
      hit = {s: r for s, r in sorted(per_seed.items()) if results.is_true(r.get('collapsed'))}
      if not hit:
        continue
      p = (scipy_stats.fisher_exact([[len(hit), len(per_seed) - len(hit)],
                                     [base_n, len(base) - base_n]])[1]
           if base and method != baseline else float('nan'))
      named = ', '.join(f'seed {s} {fmt(results.num(r.get(key)), 3)}' + (
          '' if results.num(r.get('majority_rate')) is None else
          f' (majority rate {results.num(r.get("majority_rate")):.4f})') for s, r in hit.items())
      lines.append(text('collapse_line', regime=regime, e=e, method=method, n=len(hit),
                        seeds=len(per_seed), named=named, baseline=baseline, base=base_n,
                        of=len(base), p=fmt_p(p),
                        differs=' (differs)' if p < results.ALPHA else ''))
  unknown = sum(results.num(r.get('majority_rate')) is None for r in rows)
  return '\n'.join([text('collapse_intro', margin=runs_lib.COLLAPSE_MARGIN,
                          factor=runs_lib.COLLAPSE_FACTOR, share=runs_lib.COLLAPSE_SHARE,
                          unknown=unknown, total=len(rows)), '']
                   + (['- ' + line for line in lines] or [
                       'No run collapsed.' if not unknown else
                       'No run flagged by the rules that could be applied.'])) + '\n'


def _against(value: Optional[float], ceiling: float) -> str:
  return 'not recorded' if value is None else fmt(value, 4) + (
      ' **above**' if value > ceiling else '')


def noise_table(rows, config: Mapping[str, Any], regimes: Sequence[Mapping[str, Any]]) -> str:
  """Per regime and E, against a quarter of the dataset's target difference: one evaluation's
  sampling error `sqrt(a (1 - a) / n)` (a: the baseline's mean primary statistic, n: the test
  examples in regimes.json) and the within-run noise of each run's last-K mean
  (`stats.window_noise`, median and max over the cell's runs); '' unless the primary statistic
  is a last-K mean."""
  if results.primary_statistic(config) != 'last_k_accuracy' or not rows:
    return ''
  last_k, baseline = int(config['tuning']['last_k']), config['baseline']
  tests = {r['regime']: r.get('test_examples') for r in regimes}
  datasets = results.regime_datasets(rows)
  out, runs = [], 0
  for regime, e, cell in results.cells(rows, config):
    ceiling, n = results.detect_for(datasets[regime], config) / 4, tests.get(regime)
    windows = [results.window(r, 0, last_k) for per_seed in cell.values()
               for r in per_seed.values()]
    noise = sorted(v for v in (stats.window_noise(w) for w in windows if w) if math.isfinite(v))
    runs += len(windows)
    a = results.mean(cell[baseline], 'last_k_accuracy') if baseline in cell else math.nan
    sampling = math.sqrt(a * (1 - a) / n) if n and math.isfinite(a) else None
    out.append([f'`{regime}`', e, n or 'not recorded', _against(sampling, ceiling),
                _against(float(np.median(noise)) if noise else None, ceiling),
                _against(noise[-1] if noise else None, ceiling), f'{ceiling:.4f}'])
  table = markdown_table(['regime', 'E', 'test examples', 'one evaluation\'s sampling error',
                          'within-run noise (median)', 'within-run noise (max)',
                          'ceiling (a quarter of the target)'], out)
  return text('noise_intro', baseline=baseline, last_k=last_k, runs=runs) + '\n\n' + table

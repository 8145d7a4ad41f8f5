"""The report's Diagnosis and positive-control sections: each method's paired gap to FedAvg, the
measurement that tests why, its variants' gaps (exploratory); readings in docs/experiments.md."""

import math
import os
from typing import Any, Iterable, Mapping, Optional, Sequence

from experiments import stats
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results

_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     'docs', 'experiments.md')
_READINGS = "### What each method's diagnosis reads"
BASELINE = 'fedavg'


def fmt_gap(g: Optional[stats.Interval]) -> str:
  """'+0.012 ± 0.003' (mean ± the 95% t-interval's half-width), '+0.012 (n=1)' for one seed,
  '-' for none. No significance mark: a diagnosis is exploratory (no multiplicity correction);
  the benchmark's Results tables mark what Holm's adjustment keeps."""
  if g is None:
    return '-'
  if g.n < 2:
    return f'{g.mean:+.3f} (n=1)'
  return f'{g.mean:+.3f} ± {g.half_width:.3f}'


def _by_seed(runs, regime, method, column) -> dict[Any, float]:
  """seed -> the finite or infinite value of `column` of `method`'s runs in `regime`."""
  per_seed = {r['seed']: r for r in runs if r['regime'] == regime and r['method'] == method}
  return {s: v for s, v in results.by_seed(per_seed, column).items() if not math.isnan(v)}


def gap(runs, regime, method, column='final_accuracy', baseline=BASELINE
        ) -> Optional[stats.Interval]:
  """`method - baseline` on `column`, paired over the seeds both ran in `regime`, with its 95%
  t-interval (`stats.paired_difference`); None if they share no seed."""
  return stats.paired_difference(_by_seed(runs, regime, method, column),
                                 _by_seed(runs, regime, baseline, column))


def _mean_std(runs, regime, method, column) -> Optional[tuple[float, float, int]]:
  """Mean, sample standard deviation (`stats.mean_std`) and count over seeds; None for none."""
  values = list(_by_seed(runs, regime, method, column).values())
  if not values:
    return None
  return (*stats.mean_std(values), len(values))


def _fmt(stat: Optional[tuple[float, float, int]], digits: int = 3) -> str:
  if stat is None:
    return '-'
  mean, std, n = stat
  return f'{mean:.{digits}f}' if n == 1 else f'{mean:.{digits}f} ± {std:.{digits}f}'


def variant_baseline(method: str, runs: Iterable[Mapping[str, Any]],
                     default: str = BASELINE) -> str:
  """The method `method` is compared with: its variant's `baseline` where that ran in `runs`
  (a clipped variant against FedAvg clipped alike), else `default`."""
  own = getattr(methods_lib.VARIANTS.get(method), 'baseline', None)
  if own is not None and any(r['method'] == own for r in runs):
    return own
  return default


def variants_of(method: str) -> list[methods_lib.Variant]:
  """The `VARIANTS` that diagnose `method`, in declaration order."""
  return [v for v in methods_lib.VARIANTS.values() if v.diagnoses == method]


def _regimes(runs, method) -> list[str]:
  seen = []
  for r in runs:
    if r['method'] == method and r['regime'] not in seen:
      seen.append(r['regime'])
  return seen


def _has(runs, regime, method, column) -> bool:
  return bool(_by_seed(runs, regime, method, column))


_STATISTIC_NAMES = {'final_accuracy': 'final accuracy',
                    'last_k_accuracy': 'mean accuracy of the last rounds'}


def _gap_table(runs, method, regimes, baseline, statistic='final_accuracy') -> list[str]:
  name = _STATISTIC_NAMES.get(statistic, statistic)
  lines = [f'| regime | {baseline} {name} | {method} {name} | gap (paired, 95% CI) '
           f'| best (test-selected) - final: {method} / {baseline} |', '|---|---|---|---|---|']
  for regime in regimes:
    g = gap(runs, regime, method, statistic, baseline=baseline)
    lines.append(
        f'| {regime} | {_fmt(_mean_std(runs, regime, baseline, statistic))} | '
        f'{_fmt(_mean_std(runs, regime, method, statistic))} | '
        f'{fmt_gap(g)} | '
        f'{_fmt(_mean_std(runs, regime, method, "accuracy_drop"))} / '
        f'{_fmt(_mean_std(runs, regime, baseline, "accuracy_drop"))} |')
  return lines


def _verdict(base: Optional[stats.Interval], variant: Optional[stats.Interval]) -> str:
  """How a variant's gap to FedAvg compares with the method's own."""
  if variant is None:
    return 'not run'
  if base is None:
    return ''
  change = variant.mean - base.mean
  if abs(change) < 0.005:
    return 'no change'
  return f'{"narrows" if change > 0 else "widens"} the gap by {abs(change):.3f}'


def _variant_table(runs, method, regimes, baseline, statistic='final_accuracy') -> list[str]:
  present = [v for v in variants_of(method)
             if any(r['method'] == v.name for r in runs)]
  if not present:
    return [f'No variant of {method} was run (see `experiments.benchmarking.methods.VARIANTS`: '
            f'{", ".join(v.name for v in variants_of(method)) or "none"}).']
  lines = ['| variant | changes | question | compared with | ' + ' | '.join(
      f'{regime}: gap' for regime in regimes) + ' |',
           '|---|---|---|---|' + '---|' * len(regimes)]
  for v in present:
    reference = variant_baseline(v.name, runs, baseline)
    cells = []
    for regime in regimes:
      base = gap(runs, regime, method, statistic, baseline=baseline)
      ours = gap(runs, regime, v.name, statistic, baseline=reference)
      cells.append('-' if ours is None else f'{fmt_gap(ours)} ({_verdict(base, ours)})')
    lines.append(f'| {v.name} | {v.described} | {v.question} | {reference} | '
                 + ' | '.join(cells) + ' |')
  return lines


def _pair_error_lines(runs, method, regimes, baseline) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'final_rare_pair_error')]
  if not rows:
    return ['The runs carry no class-pair errors (`test_rare_pair_error`: the training data did '
            'not provide label counts).']
  lines = ['Test errors between classes that rarely share a client in the training partition '
           '(co-occurrence < 0.1, `tff_conflict.evaluation.confusion_by_cooccurrence`) and between '
           'the other pairs; mean error rate per ordered class pair, final round:', '',
           f'| regime | rare pairs: {method} / {baseline} | common pairs: {method} / {baseline} '
           f'| excess on rare pairs (paired) | excess on common pairs (paired) |',
           '|---|---|---|---|---|']
  findings = []
  for regime in rows:
    rare = gap(runs, regime, method, 'final_rare_pair_error', baseline)
    common = gap(runs, regime, method, 'final_common_pair_error', baseline)
    lines.append(
        f'| {regime} | {_fmt(_mean_std(runs, regime, method, "final_rare_pair_error"))} / '
        f'{_fmt(_mean_std(runs, regime, baseline, "final_rare_pair_error"))} | '
        f'{_fmt(_mean_std(runs, regime, method, "final_common_pair_error"))} / '
        f'{_fmt(_mean_std(runs, regime, baseline, "final_common_pair_error"))} | '
        f'{fmt_gap(rare)} | {fmt_gap(common)} |')
    if rare is not None and common is not None:
      if rare.mean > 0 and rare.mean > 2 * max(common.mean, 0.0):
        findings.append(f'{regime}: the extra errors concentrate on rarely co-located pairs '
                        f'({rare.mean:+.3f} per pair against {common.mean:+.3f})')
      else:
        findings.append(f'{regime}: the extra errors do not concentrate on rarely co-located '
                        f'pairs ({rare.mean:+.3f} per pair against {common.mean:+.3f} on the '
                        f'others)')
  if findings:
    lines += ['', 'Reading: ' + '; '.join(findings) + '.']
  return lines


def _logit_lines(runs, method, regimes, baseline) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'final_mean_logit')]
  if not rows:
    return []
  lines = ['Mean logit of the final global model on the test split (`test_mean_logit`; softmax '
           'ignores it, cross-entropy does not move it directly):', '',
           f'| regime | {method} | {baseline} | difference (paired) |', '|---|---|---|---|']
  for regime in rows:
    g = gap(runs, regime, method, 'final_mean_logit', baseline)
    lines.append(f'| {regime} | {_fmt(_mean_std(runs, regime, method, "final_mean_logit"), 2)} | '
                 f'{_fmt(_mean_std(runs, regime, baseline, "final_mean_logit"), 2)} | '
                 f'{fmt_gap(g)} |')
  return lines


def _norm_ratio_lines(runs, method, regimes) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'norm_ratio')]
  if not rows:
    return [f'The runs of {method} carry no `aggregator/norm_ratio`.']
  lines = ['Server-step length against the plain weighted mean of the same updates '
           '(`aggregator/norm_ratio`, mean over rounds; below 1 the server step is shorter):', '',
           '| regime | norm ratio | server learning rate that compensates it (1 / ratio) | '
           'conflict fraction before |', '|---|---|---|---|']
  for regime in rows:
    ratio = _mean_std(runs, regime, method, 'norm_ratio')
    conflict = _mean_std(runs, regime, method, 'conflict_before')
    lines.append(f'| {regime} | {_fmt(ratio)} | {1.0 / ratio[0]:.2f} | {_fmt(conflict)} |')
  return lines


def _conflict_lines(runs, method, regimes) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'conflict_before')]
  if not rows:
    return []
  lines = ['Aggregator diagnostics (means over rounds):', '',
           '| regime | conflict fraction before | norm ratio |', '|---|---|---|']
  for regime in rows:
    lines.append(f'| {regime} | {_fmt(_mean_std(runs, regime, method, "conflict_before"))}'
                 f' | {_fmt(_mean_std(runs, regime, method, "norm_ratio"))} |')
  return lines


def _regime_label(row: Mapping[str, Any]) -> str:
  """The row's regime, with its local epochs when the table has them (`epochs`)."""
  epochs = row.get('epochs')
  return row['regime'] if epochs in (None, '') else f'{row["regime"]}, E={int(epochs)}'


def _reading(algorithm: str) -> Optional[str]:
  """What the diagnosis of `algorithm` reads and why: its item in docs/experiments.md's "What
  each method's diagnosis reads" (`- `name`: ...`, one paragraph), None without one."""
  try:
    with open(_DOCS) as f:
      lines = f.read().split('\n')
  except OSError:
    return None
  start, item = next((i for i, line in enumerate(lines) if line == _READINGS), len(lines)), None
  for line in lines[start:]:
    if item is not None and not line.startswith('  '):
      break
    if item is not None:
      item.append(line.strip())
    elif line.startswith(f'- `{algorithm}`: '):
      item = [line[len(f'- `{algorithm}`: '):]]
  return ' '.join(item) if item else None


def section(method: str, algorithm: str, rows: Sequence[Mapping[str, Any]], *,
            baseline: str = BASELINE, statistic: str = 'final_accuracy') -> Optional[str]:
  """The report's Markdown diagnosis of `method` (a method of `algorithm`, or one of its
  `methods.VARIANTS`) from runs.csv's rows: the paired gap against `baseline` (a variant's own
  baseline where that ran, `variant_baseline`) per regime (and E), the measurement that tests the
  algorithm's reading (`_reading`), and its variants' gaps; None for the baseline itself.

  `statistic` is the column the gaps compare (the benchmark's primary statistic); columns a run
  lacks show as '-'.

  Raises:
    ValueError: if `method` has no run in `rows`.
  """
  if method == baseline:
    return None
  runs = [dict(r, regime=_regime_label(r)) for r in rows]
  if not any(r['method'] == method for r in runs):
    raise ValueError(f'method {method!r} has no run in the runs table')
  variant = methods_lib.VARIANTS.get(method)
  algorithm = variant.diagnoses if variant else algorithm
  baseline = variant_baseline(method, runs, baseline)
  regimes = _regimes(runs, method)
  reading = f'A variant of {algorithm}: {variant.question}' if variant else _reading(algorithm)
  lines = [reading, ''] if reading else []
  lines += _gap_table(runs, method, regimes, baseline, statistic)
  lines += ['', '(gap: mean over seeds of the paired difference, ± the 95% t-interval\'s '
            'half-width; exploratory, without a multiplicity correction and so without a '
            'significance mark.)', '']
  if algorithm == 'fedga':
    lines += _pair_error_lines(runs, method, regimes, baseline) + ['']
    logits = _logit_lines(runs, method, regimes, baseline)
    if logits:
      lines += logits + ['']
  elif algorithm in ('fedld', 'fed_corrective'):
    lines += _norm_ratio_lines(runs, method, regimes) + ['']
  else:
    extra = _conflict_lines(runs, method, regimes)
    if extra:
      lines += extra + ['']
  if not variant:
    lines += ['Variants (same seeds, partition and clients; a variant changes one cause):', '']
    lines += _variant_table(runs, method, regimes, baseline, statistic)
  return '\n'.join(lines) + '\n'


def control_section(rows: Sequence[Mapping[str, Any]], *, method: str, baseline: str) -> str:
  """The reading of the positive control's runs: FedProx's published effect (Li et al.,
  "Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Fig. 1-2):
  with many local epochs on Synthetic(1, 1), FedProx with mu = 1 trains stably where FedAvg's
  training loss oscillates or rises.

  Reads `tail_global_train_loss` and `global_train_loss_rise` (runs with `--eval_train_loss`:
  the global model's loss on the clients' training data, the paper's training loss) and
  `final_accuracy` of `method` and `baseline` in the first regime `method` ran in, paired over
  seeds. The effect is reproduced when `method`'s training loss over the last quarter of the
  rounds is lower and its largest rise above the running minimum is smaller, both with 95%
  intervals excluding 0, and that rise is at most half of the baseline's (a steadier run, not a
  marginally smoother one).

  Raises:
    ValueError: `method` has no run in `rows`, or either method has no run in that regime
      carrying the global training loss.
  """
  runs = [dict(r, regime=_regime_label(r)) for r in rows]
  regimes = sorted({r['regime'] for r in runs if r['method'] == method})
  if not regimes:
    raise ValueError(f'the positive control has no run of {method!r}')
  regime = regimes[0]
  for name in (method, baseline):
    if not _has(runs, regime, name, 'tail_global_train_loss'):
      raise ValueError(f'{name!r} has no run in regime {regime!r} with the global training '
                       'loss (run with --eval_train_loss)')
  lines = [f'| measure | {baseline} | {method} | difference (paired, 95% CI) |',
           '|---|---|---|---|']
  verdicts = {}
  for column, label in (('tail_global_train_loss',
                         'training loss (global model), mean of the last quarter of rounds'),
                        ('global_train_loss_rise', 'largest rise of the training loss'),
                        ('final_accuracy', 'final test accuracy')):
    g = gap(runs, regime, method, column, baseline)
    verdicts[column] = g
    lines.append(f'| {label} | {_fmt(_mean_std(runs, regime, baseline, column))} | '
                 f'{_fmt(_mean_std(runs, regime, method, column))} | '
                 f'{fmt_gap(g)} |')
  loss, rise = verdicts['tail_global_train_loss'], verdicts['global_train_loss_rise']
  baseline_rise = _mean_std(runs, regime, baseline, 'global_train_loss_rise')
  reproduced = (loss is not None and rise is not None and loss.excludes_zero and loss.mean < 0
                and rise.excludes_zero and rise.mean < 0
                and rise.mean <= -0.5 * baseline_rise[0])
  lines += ['', 'Reading: the published effect is ' + (
      'reproduced: lower and steadier training loss.' if reproduced else
      'not reproduced by these runs (it needs a lower late training loss and a largest rise at '
      'most half the baseline\'s, both at 95% confidence).')]
  return '\n'.join(lines) + '\n'

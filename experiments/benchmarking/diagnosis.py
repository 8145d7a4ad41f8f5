"""The report's Diagnosis and positive-control sections: each method's paired gap to FedAvg, the
measurement that tests why, its variants' gaps (exploratory); readings in docs/experiments.md."""

import os
from typing import Any, Mapping, Optional, Sequence

from experiments import stats
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results
from experiments.benchmarking import tables

_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     'docs', 'experiments.md')
_READINGS = "### What each method's diagnosis reads"
BASELINE = 'fedavg'
gap = results.difference  # (cell, method, baseline, column): method - baseline paired by seed


def fmt_gap(g: Optional[stats.Interval]) -> str:
  """'+0.012 ± 0.003' (mean ± the 95% t-interval's half-width), '+0.012 (n=1)' for one seed,
  '-' for none. No significance mark: a diagnosis is exploratory (no multiplicity correction);
  the benchmark's Results tables mark what Holm's adjustment keeps."""
  if g is None:
    return '-'
  return f'{g.mean:+.3f} (n=1)' if g.n < 2 else f'{g.mean:+.3f} ± {(g.high - g.low) / 2:.3f}'


def cells_of(rows, method: str) -> list[tuple[str, Mapping[str, Any]]]:
  """('regime, E=e', method -> seed -> row) of every (regime, E) `method` ran in."""
  return [(f'{r}, E={e}', cell) for (r, e), cell in results.group(rows).items() if method in cell]


def _ms(cell, method, column, digits=3) -> str:
  return tables.fmt_mean_std(list(results.by_seed(cell.get(method, {}), column).values()), digits)


def variant_baseline(method: str, rows, default: str = BASELINE) -> str:
  """The method `method` is compared with: its variant's `baseline` where that ran in `rows`
  (a clipped variant against FedAvg clipped alike), else `default`."""
  own = methods_lib.VARIANTS.get(method, {}).get('baseline')
  return own if own is not None and any(r['method'] == own for r in rows) else default


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


def _variant_table(rows, cells, method, baseline, statistic) -> list[str]:
  variants = [v for v, spec in methods_lib.VARIANTS.items() if spec['diagnoses'] == method]
  present = [v for v in variants if any(r['method'] == v for r in rows)]
  if not present:
    return [f'No variant of {method} was run (see `experiments.benchmarking.methods.VARIANTS`: '
            f'{", ".join(variants) or "none"}).']
  lines = ['| variant | changes | question | compared with | ' + ' | '.join(
      f'{label}: gap' for label, _ in cells) + ' |', '|---|---|---|---|' + '---|' * len(cells)]
  for v in present:
    reference = variant_baseline(v, rows, baseline)
    gaps = [(gap(cell, method, baseline, statistic), gap(cell, v, reference, statistic))
            for _, cell in cells]
    question = _reading(v) or ''
    lines.append(f'| {v} | {methods_lib.described(v)} | {question} | {reference} | ' + ' | '.join(
        '-' if ours is None else f'{fmt_gap(ours)} ({_verdict(base, ours)})'
        for base, ours in gaps) + ' |')
  return lines


def _measured(cells, method, column, head: list[str], row) -> list[str]:
  """`head` then `row(label, cell)` for each cell where `method` has `column`; [] without one."""
  cells = [(label, c) for label, c in cells if results.by_seed(c.get(method, {}), column)]
  return head + [row(label, c) for label, c in cells] if cells else []


def _pair_error_lines(cells, method, baseline) -> list[str]:
  rare, common = 'final_rare_pair_error', 'final_common_pair_error'
  lines = _measured(cells, method, rare, [
      'Test errors between classes that rarely share a client in the training partition '
      '(co-occurrence < 0.1, `tff_conflict.evaluation.confusion_by_cooccurrence`) and between '
      'the other pairs; mean error rate per ordered class pair, final round:', '',
      f'| regime | rare pairs: {method} / {baseline} | common pairs: {method} / {baseline} '
      '| excess on rare pairs (paired) | excess on common pairs (paired) |',
      '|---|---|---|---|---|'], lambda label, c: (
          f'| {label} | {_ms(c, method, rare)} / {_ms(c, baseline, rare)} | '
          f'{_ms(c, method, common)} / {_ms(c, baseline, common)} | '
          f'{fmt_gap(gap(c, method, baseline, rare))} | '
          f'{fmt_gap(gap(c, method, baseline, common))} |'))
  if not lines:
    return ['The runs carry no class-pair errors (`test_rare_pair_error`: the training data did '
            'not provide label counts).']
  findings = []
  for label, c in cells:
    r, o = gap(c, method, baseline, rare), gap(c, method, baseline, common)
    if r is not None and o is not None:
      findings.append(
          f'{label}: the extra errors concentrate on rarely co-located pairs ({r.mean:+.3f} per '
          f'pair against {o.mean:+.3f})' if r.mean > 0 and r.mean > 2 * max(o.mean, 0.0) else
          f'{label}: the extra errors do not concentrate on rarely co-located pairs '
          f'({r.mean:+.3f} per pair against {o.mean:+.3f} on the others)')
  return lines + (['', 'Reading: ' + '; '.join(findings) + '.'] if findings else [])


def _logit_lines(cells, method, baseline) -> list[str]:
  return _measured(cells, method, 'final_mean_logit', [
      'Mean logit of the final global model on the test split (`test_mean_logit`; softmax '
      'ignores it, cross-entropy does not move it directly):', '',
      f'| regime | {method} | {baseline} | difference (paired) |', '|---|---|---|---|'],
                   lambda label, c: f'| {label} | {_ms(c, method, "final_mean_logit", 2)} | '
                   f'{_ms(c, baseline, "final_mean_logit", 2)} | '
                   f'{fmt_gap(gap(c, method, baseline, "final_mean_logit"))} |')


def _norm_ratio_lines(cells, method) -> list[str]:
  return _measured(cells, method, 'norm_ratio', [
      'Server-step length against the plain weighted mean of the same updates '
      '(`aggregator/norm_ratio`, mean over rounds; below 1 the server step is shorter):', '',
      '| regime | norm ratio | server learning rate that compensates it (1 / ratio) | '
      'conflict fraction before |', '|---|---|---|---|'], lambda label, c: (
          f'| {label} | {_ms(c, method, "norm_ratio")} | '
          f'{1.0 / results.mean(c[method], "norm_ratio"):.2f} | '
          f'{_ms(c, method, "conflict_before")} |')) or [
              f'The runs of {method} carry no `aggregator/norm_ratio`.']


def _conflict_lines(cells, method) -> list[str]:
  return _measured(cells, method, 'conflict_before', [
      'Aggregator diagnostics (means over rounds):', '',
      '| regime | conflict fraction before | norm ratio |', '|---|---|---|'],
                   lambda label, c: f'| {label} | {_ms(c, method, "conflict_before")} | '
                   f'{_ms(c, method, "norm_ratio")} |')


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
  `methods.VARIANTS`) from runs.csv's rows, on column `statistic`: the paired gap against
  `baseline` (a variant's own baseline where that ran) per regime and E, the measurement that
  tests the algorithm's reading (`_reading`), and its variants' gaps; None for the baseline.

  Raises:
    ValueError: if `method` has no run in `rows`.
  """
  if method == baseline:
    return None
  cells = cells_of(rows, method)
  if not cells:
    raise ValueError(f'method {method!r} has no run in the runs table')
  variant = methods_lib.VARIANTS.get(method)
  algorithm = variant['diagnoses'] if variant else algorithm
  baseline = variant_baseline(method, rows, baseline)
  reading = f'A variant of {algorithm}: {_reading(method)}' if variant else _reading(algorithm)
  name = {'final_accuracy': 'final accuracy',
          'last_k_accuracy': 'mean accuracy of the last rounds'}.get(statistic, statistic)
  lines = [reading, ''] if reading else []
  lines += [f'| regime | {baseline} {name} | {method} {name} | gap (paired, 95% CI) '
            f'| best (test-selected) - final: {method} / {baseline} |', '|---|---|---|---|---|']
  lines += [f'| {label} | {_ms(c, baseline, statistic)} | {_ms(c, method, statistic)} | '
            f'{fmt_gap(gap(c, method, baseline, statistic))} | '
            f'{_ms(c, method, "accuracy_drop")} / {_ms(c, baseline, "accuracy_drop")} |'
            for label, c in cells]
  lines += ['', '(gap: mean over seeds of the paired difference, ± the 95% t-interval\'s '
            'half-width; exploratory, without a multiplicity correction and so without a '
            'significance mark.)', '']
  if algorithm == 'fedga':
    measured = [_pair_error_lines(cells, method, baseline), _logit_lines(cells, method, baseline)]
  elif algorithm in ('fedld', 'fed_corrective'):
    measured = [_norm_ratio_lines(cells, method)]
  else:
    measured = [_conflict_lines(cells, method)]
  lines += [line for part in measured if part for line in part + ['']]
  if not variant:
    lines += ['Variants (same seeds, partition and clients; a variant changes one cause):', '']
    lines += _variant_table(rows, cells, method, baseline, statistic)
  return '\n'.join(lines) + '\n'


def control_section(rows: Sequence[Mapping[str, Any]], *, method: str, baseline: str) -> str:
  """The reading of the positive control's runs (the effect: the report's section): `method`
  against `baseline` in the first regime `method` ran in, paired over seeds, on the global
  model's training loss (`--eval_train_loss`, the paper's training loss). Reproduced when
  `method`'s loss over the last quarter of the rounds is lower and its largest rise above the
  running minimum smaller, both with 95% intervals excluding 0, and that rise at most half the
  baseline's (a steadier run, not a marginally smoother one).

  Raises:
    ValueError: `method` has no run in `rows`, or either method has no run in that regime
      carrying the global training loss.
  """
  cells = sorted(cells_of(rows, method), key=lambda x: x[0])
  if not cells:
    raise ValueError(f'the positive control has no run of {method!r}')
  regime, cell = cells[0]
  for name in (method, baseline):
    if not results.by_seed(cell.get(name, {}), 'tail_global_train_loss'):
      raise ValueError(f'{name!r} has no run in regime {regime!r} with the global training '
                       'loss (run with --eval_train_loss)')
  lines = [f'| measure | {baseline} | {method} | difference (paired, 95% CI) |',
           '|---|---|---|---|']
  for column, label in (('tail_global_train_loss',
                         'training loss (global model), mean of the last quarter of rounds'),
                        ('global_train_loss_rise', 'largest rise of the training loss'),
                        ('final_accuracy', 'final test accuracy')):
    lines.append(f'| {label} | {_ms(cell, baseline, column)} | {_ms(cell, method, column)} | '
                 f'{fmt_gap(gap(cell, method, baseline, column))} |')
  loss = gap(cell, method, baseline, 'tail_global_train_loss')
  rise = gap(cell, method, baseline, 'global_train_loss_rise')
  reproduced = (loss is not None and rise is not None and loss.excludes_zero and loss.mean < 0
                and rise.excludes_zero and rise.mean < 0
                and rise.mean <= -0.5 * results.mean(cell[baseline], 'global_train_loss_rise'))
  lines += ['', 'Reading: the published effect is ' + (
      'reproduced: lower and steadier training loss.' if reproduced else
      'not reproduced by these runs (it needs a lower late training loss and a largest rise at '
      'most half the baseline\'s, both at 95% confidence).')]
  return '\n'.join(lines) + '\n'

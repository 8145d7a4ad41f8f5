"""The report's Diagnosis and positive-control sections: each method's paired gap to FedAvg, the
measurement that tests why, its variants' gaps (exploratory); readings in docs/experiments.md."""

import os
import re
from typing import Any, Mapping, Optional, Sequence

from experiments import stats
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results
from experiments.benchmarking import tables
from experiments.benchmarking.tables import text

_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     'docs', 'experiments.md')
BASELINE = 'fedavg'
gap = results.difference  # (cell, method, baseline, column): method - baseline paired by seed
_RARE, _COMMON = 'final_rare_pair_error', 'final_common_pair_error'
# Per algorithm the measurements testing its reading (others: 'conflict'); per measurement its
# columns' (header, cell kind, column), a run needing the first column; {m} / {b} the two methods.
_MEASURED = {'fedga': ['pair_errors', 'logit'], 'fedld': ['norm_ratio'],
             'fed_corrective': ['norm_ratio']}
_MEASUREMENTS = {
    'pair_errors': [('rare pairs: {m} / {b}', 'both', _RARE),
                    ('common pairs: {m} / {b}', 'both', _COMMON),
                    ('excess on rare pairs (paired)', 'gap', _RARE),
                    ('excess on common pairs (paired)', 'gap', _COMMON)],
    'logit': [('{m}', 'method', 'final_mean_logit'), ('{b}', 'baseline', 'final_mean_logit'),
              ('difference (paired)', 'gap', 'final_mean_logit')],
    'norm_ratio': [('norm ratio', 'method', 'norm_ratio'),
                   ('server learning rate that compensates it (1 / ratio)', 'inverse',
                    'norm_ratio'),
                   ('conflict fraction before', 'method', 'conflict_before')],
    'conflict': [('conflict fraction before', 'method', 'conflict_before'),
                 ('norm ratio', 'method', 'norm_ratio')]}


def fmt_gap(g: Optional[stats.Interval]) -> str:
  """'+0.012 ± 0.003' (mean ± the 95% interval's half-width), unmarked: exploratory."""
  return tables.fmt_difference(g, digits=3, half_width=True)


def cells_of(rows, method: str) -> list[tuple[str, Mapping[str, Any]]]:
  """('regime, E=e', method -> seed -> row) of every (regime, E) `method` ran in."""
  return [(f'{r}, E={e}', cell) for (r, e), cell in results.group(rows).items() if method in cell]


def _cell(kind: str, column: str, cell, method: str, baseline: str) -> str:
  """A measurement cell: `kind` 'gap', 'inverse' (1 / mean), 'both', 'method' or 'baseline'."""
  def ms(name, digits=3):
    return tables.fmt_mean_std(cell.get(name), column, digits)
  if kind == 'gap':
    return fmt_gap(gap(cell, method, baseline, column))
  if kind == 'inverse':
    return f'{1.0 / results.mean(cell[method], column):.2f}'
  if kind == 'both':
    return f'{ms(method)} / {ms(baseline)}'
  return ms(method if kind == 'method' else baseline, 2 if column == 'final_mean_logit' else 3)


def _measure_table(cells, method, baseline, columns, needs: Optional[str] = None) -> list[str]:
  """A row per cell (where `method` has column `needs`): the regime, then `columns`."""
  cells = [(label, c) for label, c in cells
           if needs is None or results.by_seed(c.get(method, {}), needs)]
  return [tables.markdown_table(
      ['regime'] + [h.format(m=method, b=baseline) for h, _, _ in columns],
      [[label] + [_cell(kind, column, c, method, baseline) for _, kind, column in columns]
       for label, c in cells]).rstrip()] if cells else []


def _measurement(name: str, cells, method: str, baseline: str) -> list[str]:
  """The measurement's intro and table; its reading (class-pair errors) or why it is missing."""
  columns = _MEASUREMENTS[name]
  table = _measure_table(cells, method, baseline, columns, needs=columns[0][2])
  if not table:
    return {'pair_errors': [text('pair_errors_missing')],
            'norm_ratio': [f'The runs of {method} carry no `aggregator/norm_ratio`.']}.get(name, [])
  lines = [text(f'{name}_intro'), ''] + table
  findings = [text('pair_errors_concentrate' if r.mean > 0 and r.mean > 2 * max(o.mean, 0.0)
                   else 'pair_errors_spread', label=label, rare=r.mean, common=o.mean)
              for label, c in cells if name == 'pair_errors'
              for r, o in [(gap(c, method, baseline, _RARE), gap(c, method, baseline, _COMMON))]
              if r is not None and o is not None]
  return lines + (['', 'Reading: ' + '; '.join(findings) + '.'] if findings else [])


def variant_baseline(method: str, rows, default: str = BASELINE) -> str:
  """The variant `method`'s own `baseline` where that ran in `rows`, else `default`."""
  own = methods_lib.VARIANTS[method][1].baseline if method in methods_lib.VARIANTS else None
  return own if own is not None and any(r['method'] == own for r in rows) else default


def _verdict(base: Optional[stats.Interval], variant: Optional[stats.Interval]) -> str:
  """How a variant's gap to FedAvg compares with the method's own."""
  if variant is None or base is None:
    return 'not run' if variant is None else ''
  change = variant.mean - base.mean
  if abs(change) < 0.005:
    return 'no change'
  return f'{"narrows" if change > 0 else "widens"} the gap by {abs(change):.3f}'


def _variant_table(rows, cells, method, baseline, statistic) -> list[str]:
  variants = [v for v, (diagnoses, _) in methods_lib.VARIANTS.items() if diagnoses == method]
  present = [v for v in variants if any(r['method'] == v for r in rows)]
  if not present:
    return [text('no_variant', method=method, variants=', '.join(variants) or 'none')]
  def row(v, reference):
    return [v, methods_lib.described(v), _reading(v) or '', reference] + [
        '-' if ours is None else f'{fmt_gap(ours)} ({_verdict(base, ours)})'
        for base, ours in ((gap(c, method, baseline, statistic), gap(c, v, reference, statistic))
                           for _, c in cells)]
  table = [row(v, variant_baseline(v, rows, baseline)) for v in present]
  return [tables.markdown_table(['variant', 'changes', 'question', 'compared with']
                                + [f'{label}: gap' for label, _ in cells], table).rstrip()]


def _reading(algorithm: str) -> Optional[str]:
  """docs/experiments.md's item `- `algorithm`: ...` (diagnosis readings) in one line, or None."""
  try:
    with open(_DOCS) as f:
      _, heading, items = f.read().partition("### What each method's diagnosis reads\n")
  except OSError:
    return None
  item = re.search(rf'^- `{re.escape(algorithm)}`: (.*(?:\n  .*)*)', items, re.MULTILINE)
  return ' '.join(line.strip() for line in item[1].split('\n')) if heading and item else None


def section(method: str, algorithm: str, rows: Sequence[Mapping[str, Any]], *,
            baseline: str = BASELINE, statistic: str = 'final_accuracy') -> Optional[str]:
  """The diagnosis of `method` on `statistic`: its paired gap to `baseline` per cell, the
  measurements that test its reading, its variants' gaps; None for the baseline."""
  if method == baseline:
    return None
  cells = cells_of(rows, method)
  if not cells:
    raise ValueError(f'method {method!r} has no run in the runs table')
  variant = methods_lib.VARIANTS.get(method)
  algorithm = variant[0] if variant else algorithm
  baseline = variant_baseline(method, rows, baseline)
  reading = f'A variant of {algorithm}: {_reading(method)}' if variant else _reading(algorithm)
  name = {'final_accuracy': 'final accuracy',
          'last_k_accuracy': 'mean accuracy of the last rounds'}.get(statistic, statistic)
  lines = ([reading, ''] if reading else []) + _measure_table(cells, method, baseline, [
      (f'{{b}} {name}', 'baseline', statistic), (f'{{m}} {name}', 'method', statistic),
      ('gap (paired, 95% CI)', 'gap', statistic),
      ('best (test-selected) - final: {m} / {b}', 'both', 'accuracy_drop')])
  lines += ['', text('gap_note'), '']
  for measurement in _MEASURED.get(algorithm, ['conflict']):
    lines += [*part, ''] if (part := _measurement(measurement, cells, method, baseline)) else []
  if not variant:
    lines += ['Variants (same seeds, partition and clients; a variant changes one cause):', '',
              *_variant_table(rows, cells, method, baseline, statistic)]
  return '\n'.join(lines) + '\n'


def control_section(rows: Sequence[Mapping[str, Any]], *, method: str, baseline: str) -> str:
  """The positive control's reading, `method` against `baseline` in `method`'s first regime:
  reproduced where its tail global training loss and its largest rise are both lower (95%
  intervals excluding 0), that rise at most half the baseline's; ValueError without the runs."""
  regime, cell = min(cells_of(rows, method), key=lambda x: x[0], default=(None, None))
  if cell is None:
    raise ValueError(f'the positive control has no run of {method!r}')
  for name in (method, baseline):
    if not results.by_seed(cell.get(name, {}), 'tail_global_train_loss'):
      raise ValueError(f'{name!r} has no run in regime {regime!r} with the global training '
                       'loss (run with --eval_train_loss)')
  table = tables.markdown_table(
      ['measure', baseline, method, 'difference (paired, 95% CI)'],
      [[label] + [_cell(kind, column, cell, method, baseline)
                  for kind in ('baseline', 'method', 'gap')]
       for column, label in (('tail_global_train_loss',
                              'training loss (global model), mean of the last quarter of rounds'),
                             ('global_train_loss_rise', 'largest rise of the training loss'),
                             ('final_accuracy', 'final test accuracy'))])
  loss, rise = (gap(cell, method, baseline, c)
                for c in ('tail_global_train_loss', 'global_train_loss_rise'))
  reproduced = (all(d is not None and d.excludes_zero and d.mean < 0 for d in (loss, rise))
                and rise.mean <= -0.5 * results.mean(cell[baseline], 'global_train_loss_rise'))
  return (f'{table}\nReading: the published effect is '
          + text('control_reproduced' if reproduced else 'control_not_reproduced') + '\n')

"""The benchmark's report: `write_report(root)` writes `report.md` and `plots/` from the files a
benchmark leaves on disk alone, with no TFF (so `--report_only` regenerates a report)."""

import csv
import dataclasses
import io
import json
import math
import os
import posixpath
import shutil
import traceback
from typing import Any, Callable, Mapping, Optional, Sequence

from experiments import diagnosis
from experiments import files
from experiments import metrics_io
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import control as control_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import runs as runs_lib
from experiments import stats

REPORT_FILE = 'report.md'
PLOTS_DIR = 'plots'
DAGGER = '†'


# --- files ---------------------------------------------------------------------------------


def write_csv(path: str, rows: Sequence[Mapping[str, Any]],
              columns: Sequence[str] = ()) -> None:
  """Writes `rows` atomically: `columns` first, then every other key in first-seen order."""
  names = list(columns)
  for row in rows:
    names += [k for k in row if k not in names]
  files.write_csv_atomically(path, names, rows)


class DamagedRunsFile(ValueError):
  """runs.csv cannot be read as written (cut short or edited)."""


# The cells without which a runs.csv row cannot be placed in the report.
_IDENTITY = ('regime', 'method', 'epochs', 'seed')


def read_runs(path: str) -> list[dict[str, Any]]:
  """runs.csv's rows with numbers parsed (curves stay text).

  Raises:
    DamagedRunsFile: a header without the run columns, or a row with another number of cells
      than the header or without its regime, method, E or seed (a file cut short).
  """
  with open(path, newline='') as f:
    text = f.read()
  lines = list(csv.reader(io.StringIO(text)))
  header = lines[0] if lines else []
  missing = [c for c in _IDENTITY if c not in header]
  problem = f'its header lacks {missing}' if missing else None
  if not problem and not text.endswith('\n'):
    problem = 'it ends in the middle of a line'  # every row written here ends with a newline
  for number, cells in enumerate(lines[1:], start=2):
    if problem:
      break
    if len(cells) != len(header):
      problem = f'line {number} has {len(cells)} of {len(header)} cells'
    elif any(not cells[header.index(c)] for c in _IDENTITY):
      problem = f'line {number} lacks its {"/".join(_IDENTITY)}'
  if problem:
    raise DamagedRunsFile(f'{path} is damaged ({problem}): it was cut short or edited')
  rows = metrics_io.read_csv(path)
  for row in rows:
    for key in ('accuracy_curve', 'train_loss_curve', 'conflict_curve', 'hparams', 'regime',
                'method'):
      if key in row and row[key] is not None and not isinstance(row[key], str):
        row[key] = files.csv_cell(row[key])
  return rows


def _read_json(path, default):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return default


# --- numbers -------------------------------------------------------------------------------

ALPHA = 0.05
POWER = 0.8


def _num(value) -> Optional[float]:
  if value is None or value == '':
    return None
  try:
    return float(value)
  except (TypeError, ValueError):
    return None


def _is_true(value) -> bool:
  return value is True or str(value).lower() == 'true'


def group(rows) -> dict[tuple[str, int], dict[str, dict[int, Mapping[str, Any]]]]:
  """(regime, E) -> method -> seed -> row."""
  out: dict = {}
  for row in rows:
    cell = out.setdefault((row['regime'], int(row['epochs'])), {})
    cell.setdefault(row['method'], {})[int(row['seed'])] = row
  return out


def by_seed(per_seed, key) -> dict[int, float]:
  out = {}
  for seed, row in per_seed.items():
    value = _num(row.get(key))
    if value is not None:
      out[seed] = value
  return out


def primary_statistic(config: Mapping[str, Any]) -> str:
  """The runs.csv column the tables compare: the config's `primary_statistic` (benchmarks
  written before it was named: the mean over the last K rounds, K the tuning score's)."""
  return config.get('primary_statistic') or 'last_k_accuracy'


def last_k(config: Mapping[str, Any]) -> int:
  return int((config.get('tuning') or {}).get('last_k') or 5)


def statistic_label(key: str, config: Mapping[str, Any]) -> str:
  if key == 'last_k_accuracy':
    return f'mean accuracy, last {last_k(config)} rounds'
  return 'last-round accuracy' if key == 'final_accuracy' else key


def _chance(row) -> Optional[float]:
  chance = _num(row.get('chance_accuracy'))
  if chance is not None:
    return chance
  from tff_conflict.data import info  # pylint: disable=g-import-not-at-top
  try:
    return 1.0 / info.dataset_info(str(row.get('dataset'))).num_classes
  except (KeyError, ValueError, TypeError, ZeroDivisionError):
    return None


def with_divergence_rule(rows, config: Mapping[str, Any]) -> list[dict[str, Any]]:
  """runs.csv rows written before runs recorded their divergence (no `diverged_round`
  column), brought to the protocol's rule from their curves: diverged at the first non-finite
  accuracy or loss, chance accuracy from then on in `last_k_accuracy` and `final_accuracy`,
  collapsed within `runs.COLLAPSE_MARGIN` of chance. Rows that record it are returned as they
  are."""
  k = last_k(config)
  out = []
  for row in rows:
    if 'diverged_round' in row or not row.get('accuracy_curve'):
      out.append(row)
      continue
    row = dict(row)
    accuracy = runs_lib.decode_curve(row['accuracy_curve'])
    losses = runs_lib.decode_curve(row.get('train_loss_curve'))
    bad = [i for i, v in enumerate(accuracy) if v is not None and not math.isfinite(v)]
    bad += [i for i, v in enumerate(losses) if v is not None and not math.isfinite(v)]
    index = min(bad) if bad else None
    chance = _chance(row)
    ruled = [v for v in runs_lib.with_chance_after(accuracy, index, chance) if v is not None]
    row['diverged'] = index is not None
    row['diverged_round'] = None if index is None else index + 1
    row['chance_accuracy'] = chance
    if ruled and all(math.isfinite(v) for v in ruled[-k:]):
      row['final_accuracy'] = ruled[-1]
      row['last_k_accuracy'] = sum(ruled[-k:]) / len(ruled[-k:])
    final = _num(row.get('final_accuracy'))
    row['collapsed'] = bool(row['diverged'] or (
        chance is not None and final is not None
        and final <= chance + runs_lib.COLLAPSE_MARGIN))
    out.append(row)
  return out


def regime_conflict(cell, baseline: str) -> tuple[Optional[float], str]:
  """The regime's measured conflict fraction: the baseline's, else the mean of the methods that
  report one (before their correction)."""
  own = list(by_seed(cell.get(baseline, {}), 'conflict_before').values())
  if own:
    return sum(own) / len(own), baseline
  values = [v for per_seed in cell.values() for v in by_seed(per_seed, 'conflict_before').values()]
  if not values:
    return None, ''
  return sum(values) / len(values), 'mean over conflict-aware methods'


def _fmt_mean_std(values, digits=4) -> str:
  mean, std = stats.mean_std(values)
  if math.isnan(mean):
    return '-'
  return f'{mean:.{digits}f} ± {std:.{digits}f}' if len(values) > 1 else f'{mean:.{digits}f}'


def _fmt(value: Optional[float], digits=2) -> str:
  return '-' if value is None or not math.isfinite(value) else f'{value:.{digits}f}'


def _mean(values) -> Optional[float]:
  finite = [v for v in values if v is not None and math.isfinite(v)]
  return sum(finite) / len(finite) if finite else None


def difference(cell, method: str, baseline: str, key: str = 'last_k_accuracy'
               ) -> Optional[stats.PairedDifference]:
  if method == baseline or baseline not in cell or method not in cell:
    return None
  return stats.paired_difference(by_seed(cell[method], key), by_seed(cell[baseline], key))


@dataclasses.dataclass(frozen=True)
class Comparison:
  """A method against the baseline in one (regime, E) on the primary statistic.

  Attributes:
    regime, epochs, method, baseline: what is compared.
    primary: the paired difference of the primary statistic (None without a shared seed).
    secondary: the paired difference of the last round's accuracy.
    holm_p: the primary difference's p-value, Holm-adjusted over every comparison of the
      report's result tables (NaN with one seed).
    at_chance: every run of both sides collapsed (at chance): the difference says nothing.
    identical: every paired difference is exactly 0 (the two methods ran the same).
  """
  regime: str
  epochs: int
  method: str
  baseline: str
  primary: Optional[stats.Interval]
  secondary: Optional[stats.Interval]
  holm_p: float
  at_chance: bool = False
  identical: bool = False

  @property
  def significant(self) -> bool:
    """Holm agrees: the adjusted p-value is below `ALPHA` (the Holm step's interval excludes
    0)."""
    return math.isfinite(self.holm_p) and self.holm_p < ALPHA and not self.at_chance


def all_collapsed(per_seed) -> bool:
  return bool(per_seed) and all(_is_true(r.get('collapsed')) for r in per_seed.values())


def comparisons(rows, config: Mapping[str, Any]) -> dict[tuple[str, int, str], Comparison]:
  """(regime, E, method) -> `Comparison` for every method but the baseline, Holm-adjusted over
  all of them (one family: every comparison of the result tables)."""
  baseline = config.get('baseline', 'fedavg')
  key = primary_statistic(config)
  regimes, methods, epochs = orders(rows, config)
  cells = group(rows)
  found = []
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e))
      if not cell or baseline not in cell:
        continue
      for method in methods:
        if method == baseline or method not in cell:
          continue
        primary = difference(cell, method, baseline, key)
        if primary is None:
          continue
        x, y = by_seed(cell[method], key), by_seed(cell[baseline], key)
        identical = all(x[s] == y[s] for s in set(x) & set(y))
        found.append((regime, e, method, primary,
                      difference(cell, method, baseline, 'final_accuracy'),
                      all_collapsed(cell[method]) and all_collapsed(cell[baseline]),
                      identical))
  adjusted = stats.holm([f[3].p_value for f in found])
  return {(r, e, m): Comparison(r, e, m, baseline, p, s, h, chance, same)
          for (r, e, m, p, s, chance, same), h in zip(found, adjusted)}


def verdict(comparison: Optional[Comparison], margin: float) -> str:
  """'beats' / 'loses' where Holm agrees (adjusted p < `ALPHA`), 'ties' where the 95% interval
  lies inside +- `margin`, 'at chance' where both sides collapsed, else 'inconclusive'."""
  if comparison is None or comparison.primary is None or comparison.primary.n < 2:
    return 'inconclusive'
  if comparison.at_chance:
    return 'at chance'
  d = comparison.primary
  if comparison.significant:
    return 'beats' if d.mean > 0 else 'loses'
  if -margin < d.low and d.high < margin:
    return 'ties'
  return 'inconclusive'


def _fmt_difference(d: Optional[stats.PairedDifference], *, mark: bool = False) -> str:
  if d is None:
    return '-'
  if d.n < 2:
    return f'{d.mean:+.4f} (n=1)'
  text = f'{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}]'
  return f'**{text}** {DAGGER}' if mark else text


def fmt_p(p: float) -> str:
  if not math.isfinite(p):
    return '-'
  return '<0.001' if p < 0.001 else f'{p:.3f}'


def _primary_cell(c: Optional[Comparison], secondary: bool = False) -> str:
  """A comparison's Δ cell: the interval (marked where Holm agrees, primary only), or what
  makes it no comparison (both sides at chance) or a degenerate one (identical runs)."""
  if c is None:
    return '—'
  d = c.secondary if secondary else c.primary
  if d is None:
    return '-'
  if c.at_chance:
    return f'{d.mean:+.4f} (both at chance: no comparison)'
  if d.n >= 2 and d.sd == 0 and d.mean == 0:
    return '+0.0000 (identical in every seed)'
  return _fmt_difference(d, mark=c.significant and not secondary)


def regime_table(cell, methods: Sequence[str], *, baseline: str,
                 found: Mapping[str, Comparison], config: Mapping[str, Any]) -> str:
  """The Markdown table of one (regime, E) cell, one row per method; the columns:
  docs/experiments.md, "The benchmark: does a method help?"."""
  key = primary_statistic(config)
  label = statistic_label(key, config)
  lines = [f'| method | seeds | diverged | collapsed | {label} | Δ vs {baseline} [95% CI] | '
           'Holm p | last-round accuracy | Δ last round [95% CI] | conflict before → after | '
           'norm ratio | s / round |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for method in methods:
    per_seed = cell.get(method)
    if not per_seed:
      continue
    primary = list(by_seed(per_seed, key).values())
    finals = list(by_seed(per_seed, 'final_accuracy').values())
    c = found.get(method)
    if method == baseline:
      delta, p, last_delta = '—', '—', '—'
    else:
      delta = _primary_cell(c)
      p = fmt_p(c.holm_p) if c is not None else '-'
      last_delta = _primary_cell(c, secondary=True) if c is not None else '-'
    before = _mean(by_seed(per_seed, 'conflict_before').values())
    after = _mean(by_seed(per_seed, 'conflict_after').values())
    conflict = '-' if before is None else f'{before:.3f} → {_fmt(after, 3)}'
    ratio = _fmt(_mean(by_seed(per_seed, 'norm_ratio').values()), 3)
    seconds = _fmt(_mean(by_seed(per_seed, 'seconds_per_round').values()), 2)
    diverged = sum(_is_true(r.get('diverged')) for r in per_seed.values())
    excluded = excluded_updates(per_seed)
    if excluded:
      diverged = f'{diverged} ({excluded} updates excluded)'
    collapsed = sum(_is_true(r.get('collapsed')) for r in per_seed.values())
    lines.append(f'| {method} | {len(per_seed)} | {diverged} | {collapsed} | '
                 f'{_fmt_mean_std(primary)} | {delta} | {p} | {_fmt_mean_std(finals)} | '
                 f'{last_delta} | {conflict} | {ratio} | {seconds} |')
  return '\n'.join(lines) + '\n'


def excluded_updates(per_seed) -> int:
  """The client updates the cell's runs excluded as non-finite (runs.csv's
  `excluded_nonfinite_updates`, summed over seeds; 0 for runs that predate the column)."""
  return int(sum(_num(r.get('excluded_nonfinite_updates')) or 0 for r in per_seed.values()))


def detect_for(dataset: str, config: Mapping[str, Any]) -> float:
  """The difference the report computes a seed count for (`config.DETECT`)."""
  given = config.get('detect') or {}
  if dataset in given:
    return float(given[dataset])
  return config_lib.DETECT.get(dataset, config_lib.DEFAULT_DETECT)


def power_line(cell, dataset: str, *, baseline: str, config: Mapping[str, Any]) -> str:
  """The regime's minimal detectable difference and the seeds to detect `detect_for`, from the
  median paired sd of the primary statistic over the methods (a pilot's, for the next run)."""
  key = primary_statistic(config)
  sds, seeds = [], []
  for method in cell:
    d = difference(cell, method, baseline, key)
    if d is not None and d.n >= 2 and math.isfinite(d.sd) and not (
        all_collapsed(cell[method]) or all_collapsed(cell[baseline])):
      sds.append(d.sd)
      seeds.append(d.n)
  if not sds:
    return 'Minimal detectable difference: not computable (fewer than 2 paired seeds).'
  sds.sort()
  sd = sds[len(sds) // 2] if len(sds) % 2 else (sds[len(sds) // 2 - 1] + sds[len(sds) // 2]) / 2
  n = min(seeds)
  mdd = stats.minimal_detectable_difference(sd, n, alpha=ALPHA, power=POWER)
  target = detect_for(dataset, config)
  needed = stats.seeds_needed(sd, target, alpha=ALPHA, power=POWER)
  return (f'Minimal detectable difference {mdd:.4f} (paired t-test, {n} seeds, median paired sd '
          f'{sd:.4f} over the methods, {POWER:.0%} power at level {ALPHA:g} per comparison); '
          f'detecting {target:g} at that power takes {needed} seeds.')


def orders(rows, config):
  regimes = [r for r in config.get('regimes', []) if any(x['regime'] == r for x in rows)]
  regimes += sorted({r['regime'] for r in rows} - set(regimes))
  methods = [m for m in config.get('methods', []) if any(x['method'] == m for x in rows)]
  methods += sorted({r['method'] for r in rows} - set(methods))
  epochs = sorted({int(r['epochs']) for r in rows})
  return regimes, methods, epochs


def result_tables(rows, config: Mapping[str, Any]) -> list[tuple[str, int, str, str]]:
  """(regime, E, heading line, table) for every cell, from runs.csv's rows and config.json."""
  baseline = config.get('baseline', 'fedavg')
  regimes, methods, epochs = orders(rows, config)
  cells = group(rows)
  found = comparisons(rows, config)
  out = []
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e))
      if not cell:
        continue
      dataset = next(iter(next(iter(cell.values())).values()))['dataset']
      heading = power_line(cell, dataset, baseline=baseline, config=config)
      conflict, source = regime_conflict(cell, baseline)
      if conflict is not None:
        heading += f' Measured conflict fraction {conflict:.3f} ({source}).'
      mine = {m: c for (r, ee, m), c in found.items() if (r, ee) == (regime, e)}
      out.append((regime, e, heading,
                  regime_table(cell, methods, baseline=baseline, found=mine, config=config)))
  return out


def composition_table(rows, config) -> str:
  """Each composition `B+A` against its own baseline `B` and against the benchmark's baseline
  (as the FedGH paper's Table II sets "+FedGH" beside each baseline): per regime and E, paired
  differences of the primary statistic, the first column's p-values Holm-adjusted over this
  table (a dagger only where Holm agrees). Empty when no composition and its baseline both ran."""
  baseline = config.get('baseline', 'fedavg')
  key = primary_statistic(config)
  regimes, methods, epochs = orders(rows, config)
  cells = group(rows)
  pairs = [(m, methods_lib.composition_parts(m)[0]) for m in methods
           if methods_lib.composition_parts(m)]
  found = []
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e), {})
      for method, own in pairs:
        if method in cell and own in cell:
          found.append((regime, e, method, own, difference(cell, method, own, key),
                        difference(cell, method, baseline, key),
                        difference(cell, own, baseline, key)))
  if not found:
    return ''
  adjusted = stats.holm([d.p_value if d is not None else float('nan') for *_, d, _, _ in found])
  lines = [f'| regime | E | composition | its baseline | Δ vs its baseline [95% CI] | Holm p '
           f'| Δ vs {baseline} | its baseline\'s Δ vs {baseline} |',
           '|---|---|---|---|---|---|---|---|']
  for (regime, e, method, own, d_own, d_base, d_own_base), p in zip(found, adjusted):
    lines.append(f'| `{regime}` | {e} | {method} | {own} | '
                 f'{_fmt_difference(d_own, mark=math.isfinite(p) and p < 0.05)} | {fmt_p(p)} | '
                 f'{_fmt_difference(d_base)} | {_fmt_difference(d_own_base)} |')
  return '\n'.join(lines) + '\n'


def epoch_effect_table(rows, config) -> str:
  """Per method: the mean over regimes of its gain over the baseline at each E, and how many
  regimes' comparisons Holm finds above / below 0."""
  baseline = config.get('baseline', 'fedavg')
  regimes, methods, epochs = orders(rows, config)
  found = comparisons(rows, config)
  header = '| method | ' + ' | '.join(f'E={e}: mean Δ (Holm > 0 / Holm < 0)' for e in epochs)
  lines = [header + ' |', '|---|' + '---|' * len(epochs)]
  for method in methods:
    if method == baseline:
      continue
    parts = []
    for e in epochs:
      cs = [found[(r, e, method)] for r in regimes if (r, e, method) in found]
      if not cs:
        parts.append('-')
        continue
      up = sum(c.significant and c.primary.mean > 0 for c in cs)
      down = sum(c.significant and c.primary.mean < 0 for c in cs)
      parts.append(f'{sum(c.primary.mean for c in cs) / len(cs):+.4f} ({up} / {down} of '
                   f'{len(cs)})')
    lines.append(f'| {method} | ' + ' | '.join(parts) + ' |')
  return '\n'.join(lines) + '\n'


def losses_list(rows, config) -> str:
  """The cells where a method loses to the baseline (Holm agrees), with what was measured
  there."""
  cells = group(rows)
  lines = []
  for (regime, e, method), c in comparisons(rows, config).items():
    if not (c.significant and c.primary.mean < 0):
      continue
    per_seed = cells[(regime, e)][method]
    row = next(iter(per_seed.values()))
    d = c.primary
    bits = [f'Δ {d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}], Holm p {fmt_p(c.holm_p)}']
    ratio = _mean(by_seed(per_seed, 'norm_ratio').values())
    if ratio is not None:
      bits.append(f'norm ratio {ratio:.3f}')
    diverged = sum(_is_true(r.get('diverged')) for r in per_seed.values())
    if diverged:
      bits.append(f'{diverged} seeds diverged')
    bits.append(f'client lr {row.get("client_lr")}, server lr {row.get("server_lr")}, '
                f'{row.get("hparams")}')
    lines.append(f'- {method}, {regime}, E={e}: ' + '; '.join(bits))
  return '\n'.join(lines) + '\n' if lines else 'No method loses where Holm agrees.\n'


# --- validation curves ----------------------------------------------------------------------

CURVES_FILE = 'validation_curves.csv'


def plateau_settings(config: Mapping[str, Any]) -> tuple[int, float]:
  """(window K, tolerance) of the plateau criterion (config.json's tuning; defaults for
  benchmarks run before it was set)."""
  tuning = config.get('tuning') or {}
  defaults = config_lib.TuningConfig()
  window = tuning.get('plateau_window')
  tolerance = tuning.get('plateau_tolerance')
  return (int(window) if window is not None else defaults.plateau_window,
          float(tolerance) if tolerance is not None else defaults.plateau_tolerance)


def _curve_groups(curve_rows) -> dict[tuple[str, int], dict[str, list[list[Optional[float]]]]]:
  """(tuning regime, E) -> method -> one decoded validation curve per tuning seed."""
  out: dict = {}
  for row in curve_rows:
    curve = runs_lib.decode_curve(row.get('accuracy_curve'))
    if curve:
      key = (str(row['regime']), int(row['epochs']))
      out.setdefault(key, {}).setdefault(str(row['method']), []).append(curve)
  return out


def mean_curve(curves: Sequence[Sequence[Optional[float]]]) -> list[Optional[float]]:
  """The mean over seeds per round (None where no seed has a value; NaN where one is NaN)."""
  out = []
  for i in range(max((len(c) for c in curves), default=0)):
    values = [c[i] for c in curves if i < len(c) and c[i] is not None]
    out.append(float(sum(values) / len(values)) if values else None)
  return out


def plateau_verdicts(curve_rows, config) -> list[tuple[str, int, stats.Plateau, int]]:
  """(tuning regime, E, `stats.plateau` of the baseline's chosen candidate's validation
  accuracy averaged over the tuning seeds, number of seeds), per tuning regime and E."""
  baseline = config.get('baseline', 'fedavg')
  window, tolerance = plateau_settings(config)
  out = []
  for (regime, epochs), per_method in _curve_groups(curve_rows).items():
    if baseline in per_method:
      curves = per_method[baseline]
      out.append((regime, epochs, stats.plateau(mean_curve(curves), window=window,
                                                tolerance=tolerance), len(curves)))
  return out


def plateau_lines(curve_rows, config) -> str:
  """The Setup's rounds criterion and, per tuning regime and E, whether the baseline's validation
  curve plateaued, with the two means."""
  baseline = config.get('baseline', 'fedavg')
  window, tolerance = plateau_settings(config)
  head = (f'- Rounds: {config.get("rounds")}, enough when {baseline}\'s tuned validation '
          f'accuracy (its chosen candidate, mean over the tuning seeds) has plateaued: the mean '
          f'of its last {window} rounds within {tolerance:g} of the mean of the {window} before.')
  if not config.get('tuning', {}).get('tune', True):
    return head + ' Not checked: no tuning, so no validation curve.\n'
  verdicts = plateau_verdicts(curve_rows, config)
  if not verdicts:
    return head + (f' Not checked: no validation curve of {baseline} recorded '
                   f'(`{CURVES_FILE}`).\n')
  lines = [head]
  for regime, epochs, p, seeds in verdicts:
    if not (math.isfinite(p.last_mean) and math.isfinite(p.previous_mean)):
      what = (f'not plateaued (fewer than {2 * window} rounds or a non-finite value; last '
              f'{_fmt(p.last_mean, 4)}, before {_fmt(p.previous_mean, 4)})')
    else:
      trend = ('' if p.plateaued else
               ', still climbing' if p.change > 0 else ', falling')
      what = (f'{"plateaued" if p.plateaued else "NOT plateaued"}: last {window} rounds '
              f'{p.last_mean:.4f}, the {window} before {p.previous_mean:.4f} '
              f'({p.change:+.4f}{trend})')
    lines.append(f'  - `{regime}`, E={epochs} ({seeds} tuning seeds): {what}.')
  return '\n'.join(lines) + '\n'


def write_validation_plots(curve_rows, config, plots_dir: str) -> dict[tuple[str, int], str]:
  """One plot per tuning regime and E of each method's chosen candidate's validation accuracy
  (mean ± std over the tuning seeds); returns (regime, E) -> file name inside `plots_dir`."""
  from experiments import plotting  # pylint: disable=g-import-not-at-top
  written = {}
  for (regime, epochs), per_method in _curve_groups(curve_rows).items():
    os.makedirs(plots_dir, exist_ok=True)
    curves = {m: [{i: v for i, v in enumerate(c, start=1) if v is not None} for c in seeds]
              for m, seeds in per_method.items()}
    name = f'validation_{runs_lib.slug(regime.replace("#C=", "C"))}_E{epochs}.png'
    if plotting.plot_curves(curves, os.path.join(plots_dir, name),
                            ylabel='validation accuracy',
                            title=f'tuning, {regime}, E={epochs} '
                                  '(mean ± std over tuning seeds)'):
      written[(regime, epochs)] = name
  return written


# --- plots ---------------------------------------------------------------------------------


def _curves(per_method, key):
  out = {}
  for method, per_seed in per_method.items():
    out[method] = [{i: v for i, v in enumerate(runs_lib.decode_curve(row.get(key)), start=1)
                    if v is not None} for row in per_seed.values()]
  return out


def write_plots(rows, config, plots_dir: str) -> dict[str, str]:
  """Writes the plots; returns name -> file name (inside `plots_dir`)."""
  from experiments import plotting  # pylint: disable=g-import-not-at-top
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  os.makedirs(plots_dir, exist_ok=True)
  baseline = config.get('baseline', 'fedavg')
  statistic = primary_statistic(config)
  regimes, methods, epochs = orders(rows, config)
  cells = group(rows)
  written = {}
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e))
      if not cell:
        continue
      ordered = {m: cell[m] for m in methods if m in cell}
      stem = f'{runs_lib.slug(regime.replace("#C=", "C"))}_E{e}'
      global_loss = any(row.get('global_train_loss_curve') for per_seed in ordered.values()
                        for row in per_seed.values())
      # One loss comparable across methods: the global model's cross-entropy on the training
      # data. Without it, the clients' mean training loss is each method's own objective
      # (focal, calibrated, margin ...): labelled so, not comparable across methods.
      loss_curve, loss_label = (
          ('global_train_loss_curve', 'global model\'s cross-entropy on the training data')
          if global_loss else
          ('train_loss_curve', 'each method\'s own training objective\n(not comparable '
           'across methods)'))
      for key, what, ylabel in (('accuracy_curve', 'accuracy', 'test accuracy'),
                                (loss_curve, 'train_loss', loss_label)):
        name = f'{what}_{stem}.png'
        if plotting.plot_curves(_curves(ordered, key), os.path.join(plots_dir, name),
                                ylabel=ylabel, title=f'{regime}, E={e} (mean ± std over seeds)'):
          written[f'{what}:{regime}:{e}'] = name
  # Gain against conflict.
  markers = ['o', 's', '^', 'D', 'v', 'P']
  fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
  drawn = False
  all_means = []
  for i, method in enumerate(m for m in methods if m != baseline):
    for j, e in enumerate(epochs):
      xs, ys, lows, highs = [], [], [], []
      for regime in regimes:
        cell = cells.get((regime, e))
        if not cell:
          continue
        conflict, _ = regime_conflict(cell, baseline)
        d = difference(cell, method, baseline, statistic)
        if conflict is None or d is None:
          continue
        xs.append(conflict)
        ys.append(d.mean)
        all_means.append(d.mean)
        lows.append(d.mean - d.low if d.n >= 2 else 0.0)
        highs.append(d.high - d.mean if d.n >= 2 else 0.0)
      if xs:
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt=markers[j % len(markers)],
                    color=f'C{i % 10}', capsize=2, alpha=0.85,
                    label=f'{method} E={e}')
        drawn = True
  if drawn:
    # The means decide the range; intervals wider than it (few seeds) run off the axes.
    low, high = min(all_means + [0.0]), max(all_means + [0.0])
    pad = max(0.01, 0.5 * (high - low))
    ax.set_ylim(low - pad, high + pad)
    ax.axhline(0.0, color='black', linewidth=0.8)
    ax.set_xlabel(f'measured conflict fraction of the regime ({baseline} or mean of methods)')
    ax.set_ylabel(f'{statistic_label(statistic, config)} − {baseline} (95% CI)')
    ax.set_title('Gain over the baseline against gradient conflict')
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize='x-small', ncol=2)
    fig.tight_layout()
    plotting.save(fig, os.path.join(plots_dir, 'gain_vs_conflict.png'))
    written['gain_vs_conflict'] = 'gain_vs_conflict.png'
  plt.close(fig)
  # Effect of E.
  others = [m for m in methods if m != baseline]
  if others and len(epochs) > 1:
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    width = 0.8 / len(epochs)
    for j, e in enumerate(epochs):
      means, spreads = [], []
      for method in others:
        ds = [difference(cells[(r, e)], method, baseline, statistic) for r in regimes
              if (r, e) in cells]
        values = [d.mean for d in ds if d is not None]
        mean, std = stats.mean_std(values)
        means.append(0.0 if math.isnan(mean) else mean)
        spreads.append(0.0 if math.isnan(std) else std)
      ax.bar([k + j * width for k in range(len(others))], means, width, yerr=spreads,
             capsize=2, label=f'E={e}')
    ax.axhline(0.0, color='black', linewidth=0.8)
    ax.set_xticks([k + width * (len(epochs) - 1) / 2 for k in range(len(others))])
    ax.set_xticklabels(others, rotation=20, fontsize='small')
    ax.set_ylabel(f'{statistic_label(statistic, config)} − {baseline}\nmean over regimes '
                  '(± std over regimes)')
    ax.set_title('Effect of local epochs on each method\'s gain')
    ax.grid(True, axis='y', alpha=0.3)
    ax.legend(fontsize='small')
    fig.tight_layout()
    plotting.save(fig, os.path.join(plots_dir, 'epochs_effect.png'))
    plt.close(fig)
    written['epochs_effect'] = 'epochs_effect.png'
  return written


# --- the report ----------------------------------------------------------------------------


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours} h {minutes:02d} min {secs:02d} s' if hours else f'{minutes} min {secs:02d} s'


def total_wall_seconds(root: str) -> float:
  """The wall time of every invocation recorded in `root/timing.json`."""
  return sum(t.get('wall_seconds', 0.0) for t in _read_json(os.path.join(root, 'timing.json'),
                                                             []))


def searched_server_lrs(config) -> dict[str, list]:
  """method -> the server learning rates its tuning searched (config.json's plan; benchmarks
  written before every method searched alike: the per-method `tune_server_lr`)."""
  tuning = config.get('tuning', {})
  out = {}
  for m in (config.get('plan') or {}).get('methods', []):
    if 'server_lrs' in m:
      out[m['name']] = list(m['server_lrs'])
    elif m.get('tune_server_lr'):
      out[m['name']] = list(tuning.get('server_lr_grid') or [])
    else:
      out[m['name']] = [config.get('server_learning_rate', 1.0)]
  return out


def protocol_section(config, rows) -> str:
  """The protocol, stated before any number: the test split, the search, the primary statistic,
  divergence, the statistics, and every symbol of the tables."""
  baseline = config.get('baseline', 'fedavg')
  key = primary_statistic(config)
  version = int(config.get('protocol') or 1)
  seeds = config.get('report_seeds') or []
  tuning = config.get('tuning', {})
  margin = float(config.get('equivalence_margin') or 0.01)
  lines = []
  if version < config_lib.PROTOCOL:
    lines.append(
        '- **Provisional.** These runs predate the protocol below: the digits holdout and '
        'Synthetic\'s data were drawn with each run\'s seed, so the tuning seed\'s training and '
        'validation pool held test examples of the reporting seeds (tuning saw test images); '
        'only some methods searched the server learning rate; the tables are regenerated from '
        'the same runs with the protocol\'s statistics, which does not repair either flaw.')
  else:
    lines.append('- Test split: fixed for every seed and never read by tuning (digits: one '
                 'holdout drawn once; Synthetic: the clients and their test examples drawn once, '
                 'the seed redrawing the training examples; EMNIST, LEAF and tfds: their own '
                 'test split). Tuning scores a validation split carved from the clients\' '
                 'training examples only. Seeds vary the partition of the training pool, the '
                 'initial model and the clients sampled.')
  if tuning.get('tune', True):
    searched = searched_server_lrs(config)
    base = set(searched.get(baseline, []))
    extra = sorted({m for m, lrs in searched.items() if not set(lrs) <= base})
    equal = ('every method, the baseline included, searched the same client learning rates '
             f'{tuning.get("client_lr_grid")} and server learning rates '
             f'{sorted(base)}, then its own grid' if not extra else
             f'UNEQUAL: {", ".join(extra)} searched server learning rates that {baseline} did '
             f'not ({baseline}: {sorted(base)}); their gains may come from the search alone')
    lines.append(f'- Search: {equal}; the candidates per method are listed under Tuning.')
  lines.append(
      f'- Primary statistic, named before the runs: the {statistic_label(key, config)} on the '
      'test split, compared with the baseline by seed (same initial model, clients and '
      'partition); the last round\'s accuracy is secondary. The best round is not reported (it '
      'selects on the test split).')
  lines.append(
      '- Divergence: a run diverges at the first round whose evaluated accuracy or loss, clients\' '
      'or global training loss is not finite, whose server update is rejected as non-finite, or '
      'whose clients\' updates are all zeroed for non-finite values; it is recorded, not dropped, '
      'and counts at chance accuracy (1 / classes) from that round on. A run is collapsed when '
      f'its final accuracy is within {runs_lib.COLLAPSE_MARGIN:g} of chance or its final model '
      f'predicts one class for {runs_lib.COLLAPSE_SHARE:.0%} of the test split; a comparison '
      'whose both sides all collapsed is marked and never called a tie.')
  n_comparisons = len(comparisons(rows, config)) if rows else 0
  lines.append(
      f'- Statistics: {len(seeds)} reporting seeds'
      f'{" (fewer than 10: read every interval as a pilot)" if len(seeds) < 10 else ""}; '
      'paired differences over seeds with 95% Student-t intervals; p-values Holm-adjusted over '
      f'the {n_comparisons} comparisons of the Results tables (every method against {baseline} '
      f'in every regime and E); {DAGGER} and bold only where the Holm-adjusted p < {ALPHA:g}. '
      'Each regime states its minimal detectable difference and the seeds needed for its '
      'target difference. Words: "beats" / "loses" where Holm agrees, "ties" where the 95% '
      f'interval lies inside ±{margin:g}, otherwise "inconclusive".')
  lines.append(
      '- Symbols: "a ± b" in the Results tables is the mean ± the sample standard deviation over '
      'seeds (in the diagnosis tables\' gap column: ± the 95% t-interval\'s half-width); "Δ" a '
      'mean paired difference against the baseline, "[95% CI]" its Student-t interval; "Holm p" '
      'the Holm-adjusted p-value of the primary Δ; "diverged" / "collapsed" the runs so '
      'flagged, "(n updates excluded)" beside them the client updates the cell\'s runs left out '
      'of their rounds as non-finite (summed over rounds and seeds; shown when not 0, diverged '
      'or not); "conflict before → after" the mean over rounds of the fraction of client pairs '
      'whose updates have a negative cosine, before and after the aggregator\'s correction; '
      '"norm ratio" the mean over rounds of the server step\'s norm over that of the plain '
      'weighted mean of the same updates (below 1: a shorter step); "s / round" the mean '
      'round time from round 2 on.')
  return '\n'.join(lines) + '\n'


def _setup_section(config) -> str:
  tuning = config.get('tuning', {})
  plan = config.get('plan') or {}  # absent in benchmarks run before the plan was written
  models = plan.get('models') or config.get('models') or {}
  lines = [f'- {config["description"]}'] if config.get('description') else []
  lines += [
      f'- Regimes: {", ".join(f"`{r}`" for r in config.get("regimes", []))}.',
      f'- Methods: {", ".join(config.get("methods", []))}; baseline '
      f'{config.get("baseline", "fedavg")}.',
      f'- Local epochs E: {config.get("epochs")}; reporting seeds: {config.get("report_seeds")};'
      f' {config.get("rounds")} rounds, {config.get("clients_per_round")} clients per round, '
      f'batch {config.get("batch_size")}, client SGD (momentum '
      f'{config.get("client_momentum", 0)}), server SGD.',
      f'- Models: {", ".join(f"{d}: {m}" for d, m in models.items()) or "each dataset default"}'
      '.',
      '- For a given seed every method starts from the same initial model and samples the same '
      'clients in every round; ' + (
          'the partition of the training pool is drawn with the seed too.'
          if config.get('vary_partition', True) else
          f'every seed uses the partition of data seed {config.get("data_seed")}.'),
      '- Each learning process is built once per (method, builder arguments, model) and reused: '
      'a run sets its initial model, its learning rates and (FedGH) its partner-order seed, the '
      'run\'s seed, in the process\'s initial state.',
  ]
  if tuning.get('tune', True):
    regimes = plan.get('tuning_regimes') or tuning.get('tuning_regimes') or {}
    lines.append(
        f'- Tuning: {tuning.get("strategy")} search on a validation split '
        f'({tuning.get("validation_fraction")} of each client\'s training examples, seeded), '
        f'tuning seeds {tuning.get("tuning_seeds")} (disjoint from the reporting seeds), score '
        f'= mean validation accuracy over the last {tuning.get("last_k")} rounds; client lr '
        f'grid {tuning.get("client_lr_grid")}, server lr grid {tuning.get("server_lr_grid")}. '
        f'Tuned regimes: '
        f'{", ".join(f"{d}: `{r}`" for d, r in regimes.items()) or "see Tuning"}. '
        + (f'A numeric grid whose best value is at its edge is extended past it (x or / '
           f'{tuning["edge_factor"]:g}, at most {tuning["edge_steps"]} times per side, every '
           'method alike); "at edge" marks a value still at an edge. '
           if tuning.get('edge_steps') else '') + 'Reporting '
        'runs train on all of each client\'s training data and are evaluated on the test split.')
    grids = [f'{m["name"]}: ' + ', '.join(f'{k} in {v}' for k, v in m['grid'].items())
             for m in plan.get('methods', []) if m.get('grid')]
    if grids:
      lines.append('- Method grids searched (before any edge extension): ' + '; '.join(grids)
                   + '.')
  else:
    lines.append(f'- No tuning: client lr {config.get("client_learning_rate")}, server lr '
                 f'{config.get("server_learning_rate")}, and the given method values '
                 '(`hparams` column of runs.csv).')
  return '\n'.join(lines) + '\n'


def _time_section(timing, rows) -> str:
  if not timing:
    return 'No timing recorded.\n'
  wall = sum(t.get('wall_seconds', 0.0) for t in timing)
  build = sum(t.get('build_seconds', 0.0) for t in timing)
  lines = ['| invocation | finished | wall time | building processes | processes built | runs '
           'run | runs skipped | runs failed |', '|---|---|---|---|---|---|---|---|']
  for i, t in enumerate(timing, start=1):
    lines.append(f'| {i} | {t.get("finished", "")} | {_duration(t.get("wall_seconds", 0))} | '
                 f'{t.get("build_seconds", 0):.0f} s | {t.get("processes_built", "")} | '
                 f'{t.get("runs_done", "")} | {t.get("runs_skipped", "")} | '
                 f'{t.get("runs_failed", "")} |')
  share = 100.0 * build / wall if wall else 0.0
  lines.append('')
  lines.append(f'Total over invocations: {_duration(wall)} of which {_duration(build)} '
               f'({share:.1f}%) building learning processes (each built once per method, '
               'hyperparameters and model, then reused across regimes, local epochs and seeds).')
  run_seconds = sum(_num(r.get('run_seconds')) or 0.0 for r in rows)
  lines.append(f'Reporting runs: {len(rows)}, {_duration(run_seconds)} of training and '
               'evaluation in all.')
  return '\n'.join(lines) + '\n'


def _regimes_section(regimes) -> str:
  if not regimes:
    return 'Not recorded.\n'
  lines = ['| regime | clients | examples | examples per client (min / median / max) | classes '
           'per client (mean) | label TV distance to the pooled labels (mean) |',
           '|---|---|---|---|---|---|']
  for r in regimes:
    sizes = r['examples_per_client']
    lines.append(f'| `{r["regime"]}` | {r["num_clients"]} | {r["num_examples"]} | '
                 f'{sizes["min"]} / {sizes["median"]:g} / {sizes["max"]} | '
                 f'{r["classes_per_client"]["mean"]:.2f} | '
                 f'{r["label_tv_distance"]["mean"]:.3f} |')
  return '\n'.join(lines) + ('\n\nTraining data of the first reporting seed\'s partition; the '
                             'TV distance is 0 for IID labels and near 1 for disjoint ones.\n')


def _fmt_value(value) -> str:
  return f'{value:g}' if isinstance(value, float) else str(value)


def _tried(choice) -> tuple[list, list]:
  """(client lrs, server lrs) a tuning choice tried (tuning_choices.json; its candidates' names
  where it predates the record)."""
  if 'server_lrs_tried' in choice:
    return choice.get('client_lrs_tried', []), choice['server_lrs_tried']
  values = [runs_lib.candidate_values(s['candidate']) for s in choice.get('scores', [])]
  return (sorted({float(v['clr']) for v in values if 'clr' in v}),
          sorted({float(v['slr']) for v in values if 'slr' in v}))


def _parent_of(method: str, config) -> Optional[str]:
  for m in (config.get('plan') or {}).get('methods', []):
    if m.get('name') == method and 'parent' in m:
      return m['parent']
  try:
    from experiments.benchmarking import methods as methods_lib  # pylint: disable=g-import-not-at-top
    return methods_lib.parse_method(method).parent
  except ValueError:
    return None


def variant_differences(rows, config) -> list[tuple[str, str, list[str]]]:
  """(variant, parent, differences) for every method of the runs whose parent ran too: the
  learning rates and builder arguments (runs.csv's `hparams`) that differ between their runs,
  over every regime, E and seed both ran ('name: parent value -> variant value')."""
  cells = group(rows)
  methods = orders(rows, config)[1]
  out = []
  for method in methods:
    parent = _parent_of(method, config)
    if parent is None or parent not in methods:
      continue
    found = []
    for cell in cells.values():
      for seed in sorted(set(cell.get(method, {})) & set(cell.get(parent, {}))):
        ours, theirs = cell[method][seed], cell[parent][seed]
        a = dict(json.loads(theirs.get('hparams') or '{}'), client_lr=theirs.get('client_lr'),
                 server_lr=theirs.get('server_lr'))
        b = dict(json.loads(ours.get('hparams') or '{}'), client_lr=ours.get('client_lr'),
                 server_lr=ours.get('server_lr'))
        for k in sorted(set(a) | set(b)):
          if _num(a.get(k)) != _num(b.get(k)) or (
              _num(a.get(k)) is None and a.get(k) != b.get(k)):
            text = (f'{k}: {_fmt_value(a.get(k, "-"))} -> {_fmt_value(b.get(k, "-"))} '
                    f'({ours["regime"]})')
            if text not in found:
              found.append(text)
    out.append((method, parent, found))
  return out


def variants_section(rows, config) -> str:
  """What each variant changes against its parent, read from the runs themselves."""
  lines = []
  for method, parent, found in variant_differences(rows, config):
    keys = {t.split(':')[0] for t in found}
    note = '' if len(keys) == 1 else f' ({len(keys)} settings differ, not one)'
    lines.append(f'- {method} against {parent}{note}: ' + ('; '.join(found) or 'nothing'))
  if not lines:
    return ''
  return ('What each variant ran with that its parent did not (runs.csv\'s learning rates and '
          'builder arguments, per regime); a variant should change exactly one thing:\n\n'
          + '\n'.join(lines) + '\n')


def _tuning_section(choices, config) -> str:
  if not config.get('tuning', {}).get('tune', True):
    return 'Not tuned (`--tune=false`): every run uses the given values (see Setup).\n'
  if not choices:
    return 'No tuning results.\n'
  out = []
  keys = []
  for c in choices:
    key = (c['dataset'], c['regime'], c['epochs'])
    if key not in keys:
      keys.append(key)
  for dataset, regime, epochs in keys:
    out.append(f'**{dataset}**, E={epochs}: tuned on `{regime}`; used for every {dataset} '
               'regime at this E (and at any E of the grid not tuned, nearest first).\n')
    out.append('| method | client lr | server lr | own values | validation score | runner-up '
               '| candidates | client lrs tried | server lrs tried |')
    out.append('|---|---|---|---|---|---|---|---|---|')
    tried_here = {}
    for c in choices:
      if (c['dataset'], c['regime'], c['epochs']) != (dataset, regime, epochs):
        continue
      tried = _tried(c)
      tried_here[c['method']] = tried
      scores = sorted((s for s in c['scores'] if s['score'] is not None
                       and math.isfinite(s['score'])), key=lambda s: -s['score'])
      runner_up = (f'{scores[1]["candidate"]}: {scores[1]["score"]:.4f}' if len(scores) > 1
                   else '-')
      values = ', '.join(f'{k}={_fmt_value(v)}' for k, v in sorted(c['tuned'].items())) or '-'
      score = c['score']
      score_text = f'{score:.4f}' if score is not None and math.isfinite(score) else 'nan'
      edge = c.get('at_edge') or ()
      name = f'{c["method"]} (at edge: {", ".join(edge)})' if edge else c['method']
      out.append(f'| {name} | {c["client_lr"]:g} | {c["server_lr"]:g} | {values} | '
                 f'{score_text} | {runner_up} | {len(c["scores"])} | '
                 f'{", ".join(f"{v:g}" for v in tried[0])} | '
                 f'{", ".join(f"{v:g}" for v in tried[1])} |')
    out.append('')
    baseline = config.get('baseline', 'fedavg')
    if baseline in tried_here:
      every = set().union(*(set(t[1]) for t in tried_here.values()))
      missing = sorted(every - set(tried_here[baseline][1]))
      out.append(f'The baseline ({baseline}) searched every server learning rate any method '
                 'searched.\n' if not missing else
                 f'The baseline ({baseline}) did not search the server learning rates '
                 f'{", ".join(f"{v:g}" for v in missing)} that other methods searched.\n')
  return '\n'.join(out)


def render(root: str, *, plot_prefix: str = PLOTS_DIR) -> str:
  """The report's Markdown body from the files under `root`; writes the plots under
  `root/plots`."""
  config = config_lib.flat_settings(_read_json(os.path.join(root, 'config.json'), {}))
  runs_path = os.path.join(root, 'runs.csv')
  rows = with_divergence_rule(read_runs(runs_path) if os.path.exists(runs_path) else [], config)
  choices = _read_json(os.path.join(root, 'tuning_choices.json'), [])
  timing = _read_json(os.path.join(root, 'timing.json'), [])
  baseline = config.get('baseline', 'fedavg')
  plots = write_plots(rows, config, os.path.join(root, PLOTS_DIR)) if rows else {}
  curves_path = os.path.join(root, CURVES_FILE)
  curve_rows = read_runs(curves_path) if os.path.exists(curves_path) else []
  validation_plots = write_validation_plots(curve_rows, config, os.path.join(root, PLOTS_DIR))

  def image(key, alt):
    return f'![{alt}]({plot_prefix}/{plots[key]})' if key in plots else ''

  validation_images = [f'![validation accuracy, {r}, E={e}]({plot_prefix}/{name})'
                       for (r, e), name in validation_plots.items()]

  parts = [f'# Benchmark `{config.get("experiment_name", os.path.basename(root))}`\n',
           '## Setup\n', 'Protocol:\n', protocol_section(config, rows),
           f'\nSettings ({len(rows)} reporting runs):\n', _setup_section(config),
           plateau_lines(curve_rows, config),
           '## Regimes\n', _regimes_section(_read_json(os.path.join(root, 'regimes.json'), [])),
           '## Time\n', _time_section(timing, rows),
           '## Tuning\n', _tuning_section(choices, config),
           ('Validation accuracy per round of each method\'s chosen candidate (`'
            + CURVES_FILE + '`):\n\n' + ' '.join(validation_images) + '\n'
            if validation_images else ''),
           variants_section(rows, config),
           '## Results\n']
  for regime, e, heading, table in result_tables(rows, config):
    parts.append(f'### `{regime}`, E={e}\n')
    parts.append(heading + '\n')
    parts.append(table)
    images = ' '.join(filter(None, (image(f'accuracy:{regime}:{e}', 'test accuracy'),
                                    image(f'train_loss:{regime}:{e}', 'training loss'))))
    if images:
      parts.append(images + '\n')
  compositions = composition_table(rows, config)
  if compositions:
    parts.append('## Aggregators on top of the baselines\n')
    parts.append('Each `BASELINE+AGGREGATOR` against its own baseline and against '
                 f'{baseline} (paired over seeds).\n')
    parts.append(compositions)
  parts.append(f'## Gain over {baseline} against gradient conflict\n')
  parts.append('Does a method help more where clients conflict more? x: the regime\'s measured '
               'conflict fraction; y: the method\'s mean paired gain in the primary statistic '
               'with its (unadjusted) 95% interval.\n')
  parts.append((image('gain_vs_conflict', 'gain against conflict') or 'No plot (no conflict '
                'measured).') + '\n')
  parts.append('## Effect of local epochs\n')
  parts.append(epoch_effect_table(rows, config))
  if 'epochs_effect' in plots:
    parts.append(image('epochs_effect', 'effect of local epochs') + '\n')
  parts.append(f'## Where a method loses to {baseline} (Holm)\n')
  parts.append(losses_list(rows, config))
  sections = diagnosis_sections(rows, orders(rows, config)[1], baseline,
                                primary_statistic(config))
  if sections:
    parts.append('## Diagnosis\n')
    for method, text in sections:
      parts.append(f'### {method}\n')
      parts.append(text + '\n')
  control_text = _control_section(root, plot_prefix)
  if control_text:
    parts.append('## Positive control\n')
    parts.append(control_text)
  parts.append('## Files\n')
  parts.append('`runs.csv` (one row per reporting run, with its curves), `tuning.csv` (every '
               'tuning candidate\'s validation score), `validation_curves.csv` (the chosen '
               'candidates\' validation accuracy per round and tuning seed), '
               '`tuning_choices.json`, `config.json`, '
               '`timing.json`, `plots/`; each run\'s `metrics.csv` (every round\'s metrics) and '
               '`result.json` under `runs/<regime>/E<e>/<method>/seed<s>/`.\n')
  return '\n'.join(parts)


def _shown_on_failure(make: Callable[[], Optional[str]], what: str) -> Optional[str]:
  """`make()`, or the traceback of its failure as Markdown (a report is still written)."""
  try:
    return make()
  except Exception:  # pylint: disable=broad-except
    return f'{what} failed:\n\n```\n' + traceback.format_exc(limit=5) + '```'


def diagnosis_sections(rows, methods: Sequence[str], baseline: str,
                       statistic: str = 'final_accuracy') -> list[tuple[str, str]]:
  """(method, Markdown) of `experiments.diagnosis.report_section` for every method but the
  baseline (a failing diagnosis shows its traceback)."""
  out = []
  for method in methods:
    algorithm = next((r['algorithm'] for r in rows if r['method'] == method), method)
    text = _shown_on_failure(lambda m=method, a=algorithm: diagnosis.report_section(
        m, a, rows, baseline=baseline, statistic=statistic), 'The diagnosis')
    if text:
      out.append((method, text.strip()))
  return out


def _control_section(root: str, plot_prefix: str) -> Optional[str]:
  """The positive control's section (`control`), from `root/positive_control/` if it ran."""
  sub = control_lib.control_root(root)
  if sub is None:
    return None
  rows = read_runs(os.path.join(sub, 'runs.csv'))
  config = config_lib.flat_settings(_read_json(os.path.join(sub, 'config.json'), {}))
  settings = control_lib.PositiveControl.from_config(config)
  seconds = total_wall_seconds(sub)
  seeds = sorted({int(r['seed']) for r in rows})
  parts = [f'Can the harness reproduce a published effect? FedProx (Li et al., "Federated '
           'Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Fig. 1-2): '
           'with many local epochs on Synthetic(1, 1), FedProx with mu = 1 trains stably where '
           'FedAvg\'s training loss oscillates or rises. Runs: ' + settings.describe() +
           f'; seeds {seeds}' + (f'; {_duration(seconds)} wall' if seconds else '') +
           f' (`{control_lib.CONTROL_DIR}/runs.csv`).\n']
  parts.append(_shown_on_failure(lambda: diagnosis.control_section(
      rows, method=settings.method, baseline=settings.baseline), 'The reading') + '\n')
  plots = write_plots(rows, config, os.path.join(sub, PLOTS_DIR)) if rows else {}
  prefix = posixpath.join(posixpath.dirname(plot_prefix), control_lib.CONTROL_DIR, PLOTS_DIR)
  images = [f'![{alt}]({prefix}/{name})' for key, name in sorted(plots.items())
            for kind, alt in (('train_loss:', 'training loss'), ('accuracy:', 'test accuracy'))
            if key.startswith(kind)]
  if images:
    parts.append(' '.join(images) + '\n')
  return '\n'.join(parts)


def write_report(root: str) -> str:
  """Writes `root/report.md` (and the plots) from `config.json`, `runs.csv`,
  `tuning_choices.json` and `timing.json` under `root` (`grid.run_benchmark`); returns its path.

  Every number of the result tables comes from runs.csv alone (`result_tables`).
  """
  body = render(root)
  path = os.path.join(root, REPORT_FILE)
  with open(path, 'w') as f:
    f.write(body)
  return path


RESULTS_FILES = ('runs.csv', 'tuning.csv', 'tuning_choices.json', 'config.json', 'timing.json',
                 'regimes.json', CURVES_FILE)


def results_dir_for(results_md: str) -> str:
  """Where RESULTS.md's data and plots go: `docs/results/` next to it."""
  return os.path.join(os.path.dirname(os.path.abspath(results_md)), 'docs', 'results')


def _same_file(a: str, b: str) -> bool:
  return os.path.exists(b) and os.path.samefile(a, b)


def write_results_md(results_md: str, root: str, *, header: Mapping[str, str]) -> str:
  """Writes RESULTS.md: `header` (machine, date, command, wall time, ...) then the report,
  and copies runs.csv, the other result files and the plots to `docs/results/` beside it (`root`
  may be that directory itself: the report is then regenerated from the committed data).

  Returns:
    The results directory.
  """
  target = results_dir_for(results_md)
  os.makedirs(os.path.join(target, PLOTS_DIR), exist_ok=True)
  for name in RESULTS_FILES:
    source = os.path.join(root, name)
    if os.path.exists(source) and not _same_file(source, os.path.join(target, name)):
      shutil.copyfile(source, os.path.join(target, name))
  control_source = control_lib.control_root(root)
  if control_source is not None:
    control_target = os.path.join(target, control_lib.CONTROL_DIR)
    os.makedirs(control_target, exist_ok=True)
    for name in RESULTS_FILES:
      source = os.path.join(control_source, name)
      if os.path.exists(source) and not _same_file(source, os.path.join(control_target, name)):
        shutil.copyfile(source, os.path.join(control_target, name))
  here = os.path.dirname(os.path.abspath(results_md))
  body = render(target, plot_prefix=os.path.relpath(os.path.join(target, PLOTS_DIR), here))
  lines = ['# Results', '']
  lines += [f'- {key}: {value}' for key, value in header.items()]
  lines += ['', f'The data behind every number: `{os.path.relpath(target, here)}/runs.csv` (one '
            'row per reporting run, with its curves); the tables below are generated from it.',
            '']
  body = '\n'.join('#' + line if line.startswith('#') else line for line in body.splitlines())
  with open(results_md, 'w') as f:
    f.write('\n'.join(lines) + '\n' + body + '\n')
  return target


def check_results_md(results_md: str) -> list[str]:
  """The lines of the result tables, regenerated from the runs.csv behind `results_md`
  (`docs/results/runs.csv` beside it), that `results_md` does not contain; empty when every
  number matches.

  Raises:
    FileNotFoundError: `results_md` or its runs.csv is missing.
  """
  source = results_dir_for(results_md)
  config = config_lib.flat_settings(_read_json(os.path.join(source, 'config.json'), {}))
  rows = with_divergence_rule(read_runs(os.path.join(source, 'runs.csv')), config)
  with open(results_md) as f:
    text = f.read()
  present = set(text.splitlines())
  missing = []
  for _, _, heading, table in result_tables(rows, config):
    for line in [heading] + table.splitlines():
      if line not in present:
        missing.append(line)
  return missing

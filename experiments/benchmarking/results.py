"""A benchmark's runs.csv: read and written, brought to the divergence rule, grouped by (regime,
E, method, seed) and compared with the baseline (paired, Holm); each run's summary columns."""

import csv
import dataclasses
import io
import json
import math
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from experiments import files
from experiments import metrics_io
from experiments import stats
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import runs as runs_lib


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


def read_json(path, default):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return default


def load(root: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
  """(runs.csv's rows under the divergence rule, config.json's flat settings) of a benchmark
  directory; no rows without a runs.csv."""
  config = config_lib.flat_settings(read_json(os.path.join(root, 'config.json'), {}))
  path = os.path.join(root, 'runs.csv')
  return with_divergence_rule(read_runs(path) if os.path.exists(path) else [], config), config


ALPHA, POWER = 0.05, 0.8  # the level of every test, the power the seed counts aim at


def num(value) -> Optional[float]:
  """A cell as a float; None for an empty or non-numeric one."""
  if value is None or value == '':
    return None
  try:
    return float(value)
  except (TypeError, ValueError):
    return None


def _finite(value) -> Optional[float]:
  """`num`, with NaN as None."""
  value = num(value)
  return None if value is None or math.isnan(value) else value


def is_true(value) -> bool:
  return value is True or str(value).lower() == 'true'


def group(rows) -> dict[tuple[str, int], dict[str, dict[int, Mapping[str, Any]]]]:
  """(regime, E) -> method -> seed -> row."""
  out: dict = {}
  for row in rows:
    cell = out.setdefault((row['regime'], int(row['epochs'])), {})
    cell.setdefault(row['method'], {})[int(row['seed'])] = row
  return out


def by_seed(per_seed, key) -> dict[int, float]:
  """seed -> the number in column `key` (NaN kept), for the seeds that have one."""
  values = {seed: num(row.get(key)) for seed, row in per_seed.items()}
  return {seed: value for seed, value in values.items() if value is not None}


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
  chance = num(row.get('chance_accuracy'))
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
    final = num(row.get('final_accuracy'))
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
  return bool(per_seed) and all(is_true(r.get('collapsed')) for r in per_seed.values())


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


def orders(rows, config):
  regimes = [r for r in config.get('regimes', []) if any(x['regime'] == r for x in rows)]
  regimes += sorted({r['regime'] for r in rows} - set(regimes))
  methods = [m for m in config.get('methods', []) if any(x['method'] == m for x in rows)]
  methods += sorted({r['method'] for r in rows} - set(methods))
  epochs = sorted({int(r['epochs']) for r in rows})
  return regimes, methods, epochs


def excluded_updates(per_seed) -> int:
  """The client updates the cell's runs excluded as non-finite (runs.csv's
  `excluded_nonfinite_updates`, summed over seeds; 0 for runs that predate the column)."""
  return int(sum(num(r.get('excluded_nonfinite_updates')) or 0 for r in per_seed.values()))


def detect_for(dataset: str, config: Mapping[str, Any]) -> float:
  """The difference the report computes a seed count for (`config.DETECT`)."""
  given = config.get('detect') or {}
  if dataset in given:
    return float(given[dataset])
  return config_lib.DETECT.get(dataset, config_lib.DEFAULT_DETECT)


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


def curve_groups(curve_rows) -> dict[tuple[str, int], dict[str, list[list[Optional[float]]]]]:
  """(tuning regime, E) -> method -> one decoded validation curve per tuning seed."""
  out: dict = {}
  for row in curve_rows:
    curve = runs_lib.decode_curve(row.get('accuracy_curve'))
    if curve:
      key = (str(row['regime']), int(row['epochs']))
      out.setdefault(key, {}).setdefault(str(row['method']), []).append(curve)
  return out


def plateau_verdicts(curve_rows, config) -> list[tuple[str, int, stats.Plateau, int]]:
  """(tuning regime, E, `stats.plateau` of the baseline's chosen candidate's validation
  accuracy averaged over the tuning seeds, number of seeds), per tuning regime and E."""
  baseline = config.get('baseline', 'fedavg')
  window, tolerance = plateau_settings(config)
  out = []
  for (regime, epochs), per_method in curve_groups(curve_rows).items():
    if baseline in per_method:
      curves = per_method[baseline]
      out.append((regime, epochs, stats.plateau(stats.mean_curve(curves), window=window,
                                                tolerance=tolerance), len(curves)))
  return out


def total_wall_seconds(root: str) -> float:
  """The wall time of every invocation recorded in `root/timing.json`."""
  return sum(t.get('wall_seconds', 0.0) for t in read_json(os.path.join(root, 'timing.json'),
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


def _column(rows: Sequence[Mapping[str, Any]], name: str) -> list[float]:
  """The finite values of column `name`; for a name starting with '/', of the first column whose
  last path component it is (the aggregator's `.../norm_ratio`, not `.../mean_norm_ratio`)."""
  if name.startswith('/'):
    name = next((c for c in (rows[0] if rows else ()) if '/' in c and c.endswith(name)), None)
  values = (_finite(r.get(name)) for r in rows) if name else ()
  return [v for v in values if v is not None]


def _mean(values: Sequence[float]) -> Optional[float]:
  return float(np.mean(values)) if values else None


def summarize_run(rows: Sequence[Mapping[str, Any]]) -> dict[str, Optional[float]]:
  """The runs.csv columns a reporting run adds from its metrics.csv rows (`metrics_io`).

  `accuracy_drop` (best - final `test_accuracy`); `train_loss_rise` (`stats.train_loss_rise`)
  of the clients' `train_loss`; of the global model's `global_train_loss` (`--eval_train_loss`)
  the final value, `tail_global_train_loss` (its mean over the last quarter of the evaluated
  rounds: an oscillating loss makes the last value alone noisy) and its rise; the last
  evaluation's `test_mean_logit` (the logits' drift along the direction softmax ignores),
  `test_rare_pair_error`, `test_common_pair_error` and `test_rare_error_share`; the mean over
  rounds of the aggregator's `mean_update_norm`. A column the run lacks is None, as are the
  accuracies of a run whose every evaluated accuracy is non-finite (recorded, not refused).

  Raises:
    ValueError: if `rows` is empty or no row has a test accuracy column (never evaluated).
  """
  if not rows:
    raise ValueError('rows must hold at least one metrics row, got none')
  if not any(r.get('test_accuracy') not in (None, '') for r in rows):
    raise ValueError('rows hold no test_accuracy: was the run evaluated?')
  accuracies = _column(rows, 'test_accuracy')
  last = ([r for r in rows if _finite(r.get('test_accuracy')) is not None] or list(rows))[-1]
  losses = _column(rows, 'train_loss')
  global_losses = _column(rows, 'global_train_loss')
  out = {
      'accuracy_drop': max(accuracies) - accuracies[-1] if accuracies else None,
      'train_loss_rise': stats.train_loss_rise(losses) if losses else None,
      'final_global_train_loss': global_losses[-1] if global_losses else None,
      'tail_global_train_loss': _mean(global_losses[-max(1, len(global_losses) // 4):]),
      'global_train_loss_rise': stats.train_loss_rise(global_losses) if global_losses else None,
      'final_mean_logit': _finite(last.get('test_mean_logit'))}
  for name in ('rare_pair_error', 'common_pair_error', 'rare_error_share'):
    out[f'final_{name}'] = _finite(last.get(f'test_{name}'))
  out['mean_update_norm'] = _mean(_column(rows, '/mean_update_norm'))
  return out

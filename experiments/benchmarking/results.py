"""A benchmark directory's files read back, its runs grouped by (regime, E, method, seed) and
compared with the baseline (paired over seeds, Holm); each run's summary columns."""

import csv
import io
import json
import math
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tff_conflict import _files as files
from experiments import stats
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import runs as runs_lib
from tff_conflict.simulation import metrics as metrics_io

ALPHA, POWER = 0.05, 0.8  # the level of every test, the power the seed counts aim at
CURVES_FILE = 'validation_curves.csv'
# The files the report reads besides the runs' own (`grid.run_benchmark` says what each holds).
RECORD_FILES = ('config.json', 'runs.csv', 'tuning.csv', 'tuning_choices.json', 'timing.json',
                'regimes.json', CURVES_FILE)
_IDENTITY = ('regime', 'method', 'epochs', 'seed')  # the cells that place a row in the report


def write_csv(path: str, rows: Sequence[Mapping[str, Any]],
              columns: Sequence[str] = ()) -> None:
  """Writes `rows` atomically: `columns` first, then every other key in first-seen order."""
  files.write_csv_atomically(path, list(dict.fromkeys([*columns, *(k for r in rows for k in r)])),
                             rows)


class DamagedRunsFile(ValueError):
  """runs.csv (or config.json) cannot be read as written (cut short, edited or missing)."""


def _damage(text: str) -> Optional[str]:
  """What makes runs.csv's `text` not a file written whole here (every row ends in a newline)."""
  header, *lines = list(csv.reader(io.StringIO(text))) or [[]]
  missing = [c for c in _IDENTITY if c not in header]
  if missing:
    return f'its header lacks {missing}'
  if not text.endswith('\n'):
    return 'it ends in the middle of a line'
  for n, cells in enumerate(lines, start=2):
    if len(cells) != len(header):
      return f'line {n} has {len(cells)} of {len(header)} cells'
    if not all(cells[header.index(c)] for c in _IDENTITY):
      return f'line {n} lacks its {"/".join(_IDENTITY)}'
  return None


def read_runs(path: str) -> list[dict[str, Any]]:
  """runs.csv's rows, numbers parsed (curves, hparams, regime, method stay text); raises
  DamagedRunsFile where the file was cut short or edited."""
  with open(path, newline='') as f:
    problem = _damage(f.read())
  if problem:
    raise DamagedRunsFile(f'{path} is damaged ({problem}): it was cut short or edited')
  rows = metrics_io.read_csv(path)
  for row in rows:
    for key in ('accuracy_curve', 'train_loss_curve', 'conflict_curve', 'hparams', 'regime',
                'method'):
      if row.get(key) is not None and not isinstance(row[key], str):
        row[key] = files.csv_cell(row[key])
  return rows


def read_json(path, default):
  """The JSON value in `path`; `default` when it is missing or not JSON."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return default


def load(root: str) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
  """(runs.csv's rows, config.json's flat settings, validation_curves.csv's rows) of `root`
  (no rows for a missing file); raises DamagedRunsFile for a damaged runs.csv or config.json."""
  config = read_json(os.path.join(root, 'config.json'), None)
  if not isinstance(config, dict):
    raise DamagedRunsFile(f'{os.path.join(root, "config.json")} is missing or damaged (not a '
                          'JSON object): the benchmark did not start or it was edited')
  runs, curves = (read_runs(path) if os.path.exists(path) else []
                  for path in (os.path.join(root, n) for n in ('runs.csv', CURVES_FILE)))
  for row in runs:
    recheck_collapse(row, root)
  return runs, config_lib.flat_settings(config), curves


def recheck_collapse(row: dict[str, Any], root: str) -> None:
  """Sets a row's `majority_rate` (its own, else its result.json's confusion matrix's, else None)
  and flags it `collapsed` where `runs.at_floor` finds it so (a set flag stays)."""
  majority = _finite(row.get('majority_rate'))
  if majority is None:
    result = runs_lib.read_result(runs_lib.report_run_dir(
        root, str(row['regime']), int(row['epochs']), str(row['method']), int(row['seed'])))
    majority = runs_lib.majority_rate((result or {}).get('confusion_matrix'))
  row['majority_rate'] = majority
  row['collapsed'] = is_true(row.get('collapsed')) or runs_lib.at_floor(
      _finite(row.get('last_k_accuracy')), _finite(row.get('chance_accuracy')), majority)


def num(value) -> Optional[float]:
  try:
    return None if value in (None, '') else float(value)
  except (TypeError, ValueError):
    return None


def _finite(value) -> Optional[float]:
  value = num(value)
  return None if value is None or math.isnan(value) else value


def is_true(value) -> bool:
  return value is True or str(value).lower() == 'true'


def group(rows) -> dict[tuple[str, int], dict[str, dict[int, Mapping[str, Any]]]]:
  """(regime, E) -> method -> seed -> row, in the order the rows first name them."""
  out: dict = {}
  for row in rows:
    cell = out.setdefault((row['regime'], int(row['epochs'])), {})
    cell.setdefault(row['method'], {})[int(row['seed'])] = row
  return out


def by_seed(per_seed, key) -> dict[int, float]:
  """seed -> the finite number in column `key`, for the seeds that have one."""
  return {seed: value for seed, row in per_seed.items()
          for value in [_finite(row.get(key))] if value is not None}


def mean(per_seed, key) -> float:
  """The mean over seeds of the finite values of column `key`; NaN for none."""
  return stats.mean_std(list(by_seed(per_seed, key).values()))[0]


def orders(rows, config) -> tuple[list[str], list[str], list[int]]:
  """The regimes and methods of the runs in the config's order (others after, sorted), and E."""
  def ordered(key):
    found = {r[key] for r in rows}
    return [x for x in config.get(key + 's', []) if x in found] + sorted(
        found - set(config.get(key + 's', [])))
  return ordered('regime'), ordered('method'), sorted({int(r['epochs']) for r in rows})


def cells(rows, config) -> list[tuple[str, int, Mapping[str, Any]]]:
  """(regime, E, method -> seed -> row) of every cell that ran, in the report's order."""
  (regimes, _, epochs), found = orders(rows, config), group(rows)
  return [(r, e, found[(r, e)]) for r in regimes for e in epochs if (r, e) in found]


def primary_statistic(config: Mapping[str, Any]) -> str:
  return config.get('primary_statistic') or 'last_k_accuracy'


def statistic_label(key: str, config: Mapping[str, Any]) -> str:
  if key == 'last_k_accuracy':
    return f'mean accuracy, last {config["tuning"]["last_k"]} rounds'
  return 'last-round accuracy' if key == 'final_accuracy' else key


def difference(cell, method: str, baseline: str, key: str = 'last_k_accuracy'
               ) -> Optional[stats.Interval]:
  """`method - baseline` on column `key`, paired over the seeds both ran in `cell`."""
  if method == baseline or baseline not in cell or method not in cell:
    return None
  return stats.paired_difference(by_seed(cell[method], key), by_seed(cell[baseline], key))


def collapsed(per_seed) -> bool:
  """Every run (of one method in one cell) collapsed."""
  return bool(per_seed) and all(is_true(r.get('collapsed')) for r in per_seed.values())


def at_chance(cell, method: str, baseline: str) -> bool:
  """Every run of both sides collapsed: their difference says nothing."""
  return collapsed(cell.get(method)) and collapsed(cell.get(baseline))


def identical(d: Optional[stats.Interval]) -> bool:
  """The same statistic in every one of at least 2 paired seeds: one computation, not a tie."""
  return d is not None and d.n >= 2 and d.sd == 0 and d.mean == 0


def family_size(found: Mapping[Any, stats.Interval]) -> int:
  """The comparisons of `found` tested in a Holm family (identical ones are none)."""
  return sum(tested(d) and not identical(d) for d in found.values())


# `stats.Interval.family` names: '' is none (no test, p-value NaN), else one of:
PRIMARY, OTHERS = 'primary', 'against other baselines'   # `family`'s, `comparisons`' pairs'


def regime_datasets(rows) -> dict[str, str]:
  return {str(r['regime']): str(r['dataset']) for r in rows}


def references(config: Mapping[str, Any]) -> list[str]:
  """What the primary family compares with: the baseline, then `best_of`'s other baselines among
  the methods run."""
  pool, baseline = config.get('best_of') or config_lib.BASELINES, config['baseline']
  return [baseline] + [b for b in pool if b != baseline and b in config['methods']]


def cell_references(cell, config: Mapping[str, Any]) -> list[str]:
  """`references` that ran in `cell`, less those `identical` to the baseline there."""
  baseline = config['baseline']
  return [b for b in references(config) if b in cell and (b == baseline or not identical(
      difference(cell, b, baseline, primary_statistic(config))))]


def transferred_from(config: Mapping[str, Any], regime: str, dataset: str) -> Optional[str]:
  """The other regime whose tuning `regime` uses, else None (tuned on itself, or untuned)."""
  if not (config.get('tuning') or {}).get('tune', config.get('tune', True)):
    return None
  plan = config.get('plan') or {}
  tuned = (plan['tuned_on'].get(regime) if 'tuned_on' in plan   # older config.json: per dataset
           else (plan.get('tuning_regimes') or {}).get(dataset))
  return tuned if tuned and tuned != regime else None


def primary_regimes(config: Mapping[str, Any]) -> list[str]:
  return list(config.get('primary_regimes') or config.get('regimes') or [])


def compared_methods(rows, config: Mapping[str, Any]) -> list[str]:
  """The methods the primary family compares: `family_methods` if named, else all but the
  baseline and `best_of`; the others are reported with intervals and no test."""
  pool = set(config.get('best_of') or config_lib.BASELINES) | {config['baseline']}
  named = config.get('family_methods') or ()
  return [m for m in orders(rows, config)[1] if m not in pool and (not named or m in named)]


FAMILY_FILE = 'family.json'


def family_members(config: Mapping[str, Any]) -> dict[str, Any]:
  """family.json from the config alone, before the runs: every (regime, E, method, reference)
  `family` may test, the statistic, the level, the margin and the difference aimed at."""
  methods = [{'method': m, 'regime': r} for m in config['methods'] for r in config['regimes']]
  rows = [dict(m, epochs=e) for m in methods for e in config['epochs']]
  return {'statistic': statistic_label(primary_statistic(config), config), 'alpha': ALPHA,
          'margin': margin(config), 'detect': {d: detect_for(d, config) for d in sorted(
              {r.split(':')[0].split('(')[0] for r in primary_regimes(config)})},
          'members': [[r, e, m, against] for r in primary_regimes(config)
                      for e in config['epochs'] for m in compared_methods(rows, config)
                      for against in references(config)]}


def window(row: Mapping[str, Any], back: int, last_k: int) -> Optional[list[float]]:
  """The counted test accuracies of the `last_k` evaluated rounds `back` windows before the last
  (0: the primary statistic's); None for a short curve or a non-finite value."""
  counted = [a for a in runs_lib.counted_curve(row) if a is not None]
  end = len(counted) - back * last_k
  values = counted[end - last_k:end] if end - last_k >= 0 else []
  return (values if values and all(v is not None and math.isfinite(v) for v in values)
          else None)


def window_statistic(row: Mapping[str, Any], back: int, last_k: int) -> Optional[float]:
  """The mean of `window`; None where it is None."""
  values = window(row, back, last_k)
  return None if values is None else float(np.mean(values))


def _holm(found: Mapping[Any, Optional[stats.Interval]], family: str
          ) -> dict[Any, stats.Interval]:
  """`found`'s intervals tested in `family`, Holm-adjusted over the non-identical ones."""
  found = {k: d for k, d in found.items() if d is not None}
  adjusted = stats.holm([float('nan') if identical(d) else d.p_value for d in found.values()])
  return {k: d._replace(p_value=p, family='' if identical(d) else family)
          for (k, d), p in zip(found.items(), adjusted)}


def family(rows, config: Mapping[str, Any], back: int = 0
           ) -> dict[tuple[str, int, str, str], stats.Interval]:
  """The primary family: (regime, E, method, reference) -> the Holm-adjusted paired difference
  of every `compared_methods` against each `cell_references` in the `primary_regimes`; with
  `back` > 0, on the `window_statistic` `back` windows before the last."""
  key = primary_statistic(config)
  last_k = int((config.get('tuning') or {}).get('last_k') or config.get('last_k') or 5)
  methods, primary = compared_methods(rows, config), primary_regimes(config)
  windows = lambda per_seed: {s: v for s, r in per_seed.items()
                              for v in [window_statistic(r, back, last_k)] if v is not None}
  return _holm({(regime, e, method, against): difference(cell, method, against, key) if not back
                else stats.paired_difference(windows(cell[method]), windows(cell[against]))
                for regime, e, cell in cells(rows, config) if regime in primary
                for method in methods if method in cell
                for against in cell_references(cell, config)}, PRIMARY)


def comparisons(rows, config: Mapping[str, Any], pairs: Sequence[tuple[str, str]] = ()
                ) -> dict[tuple[str, int, str], stats.Interval]:
  """(regime, E, method) -> its `difference` against its `pairs` partner (default: the
  baseline): tested in the primary `family` where it is in it, else against the baseline no test
  (family ''), against another method Holm over those pairs (family `OTHERS`)."""
  baseline, key, tested = config['baseline'], primary_statistic(config), family(rows, config)
  main = {(r, e, m): d if d.family is not None else d._replace(p_value=float('nan'), family='')
          for r, e, cell in cells(rows, config) for m in orders(rows, config)[1]
          if not pairs or (m, baseline) in pairs
          for d in [tested.get((r, e, m, baseline)) or difference(cell, m, baseline, key)]
          if d is not None}
  others = {(r, e, m): difference(cell, m, b, key)
            for r, e, cell in cells(rows, config) for m, b in pairs if b != baseline
            if (r, e, m, b) not in tested}
  return {**main, **_holm(others, OTHERS),
          **{(r, e, m): d for (r, e, m, b), d in tested.items() if (m, b) in pairs
             and b != baseline}}


def significant(d: Optional[stats.Interval], chance: bool = False) -> bool:
  """Holm agrees (`comparisons`' adjusted p-value below `ALPHA`) and not both collapsed."""
  return tested(d) and math.isfinite(d.p_value) and d.p_value < ALPHA and not chance


def tested(d: Optional[stats.Interval]) -> bool:
  """Whether `d` was tested in a family (family '': reported without a verdict)."""
  return d is not None and d.family != ''


def margin(config: Mapping[str, Any]) -> float:
  """The equivalence margin a tie's 95% interval lies inside."""
  return float(config.get('equivalence_margin') or 0.01)


NOT_TESTED = 'not tested'


def verdict(d: Optional[stats.Interval], margin: float = 0.0, chance: bool = False) -> str:
  """'beats' / 'loses' where Holm agrees, 'ties' with the 95% interval inside +- `margin`,
  'both collapsed', 'identical', `NOT_TESTED` outside every family, else 'inconclusive'."""
  if d is None or d.n < 2:
    return 'inconclusive'
  if chance:
    return 'both collapsed'
  if identical(d):
    return 'identical'
  if not tested(d):
    return NOT_TESTED
  if significant(d):
    return 'beats' if d.mean > 0 else 'loses'
  return 'ties' if -margin < d.low and d.high < margin else 'inconclusive'


def against_every(words: Sequence[str]) -> str:
  """A method's verdict against every baseline from its `verdict` against each: the
  intersection-union test (Berger, Technometrics 24(4), 1982; docs/methods.md)."""
  if 'loses' in words:
    return 'loses to a baseline'
  alike = {'beats': 'beats every baseline', 'ties': 'ties every baseline',
           'both collapsed': 'both collapsed', 'identical': 'identical'}
  return alike.get(words[0], 'inconclusive') if len(set(words)) == 1 else 'inconclusive'


def every_baseline(rows, config: Mapping[str, Any]
                   ) -> dict[tuple[str, int, str], tuple[str, dict[str, str]]]:
  """(regime, E, method) -> (`against_every` verdict, baseline -> `verdict`) over `family`."""
  cells, out = group(rows), {}
  for (regime, e, method, against), d in family(rows, config).items():
    word = verdict(d, margin(config), at_chance(cells[(regime, e)], method, against))
    out.setdefault((regime, e, method), {})[against] = word
  return {k: (against_every(list(words.values())), words) for k, words in out.items()}


def detectable(d: Optional[stats.Interval], level: float) -> Optional[float]:
  """`stats.minimal_detectable_difference` at `level` and `POWER` from `d`'s sd and n, or None."""
  if d is None or d.n < 2 or not math.isfinite(d.sd):
    return None
  return stats.minimal_detectable_difference(d.sd, d.n, alpha=level, power=POWER)


def speed_target(config: Mapping[str, Any]) -> float:
  """The speed target's fraction of the baseline's primary statistic (default 0.9)."""
  return float(config.get('speed_target') or 0.9)


def rounds_to(row: Mapping[str, Any], target: float) -> tuple[int, bool]:
  """(the first round whose `runs.counted_curve` reaches `target`, else the horizon + 1, hit)."""
  curve = runs_lib.counted_curve(row)
  found = next((r for r, a in enumerate(curve, start=1)
                if a is not None and math.isfinite(a) and a >= target), None)
  return (found, True) if found is not None else (len(curve) + 1, False)


def speed(rows, config: Mapping[str, Any]
          ) -> dict[tuple[str, int], tuple[float, dict[str, tuple[dict[int, int], int]]]]:
  """(regime, E) -> (target: `speed_target` times the baseline's mean primary statistic,
  method -> (seed -> `rounds_to` it, seeds never reaching it)) where the baseline ran."""
  out = {}
  for regime, e, cell in cells(rows, config):
    if config['baseline'] in cell:
      target = speed_target(config) * mean(cell[config['baseline']], primary_statistic(config))
      found = {m: {s: rounds_to(r, target) for s, r in per_seed.items()}
               for m, per_seed in cell.items()}
      out[(regime, e)] = (target, {m: ({s: n for s, (n, _) in f.items()},
                                       sum(not hit for _, hit in f.values()))
                                   for m, f in found.items()})
  return out


def holm_level(rows, config: Mapping[str, Any]) -> float:
  """The primary family's first Holm level: `ALPHA` / its size."""
  return ALPHA / max(1, family_size(family(rows, config)))


def detect_for(dataset: str, config: Mapping[str, Any]) -> float:
  """The difference the report computes a seed count for."""
  return float((config.get('detect') or {}).get(
      dataset, config_lib.DETECT.get(dataset, config_lib.DEFAULT_DETECT)))


def regime_conflict(cell, baseline: str) -> tuple[Optional[float], str]:
  """(measured conflict fraction, whose): the baseline's, else the mean over the methods'."""
  own = list(by_seed(cell.get(baseline, {}), 'conflict_before').values())
  values = own or [v for s in cell.values() for v in by_seed(s, 'conflict_before').values()]
  if not values:
    return None, ''
  return sum(values) / len(values), baseline if own else 'mean over conflict-aware methods'


def curve_groups(curve_rows) -> dict[tuple[str, int], dict[str, list[list[Optional[float]]]]]:
  """(tuning regime, E) -> method -> one decoded validation curve per tuning seed."""
  out: dict = {}
  for row in curve_rows:
    curve = runs_lib.decode_curve(row.get('accuracy_curve'))
    if curve:
      key = (str(row['regime']), int(row['epochs']))
      out.setdefault(key, {}).setdefault(str(row['method']), []).append(curve)
  return out


def plateau_verdicts(curve_rows, config
                     ) -> list[tuple[str, int, tuple[float, float, bool], int]]:
  """(tuning regime, E, `stats.plateau` of the baseline's mean validation curve, seeds)."""
  baseline, tuning = config['baseline'], config['tuning']
  return [(regime, epochs, stats.plateau(
      stats.mean_curve(per_method[baseline]), window=tuning['plateau_window'],
      tolerance=tuning['plateau_tolerance']), len(per_method[baseline]))
          for (regime, epochs), per_method in curve_groups(curve_rows).items()
          if baseline in per_method]


def test_plateau_verdicts(rows, config) -> list[tuple[str, int, tuple[float, float, bool], int]]:
  """(regime, E, `stats.plateau` of the baseline's mean counted test curve, reporting seeds)."""
  baseline, tuning = config['baseline'], config['tuning']
  return [(regime, e, stats.plateau(
      stats.mean_curve([runs_lib.counted_curve(r) for r in cell[baseline].values()]),
      window=tuning['plateau_window'], tolerance=tuning['plateau_tolerance']),
           len(cell[baseline])) for regime, e, cell in cells(rows, config) if baseline in cell]


def total_wall_seconds(root: str) -> float:
  return sum(t.get('wall_seconds', 0.0) for t in read_json(os.path.join(root, 'timing.json'), []))


def unequal_search(config) -> tuple[list[str], list]:
  """(methods that searched server lrs the baseline did not, the baseline's), from the plan."""
  searched = {m['name']: m['server_lrs'] for m in config['plan']['methods']}
  base = set(searched.get(config['baseline'], []))
  return sorted(m for m, lrs in searched.items() if not set(lrs) <= base), sorted(base)


def summarize_run(rows: Sequence[Mapping[str, Any]]) -> dict[str, Optional[float]]:
  """The runs.csv columns a run adds from its metrics.csv rows (None where missing); raises
  ValueError without rows or a test accuracy."""
  if not any(r.get('test_accuracy') not in (None, '') for r in rows):
    raise ValueError('rows hold no test_accuracy: was the run evaluated?' if rows else
                     'rows must hold at least one metrics row, got none')

  def column(name):  # a name starting with '/': the first column with that last component
    if name.startswith('/'):
      name = next((c for c in rows[0] if '/' in c and c.endswith(name)), None)
    return [v for v in (_finite(r.get(name)) for r in rows) if v is not None] if name else []
  accuracies, losses = column('test_accuracy'), column('train_loss')
  global_losses, norms = column('global_train_loss'), column('/mean_update_norm')
  last = ([r for r in rows if _finite(r.get('test_accuracy')) is not None] or list(rows))[-1]
  return {
      'accuracy_drop': max(accuracies) - accuracies[-1] if accuracies else None,
      'train_loss_rise': stats.train_loss_rise(losses) if losses else None,
      'final_global_train_loss': global_losses[-1] if global_losses else None,
      'tail_global_train_loss': (float(np.mean(global_losses[-max(1, len(global_losses) // 4):]))
                                 if global_losses else None),
      'global_train_loss_rise': stats.train_loss_rise(global_losses) if global_losses else None,
      'final_mean_logit': _finite(last.get('test_mean_logit')),
      **{f'final_{name}': _finite(last.get(f'test_{name}'))
         for name in ('rare_pair_error', 'common_pair_error', 'rare_error_share')},
      'mean_update_norm': float(np.mean(norms)) if norms else None}

"""A benchmark directory's files read back, its runs grouped by (regime, E, method, seed) and
compared with the baseline (paired over seeds, Holm); each run's summary columns."""

import csv
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

ALPHA, POWER = 0.05, 0.8  # the level of every test, the power the seed counts aim at
CURVES_FILE = 'validation_curves.csv'
# The files the report reads besides the runs' own (`grid.run_benchmark` says what each holds).
RECORD_FILES = ('config.json', 'runs.csv', 'tuning.csv', 'tuning_choices.json', 'timing.json',
                'regimes.json', CURVES_FILE)
_IDENTITY = ('regime', 'method', 'epochs', 'seed')  # the cells that place a row in the report


def write_csv(path: str, rows: Sequence[Mapping[str, Any]],
              columns: Sequence[str] = ()) -> None:
  """Writes `rows` atomically: `columns` first, then every other key in first-seen order."""
  names = list(columns)
  for row in rows:
    names += [k for k in row if k not in names]
  files.write_csv_atomically(path, names, rows)


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
  """runs.csv's rows with numbers parsed (curves, hparams, regime and method stay text).

  Raises:
    DamagedRunsFile: the file was cut short or edited.
  """
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
  """(runs.csv's rows, config.json's flat settings, validation_curves.csv's rows) of a benchmark
  directory (no rows for a missing file).

  Raises:
    DamagedRunsFile: config.json is missing or not JSON, or runs.csv is damaged.
  """
  def rows(name):
    path = os.path.join(root, name)
    return read_runs(path) if os.path.exists(path) else []
  config = read_json(os.path.join(root, 'config.json'), None)
  if not isinstance(config, dict):
    raise DamagedRunsFile(f'{os.path.join(root, "config.json")} is missing or damaged (not a '
                          'JSON object): the benchmark did not start or it was edited')
  flat = config_lib.flat_settings(config)
  runs = rows('runs.csv')
  for row in runs:
    recheck_collapse(row, root)
  return runs, flat, rows(CURVES_FILE)


def recheck_collapse(row: dict[str, Any], root: str) -> None:
  """Sets a runs.csv row's `majority_rate` (its own; for a row written before the column, from
  its run's result.json confusion matrix where that is on disk; else None: unknown) and flags it
  `collapsed` where `runs.at_floor` finds it at that rate (a flag already set stays)."""
  majority = _finite(row.get('majority_rate'))
  if majority is None:
    result = runs_lib.read_result(runs_lib.report_run_dir(
        root, str(row['regime']), int(row['epochs']), str(row['method']), int(row['seed'])))
    majority = runs_lib.majority_rate((result or {}).get('confusion_matrix'))
  row['majority_rate'] = majority
  row['collapsed'] = is_true(row.get('collapsed')) or runs_lib.at_floor(
      _finite(row.get('last_k_accuracy')), _finite(row.get('chance_accuracy')), majority)


def num(value) -> Optional[float]:
  """A cell as a float; None for an empty or non-numeric one."""
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
  """seed -> the number in column `key`, for the seeds that have one (NaN left out)."""
  values = {seed: _finite(row.get(key)) for seed, row in per_seed.items()}
  return {seed: value for seed, value in values.items() if value is not None}


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
  regimes, _, epochs = orders(rows, config)
  found = group(rows)
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
  """The two sides' runs gave the same statistic in every one of at least 2 paired seeds: one
  computation, not a tie (`methods.identical_reason` says why where it is known)."""
  return d is not None and d.n >= 2 and d.sd == 0 and d.mean == 0


def family_size(found: Mapping[Any, stats.Interval]) -> int:
  """The comparisons of `found` tested in a Holm family (identical ones are none)."""
  return sum(tested(d) and not identical(d) for d in found.values())


# The Holm families of `stats.Interval.family`: '' is none (no test, its p-value NaN: outside
# every family, or `identical`).
PRIMARY = 'primary'   # the name of the primary family
OTHERS = 'against other baselines'   # `comparisons`' family of the pairs it is given


def regime_datasets(rows) -> dict[str, str]:
  return {str(r['regime']): str(r['dataset']) for r in rows}


def references(config: Mapping[str, Any]) -> list[str]:
  """What the primary family compares each method with: the baseline, then every other baseline
  of `best_of`."""
  pool = config.get('best_of') or config_lib.BASELINES
  return [config['baseline']] + [b for b in pool if b != config['baseline']]


def cell_references(cell, config: Mapping[str, Any]) -> list[str]:
  """`references` that ran in one (regime, E) cell, less a baseline whose runs there equal the
  baseline's in every seed (`identical`: one computation, compared once)."""
  baseline = config['baseline']
  return [b for b in references(config) if b in cell and (b == baseline or not identical(
      difference(cell, b, baseline, primary_statistic(config))))]


def transferred_from(config: Mapping[str, Any], regime: str, dataset: str) -> Optional[str]:
  """The regime whose tuning `regime` uses when it is another (a transferred tuning), else
  None (tuned on itself, or untuned)."""
  if not (config.get('tuning') or {}).get('tune', config.get('tune', True)):
    return None
  tuned = ((config.get('plan') or {}).get('tuning_regimes') or {}).get(dataset)
  return tuned if tuned and tuned != regime else None


def primary_regimes(config: Mapping[str, Any]) -> list[str]:
  return list(config.get('primary_regimes') or config.get('regimes') or [])


def compared_methods(rows, config: Mapping[str, Any]) -> list[str]:
  """The methods the primary family compares with the references: all but `best_of` and the
  baseline."""
  pool = set(config.get('best_of') or config_lib.BASELINES) | {config['baseline']}
  return [m for m in orders(rows, config)[1] if m not in pool]


def window_statistic(row: Mapping[str, Any], back: int, last_k: int) -> Optional[float]:
  """The mean test accuracy of the `last_k` evaluated rounds ending `back` windows of `last_k`
  before the last (0: the primary statistic's window), a diverged run at chance from its
  divergence on; None when the curve is too short or a value is not finite."""
  diverged, chance = num(row.get('diverged_round')), num(row.get('chance_accuracy'))
  counted = [runs_lib.counted_accuracy(a, i, None if diverged is None else int(diverged), chance)
             for i, a in enumerate(runs_lib.decode_curve(row.get('accuracy_curve')), start=1)
             if a is not None]
  end = len(counted) - back * last_k
  window = counted[end - last_k:end] if end - last_k >= 0 else []
  return (float(np.mean(window)) if window and all(v is not None and math.isfinite(v)
                                                   for v in window) else None)


def _holm(found: Mapping[Any, Optional[stats.Interval]], family: str
          ) -> dict[Any, stats.Interval]:
  """`found`'s intervals tested in `family`, Holm-adjusted over the non-identical ones."""
  found = {k: d for k, d in found.items() if d is not None}
  adjusted = stats.holm([float('nan') if identical(d) else d.p_value for d in found.values()])
  return {k: d._replace(p_value=p, family='' if identical(d) else family)
          for (k, d), p in zip(found.items(), adjusted)}


def family(rows, config: Mapping[str, Any], back: int = 0
           ) -> dict[tuple[str, int, str, str], stats.Interval]:
  """The primary family, named before the runs: (regime, E, method, reference) -> the paired
  difference of the primary statistic, Holm-adjusted over the family: every `compared_methods`
  against each of `cell_references` (every baseline that ran) in every `primary_regimes` regime
  and E, each (method, regime, E, baseline) one member (an `identical` comparison is no test and
  outside it). `back` > 0: the same comparisons on the window `back`
  windows before the last (`window_statistic`; the last-k statistic only), adjusted alike."""
  key = primary_statistic(config)
  last_k = int((config.get('tuning') or {}).get('last_k') or config.get('last_k') or 5)
  methods, primary = compared_methods(rows, config), primary_regimes(config)
  found = {}
  for regime, e, cell in cells(rows, config):
    for method in methods if regime in primary else []:
      for against in cell_references(cell, config):
        if method not in cell or against not in cell:
          continue
        if back:
          found[(regime, e, method, against)] = stats.paired_difference(*(
              {s: v for s, r in cell[m].items()
               for v in [window_statistic(r, back, last_k)] if v is not None}
              for m in (method, against)))
        else:
          found[(regime, e, method, against)] = difference(cell, method, against, key)
  return _holm(found, PRIMARY)


def comparisons(rows, config: Mapping[str, Any], pairs: Sequence[tuple[str, str]] = ()
                ) -> dict[tuple[str, int, str], stats.Interval]:
  """(regime, E, method) -> `difference` of the primary statistic against the method `pairs`
  gives it (default: every method against the config's baseline): against the baseline, the
  primary `family`'s test where the comparison is in it, else no test (p-value NaN, family '');
  against another method, Holm over those other pairs together (family `OTHERS`). A comparison
  is tested in one family at most."""
  baseline, key, tested = config['baseline'], primary_statistic(config), family(rows, config)
  main = {}
  for r, e, cell in cells(rows, config):
    for m in orders(rows, config)[1]:
      d = None if m == baseline or (pairs and (m, baseline) not in pairs) else (
          tested.get((r, e, m, baseline)) or difference(cell, m, baseline, key))
      if d is not None:
        main[(r, e, m)] = d if d.family is not None else d._replace(
            p_value=float('nan'), family='')
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
  """Whether `d` was tested in a family (one of family '': reported without a verdict)."""
  return d is not None and d.family != ''


def margin(config: Mapping[str, Any]) -> float:
  """The equivalence margin a tie's 95% interval lies inside."""
  return float(config.get('equivalence_margin') or 0.01)


NOT_TESTED = 'not tested'


def verdict(d: Optional[stats.Interval], margin: float = 0.0, chance: bool = False) -> str:
  """'beats' / 'loses' where Holm agrees, 'ties' where the 95% interval lies inside +- `margin`
  (never for 0), 'both collapsed' where both sides collapsed, 'identical' where the runs gave the same
  statistic in every seed (never 'ties'), `NOT_TESTED` outside every family (no verdict word),
  else 'inconclusive'."""
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


EVERY = 'every baseline'   # the column of `against_every`'s verdicts


def against_every(words: Sequence[str]) -> str:
  """A method's verdict against every baseline from its `verdict` against each (Berger,
  "Multiparameter hypothesis testing and acceptance sampling", Technometrics 24(4), 1982).

  'beats every baseline' only where it beats each one: the intersection-union test of "it is
  better than each", whose null hypothesis is the union of the per-baseline nulls, rejects where
  each per-baseline test rejects and is then valid at the level of those tests, with no
  correction across the baselines. Here each per-baseline test is its comparison's
  Holm-adjusted test in the primary `family`, where every (method, regime, E, baseline) is one
  member, so the family-wise error over every word below stays at `ALPHA`. 'loses to a
  baseline' where it loses to any one (Holm agrees); 'ties every baseline' where it ties each
  one (each 95% interval inside the margin); 'both collapsed' / 'identical' where every comparison
  is; else 'inconclusive' (also with no comparison)."""
  if 'loses' in words:
    return 'loses to a baseline'
  for word, said in (('beats', 'beats every baseline'), ('ties', 'ties every baseline'),
                     ('both collapsed', 'both collapsed'), ('identical', 'identical')):
    if words and all(w == word for w in words):
      return said
  return 'inconclusive'


def every_baseline(rows, config: Mapping[str, Any]
                   ) -> dict[tuple[str, int, str], tuple[str, dict[str, str]]]:
  """(regime, E, method) -> (`against_every` verdict, baseline -> `verdict`) over the primary
  `family`."""
  cells, out = group(rows), {}
  for (regime, e, method, against), d in family(rows, config).items():
    word = verdict(d, margin(config), at_chance(cells[(regime, e)], method, against))
    out.setdefault((regime, e, method), {})[against] = word
  return {k: (against_every(list(words.values())), words) for k, words in out.items()}


def detectable(d: Optional[stats.Interval], level: float) -> Optional[float]:
  """The difference a comparison detects with `POWER` at `level` (the family's first Holm level:
  `holm_level`) from its own paired sd and seeds (`stats.minimal_detectable_difference`); None
  without 2 seeds and a finite sd."""
  if d is None or d.n < 2 or not math.isfinite(d.sd):
    return None
  return stats.minimal_detectable_difference(d.sd, d.n, alpha=level, power=POWER)


def speed_target(config: Mapping[str, Any]) -> float:
  """The fraction of the baseline's primary statistic the speed statistic's target is
  (config.json's `speed_target`, default 0.9), named before the runs."""
  return float(config.get('speed_target') or 0.9)


def rounds_to(row: Mapping[str, Any], target: float) -> tuple[int, bool]:
  """(the first round whose counted test accuracy (`runs.counted_curve`) reaches `target`,
  whether it did): one that never does counts as its horizon + 1, a bound."""
  curve = runs_lib.counted_curve(row)
  found = next((r for r, a in enumerate(curve, start=1)
                if a is not None and math.isfinite(a) and a >= target), None)
  return (found, True) if found is not None else (len(curve) + 1, False)


def speed(rows, config: Mapping[str, Any]
          ) -> dict[tuple[str, int], tuple[float, dict[str, tuple[dict[int, int], int]]]]:
  """(regime, E) -> (the target: `speed_target` times the mean over the baseline's seeds of its
  primary statistic, method -> (seed -> `rounds_to` it, seeds that never reach it)), for the
  cells where the baseline ran. A secondary statistic outside every family."""
  key, out = primary_statistic(config), {}
  for regime, e, cell in cells(rows, config):
    if config['baseline'] not in cell:
      continue
    target = speed_target(config) * mean(cell[config['baseline']], key)
    per = {}
    for method, per_seed in cell.items():
      found = {s: rounds_to(r, target) for s, r in per_seed.items()}
      per[method] = ({s: n for s, (n, _) in found.items()},
                     sum(not hit for _, hit in found.values()))
    out[(regime, e)] = (target, per)
  return out


def holm_level(rows, config: Mapping[str, Any]) -> float:
  """The level of the primary family's first Holm step, `ALPHA` / its size (`ALPHA` for none):
  where the detectable difference matters for a verdict."""
  return ALPHA / max(1, family_size(family(rows, config)))


def detect_for(dataset: str, config: Mapping[str, Any]) -> float:
  """The difference the report computes a seed count for."""
  return float((config.get('detect') or {}).get(
      dataset, config_lib.DETECT.get(dataset, config_lib.DEFAULT_DETECT)))


def regime_conflict(cell, baseline: str) -> tuple[Optional[float], str]:
  """The regime's measured conflict fraction: the baseline's, else the mean of the methods that
  report one (before their correction)."""
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
  """(tuning regime, E, `stats.plateau` of the baseline's chosen candidate's validation
  accuracy averaged over the tuning seeds, number of seeds), per tuning regime and E."""
  baseline, tuning = config['baseline'], config['tuning']
  return [(regime, epochs, stats.plateau(
      stats.mean_curve(per_method[baseline]), window=tuning['plateau_window'],
      tolerance=tuning['plateau_tolerance']), len(per_method[baseline]))
          for (regime, epochs), per_method in curve_groups(curve_rows).items()
          if baseline in per_method]


def total_wall_seconds(root: str) -> float:
  """The wall time of every invocation recorded in `root/timing.json`."""
  return sum(t.get('wall_seconds', 0.0) for t in read_json(os.path.join(root, 'timing.json'), []))


def unequal_search(config) -> tuple[list[str], list]:
  """(the methods whose tuning searched server learning rates the baseline's did not, the
  baseline's), from config.json's plan."""
  searched = {m['name']: m['server_lrs'] for m in config['plan']['methods']}
  base = set(searched.get(config['baseline'], []))
  return sorted(m for m, lrs in searched.items() if not set(lrs) <= base), sorted(base)


def summarize_run(rows: Sequence[Mapping[str, Any]]) -> dict[str, Optional[float]]:
  """The runs.csv columns a reporting run adds from its metrics.csv rows (None where the run
  lacks the column or every evaluated accuracy is non-finite): `final_*` are the last
  evaluation's, `tail_global_train_loss` the mean over the last quarter of the evaluated rounds
  (an oscillating loss makes the last value alone noisy).

  Raises:
    ValueError: if `rows` is empty or no row has a test accuracy column (never evaluated).
  """
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
  out = {
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
  return out

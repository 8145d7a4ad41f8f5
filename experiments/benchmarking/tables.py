"""The report's Markdown tables and sections, from runs.csv's rows (`results`) and config.json:
setup, protocol, regimes, time, tuning, results per (regime, E), compositions, effect of E."""

import json
import math
import statistics
from typing import Any, Mapping, Optional, Sequence

from experiments import stats
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results
from experiments.benchmarking import runs as runs_lib


DAGGER = '†'


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


def _primary_cell(c: Optional[results.Comparison], secondary: bool = False) -> str:
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
                 found: Mapping[str, results.Comparison], config: Mapping[str, Any]) -> str:
  """The Markdown table of one (regime, E) cell, one row per method; the columns:
  docs/experiments.md, "The benchmark: does a method help?"."""
  key = results.primary_statistic(config)
  label = results.statistic_label(key, config)
  lines = [f'| method | seeds | diverged | collapsed | {label} | Δ vs {baseline} [95% CI] | '
           'Holm p | last-round accuracy | Δ last round [95% CI] | conflict before → after | '
           'norm ratio | s / round |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for method in methods:
    per_seed = cell.get(method)
    if not per_seed:
      continue
    primary = list(results.by_seed(per_seed, key).values())
    finals = list(results.by_seed(per_seed, 'final_accuracy').values())
    c = found.get(method)
    if method == baseline:
      delta, p, last_delta = '—', '—', '—'
    else:
      delta = _primary_cell(c)
      p = fmt_p(c.holm_p) if c is not None else '-'
      last_delta = _primary_cell(c, secondary=True) if c is not None else '-'
    before = _mean(results.by_seed(per_seed, 'conflict_before').values())
    after = _mean(results.by_seed(per_seed, 'conflict_after').values())
    conflict = '-' if before is None else f'{before:.3f} → {_fmt(after, 3)}'
    ratio = _fmt(_mean(results.by_seed(per_seed, 'norm_ratio').values()), 3)
    seconds = _fmt(_mean(results.by_seed(per_seed, 'seconds_per_round').values()), 2)
    diverged = sum(results.is_true(r.get('diverged')) for r in per_seed.values())
    excluded = results.excluded_updates(per_seed)
    if excluded:
      diverged = f'{diverged} ({excluded} updates excluded)'
    collapsed = sum(results.is_true(r.get('collapsed')) for r in per_seed.values())
    lines.append(f'| {method} | {len(per_seed)} | {diverged} | {collapsed} | '
                 f'{_fmt_mean_std(primary)} | {delta} | {p} | {_fmt_mean_std(finals)} | '
                 f'{last_delta} | {conflict} | {ratio} | {seconds} |')
  return '\n'.join(lines) + '\n'


def power_line(cell, dataset: str, *, baseline: str, config: Mapping[str, Any]) -> str:
  """The regime's minimal detectable difference and the seeds to detect `detect_for`, from the
  median paired sd of the primary statistic over the methods (a pilot's, for the next run)."""
  key = results.primary_statistic(config)
  sds, seeds = [], []
  for method in cell:
    d = results.difference(cell, method, baseline, key)
    if d is not None and d.n >= 2 and math.isfinite(d.sd) and not (
        results.all_collapsed(cell[method]) or results.all_collapsed(cell[baseline])):
      sds.append(d.sd)
      seeds.append(d.n)
  if not sds:
    return 'Minimal detectable difference: not computable (fewer than 2 paired seeds).'
  sd = statistics.median(sds)
  n = min(seeds)
  mdd = stats.minimal_detectable_difference(sd, n, alpha=results.ALPHA, power=results.POWER)
  target = results.detect_for(dataset, config)
  needed = stats.seeds_needed(sd, target, alpha=results.ALPHA, power=results.POWER)
  return (f'Minimal detectable difference {mdd:.4f} (paired t-test, {n} seeds, median paired sd '
          f'{sd:.4f} over the methods, {results.POWER:.0%} power at level {results.ALPHA:g} per '
          'comparison); '
          f'detecting {target:g} at that power takes {needed} seeds.')


def result_tables(rows, config: Mapping[str, Any]) -> list[tuple[str, int, str, str]]:
  """(regime, E, heading line, table) for every cell, from runs.csv's rows and config.json."""
  baseline = config.get('baseline', 'fedavg')
  regimes, methods, epochs = results.orders(rows, config)
  cells = results.group(rows)
  found = results.comparisons(rows, config)
  out = []
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e))
      if not cell:
        continue
      dataset = next(iter(next(iter(cell.values())).values()))['dataset']
      heading = power_line(cell, dataset, baseline=baseline, config=config)
      conflict, source = results.regime_conflict(cell, baseline)
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
  key = results.primary_statistic(config)
  regimes, methods, epochs = results.orders(rows, config)
  cells = results.group(rows)
  pairs = [(m, methods_lib.composition_parts(m)[0]) for m in methods
           if methods_lib.composition_parts(m)]
  found = []
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e), {})
      for method, own in pairs:
        if method in cell and own in cell:
          found.append((regime, e, method, own, results.difference(cell, method, own, key),
                        results.difference(cell, method, baseline, key),
                        results.difference(cell, own, baseline, key)))
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
  regimes, methods, epochs = results.orders(rows, config)
  found = results.comparisons(rows, config)
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
  cells = results.group(rows)
  lines = []
  for (regime, e, method), c in results.comparisons(rows, config).items():
    if not (c.significant and c.primary.mean < 0):
      continue
    per_seed = cells[(regime, e)][method]
    row = next(iter(per_seed.values()))
    d = c.primary
    bits = [f'Δ {d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}], Holm p {fmt_p(c.holm_p)}']
    ratio = _mean(results.by_seed(per_seed, 'norm_ratio').values())
    if ratio is not None:
      bits.append(f'norm ratio {ratio:.3f}')
    diverged = sum(results.is_true(r.get('diverged')) for r in per_seed.values())
    if diverged:
      bits.append(f'{diverged} seeds diverged')
    bits.append(f'client lr {row.get("client_lr")}, server lr {row.get("server_lr")}, '
                f'{row.get("hparams")}')
    lines.append(f'- {method}, {regime}, E={e}: ' + '; '.join(bits))
  return '\n'.join(lines) + '\n' if lines else 'No method loses where Holm agrees.\n'


def plateau_lines(curve_rows, config) -> str:
  """The Setup's rounds criterion and, per tuning regime and E, whether the baseline's validation
  curve plateaued, with the two means."""
  baseline = config.get('baseline', 'fedavg')
  window, tolerance = results.plateau_settings(config)
  head = (f'- Rounds: {config.get("rounds")}, enough when {baseline}\'s tuned validation '
          f'accuracy (its chosen candidate, mean over the tuning seeds) has plateaued: the mean '
          f'of its last {window} rounds within {tolerance:g} of the mean of the {window} before.')
  if not config.get('tuning', {}).get('tune', True):
    return head + ' Not checked: no tuning, so no validation curve.\n'
  verdicts = results.plateau_verdicts(curve_rows, config)
  if not verdicts:
    return head + (f' Not checked: no validation curve of {baseline} recorded '
                   f'(`{results.CURVES_FILE}`).\n')
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


def duration(seconds: float) -> str:
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours} h {minutes:02d} min {secs:02d} s' if hours else f'{minutes} min {secs:02d} s'


def protocol_section(config, rows) -> str:
  """The protocol, stated before any number: the test split, the search, the primary statistic,
  divergence, the statistics, and every symbol of the tables."""
  baseline = config.get('baseline', 'fedavg')
  key = results.primary_statistic(config)
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
    searched = results.searched_server_lrs(config)
    base = set(searched.get(baseline, []))
    extra = sorted({m for m, lrs in searched.items() if not set(lrs) <= base})
    equal = ('every method, the baseline included, searched the same client learning rates '
             f'{tuning.get("client_lr_grid")} and server learning rates '
             f'{sorted(base)}, then its own grid' if not extra else
             f'UNEQUAL: {", ".join(extra)} searched server learning rates that {baseline} did '
             f'not ({baseline}: {sorted(base)}); their gains may come from the search alone')
    lines.append(f'- Search: {equal}; the candidates per method are listed under Tuning.')
  lines.append(
      '- Primary statistic, named before the runs: the '
      f'{results.statistic_label(key, config)} on the '
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
  n_comparisons = len(results.comparisons(rows, config)) if rows else 0
  lines.append(
      f'- Statistics: {len(seeds)} reporting seeds'
      f'{" (fewer than 10: read every interval as a pilot)" if len(seeds) < 10 else ""}; '
      'paired differences over seeds with 95% Student-t intervals; p-values Holm-adjusted over '
      f'the {n_comparisons} comparisons of the Results tables (every method against {baseline} '
      f'in every regime and E); {DAGGER} and bold only where the Holm-adjusted p < '
      f'{results.ALPHA:g}. '
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


def setup_section(config) -> str:
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


def time_section(timing, rows) -> str:
  if not timing:
    return 'No timing recorded.\n'
  wall = sum(t.get('wall_seconds', 0.0) for t in timing)
  build = sum(t.get('build_seconds', 0.0) for t in timing)
  lines = ['| invocation | finished | wall time | building processes | processes built | runs '
           'run | runs skipped | runs failed |', '|---|---|---|---|---|---|---|---|']
  for i, t in enumerate(timing, start=1):
    lines.append(f'| {i} | {t.get("finished", "")} | {duration(t.get("wall_seconds", 0))} | '
                 f'{t.get("build_seconds", 0):.0f} s | {t.get("processes_built", "")} | '
                 f'{t.get("runs_done", "")} | {t.get("runs_skipped", "")} | '
                 f'{t.get("runs_failed", "")} |')
  share = 100.0 * build / wall if wall else 0.0
  lines.append('')
  lines.append(f'Total over invocations: {duration(wall)} of which {duration(build)} '
               f'({share:.1f}%) building learning processes (each built once per method, '
               'hyperparameters and model, then reused across regimes, local epochs and seeds).')
  run_seconds = sum(results.num(r.get('run_seconds')) or 0.0 for r in rows)
  lines.append(f'Reporting runs: {len(rows)}, {duration(run_seconds)} of training and '
               'evaluation in all.')
  return '\n'.join(lines) + '\n'


def regimes_section(regimes) -> str:
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
    return methods_lib.parse_method(method).parent
  except ValueError:
    return None


def variant_differences(rows, config) -> list[tuple[str, str, list[str]]]:
  """(variant, parent, differences) for every method of the runs whose parent ran too: the
  learning rates and builder arguments (runs.csv's `hparams`) that differ between their runs,
  over every regime, E and seed both ran ('name: parent value -> variant value')."""
  cells = results.group(rows)
  methods = results.orders(rows, config)[1]
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
          if results.num(a.get(k)) != results.num(b.get(k)) or (
              results.num(a.get(k)) is None and a.get(k) != b.get(k)):
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


def tuning_section(choices, config) -> str:
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

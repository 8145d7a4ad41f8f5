"""The report's Markdown tables and lists, from runs.csv's rows (`results`) and config.json:
protocol, setup, regimes, time, tuning, variants, results per (regime, E) and their summaries."""

import json
import math
from typing import Any, Mapping, Optional, Sequence

from experiments import stats
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results
from experiments.benchmarking import runs as runs_lib

DAGGER = '†'


def fmt(value: Optional[float], digits: int = 2) -> str:
  return '-' if value is None or not math.isfinite(value) else f'{value:.{digits}f}'


def fmt_mean_std(values: Sequence[float], digits: int = 4) -> str:
  """'mean ± sample sd' of the finite values ('mean' alone for one value, '-' for none)."""
  mean, std = stats.mean_std(values)
  if math.isnan(mean):
    return '-'
  return f'{mean:.{digits}f} ± {std:.{digits}f}' if len(values) > 1 else f'{mean:.{digits}f}'


def fmt_p(p: float) -> str:
  return '-' if not math.isfinite(p) else '<0.001' if p < 0.001 else f'{p:.3f}'


def fmt_difference(d: Optional[stats.Interval], *, mark: bool = False,
                   digits: int = 4) -> str:
  """'+m [+low, +high]' (bold with a dagger where `mark`), '+m (n=1)' for one seed."""
  if d is None:
    return '-'
  if d.n < 2:
    return f'{d.mean:+.{digits}f} (n=1)'
  text = f'{d.mean:+.{digits}f} [{d.low:+.{digits}f}, {d.high:+.{digits}f}]'
  return f'**{text}** {DAGGER}' if mark else text


def _diverged(per_seed) -> int:
  return sum(results.is_true(r.get('diverged')) for r in per_seed.values())


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  lines = ['| ' + ' | '.join(str(c) for c in line) + ' |' for line in [header, *rows]]
  return '\n'.join([lines[0], '|' + '---|' * len(header)] + lines[1:]) + '\n'


def delta_cell(d: Optional[stats.Interval], chance: bool, *, mark: bool) -> str:
  """A comparison's Δ cell: the interval (marked where `mark`), or what makes it no comparison
  (both sides at chance) or a degenerate one (identical runs)."""
  if d is None:
    return '-'
  if chance:
    return f'{d.mean:+.4f} (both at chance: no comparison)'
  if d.n >= 2 and d.sd == 0 and d.mean == 0:
    return '+0.0000 (identical in every seed)'
  return fmt_difference(d, mark=mark)


def regime_table(cell, methods: Sequence[str], *, baseline: str,
                 found: Mapping[str, stats.Interval], config: Mapping[str, Any]) -> str:
  """The Markdown table of one (regime, E) cell, one row per method, `found` its comparisons
  (`results.comparisons`); columns: docs/experiments.md, "The benchmark: does a method help?"."""
  key = results.primary_statistic(config)
  out = []
  for method in [m for m in methods if cell.get(m)]:
    per_seed = cell[method]
    d, chance = found.get(method), results.at_chance(cell, method, baseline)
    if method == baseline:
      delta = p = last_delta = '—'
    elif d is None:
      delta, p, last_delta = '—', '-', '-'
    else:
      delta = delta_cell(d, chance, mark=results.significant(d, chance))
      p = fmt_p(d.p_value)
      last_delta = delta_cell(results.difference(cell, method, baseline, 'final_accuracy'),
                              chance, mark=False)
    before = results.mean(per_seed, 'conflict_before')
    excluded = int(sum(results.num(r.get('excluded_nonfinite_updates')) or 0
                       for r in per_seed.values()))
    out.append([
        method, len(per_seed),
        f'{_diverged(per_seed)} ({excluded} updates excluded)' if excluded else _diverged(per_seed),
        sum(results.is_true(r.get('collapsed')) for r in per_seed.values()),
        fmt_mean_std(list(results.by_seed(per_seed, key).values())), delta, p,
        fmt_mean_std(list(results.by_seed(per_seed, 'final_accuracy').values())), last_delta,
        '-' if math.isnan(before) else
        f'{before:.3f} → {fmt(results.mean(per_seed, "conflict_after"), 3)}',
        fmt(results.mean(per_seed, 'norm_ratio'), 3),
        fmt(results.mean(per_seed, 'seconds_per_round'))])
  return _table(['method', 'seeds', 'diverged', 'collapsed', results.statistic_label(key, config),
                 f'Δ vs {baseline} [95% CI]', 'Holm p', 'last-round accuracy',
                 'Δ last round [95% CI]', 'conflict before → after', 'norm ratio', 's / round'],
                out)


def power_line(cell, *, baseline: str, config: Mapping[str, Any]) -> str:
  """The regime's minimal detectable difference and the seeds to detect its target
  (`results.power`)."""
  found = results.power(cell, baseline, config)
  if found is None:
    return 'Minimal detectable difference: not computable (fewer than 2 paired seeds).'
  mdd, needed, target, sd, n = found
  return (f'Minimal detectable difference {mdd:.4f} (paired t-test, {n} seeds, median paired sd '
          f'{sd:.4f} over the methods, {results.POWER:.0%} power at level {results.ALPHA:g} per '
          f'comparison); detecting {target:g} at that power takes {needed} seeds.')


def result_tables(rows, config: Mapping[str, Any]) -> list[tuple[str, int, str, str]]:
  """(regime, E, heading line, table) for every cell, from runs.csv's rows and config.json."""
  baseline = config['baseline']
  methods = results.orders(rows, config)[1]
  found = results.comparisons(rows, config)
  out = []
  for regime, e, cell in results.cells(rows, config):
    heading = power_line(cell, baseline=baseline, config=config)
    conflict, source = results.regime_conflict(cell, baseline)
    if conflict is not None:
      heading += f' Measured conflict fraction {conflict:.3f} ({source}).'
    mine = {m: d for (r, ee, m), d in found.items() if (r, ee) == (regime, e)}
    out.append((regime, e, heading,
                regime_table(cell, methods, baseline=baseline, found=mine, config=config)))
  return out


def composition_table(rows, config) -> str:
  """Each composition `B+A` against its own baseline `B` and against the benchmark's baseline
  (as the FedGH paper's Table II sets "+FedGH" beside each baseline): per regime and E, paired
  differences of the primary statistic, the first column's p-values Holm-adjusted over this
  table (a dagger only where Holm agrees). Empty when no composition and its baseline both ran."""
  baseline = config['baseline']
  key = results.primary_statistic(config)
  pairs = [(m, methods_lib.composition_parts(m)[0]) for m in results.orders(rows, config)[1]
           if methods_lib.composition_parts(m)]
  found = [(regime, e, method, own, *(results.difference(cell, a, b, key) for a, b in (
      (method, own), (method, baseline), (own, baseline))))
           for regime, e, cell in results.cells(rows, config) for method, own in pairs
           if method in cell and own in cell]
  if not found:
    return ''
  adjusted = stats.holm([d.p_value if d is not None else float('nan') for *_, d, _, _ in found])
  return _table(['regime', 'E', 'composition', 'its baseline', 'Δ vs its baseline [95% CI]',
                 'Holm p', f'Δ vs {baseline}', f'its baseline\'s Δ vs {baseline}'],
                [[f'`{regime}`', e, method, own,
                  fmt_difference(d_own, mark=math.isfinite(p) and p < results.ALPHA), fmt_p(p),
                  fmt_difference(d_base), fmt_difference(d_own_base)]
                 for (regime, e, method, own, d_own, d_base, d_own_base), p
                 in zip(found, adjusted)])


def epoch_effect_table(rows, config) -> str:
  """Per method: the mean over regimes of its gain over the baseline at each E, and how many
  regimes' comparisons Holm finds above / below 0."""
  baseline = config['baseline']
  regimes, methods, epochs = results.orders(rows, config)
  found = results.comparisons(rows, config)
  cells = results.group(rows)
  out = []
  for method in [m for m in methods if m != baseline]:
    parts = []
    for e in epochs:
      ds = [(found[(r, e, method)], results.at_chance(cells[(r, e)], method, baseline))
            for r in regimes if (r, e, method) in found]
      up = sum(results.significant(d, chance) and d.mean > 0 for d, chance in ds)
      down = sum(results.significant(d, chance) and d.mean < 0 for d, chance in ds)
      parts.append(f'{sum(d.mean for d, _ in ds) / len(ds):+.4f} ({up} / {down} of {len(ds)})'
                   if ds else '-')
    out.append([method] + parts)
  return _table(['method'] + [f'E={e}: mean Δ (Holm > 0 / Holm < 0)' for e in epochs], out)


def losses_list(rows, config) -> str:
  """The cells where a method loses to the baseline (Holm agrees), with what was measured
  there."""
  baseline = config['baseline']
  cells = results.group(rows)
  lines = []
  for (regime, e, method), d in results.comparisons(rows, config).items():
    cell = cells[(regime, e)]
    if not (results.significant(d, results.at_chance(cell, method, baseline)) and d.mean < 0):
      continue
    row = next(iter(cell[method].values()))
    bits = [f'Δ {fmt_difference(d)}, Holm p {fmt_p(d.p_value)}']
    ratio = results.mean(cell[method], 'norm_ratio')
    if not math.isnan(ratio):
      bits.append(f'norm ratio {ratio:.3f}')
    if _diverged(cell[method]):
      bits.append(f'{_diverged(cell[method])} seeds diverged')
    bits.append(f'client lr {row.get("client_lr")}, server lr {row.get("server_lr")}, '
                f'{row.get("hparams")}')
    lines.append(f'- {method}, {regime}, E={e}: ' + '; '.join(bits))
  return '\n'.join(lines) + '\n' if lines else 'No method loses where Holm agrees.\n'


def plateau_lines(curve_rows, config) -> str:
  """The Setup's rounds criterion and, per tuning regime and E, whether the baseline's validation
  curve plateaued, with the two means."""
  baseline = config['baseline']
  window, tolerance = config['tuning']['plateau_window'], config['tuning']['plateau_tolerance']
  head = (f'- Rounds: {config.get("rounds")}, enough when {baseline}\'s tuned validation '
          f'accuracy (its chosen candidate, mean over the tuning seeds) has plateaued: the mean '
          f'of its last {window} rounds within {tolerance:g} of the mean of the {window} before.')
  if not config['tuning']['tune']:
    return head + ' Not checked: no tuning, so no validation curve.\n'
  verdicts = results.plateau_verdicts(curve_rows, config)
  if not verdicts:
    return head + (f' Not checked: no validation curve of {baseline} recorded '
                   f'(`{results.CURVES_FILE}`).\n')
  lines = [head]
  for regime, epochs, (last, previous, plateaued), seeds in verdicts:
    if not (math.isfinite(last) and math.isfinite(previous)):
      what = (f'not plateaued (fewer than {2 * window} rounds or a non-finite value; last '
              f'{fmt(last, 4)}, before {fmt(previous, 4)})')
    else:
      trend = '' if plateaued else ', still climbing' if last > previous else ', falling'
      what = (f'{"plateaued" if plateaued else "NOT plateaued"}: last {window} rounds '
              f'{last:.4f}, the {window} before {previous:.4f} ({last - previous:+.4f}{trend})')
    lines.append(f'  - `{regime}`, E={epochs} ({seeds} tuning seeds): {what}.')
  return '\n'.join(lines) + '\n'


def duration(seconds: float) -> str:
  minutes, secs = divmod(int(round(seconds)), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours} h {minutes:02d} min {secs:02d} s' if hours else f'{minutes} min {secs:02d} s'


def protocol_section(config, rows) -> str:
  """The protocol, stated before any number: the test split, the search, the primary statistic,
  divergence, the statistics, and every symbol of the tables."""
  baseline = config['baseline']
  seeds = config.get('report_seeds') or []
  tuning = config['tuning']
  lines = [
      '- Test split: fixed for every seed and never read by tuning (digits: one holdout drawn '
      'once; Synthetic: the clients and their test examples drawn once, the seed redrawing the '
      'training examples; EMNIST, LEAF and tfds: their own test split). Tuning scores a '
      'validation split carved from the clients\' training examples only. Seeds vary the '
      'partition of the training pool, the initial model and the clients sampled.']
  if tuning['tune']:
    extra, base = results.unequal_search(config)
    equal = ('every method, the baseline included, searched the same client learning rates '
             f'{tuning.get("client_lr_grid")} and server learning rates {base}, then its own '
             'grid' if not extra else
             f'UNEQUAL: {", ".join(extra)} searched server learning rates that {baseline} did '
             f'not ({baseline}: {base}); their gains may come from the search alone')
    lines.append(f'- Search: {equal}; the candidates per method are listed under Tuning.')
  lines.append(
      '- Primary statistic, named before the runs: the '
      f'{results.statistic_label(results.primary_statistic(config), config)} on the test split, '
      'compared with the baseline by seed (same initial model, clients and partition); the last '
      'round\'s accuracy is secondary. The best round is not reported (it selects on the test '
      'split).')
  lines.append(
      '- Divergence: a run diverges at the first round whose evaluated accuracy or loss, clients\' '
      'or global training loss is not finite, whose server update is rejected as non-finite, or '
      'whose clients\' updates are all zeroed for non-finite values; it is recorded, not dropped, '
      'and counts at chance accuracy (1 / classes) from that round on. A run is collapsed when '
      f'its final accuracy is within {runs_lib.COLLAPSE_MARGIN:g} of chance or its final model '
      f'predicts one class for {runs_lib.COLLAPSE_SHARE:.0%} of the test split; a comparison '
      'whose both sides all collapsed is marked and never called a tie.')
  lines.append(
      f'- Statistics: {len(seeds)} reporting seeds'
      f'{" (fewer than 10: read every interval as a pilot)" if len(seeds) < 10 else ""}; '
      'paired differences over seeds with 95% Student-t intervals; p-values Holm-adjusted over '
      f'the {len(results.comparisons(rows, config))} comparisons of the Results tables (every '
      f'method against {baseline} in every regime and E); {DAGGER} and bold only where the '
      f'Holm-adjusted p < {results.ALPHA:g}. Each regime states its minimal detectable difference '
      'and the seeds needed for its target difference. Words: "beats" / "loses" where Holm '
      'agrees, "ties" where the 95% interval lies inside '
      f'±{results.margin(config):g}, otherwise "inconclusive".')
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
  tuning, plan = config['tuning'], config['plan']
  lines = [f'- {config["description"]}'] if config.get('description') else []
  lines += [
      f'- Regimes: {", ".join(f"`{r}`" for r in config.get("regimes", []))}.',
      f'- Methods: {", ".join(config.get("methods", []))}; baseline '
      f'{config["baseline"]}.',
      f'- Local epochs E: {config.get("epochs")}; reporting seeds: {config.get("report_seeds")};'
      f' {config.get("rounds")} rounds, {config.get("clients_per_round")} clients per round, '
      f'batch {config.get("batch_size")}, client SGD (momentum '
      f'{config.get("client_momentum", 0)}), server SGD.',
      '- Models: ' + (', '.join(f'{d}: {m}' for d, m in plan['models'].items())
                      or 'each dataset default') + '.',
      '- For a given seed every method starts from the same initial model and samples the same '
      'clients in every round; ' + (
          'the partition of the training pool is drawn with the seed too.'
          if config.get('vary_partition', True) else
          f'every seed uses the partition of data seed {config.get("data_seed")}.'),
      '- Each learning process is built once per (method, builder arguments, model) and reused: '
      'a run sets its initial model, its learning rates and (FedGH) its partner-order seed, the '
      'run\'s seed, in the process\'s initial state.']
  if not tuning['tune']:
    return '\n'.join(lines + [
        f'- No tuning: client lr {config.get("client_learning_rate")}, server lr '
        f'{config.get("server_learning_rate")}, and the given method values (`hparams` column of '
        'runs.csv).']) + '\n'
  edge = (f'A numeric grid whose best value is at its edge is extended past it (x or / '
          f'{tuning["edge_factor"]:g}, at most {tuning["edge_steps"]} times per side, every '
          'method alike); "at edge" marks a value still at an edge. '
          if tuning.get('edge_steps') else '')
  regimes = ', '.join(f'{d}: `{r}`' for d, r in plan['tuning_regimes'].items()) or 'see Tuning'
  lines.append(
      f'- Tuning: {tuning.get("strategy")} search on a validation split '
      f'({tuning.get("validation_fraction")} of each client\'s training examples, seeded), '
      f'tuning seeds {tuning.get("tuning_seeds")} (disjoint from the reporting seeds), score '
      f'= mean validation accuracy over the last {tuning.get("last_k")} rounds; client lr '
      f'grid {tuning.get("client_lr_grid")}, server lr grid {tuning.get("server_lr_grid")}. '
      f'Tuned regimes: {regimes}. {edge}Reporting runs train on all of each client\'s training '
      'data and are evaluated on the test split.')
  grids = [f'{m["name"]}: ' + ', '.join(f'{k} in {v}' for k, v in m['grid'].items())
           for m in plan['methods'] if m.get('grid')]
  if grids:
    lines.append('- Method grids searched (before any edge extension): ' + '; '.join(grids) + '.')
  return '\n'.join(lines) + '\n'


def time_section(timing, rows) -> str:
  if not timing:
    return 'No timing recorded.\n'
  wall = sum(t.get('wall_seconds', 0.0) for t in timing)
  build = sum(t.get('build_seconds', 0.0) for t in timing)
  table = _table(['invocation', 'finished', 'wall time', 'building processes', 'processes built',
                  'runs run', 'runs skipped', 'runs failed'],
                 [[i, t.get('finished', ''), duration(t.get('wall_seconds', 0)),
                   f'{t.get("build_seconds", 0):.0f} s', t.get('processes_built', ''),
                   t.get('runs_done', ''), t.get('runs_skipped', ''), t.get('runs_failed', '')]
                  for i, t in enumerate(timing, start=1)])
  run_seconds = sum(results.num(r.get('run_seconds')) or 0.0 for r in rows)
  return (f'{table}\nTotal over invocations: {duration(wall)} of which {duration(build)} '
          f'({100.0 * build / wall if wall else 0.0:.1f}%) building learning processes (each '
          'built once per method, hyperparameters and model, then reused across regimes, local '
          f'epochs and seeds).\nReporting runs: {len(rows)}, {duration(run_seconds)} of training '
          'and evaluation in all.\n')


def regimes_section(regimes) -> str:
  if not regimes:
    return 'Not recorded.\n'
  return _table(
      ['regime', 'clients', 'examples', 'examples per client (min / median / max)',
       'classes per client (mean)', 'label TV distance to the pooled labels (mean)'],
      [[f'`{r["regime"]}`', r['num_clients'], r['num_examples'],
        '{min} / {median:g} / {max}'.format(**r['examples_per_client']),
        f'{r["classes_per_client"]["mean"]:.2f}', f'{r["label_tv_distance"]["mean"]:.3f}']
       for r in regimes]) + ('\nTraining data of the first reporting seed\'s partition; the TV '
                             'distance is 0 for IID labels and near 1 for disjoint ones.\n')


def _fmt_value(value) -> str:
  return f'{value:g}' if isinstance(value, float) else str(value)


def _settings(row) -> dict[str, Any]:
  return dict(json.loads(row.get('hparams') or '{}'), client_lr=row.get('client_lr'),
              server_lr=row.get('server_lr'))


def variant_differences(rows, config) -> list[tuple[str, str, list[str]]]:
  """(variant, parent, differences) for every method of the runs whose parent (config.json's
  plan) ran too: the learning rates and builder arguments (runs.csv's `hparams`) that differ
  between their runs, over every regime, E and seed both ran ('name: parent value -> variant
  value (regime)')."""
  methods = results.orders(rows, config)[1]
  parents = {m['name']: m.get('parent') for m in config['plan']['methods']}
  out = []
  for method in [m for m in methods if parents.get(m) in methods]:
    parent, found = parents[method], []
    for cell in results.group(rows).values():
      for seed in sorted(set(cell.get(method, {})) & set(cell.get(parent, {}))):
        a, b = _settings(cell[parent][seed]), _settings(cell[method][seed])
        for k in sorted(set(a) | set(b)):
          x, y = results.num(a.get(k)), results.num(b.get(k))
          text = (f'{k}: {_fmt_value(a.get(k, "-"))} -> {_fmt_value(b.get(k, "-"))} '
                  f'({cell[method][seed]["regime"]})')
          if (x != y or (x is None and a.get(k) != b.get(k))) and text not in found:
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
  return ('What each variant ran with that its parent did not (runs.csv\'s learning rates and '
          'builder arguments, per regime); a variant should change exactly one thing:\n\n'
          + '\n'.join(lines) + '\n') if lines else ''


def _lrs(values) -> str:
  return ', '.join(f'{v:g}' for v in values)


def tuning_section(choices, config) -> str:
  if not config['tuning']['tune']:
    return 'Not tuned (`--tune=false`): every run uses the given values (see Setup).\n'
  if not choices:
    return 'No tuning results.\n'
  baseline = config['baseline']
  out = []
  for where in dict.fromkeys((c['dataset'], c['regime'], c['epochs']) for c in choices):
    dataset, regime, epochs = where
    here = [c for c in choices if (c['dataset'], c['regime'], c['epochs']) == where]
    table = []
    for c in here:
      scores = sorted((s for s in c['scores'] if s['score'] is not None
                       and math.isfinite(s['score'])), key=lambda s: -s['score'])
      edge = c.get('at_edge') or ()
      table.append([
          f'{c["method"]} (at edge: {", ".join(edge)})' if edge else c['method'],
          f'{c["client_lr"]:g}', f'{c["server_lr"]:g}',
          ', '.join(f'{k}={_fmt_value(v)}' for k, v in sorted(c['tuned'].items())) or '-',
          f'{c["score"]:.4f}' if c['score'] is not None and math.isfinite(c['score']) else 'nan',
          f'{scores[1]["candidate"]}: {scores[1]["score"]:.4f}' if len(scores) > 1 else '-',
          len(c['scores']), _lrs(c['client_lrs_tried']), _lrs(c['server_lrs_tried'])])
    out.append(f'**{dataset}**, E={epochs}: tuned on `{regime}`; used for every {dataset} '
               'regime at this E (and at any E of the grid not tuned, nearest first).\n')
    out.append(_table(['method', 'client lr', 'server lr', 'own values', 'validation score',
                       'runner-up', 'candidates', 'client lrs tried', 'server lrs tried'], table))
    tried = {c['method']: set(c['server_lrs_tried']) for c in here}
    if baseline in tried:
      missing = sorted(set().union(*tried.values()) - tried[baseline])
      out.append(f'The baseline ({baseline}) searched every server learning rate any method '
                 'searched.\n' if not missing else
                 f'The baseline ({baseline}) did not search the server learning rates '
                 f'{_lrs(missing)} that other methods searched.\n')
  return '\n'.join(out)

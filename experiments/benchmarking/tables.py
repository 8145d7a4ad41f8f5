"""The report's Markdown tables and lists from runs.csv's rows and config.json; their prose is
report_text.md's."""

import functools
import json
import math
import os
import re
from typing import Any, Mapping, Optional, Sequence

from experiments import stats
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results
from experiments.benchmarking import runs as runs_lib

DAGGER = '†'
_TEXT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'report_text.md')


@functools.cache
def _texts() -> dict[str, str]:
  with open(_TEXT_FILE) as f:
    _, *parts = re.split(r'^## (\w+)\n', f.read(), flags=re.MULTILINE)
  return {name: ' '.join(body.split()) for name, body in zip(parts[::2], parts[1::2])}


def text(name: str, **values: Any) -> str:
  """report_text.md's text `name` with its `{placeholders}` filled."""
  return _texts()[name].format(**values)


def fmt(value: Optional[float], digits: int = 2) -> str:
  return '-' if value is None or not math.isfinite(value) else f'{value:.{digits}f}'


def fmt_mean_std(per_seed, column: str, digits: int = 4) -> str:
  """'mean ± sd' over seeds of a column's finite values ('mean' for one, '-' for none)."""
  values = list(results.by_seed(per_seed or {}, column).values())
  mean, std = stats.mean_std(values)
  return ('-' if math.isnan(mean) else f'{mean:.{digits}f} ± {std:.{digits}f}'
          if len(values) > 1 else f'{mean:.{digits}f}')


def fmt_p(p: float) -> str:
  return '-' if not math.isfinite(p) else '<0.001' if p < 0.001 else f'{p:.3f}'


def fmt_difference(d: Optional[stats.Interval], *, mark: bool = False, digits: int = 4,
                   half_width: bool = False) -> str:
  """'+m [+low, +high]' (bold with a dagger where `mark`), '+m ± half-width' with `half_width`,
  '+m (n=1)' for one seed."""
  if d is None or d.n < 2 or half_width:
    return ('-' if d is None else f'{d.mean:+.{digits}f} (n=1)' if d.n < 2 else
            f'{d.mean:+.{digits}f} ± {(d.high - d.low) / 2:.{digits}f}')
  interval = f'{d.mean:+.{digits}f} [{d.low:+.{digits}f}, {d.high:+.{digits}f}]'
  return f'**{interval}** {DAGGER}' if mark else interval


def delta_cell(d: Optional[stats.Interval], chance: bool, *, mark: bool,
               pair: Optional[tuple[str, str]] = None) -> str:
  """A Δ cell: the interval, or why it is none (both collapsed; identical, with `pair` why)."""
  if d is None or chance:
    return '-' if d is None else f'{d.mean:+.4f} (both collapsed: no comparison)'
  if results.identical(d):
    return 'identical in every seed (no test)' + (
        '' if pair is None else f': {methods_lib.identical_reason(*pair) or "reason unknown"}')
  return fmt_difference(d, mark=mark)


def duration(seconds: float) -> str:
  minutes, secs = divmod(int(round(seconds)), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours} h {minutes:02d} min {secs:02d} s' if hours else f'{minutes} min {secs:02d} s'


def _diverged(per_seed) -> int:
  return sum(results.is_true(r.get('diverged')) for r in per_seed.values())


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  lines = ['| ' + ' | '.join(str(c) for c in line) + ' |' for line in [header, *rows]]
  return '\n'.join([lines[0], '|' + '---|' * len(header)] + lines[1:]) + '\n'


def _tested_cells(cell, method: str, against: str, d) -> tuple[str, str]:
  """(Δ cell, Holm p cell) of `method` against `against` ('no test' outside every family)."""
  if method == against or d is None:
    return '—', '—' if method == against else '-'
  chance = results.at_chance(cell, method, against)
  return (delta_cell(d, chance, mark=results.significant(d, chance), pair=(method, against)),
          fmt_p(d.p_value) if results.tested(d) or results.identical(d) else 'no test')


def regime_table(cell, methods: Sequence[str], *, config: Mapping[str, Any],
                 against: Sequence[str], found: Mapping[str, Mapping[str, stats.Interval]],
                 every: Optional[Mapping[str, str]] = None) -> str:
  """One (regime, E) cell's table, a row per method (columns: docs/experiments.md); `found`:
  reference -> method -> comparison, per `against`; `every`: method -> verdict against all."""
  key, baseline = results.primary_statistic(config), against[0]
  out = []
  for method in [m for m in methods if cell.get(m)]:
    per_seed = cell[method]
    d, chance = found[baseline].get(method), results.at_chance(cell, method, baseline)
    last_delta = ('—' if method == baseline else '-' if d is None else delta_cell(
        results.difference(cell, method, baseline, 'final_accuracy'), chance, mark=False))
    before = results.mean(per_seed, 'conflict_before')
    excluded = int(sum(results.by_seed(per_seed, 'excluded_nonfinite_updates').values()))
    out.append([
        method, len(per_seed), f'{_diverged(per_seed)} ({excluded} updates excluded)'
        if excluded else _diverged(per_seed),
        sum(results.is_true(r.get('collapsed')) for r in per_seed.values()),
        fmt_mean_std(per_seed, key),
        *[c for b in against for c in _tested_cells(cell, method, b, found[b].get(method))],
        *([every.get(method, '—')] if every is not None else []),
        fmt_mean_std(per_seed, 'final_accuracy'), last_delta,
        '-' if math.isnan(before) else
        f'{before:.3f} → {fmt(results.mean(per_seed, "conflict_after"), 3)}',
        fmt(results.mean(per_seed, 'norm_ratio'), 3),
        fmt(results.mean(per_seed, 'seconds_per_round'))])
  return markdown_table(
      ['method', 'seeds', 'diverged', 'collapsed', results.statistic_label(key, config),
       *[c for b in against for c in (f'Δ vs {b} [95% CI]', 'Holm p')],
       *(['vs every baseline'] if every is not None else []),
       'last-round accuracy', 'Δ last round [95% CI]',
       'conflict before → after', 'norm ratio', 's / round'], out)


def power_line(cell, *, baseline: str, config: Mapping[str, Any]) -> str:
  """Outside the primary family: the range of the detectable differences at `ALPHA` and seeds
  needed over the comparisons against `baseline` (neither collapsed, sd > 0); '' without one."""
  key = results.primary_statistic(config)
  found = [d for m in cell for d in [results.difference(cell, m, baseline, key)]
           if not (results.collapsed(cell[m]) or results.collapsed(cell.get(baseline)))
           and d is not None and d.n >= 2 and math.isfinite(d.sd) and d.sd > 0]
  if not found:
    return ''
  target = results.detect_for(next(iter(next(iter(cell.values())).values()))['dataset'], config)
  mdd = [results.detectable(d, results.ALPHA) for d in found]
  needed = [stats.seeds_needed(d.sd, target, alpha=results.ALPHA, power=results.POWER)
            for d in found]
  return text('power_line', low=min(mdd), high=max(mdd), n=min(d.n for d in found),
              power=results.POWER, alpha=results.ALPHA, target=target, fewest=min(needed),
              most=max(needed))


def result_tables(rows, config: Mapping[str, Any]) -> list[tuple[str, int, str, str]]:
  """(regime, E, heading line, table) for every cell; the heading names the baselines identical
  to the baseline, a transferred tuning, the power outside the family and the conflict."""
  baseline, key = config['baseline'], results.primary_statistic(config)
  methods = results.orders(rows, config)[1]
  found, tested = results.comparisons(rows, config), results.family(rows, config)
  every, datasets = results.every_baseline(rows, config), results.regime_datasets(rows)
  out = []
  for regime, e, cell in results.cells(rows, config):
    conflict, whose = results.regime_conflict(cell, baseline)
    primary, refs = regime in results.primary_regimes(config), results.cell_references(cell, config)
    same = [b for b in results.references(config) if primary and b in cell and b not in refs]
    source = results.transferred_from(config, regime, datasets[regime])
    heading = ' '.join(filter(None, (
        text('same_as_baseline', same=', '.join(same), baseline=baseline) if same else '',
        text('transferred', source=source) if source else '',
        '' if primary else text('outside_family'),
        '' if primary else power_line(cell, baseline=baseline, config=config),
        f'Measured conflict fraction {conflict:.3f} ({whose}).' if conflict is not None
        else '')))
    against = refs if primary else [baseline]
    per = {baseline: {m: d for (r, ee, m), d in found.items() if (r, ee) == (regime, e)}}
    for b in against[1:]:   # the primary family's; the baselines against each other: no test
      per[b] = {m: tested.get((regime, e, m, b)) or d._replace(family='')
                for m in methods if m != b
                for d in [results.difference(cell, m, b, key)] if d is not None}
    out.append((regime, e, heading, regime_table(
        cell, methods, config=config, against=against, found=per,
        every={m: w for (r, ee, m), (w, _) in every.items() if (r, ee) == (regime, e)}
        if primary else None)))
  return out


def composition_table(rows, config) -> str:
  """Each composition `B+A` against its `B` (with the primary family's Holm p where tested)
  and against the baseline (as FedGH's Table II), per regime and E; '' when none ran with `B`."""
  baseline, key = config['baseline'], results.primary_statistic(config)
  tested = results.family(rows, config)
  pairs = [(m, methods_lib.composition_parts(m)[0]) for m in results.orders(rows, config)[1]
           if methods_lib.composition_parts(m)]
  found = [(regime, e, method, own, *(results.difference(cell, a, b, key) for a, b in (
      (method, own), (method, baseline), (own, baseline))))
           for regime, e, cell in results.cells(rows, config) for method, own in pairs
           if method in cell and own in cell]
  if not found:
    return ''

  def own_cells(regime, e, method, own, d):
    primary = tested.get((regime, e, method, own))
    return (delta_cell(primary or d, False, mark=results.significant(primary), pair=(method, own)),
            'no test' if primary is None else fmt_p(primary.p_value))
  return markdown_table(
      ['regime', 'E', 'composition', 'its baseline', 'Δ vs its baseline [95% CI]',
       'Holm p (primary family)', f'Δ vs {baseline}', f'its baseline\'s Δ vs {baseline}'],
      [[f'`{regime}`', e, method, own, *own_cells(regime, e, method, own, d_own),
        fmt_difference(d_base), fmt_difference(d_own_base)]
       for regime, e, method, own, d_own, d_base, d_own_base in found])


def windows_table(rows, config) -> str:
  """The primary family's verdicts on the three `last_k` windows before the last and on the
  last, each Holm-adjusted alike; '' without a family or a last-k primary statistic."""
  if results.primary_statistic(config) != 'last_k_accuracy' or not results.family(rows, config):
    return ''
  found = [results.family(rows, config, back) for back in (3, 2, 1, 0)]
  cells, margin = results.group(rows), results.margin(config)
  words = {k: [results.verdict(f.get(k), margin, results.at_chance(cells[k[:2]], *k[2:]))
               for f in found] for k in found[-1]}
  changed = [[f'`{regime}`', e, method, against, *w]
             for (regime, e, method, against), w in words.items() if len(set(w)) > 1]
  last_k = int(config['tuning']['last_k'])
  head = text('windows_intro', same=len(words) - len(changed), total=len(words), last_k=last_k)
  return head + '\n' + ('\n' + markdown_table(
      ['regime', 'E', 'method', 'against', f'{3 * last_k} to {4 * last_k - 1} rounds before',
       f'{2 * last_k} to {3 * last_k - 1} before', f'{last_k} to {2 * last_k - 1} before',
       'last window'], changed) if changed else '')


def epoch_effect_table(rows, config) -> str:
  """Per method and E: its mean gain over regimes, and in how many Holm finds it > 0 / < 0."""
  baseline = config['baseline']
  regimes, methods, epochs = results.orders(rows, config)
  found, cells, out = results.comparisons(rows, config), results.group(rows), []
  for method in [m for m in methods if m != baseline]:
    parts = []
    for e in epochs:
      ds = {r: found[(r, e, method)] for r in regimes if (r, e, method) in found}
      words = [results.verdict(d, chance=results.at_chance(cells[(r, e)], method, baseline))
               for r, d in ds.items()]
      parts.append(f'{sum(d.mean for d in ds.values()) / len(ds):+.4f} '
                   f'({words.count("beats")} / {words.count("loses")} of {len(ds)})' if ds else '-')
    out.append([method] + parts)
  return markdown_table(['method'] + [f'E={e}: mean Δ (Holm > 0 / Holm < 0)' for e in epochs], out)


def losses_list(rows, config) -> str:
  """The primary family's comparisons a method loses (Holm agrees), with what was measured."""
  cells, lines = results.group(rows), []
  for (regime, e, method, against), d in results.family(rows, config).items():
    cell = cells[(regime, e)]
    if results.verdict(d, chance=results.at_chance(cell, method, against)) != 'loses':
      continue
    row, ratio = next(iter(cell[method].values())), results.mean(cell[method], 'norm_ratio')
    bits = [f'Δ {fmt_difference(d)}, Holm p {fmt_p(d.p_value)}',
            '' if math.isnan(ratio) else f'norm ratio {ratio:.3f}',
            f'{_diverged(cell[method])} seeds diverged' if _diverged(cell[method]) else '',
            f'client lr {row.get("client_lr")}, server lr {row.get("server_lr")}, '
            f'{row.get("hparams")}']
    lines.append(f'- {method} against {against}, {regime}, E={e}: '
                 + '; '.join(filter(None, bits)))
  return '\n'.join(lines) + '\n' if lines else 'No method loses where Holm agrees.\n'


def plateau_lines(curve_rows, config, rows=()) -> str:
  """The rounds criterion and, per tuning regime and E, whether the baseline's validation curve
  plateaued; per reporting regime and E, whether its test curve (`rows`) did."""
  baseline = config['baseline']
  window, tolerance = config['tuning']['plateau_window'], config['tuning']['plateau_tolerance']
  head = text('plateau_rule', rounds=config_lib.per_dataset(config, 'rounds'), baseline=baseline,
              window=window, tolerance=tolerance)
  verdicts = results.plateau_verdicts(curve_rows, config) if config['tuning']['tune'] else []
  tests = results.test_plateau_verdicts(rows, config) if rows else []
  lines = [head if verdicts else head + ' ' + text(
      'plateau_unchecked' if config['tuning']['tune'] else 'plateau_untuned', baseline=baseline,
      file=results.CURVES_FILE)]
  for split, found in (('tuning', verdicts), ('reporting', tests)):
    for regime, epochs, (last, previous, plateaued), seeds in found:
      if not (math.isfinite(last) and math.isfinite(previous)):
        what = text('plateau_short', rounds=2 * window, last=fmt(last, 4),
                    before=fmt(previous, 4))
      else:
        trend = '' if plateaued else ', still climbing' if last > previous else ', falling'
        what = (f'{"plateaued" if plateaued else "NOT plateaued"}: last {window} rounds '
                f'{last:.4f}, the {window} before {previous:.4f} ({last - previous:+.4f}{trend})')
      curve = 'validation' if split == 'tuning' else 'test'
      lines.append(f'  - `{regime}`, E={epochs}, {curve} ({seeds} {split} seeds): {what}.')
  return '\n'.join(lines) + '\n'


def protocol_section(config, rows) -> str:
  """The protocol: test split, search, primary statistic, divergence, statistics, symbols."""
  baseline, tuning, seeds = config['baseline'], config['tuning'], config.get('report_seeds') or []
  lines = [text('protocol_test_split')]
  if tuning['tune']:
    extra, base = results.unequal_search(config)
    equal = (text('protocol_search_unequal', methods=', '.join(extra), baseline=baseline,
                  base=base) if extra else
             text('protocol_search_equal', client=config_lib.per_dataset(config, 'client_lr_grid'),
                  base=base,
                  own=(', then its own grid' if tuning.get('tune_method_grids', True) else
                       ', every method at its given (default: its authors\') values')))
    lines.append(text('protocol_search', equal=equal))
  lines += [
      text('protocol_statistic', last_k=tuning.get('last_k'),
           label=results.statistic_label(results.primary_statistic(config), config)),
      text('protocol_divergence', factor=runs_lib.COLLAPSE_FACTOR,
           margin=runs_lib.COLLAPSE_MARGIN, share=runs_lib.COLLAPSE_SHARE),
      text('protocol_statistics', seeds=len(seeds),
           pilot=' (fewer than 10: read every interval as a pilot)' if len(seeds) < 10 else '',
           family=family_description(rows, config), baseline=baseline, dagger=DAGGER,
           alpha=results.ALPHA, margin=results.margin(config)),
      text('protocol_symbols')]
  return '\n'.join(lines) + '\n'


def family_description(rows, config) -> str:
  """The primary family in words: size, regimes, methods, references, `against_every`."""
  named, methods = config.get('family_methods'), results.compared_methods(rows, config)
  outside = [m for m in results.orders(rows, config)[1] if m not in methods
             and m != config['baseline'] and m not in results.references(config)]
  others = results.references(config)[1:]
  return text('family' if others else 'family_single',
              size=results.family_size(results.family(rows, config)),
              which=(f'methods named for it ({", ".join(methods)})' if named
                     else 'methods that are not baselines'),
              moved=text('family_moved', outside=', '.join(outside)) if named and outside else '',
              methods=len(methods), baseline=config['baseline'],
              others=', '.join(others),
              regimes=', '.join(f'`{r}`' for r in results.primary_regimes(config)),
              level=results.holm_level(rows, config))


def _tuned_on(plan) -> str:
  """Which regime each reporting regime's tuning ran on (older config.json: per dataset)."""
  if 'tuned_on' not in plan:
    return ', '.join(f'{d}: `{r}`' for d, r in plan.get('tuning_regimes', {}).items())
  return ', '.join(f'`{r}`: ' + ('itself' if t == r else f'`{t}`')
                   for r, t in plan['tuned_on'].items())


def setup_section(config) -> str:
  tuning, plan = config['tuning'], config['plan']
  lines = [f'- {config["description"]}'] if config.get('description') else []
  natural = [f'`{r}`' for r in config.get('regimes', []) if ':natural' in r]
  lines += [
      f'- Regimes: {", ".join(f"`{r}`" for r in config.get("regimes", []))}.',
      f'- Methods: {", ".join(config.get("methods", []))}; baseline {config["baseline"]}.',
      text('setup_runs', epochs=config.get('epochs'), seeds=config.get('report_seeds'),
           rounds=config_lib.per_dataset(config, 'rounds'), clients=config.get('clients_per_round'),
           batch=config.get('batch_size'), momentum=config.get('client_momentum', 0)),
      '- Models: ' + (', '.join(f'{d}: {m}' for d, m in plan['models'].items())
                      or 'each dataset default') + '.',
      text('setup_same_start') + ' ' + (
          text('setup_partition_varies') + (' ' + text(
              'setup_partition_natural', regimes=', '.join(natural)) if natural else '')
          if config.get('vary_partition', True) else
          text('setup_partition_fixed', data_seed=config.get('data_seed'))),
      text('setup_processes')]
  if not tuning['tune']:
    return '\n'.join(lines + [text('setup_untuned', client=config.get('client_learning_rate'),
                                   server=config.get('server_learning_rate'))]) + '\n'
  edge = (text('setup_edge', factor=tuning['edge_factor'], steps=tuning['edge_steps']) + ' '
          if tuning.get('edge_steps') else '')
  lines.append(text(
      'setup_tuning', strategy=tuning.get('strategy') + (
          ' (successive halving)' if tuning.get('schedule') == 'halving' else ''),
      fraction=tuning.get('validation_fraction'), seeds=tuning.get('tuning_seeds'),
      last_k=tuning.get('last_k'), client=config_lib.per_dataset(config, 'client_lr_grid'),
      server=config_lib.per_dataset(config, 'server_lr_grid') if tuning.get('tune_server_lr', True)
      else f'none (--notune_server_lr: {config.get("server_learning_rate")})', edge=edge,
      regimes=_tuned_on(plan) or 'see Tuning'))
  grids = [f'{m["name"]}: ' + ', '.join(f'{k} in {v}' for k, v in m['grid'].items())
           for m in plan['methods'] if m.get('grid')]
  return '\n'.join(lines + ([text('setup_grids', grids='; '.join(grids))] if grids else [])) + '\n'


def time_section(timing, rows) -> str:
  if not timing:
    return 'No timing recorded.\n'
  wall, build = (sum(t.get(k, 0.0) for t in timing) for k in ('wall_seconds', 'build_seconds'))
  table = markdown_table(
      ['invocation', 'finished', 'wall time', 'building processes', 'processes built',
       'runs run', 'runs skipped', 'runs failed'],
      [[i, t.get('finished', '') + ('' if t.get('ended', True) else ' (stopped)'),
        duration(t.get('wall_seconds', 0)),
        f'{t.get("build_seconds", 0):.0f} s', t.get('processes_built', ''),
        t.get('runs_done', ''), t.get('runs_skipped', ''), t.get('runs_failed', '')]
       for i, t in enumerate(timing, start=1)])
  run_seconds = sum(results.num(r.get('run_seconds')) or 0.0 for r in rows)
  # Building is summed over the workers: its share is of the workers' time, not the wall's.
  busy = sum(t.get('wall_seconds', 0.0) * (t.get('workers') or 1) for t in timing)
  total = text('time_total', n=len(timing), wall=duration(wall), build=duration(build),
               share=100.0 * build / busy if busy else 0.0, busy=duration(busy))
  failed = timing[-1].get('failed') or []
  failures = ''.join([f'\n{text("time_failed", failed=len(failed))}\n\n'] + [
      f'- {f["run"]}: {f["error"]} (`{f["details"]}`)\n' for f in failed]) if failed else ''
  held = timing[-1].get('incomplete') or []
  failures += f'\n{text("time_incomplete", searches="; ".join(held))}\n' if held else ''
  return (f'{table}\n{total}\nReporting runs: {len(rows)}, {duration(run_seconds)} of training '
          f'and evaluation in all.\n{failures}')


def regimes_section(regimes) -> str:
  if not regimes:
    return 'Not recorded.\n'
  return markdown_table(
      ['regime', 'clients', 'examples', 'test examples',
       'examples per client (min / median / max)',
       'classes per client (mean)', 'label TV distance to the pooled labels (mean)'],
      [[f'`{r["regime"]}`', r['num_clients'], r['num_examples'],
        'not recorded' if r.get('test_examples') is None else r['test_examples'],
        '{min} / {median:g} / {max}'.format(**r['examples_per_client']),
        f'{r["classes_per_client"]["mean"]:.2f}', f'{r["label_tv_distance"]["mean"]:.3f}']
       for r in regimes]) + '\n' + text('regimes_note') + '\n'


def _fmt_value(value) -> str:
  return f'{value:g}' if isinstance(value, float) else str(value)


def _settings(row) -> dict[str, Any]:
  return dict(json.loads(row.get('hparams') or '{}'), client_lr=row.get('client_lr'),
              server_lr=row.get('server_lr'))


def variant_differences(rows, config) -> list[tuple[str, str, list[str], list[str]]]:
  """(variant, parent, settings that differ, 'name: parent value -> variant value (regime)')
  for each method whose plan parent ran too, over the lrs and `hparams` of every run both ran."""
  methods = results.orders(rows, config)[1]
  parents = {m['name']: m.get('parent') for m in config['plan']['methods']}
  out = []
  for method in [m for m in methods if parents.get(m) in methods]:
    parent, found = parents[method], {}   # change -> its setting
    for cell in results.group(rows).values():
      for seed in sorted(set(cell.get(method, {})) & set(cell.get(parent, {}))):
        a, b = _settings(cell[parent][seed]), _settings(cell[method][seed])
        for k in sorted(set(a) | set(b)):
          x, y = results.num(a.get(k)), results.num(b.get(k))
          if x != y or (x is None and a.get(k) != b.get(k)):
            found.setdefault(f'{k}: {_fmt_value(a.get(k, "-"))} -> {_fmt_value(b.get(k, "-"))} '
                             f'({cell[method][seed]["regime"]})', k)
    out.append((method, parent, sorted(set(found.values())), list(found)))
  return out


def variants_section(rows, config) -> str:
  lines = []
  for method, parent, keys, found in variant_differences(rows, config):
    note = '' if len(keys) == 1 else f' ({len(keys)} settings differ, not one)'
    lines.append(f'- {method} against {parent}{note}: ' + ('; '.join(found) or 'nothing'))
  return text('variants_intro') + '\n\n' + '\n'.join(lines) + '\n' if lines else ''


def _lrs(values) -> str:
  return ', '.join(f'{v:g}' for v in values)


def tuning_section(choices, config) -> str:
  if not config['tuning']['tune']:
    return 'Not tuned (`--tune=false`): every run uses the given values (see Setup).\n'
  if not choices:
    return 'No tuning results.\n'
  baseline, out = config['baseline'], []
  for where in dict.fromkeys((c['dataset'], c['regime'], c['epochs']) for c in choices):
    here = [c for c in choices if (c['dataset'], c['regime'], c['epochs']) == where]
    out += [text('tuning_where', dataset=where[0], regime=where[1], epochs=where[2]) + '\n',
            markdown_table(['method', 'client lr', 'server lr', 'own values', 'validation score',
                            'runner-up', 'candidates', 'client lrs tried', 'server lrs tried'],
                           [_tuning_row(c) for c in here])]
    tried = {c['method']: set(c['server_lrs_tried']) for c in here}
    if baseline in tried:
      missing = sorted(set().union(*tried.values()) - tried[baseline])
      out.append(text('tuning_unequal' if missing else 'tuning_equal', baseline=baseline,
                      missing=_lrs(missing)) + '\n')
  return '\n'.join(out)


def _tuning_row(c) -> list[Any]:
  """A tuning choice's row: values, score, the runner-up at full length, what was tried."""
  scores = sorted((s for s in c['scores'] if s['score'] is not None and math.isfinite(s['score'])
                   and s.get('rounds') == c.get('rounds')), key=lambda s: -s['score'])
  edge = [f'at {k[3:]}: {", ".join(c[k])}' for k in ('at_edge', 'at_bound') if c.get(k)]
  return [f'{c["method"]} ({"; ".join(edge)})' if edge else c['method'],
          f'{c["client_lr"]:g}', f'{c["server_lr"]:g}',
          ', '.join(f'{k}={_fmt_value(v)}' for k, v in sorted(c['tuned'].items())) or '-',
          f'{c["score"]:.4f}' if c['score'] is not None and math.isfinite(c['score']) else 'nan',
          f'{scores[1]["candidate"]}: {scores[1]["score"]:.4f}' if len(scores) > 1 else '-',
          c.get('candidates', len(c['scores'])), _lrs(c['client_lrs_tried']),
          _lrs(c['server_lrs_tried'])]

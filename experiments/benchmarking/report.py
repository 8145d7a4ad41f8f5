"""The benchmark's report from the files a benchmark leaves on disk, with no TFF (so
`--report_only` regenerates it): `write_report(root)` writes report.md and plots/;
`write_results_md` publishes it as RESULTS.md with its data in docs/results/."""

import os
import posixpath
import shutil
import traceback
from typing import Callable, Mapping, Optional, Sequence

from experiments import plotting
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import control as control_lib
from experiments.benchmarking import diagnosis
from experiments.benchmarking import results
from experiments.benchmarking import tables

REPORT_FILE = 'report.md'
PLOTS_DIR = 'plots'


def render(root: str, *, plot_prefix: str = PLOTS_DIR) -> str:
  """The report's Markdown body from the files under `root`; writes the plots under
  `root/plots`."""
  rows, config = results.load(root)
  choices = results.read_json(os.path.join(root, 'tuning_choices.json'), [])
  timing = results.read_json(os.path.join(root, 'timing.json'), [])
  baseline = config.get('baseline', 'fedavg')
  plots = plotting.write_plots(rows, config, os.path.join(root, PLOTS_DIR)) if rows else {}
  curves_path = os.path.join(root, results.CURVES_FILE)
  curve_rows = results.read_runs(curves_path) if os.path.exists(curves_path) else []
  validation_plots = plotting.write_validation_plots(curve_rows, config,
                                                     os.path.join(root, PLOTS_DIR))

  def image(key, alt):
    return f'![{alt}]({plot_prefix}/{plots[key]})' if key in plots else ''

  validation_images = [f'![validation accuracy, {r}, E={e}]({plot_prefix}/{name})'
                       for (r, e), name in validation_plots.items()]

  parts = [f'# Benchmark `{config.get("experiment_name", os.path.basename(root))}`\n',
           '## Setup\n', 'Protocol:\n', tables.protocol_section(config, rows),
           f'\nSettings ({len(rows)} reporting runs):\n', tables.setup_section(config),
           tables.plateau_lines(curve_rows, config),
           '## Regimes\n',
           tables.regimes_section(results.read_json(os.path.join(root, 'regimes.json'), [])),
           '## Time\n', tables.time_section(timing, rows),
           '## Tuning\n', tables.tuning_section(choices, config),
           ('Validation accuracy per round of each method\'s chosen candidate (`'
            + results.CURVES_FILE + '`):\n\n' + ' '.join(validation_images) + '\n'
            if validation_images else ''),
           tables.variants_section(rows, config),
           '## Results\n']
  for regime, e, heading, table in tables.result_tables(rows, config):
    parts.append(f'### `{regime}`, E={e}\n')
    parts.append(heading + '\n')
    parts.append(table)
    images = ' '.join(filter(None, (image(f'accuracy:{regime}:{e}', 'test accuracy'),
                                    image(f'train_loss:{regime}:{e}', 'training loss'))))
    if images:
      parts.append(images + '\n')
  compositions = tables.composition_table(rows, config)
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
  parts.append(tables.epoch_effect_table(rows, config))
  if 'epochs_effect' in plots:
    parts.append(image('epochs_effect', 'effect of local epochs') + '\n')
  parts.append(f'## Where a method loses to {baseline} (Holm)\n')
  parts.append(tables.losses_list(rows, config))
  sections = diagnosis_sections(rows, results.orders(rows, config)[1], baseline,
                                results.primary_statistic(config))
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
  """(method, Markdown) of `diagnosis.section` for every method but the
  baseline (a failing diagnosis shows its traceback)."""
  out = []
  for method in methods:
    algorithm = next((r['algorithm'] for r in rows if r['method'] == method), method)
    text = _shown_on_failure(lambda m=method, a=algorithm: diagnosis.section(
        m, a, rows, baseline=baseline, statistic=statistic), 'The diagnosis')
    if text:
      out.append((method, text.strip()))
  return out


def _control_section(root: str, plot_prefix: str) -> Optional[str]:
  """The positive control's section (`control`), from `root/positive_control/` if it ran."""
  sub = control_lib.control_root(root)
  if sub is None:
    return None
  rows = results.read_runs(os.path.join(sub, 'runs.csv'))
  config = config_lib.flat_settings(results.read_json(os.path.join(sub, 'config.json'), {}))
  settings = control_lib.PositiveControl.from_config(config)
  seconds = results.total_wall_seconds(sub)
  seeds = sorted({int(r['seed']) for r in rows})
  parts = ['Can the harness reproduce a published effect? FedProx (Li et al., "Federated '
           'Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Fig. 1-2): '
           'with many local epochs on Synthetic(1, 1), FedProx with mu = 1 trains stably where '
           'FedAvg\'s training loss oscillates or rises. Runs: ' + settings.describe() +
           f'; seeds {seeds}' + (f'; {tables.duration(seconds)} wall' if seconds else '') +
           f' (`{control_lib.CONTROL_DIR}/runs.csv`).\n']
  parts.append(_shown_on_failure(lambda: diagnosis.control_section(
      rows, method=settings.method, baseline=settings.baseline), 'The reading') + '\n')
  plots = plotting.write_plots(rows, config, os.path.join(sub, PLOTS_DIR)) if rows else {}
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

  Every number of the result tables comes from runs.csv alone (`tables.result_tables`).
  """
  body = render(root)
  path = os.path.join(root, REPORT_FILE)
  with open(path, 'w') as f:
    f.write(body)
  return path


RESULTS_FILES = ('runs.csv', 'tuning.csv', 'tuning_choices.json', 'config.json', 'timing.json',
                 'regimes.json', results.CURVES_FILE)


def results_dir_for(results_md: str) -> str:
  """Where RESULTS.md's data and plots go: `docs/results/` next to it."""
  return os.path.join(os.path.dirname(os.path.abspath(results_md)), 'docs', 'results')


def write_results_md(results_md: str, root: str, *, header: Mapping[str, str]) -> str:
  """Writes RESULTS.md: `header` (machine, date, command, wall time, ...) then the report,
  and copies runs.csv, the other result files and the plots to `docs/results/` beside it (`root`
  may be that directory itself: the report is then regenerated from the committed data).

  Returns:
    The results directory.
  """
  target = results_dir_for(results_md)
  os.makedirs(os.path.join(target, PLOTS_DIR), exist_ok=True)
  control_source = control_lib.control_root(root)
  for source_dir, target_dir in [(root, target)] + (
      [] if control_source is None else
      [(control_source, os.path.join(target, control_lib.CONTROL_DIR))]):
    os.makedirs(target_dir, exist_ok=True)
    for name in RESULTS_FILES:
      source, copy = os.path.join(source_dir, name), os.path.join(target_dir, name)
      if os.path.exists(source) and not (os.path.exists(copy) and os.path.samefile(source, copy)):
        shutil.copyfile(source, copy)
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

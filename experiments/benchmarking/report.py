"""The benchmark's report from its files on disk: `write_report(root)` writes report.md and plots/,
`write_results_md` publishes it as RESULTS.md with its data in docs/results/."""

import os
import posixpath
import shutil
import subprocess
import traceback
from typing import Callable, Mapping, Optional

from tff_conflict import _files as files
from experiments.benchmarking import plots as plots_lib
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import diagnosis
from experiments.benchmarking import results
from experiments.benchmarking import secondary
from experiments.benchmarking import tables

REPORT_FILE = 'report.md'
PLOTS_DIR = 'plots'


def render(root: str, *, plot_prefix: str = PLOTS_DIR) -> str:
  """The report's Markdown from the files under `root`; (re)writes `root/plots`."""
  rows, config, curve_rows = results.load(root)
  baseline, plots_dir = config['baseline'], os.path.join(root, PLOTS_DIR)
  plots = plots_lib.write_plots(rows, config, plots_dir) if rows else {}
  validation_plots = plots_lib.write_validation_plots(curve_rows, plots_dir)
  validation = [f'![validation accuracy, {r}, E={e}]({plot_prefix}/{name})' for (r, e), name
                in validation_plots.items()]
  for name in set(os.listdir(plots_dir) if os.path.isdir(plots_dir) else []) - {
      *plots.values(), *validation_plots.values()}:
    if name.endswith('.png'):
      os.remove(os.path.join(plots_dir, name))

  def image(key, alt):
    return f'![{alt}]({plot_prefix}/{plots[key]})' if key in plots else ''

  def read(name, default):
    return results.read_json(os.path.join(root, name), default)

  parts = [f'# Benchmark `{config.get("experiment_name", os.path.basename(root))}`\n',
           '## Setup\n', 'Protocol:\n', tables.protocol_section(config, rows),
           f'\nSettings ({len(rows)} reporting runs):\n', tables.setup_section(config),
           tables.plateau_lines(curve_rows, config, rows),
           '## Regimes\n', tables.regimes_section(read('regimes.json', [])),
           '## Time\n', tables.time_section(read('timing.json', []), rows),
           '## Tuning\n', tables.tuning_section(read('tuning_choices.json', []), config),
           (tables.text('validation_plots', file=results.CURVES_FILE) + '\n\n'
            + ' '.join(validation) + '\n' if validation else ''),
           tables.variants_section(rows, config),
           '## Results\n']
  for regime, e, heading, table in tables.result_tables(rows, config):
    parts += [f'### `{regime}`, E={e}\n', *([heading + '\n'] if heading else []), table]
    images = ' '.join(filter(None, (image(f'accuracy:{regime}:{e}', 'test accuracy'),
                                    image(f'train_loss:{regime}:{e}', 'training loss'))))
    if images:
      parts.append(images + '\n')
  windows, compositions = tables.windows_table(rows, config), tables.composition_table(rows, config)
  power, speed = secondary.power_table(rows, config), secondary.speed_table(rows, config)
  noise = secondary.noise_table(rows, config, read('regimes.json', []))
  parts += ['## Noise against the effects\n', noise] if noise else []
  parts += ['## Power per comparison\n', power] if power else []
  parts += ['## Collapsed runs\n', secondary.collapse_section(rows, config)] if rows else []
  parts += ['## Verdicts on earlier windows\n', windows] if windows else []
  parts += ['## Rounds to a target (secondary)\n', speed] if speed else []
  parts += ['## Aggregators on top of the baselines\n', tables.text(
      'compositions_intro', baseline=baseline) + '\n', compositions] if compositions else []
  parts += [f'## Gain over {baseline} against gradient conflict\n',
            tables.text('gain_intro') + '\n',
            (image('gain_vs_conflict', 'gain against conflict') or 'No plot (no conflict '
             'measured).') + '\n',
            '## Effect of local epochs\n', tables.epoch_effect_table(rows, config)]
  if 'epochs_effect' in plots:
    parts.append(image('epochs_effect', 'effect of local epochs') + '\n')
  parts += ['## Where a method loses (primary family, Holm)\n', tables.losses_list(rows, config)]
  diagnoses = []
  for method in results.orders(rows, config)[1]:
    algorithm = next((r['algorithm'] for r in rows if r['method'] == method), method)
    text = _shown_on_failure(lambda m=method, a=algorithm: diagnosis.section(
        m, a, rows, baseline=baseline, statistic=results.primary_statistic(config)),
                             'The diagnosis')
    if text:
      diagnoses += [f'### {method}\n', text.strip() + '\n']
  control_text = _control_section(root, plot_prefix)
  parts += (['## Diagnosis\n'] + diagnoses if diagnoses else []) + (
      ['## Positive control\n', control_text] if control_text else [])
  parts += ['## Files\n', tables.text('files') + '\n']
  return '\n'.join(parts)


def _shown_on_failure(make: Callable[[], Optional[str]], what: str) -> Optional[str]:
  """`make()`, or the traceback of its failure as Markdown (a report is still written)."""
  try:
    return make()
  except Exception:  # pylint: disable=broad-except
    return f'{what} failed:\n\n```\n' + traceback.format_exc(limit=5) + '```'


def _control_section(root: str, plot_prefix: str) -> Optional[str]:
  """The positive control's section, from `root/positive_control/` if it ran."""
  sub = config_lib.control_root(root)
  if sub is None:
    return None
  rows, config, _ = results.load(sub)
  method, baseline, ran = config_lib.control_reading(config)
  seconds = results.total_wall_seconds(sub)
  wall = f'; {tables.duration(seconds)} wall' if seconds else ''
  parts = [tables.text('control_intro', ran=ran, seeds=sorted({int(r['seed']) for r in rows}),
                       wall=wall, file=f'{config_lib.CONTROL_DIR}/runs.csv') + '\n',
           _shown_on_failure(lambda: diagnosis.control_section(
               rows, method=method, baseline=baseline), 'The reading') + '\n']
  plots = plots_lib.write_plots(rows, config, os.path.join(sub, PLOTS_DIR)) if rows else {}
  prefix = posixpath.join(posixpath.dirname(plot_prefix), config_lib.CONTROL_DIR, PLOTS_DIR)
  images = [f'![{alt}]({prefix}/{name})' for key, name in sorted(plots.items())
            for kind, alt in (('train_loss:', 'training loss'), ('accuracy:', 'test accuracy'))
            if key.startswith(kind)]
  return '\n'.join(parts + ([' '.join(images) + '\n'] if images else []))


def write_report(root: str) -> str:
  """Writes `root/report.md` (and the plots) from the files under `root`; returns its path."""
  path = os.path.join(root, REPORT_FILE)
  files.write_text_atomically(path, render(root))
  return path


def results_dir_for(results_md: str) -> str:
  """Where RESULTS.md's data and plots go: `docs/results/` next to it."""
  return os.path.join(os.path.dirname(os.path.abspath(results_md)), 'docs', 'results')


def family_commit(results_dir: str) -> str:
  """The git commit (short hash, date) that last changed `results_dir`'s family.json, if that
  commit holds the file as it is now: the primary family as it was named before the runs."""
  name = results.FAMILY_FILE
  if not os.path.exists(os.path.join(results_dir, name)):
    return 'no family.json'
  git = lambda *args: subprocess.run(['git', *args], cwd=results_dir, capture_output=True,
                                     text=True, timeout=30, check=True).stdout
  try:   # no git, no repository or no commit yet, or git hung: not known
    found = git('log', '-n1', '--format=%h %cI', '--', name).split()
    committed = git('show', f'{found[0]}:./{name}') if found else None
  except (OSError, subprocess.SubprocessError):
    return 'not known (no git history here)'
  with open(os.path.join(results_dir, name)) as f:
    return f'{found[0]} ({found[1]})' if f.read() == committed else 'not committed as it is here'


def write_results_md(results_md: str, root: str, *, header: Mapping[str, str]) -> str:
  """Copies `root`'s result files (and its positive control's) to `results_dir_for` (`root` may
  be it), then writes `header`, the commit of its family.json (`family_commit`) and the report
  one level down to RESULTS.md; returns the dir."""
  target, control = results_dir_for(results_md), config_lib.control_root(root)
  for source_dir, target_dir in [(root, target)] + (
      [(control, os.path.join(target, config_lib.CONTROL_DIR))] if control else []):
    os.makedirs(target_dir, exist_ok=True)
    for name in results.RECORD_FILES:
      source, copy = os.path.join(source_dir, name), os.path.join(target_dir, name)
      if os.path.exists(source) and not (os.path.exists(copy) and os.path.samefile(source, copy)):
        shutil.copyfile(source, copy)
  header = dict(header, **{'Primary family (family.json) committed in': family_commit(target)})
  here = os.path.dirname(os.path.abspath(results_md))
  body = render(target, plot_prefix=os.path.relpath(os.path.join(target, PLOTS_DIR), here))
  lines = ['# Results', ''] + [f'- {key}: {value}' for key, value in header.items()] + [
      '', tables.text('results_md_data', runs=f'{os.path.relpath(target, here)}/runs.csv'), '']
  lines += ['#' + line if line.startswith('#') else line for line in body.splitlines()]
  files.write_text_atomically(results_md, '\n'.join(lines) + '\n')
  return target

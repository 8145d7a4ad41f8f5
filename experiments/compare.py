"""Compares algorithms (and seeds) on the same data, initial models and clients per round: `python
-m experiments.compare --algorithms=fedavg,fedgh --seeds=0,1,2` writes each run, summary.md and
plots under `<output_dir>/compare_<dataset>/` (`--preset=readme`: the README's command)."""

from tff_conflict import _interrupts as interrupts  # pylint: disable=g-bad-import-order
if __name__ == '__main__':   # Ctrl-C / SIGTERM before main (TensorFlow loading): 130 / 143 at once
  interrupts.exit_on_signals()

import dataclasses
import functools
import itertools
import os
import sys
from typing import Any, Mapping, Optional, Sequence

# Quiet before TensorFlow is imported (its C++ logs read the environment then); TensorFlow must be
# imported before absl's app.run() parses flags (BUILD_NOTES.md, Keras pitfalls).
import tff_conflict
tff_conflict.quiet()
import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np

from experiments import cli  # pylint: disable=g-import-not-at-top
from experiments import config
from experiments import executors
from experiments import experiment_lib
from experiments import flags_lib
from tff_conflict import _files as files
from experiments import presets
from tff_conflict.simulation import progress as progress_lib
from experiments import stats
from tff_conflict.simulation import training_loop
from experiments.benchmarking import config as bench_config
from experiments.benchmarking import plots as plotting
from experiments.benchmarking import runs as runs_lib

FLAGS = flags.FLAGS

_ALL_ALGORITHMS = list(experiment_lib.ALGORITHM_HPARAMS)
# The table's primary column averages the last LAST_K evaluated rounds, as the benchmark does.
LAST_K = bench_config.BenchmarkConfig.last_k

flags.DEFINE_list('algorithms', _ALL_ALGORITHMS, 'Algorithms to compare '
                  '(tff_conflict.learning.ALGORITHMS).')
flags.DEFINE_list('seeds', ['0'], 'Seeds (model initialisation, client sampling, shuffling); '
                  'the data partition is --data_seed for all.')
flags.DEFINE_float('target_accuracy', 0.8, 'Test accuracy whose first round is reported.')
# Sets the preset's values (`presets.COMPARE`) on every flag not given on the command line.
apply_preset = functools.partial(flags_lib.apply_preset, presets.COMPARE)


flags_lib.register_validators()


def _distinct(items) -> bool:
  return bool(items) and len(set(items)) == len(items)


def check_flags() -> tuple[config.ExperimentConfig, tuple[str, ...], tuple[int, ...], float]:
  """(settings, algorithms, seeds, target accuracy) of the flags; `config.ConfigError`."""
  experiment = flags_lib.check_common_flags(algorithms=FLAGS.algorithms)
  config.must(f'a non-empty list of distinct algorithms of {_ALL_ALGORITHMS}',
              lambda v: _distinct(v) and all(a in _ALL_ALGORITHMS for a in v))(
                  'algorithms', FLAGS.algorithms)
  seeds = config.must('distinct non-negative integers', lambda v: _distinct(v) and all(
      s >= 0 for s in v))('seeds', config.parse_numbers('seeds', FLAGS.seeds))
  config.RATIO('target_accuracy', FLAGS.target_accuracy)
  return experiment, tuple(FLAGS.algorithms), seeds, FLAGS.target_accuracy


def summarize(runs: Sequence[Sequence[Mapping[str, Any]]], target_accuracy: float, *,
              num_classes: Optional[int] = None,
              confusions: Optional[Sequence[Any]] = None) -> dict[str, list]:
  """An algorithm's table row: per seed, the benchmark's summary of its metrics rows
  (`runs.summarize`, `runs.collapse_columns` with its final confusion matrix where known) and the
  first round at `target_accuracy` (where reached)."""
  summaries = [runs_lib.summarize(rows, prefix='test', last_k=LAST_K, num_classes=num_classes)
               for rows in runs]
  out = {k: [s[k] for s in summaries] for k in ('last_k_accuracy', 'final_accuracy',
                                                 'final_macro_f1', 'seconds_per_round',
                                                 'diverged_round')}
  out['collapsed'] = [runs_lib.collapse_columns(s, c)['collapsed']
                      for s, c in itertools.zip_longest(summaries, confusions or ())]
  out['rounds_to_target'] = [reached[0] for reached in (
      [r['round_num'] for r in rows if (r.get('test_accuracy') or 0) >= target_accuracy]
      for rows in runs) if reached]
  return out


def _mean_std(values: Sequence[float]) -> str:
  """'mean ± sample standard deviation' over seeds, as the benchmark's tables."""
  if len(values) == 1:
    return f'{values[0]:.4f}'
  return '{:.4f} ± {:.4f}'.format(*stats.mean_std(values))


def _health(summary: Mapping[str, list]) -> str:
  """'diverged at round 4', 'collapsed (2/3 seeds)', ... or 'no' (the benchmark's flags)."""
  seeds = len(summary['final_accuracy'])
  diverged = [r for r in summary.get('diverged_round', ()) if r is not None]
  collapsed = sum(summary.get('collapsed', ()))
  flagged = []
  if diverged:
    flagged.append(f'diverged at round {diverged[0]}' if seeds == 1
                   else f'diverged ({len(diverged)}/{seeds} seeds)')
  if collapsed:
    flagged.append('collapsed' if seeds == 1 else f'collapsed ({collapsed}/{seeds} seeds)')
  return ', '.join(flagged) or 'no'


def markdown_table(summaries: Mapping[str, Mapping[str, list]], target_accuracy: float) -> str:
  """The comparison (algorithm -> `summarize`) as a Markdown table, mean ± sample std over seeds:
  the benchmark's primary statistic, the last round's, and which runs diverged or collapsed."""
  lines = [f'| algorithm | test accuracy, mean of last {LAST_K} rounds | final test accuracy | '
           f'final macro-F1 | first round at {target_accuracy:g} test accuracy | '
           'mean round time (s) | diverged / collapsed |', '|---|---|---|---|---|---|---|']
  for algorithm, s in summaries.items():
    seeds, reached = len(s['final_accuracy']), s['rounds_to_target']
    rounds = f'{np.mean(reached):.1f}'.rstrip('0').rstrip('.') if reached else 'not reached'
    if reached and seeds > 1:
      rounds += f' ({len(reached)}/{seeds} seeds)'
    lines.append(f'| {algorithm} | {_mean_std(s["last_k_accuracy"])} | '
                 f'{_mean_std(s["final_accuracy"])} | {_mean_std(s["final_macro_f1"])} | '
                 f'{rounds} | {np.mean(s["seconds_per_round"]):.2f} | {_health(s)} |')
  return '\n'.join(lines) + '\n'


# plot file -> (suffix of its column, y label, title)
_PLOTS = {'accuracy': ('test_accuracy', 'test accuracy', 'Test accuracy per round'),
          'conflict_fraction': ('conflict_fraction_before',
                                'fraction of client pairs with negative cosine',
                                'Gradient conflict before correction, per round')}


def write_plots(runs: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], root: str
                ) -> list[str]:
  """accuracy.png and conflict_fraction.png under `root`; returns the files written."""
  written = []
  for name, (suffix, ylabel, title) in _PLOTS.items():
    curves = {}
    for algorithm, per_seed in runs.items():
      column = next((c for c in per_seed[0][0] if c.endswith(suffix)), None)
      if column is not None:
        curves[algorithm] = [{r['round_num']: r[column] for r in rows
                              if r.get(column) is not None} for rows in per_seed]
    path = os.path.join(root, f'{name}.png')
    if curves and plotting.plot_curves(curves, path, ylabel=ylabel, title=title):
      written.append(path)
  return written


def _worker_state(experiment: config.ExperimentConfig, root: str) -> tuple:
  """`_run_one`'s state in a worker: TFF's local runtime, the data loaded once, no progress."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  quiet = dataclasses.replace(experiment, output=dataclasses.replace(experiment.output,
                                                                     progress=False))
  return (quiet, root, experiment_lib.load_task(quiet), experiment_lib.Runs(quiet.output.runtime),
          None)


def _run_one(state: tuple, job: tuple[str, int]) -> tuple[list[dict[str, Any]], Any]:
  """(metrics rows, confusion matrix or None) of (algorithm, seed) in `<root>/<alg>/seed<seed>`
  with `state` = (settings, root, data, `Runs`, progress stream or None)."""
  (experiment, root, task, runs, stream), (algorithm, seed) = state, job
  rows, _, _ = experiment_lib.run_experiment(
      dataclasses.replace(experiment.with_seed(seed), algorithm=config.AlgorithmConfig(
          algorithm, **vars(experiment.hparams))),
      task=task, runs=runs, experiment_dir=os.path.join(root, algorithm, f'seed{seed}'),
      label=f'{algorithm} seed {seed}', stream=stream)
  return rows, runs.confusion


def comparison_name(experiment: config.ExperimentConfig) -> str:
  """`output.experiment_name` or `compare_<dataset>`."""
  return experiment.output.experiment_name or f'compare_{experiment.data.dataset}'


def run_comparison(experiment: config.ExperimentConfig, algorithms: Sequence[str],
                   seeds: Sequence[int], target_accuracy: float, *, stream=None
                   ) -> tuple[str, list[str], str]:
  """Runs every (algorithm, seed); returns (the Markdown table, the plot files, the directory)."""
  root = os.path.join(experiment.output.output_dir, comparison_name(experiment))
  jobs = [(algorithm, seed) for seed in seeds for algorithm in algorithms]
  if experiment.training.resume:   # before any work: a rerun never cuts a longer run
    for algorithm, seed in jobs:
      training_loop.check_rounds(os.path.join(root, algorithm, f'seed{seed}'),
                                 experiment.training.rounds)
  os.makedirs(root, exist_ok=True)
  hparams = experiment_lib.hparams_record(
      experiment, algorithms=list(algorithms), seeds=list(seeds), target_accuracy=target_accuracy)
  hparams.update(vars(experiment.hparams))  # every method's, read per run
  for name in ('algorithm', 'client_loss', 'aggregator', 'seed', 'proximal_term'):  # per run
    hparams.pop(name, None)
  training_loop.write_hparams(os.path.join(root, training_loop.HPARAMS_FILE), hparams)
  task = experiment_lib.load_task(experiment, algorithms)   # the same data for every seed
  print(f'{len(algorithms)} algorithms x {len(seeds)} seed(s) on {experiment.data.dataset}: '
        f'{len(task[0].client_ids)} clients, {experiment.training.clients_per_round} per round, '
        f'{experiment.training.rounds} rounds, model {experiment_lib.model_name(experiment)} -> '
        f'{root}', file=stream or sys.stdout, flush=True)
  output = experiment.output
  inline = output.executor == 'inline'
  done = {}   # (algorithm, seed) -> (metrics rows, confusion matrix; None: not evaluated now)
  with executors.make(executors.Options.of(output),
                      functools.partial(_worker_state, experiment, root), _run_one,
                      affinity=lambda job: job[0],
                      state=(experiment, root, task, experiment_lib.Runs(output.runtime), stream)
                      if inline else None) as executor:
    tickets = {executor.submit(job): job for job in jobs}
    progress = progress_lib.Progress(len(jobs), label='[compare]', unit='run',
                                     enabled=output.progress and not inline, stream=stream)
    while len(done) < len(jobs):
      for outcome in executor.wait():
        algorithm, seed = tickets[outcome.ticket]
        if outcome.error is not None:
          raise cli.Failure(f'{algorithm} seed {seed}: {outcome.error}; the same command '
                            'resumes every run from its checkpoints')
        done[algorithm, seed] = outcome.value
        progress.tick(postfix=f'{algorithm} seed {seed} done')
    progress.close()
  runs = {alg: [done[alg, seed][0] for seed in seeds] for alg in algorithms}
  classes = experiment_lib.model_of(experiment, task[0])[1]
  table = markdown_table({alg: summarize(r, target_accuracy, num_classes=classes,
                                         confusions=[done[alg, seed][1] for seed in seeds])
                          for alg, r in runs.items()}, target_accuracy)
  files.write_text_atomically(
      os.path.join(root, 'summary.md'),
      f'# {experiment.data.dataset}: {experiment.training.rounds} rounds, '
      f'{experiment.training.clients_per_round} clients per round, seeds '
      f'{[str(s) for s in seeds]}\n\n{table}')
  return table, write_plots(runs, root), root


def main(unused_argv):
  flags_lib.quiet_logs()
  apply_preset()
  experiment, algorithms, seeds, target_accuracy = check_flags()
  cli.prepare_output_dir(os.path.join(experiment.output.output_dir, comparison_name(experiment)))
  cli.install_context(experiment)
  table, plots, root = run_comparison(experiment, algorithms, seeds, target_accuracy)
  print(f'\n{table}\ntable: {os.path.join(root, "summary.md")}')
  for path in plots:
    print(f'plot: {path}')


if __name__ == '__main__':
  cli.run(main)

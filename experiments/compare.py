"""Compares federated algorithms (and seeds) on the same data, initial models and clients per round:
`python -m experiments.compare --algorithms=fedavg,fedgh --seeds=0,1,2` writes each run, summary.md
and plots under `<output_dir>/compare_<dataset>/` (`--preset=readme`: the README's command)."""

from experiments import interrupts  # pylint: disable=g-bad-import-order
if __name__ == '__main__':   # Ctrl-C / SIGTERM before main (TensorFlow loading): 130 / 143 at once
  interrupts.exit_on_signals()

import dataclasses
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
from experiments import datasets
from experiments import experiment_lib
from experiments import flags_lib
from experiments import metrics_io
from experiments import files
from experiments import plotting
from experiments import training_loop
from experiments.benchmarking import config as bench_config
from tff_conflict import runtime

FLAGS = flags.FLAGS

_ALL_ALGORITHMS = list(experiment_lib.ALGORITHM_HPARAMS)
# The README's table: FedAvg, FedProx and the five methods (the other baselines, e.g. scaffold,
# by --algorithms).
_README_ALGORITHMS = ['fedavg', 'fedprox', 'fedgh', 'fedmgc', 'fedga', 'fedld', 'fed_corrective']
CONFLICT_COLUMN_SUFFIX = 'conflict_fraction_before'
# The table's primary column averages the last LAST_K evaluated rounds, as the benchmark does.
LAST_K = bench_config.TuningConfig().last_k

with flags_lib.record_group('compare'):
  flags.DEFINE_list('algorithms', _ALL_ALGORITHMS, 'Algorithms to compare '
                    '(tff_conflict.learning.ALGORITHMS).')
  flags.DEFINE_list('seeds', ['0'], 'Seeds (model initialisation, client sampling, shuffling); '
                    'the data partition is --data_seed for all.')
  flags.DEFINE_float('target_accuracy', 0.8, 'Test accuracy whose first round is reported.')
# --preset (flags_lib, shared by the binaries): readme, the README's main command (PRESETS).

# The README's main command: offline digits, Dirichlet alpha = 0.1 over 20 clients, 10 per
# round, FedAvg, FedProx and the five methods, seed 0, FedAvg's 2NN (mlp) trained 2 local
# epochs per round, on the default runtime (--runtime=cpp gives the same table on TFF's C++
# runtime).
PRESETS: dict[str, dict[str, Any]] = {
    'readme': dict(dataset='digits', num_clients=20, alpha=0.1, clients_per_round=10,
                   rounds=20, client_epochs=2, client_batch_size=20, model='mlp',
                   client_learning_rate=0.1, eval_every=1,
                   algorithms=_README_ALGORITHMS, seeds=['0'],
                   target_accuracy=0.8, experiment_name='readme_digits'),
}


def apply_preset() -> None:
  """Sets the preset's values (`PRESETS`) on every flag not given on the command line."""
  flags_lib.apply_preset(PRESETS)


flags_lib.register_validators()


def _distinct(items, allowed=None) -> bool:
  return (bool(items) and len(set(items)) == len(items)
          and (allowed is None or all(i in allowed for i in items)))


@dataclasses.dataclass(frozen=True)
class ComparisonConfig:
  """What a comparison runs besides one experiment's settings.

  Attributes:
    algorithms: named methods (`tff_conflict.learning.ALGORITHMS`), distinct, at least one.
    seeds: distinct seeds >= 0, at least one; each (algorithm, seed) is one run.
    target_accuracy: the test accuracy whose first round the table reports, in (0, 1].
  """
  algorithms: tuple[str, ...] = config.setting(
      tuple(_ALL_ALGORITHMS), flag='algorithms',
      check=config.Check(f'a non-empty list of distinct algorithms of {_ALL_ALGORITHMS}',
                         lambda v: _distinct(list(v), _ALL_ALGORITHMS)))
  seeds: tuple[int, ...] = config.setting(
      (0,), flag='seeds', check=config.Check(
          'distinct non-negative integers',
          lambda v: _distinct(list(v)) and all(config.at_least(0)(s) for s in v)))
  target_accuracy: float = config.setting(0.8, flag='target_accuracy', check=config.RATIO)

  def __post_init__(self):
    object.__setattr__(self, 'algorithms', tuple(self.algorithms))
    object.__setattr__(self, 'seeds', tuple(self.seeds))
    config.check_fields(self)


def check_flags() -> tuple[config.ExperimentConfig, ComparisonConfig]:
  """The typed settings of the flags, after the cross-flag checks; raises `config.ConfigError`."""
  experiment = flags_lib.check_common_flags(algorithms=FLAGS.algorithms)
  return experiment, ComparisonConfig(algorithms=tuple(FLAGS.algorithms),
                                      seeds=config.parse_numbers('seeds', FLAGS.seeds),
                                      target_accuracy=FLAGS.target_accuracy)


@dataclasses.dataclass
class Summary:
  """One table row: an algorithm over its seeds."""
  algorithm: str
  last_k_accuracy: list[float]  # the mean test accuracy over the last LAST_K evaluated rounds
  final_accuracy: list[float]
  final_macro_f1: list[float]
  rounds_to_target: list[int]   # only the seeds that reach the target
  num_seeds: int
  mean_round_time: float


def _values(rows, column):
  return [r[column] for r in rows if r.get(column) is not None]


def summarize(algorithm: str, runs: Sequence[Sequence[Mapping[str, Any]]],
              target_accuracy: float) -> Summary:
  """The table row of `algorithm` from the metrics rows of each of its seeds' runs."""
  last_ks, finals, f1s, reached, times = [], [], [], [], []
  for rows in runs:
    accuracies = [(r['round_num'], r['test_accuracy']) for r in rows
                  if r.get('test_accuracy') is not None]
    last_ks.append(float(np.mean([a for _, a in accuracies[-LAST_K:]])))
    finals.append(accuracies[-1][1])
    f1s.append(_values(rows, 'test_macro_f1')[-1])
    first = next((r for r, a in accuracies if a >= target_accuracy), None)
    if first is not None:
      reached.append(first)
    later = [r['round_time_s'] for r in rows if r['round_num'] >= 2]
    times.extend(later or _values(rows, 'round_time_s'))
  return Summary(algorithm, last_ks, finals, f1s, reached, len(runs),
                 float(np.mean(times)) if times else float('nan'))


def _mean_std(values: Sequence[float]) -> str:
  if len(values) == 1:
    return f'{values[0]:.4f}'
  return f'{np.mean(values):.4f} ± {np.std(values):.4f}'


def markdown_table(summaries: Sequence[Summary], target_accuracy: float) -> str:
  """The comparison as a Markdown table (mean ± std over seeds where there are several): the
  mean test accuracy over the last `LAST_K` evaluated rounds first (the benchmark's primary
  statistic), then the last round's; the first round at `target_accuracy` is read off the test
  curve (descriptive, not a selection)."""
  header = (f'| algorithm | test accuracy, mean of last {LAST_K} rounds | final test accuracy | '
            f'final macro-F1 | first round at {target_accuracy:g} test accuracy | '
            'mean round time (s) |')
  lines = [header, '|---|---|---|---|---|---|']
  for s in summaries:
    if s.rounds_to_target:
      rounds = f'{np.mean(s.rounds_to_target):.1f}'.rstrip('0').rstrip('.')
      if s.num_seeds > 1:
        rounds += f' ({len(s.rounds_to_target)}/{s.num_seeds} seeds)'
    else:
      rounds = 'not reached'
    lines.append(f'| {s.algorithm} | {_mean_std(s.last_k_accuracy)} | '
                 f'{_mean_std(s.final_accuracy)} | {_mean_std(s.final_macro_f1)} | {rounds} | '
                 f'{s.mean_round_time:.2f} |')
  return '\n'.join(lines) + '\n'


def conflict_column(rows: Sequence[Mapping[str, Any]]):
  """The column of the aggregator's conflict fraction before correction, or None."""
  if not rows:
    return None
  return next((c for c in rows[0] if c.endswith(CONFLICT_COLUMN_SUFFIX)), None)


def write_plots(runs: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], root: str
                ) -> list[str]:
  """accuracy.png and conflict_fraction.png under `root`; returns the files written."""
  written = []
  accuracy = {alg: [{r['round_num']: r['test_accuracy'] for r in rows
                     if r.get('test_accuracy') is not None} for rows in per_seed]
              for alg, per_seed in runs.items()}
  path = os.path.join(root, 'accuracy.png')
  if plotting.plot_curves(accuracy, path, ylabel='test accuracy',
                          title='Test accuracy per round'):
    written.append(path)
  conflict = {}
  for alg, per_seed in runs.items():
    column = conflict_column(per_seed[0])
    if column is not None:
      conflict[alg] = [{r['round_num']: r[column] for r in rows if r.get(column) is not None}
                       for rows in per_seed]
  path = os.path.join(root, 'conflict_fraction.png')
  if conflict and plotting.plot_curves(
      conflict, path, ylabel='fraction of client pairs with negative cosine',
      title='Gradient conflict before correction, per round'):
    written.append(path)
  return written


def comparison_name(experiment: config.ExperimentConfig) -> str:
  """The comparison's directory name: `output.experiment_name` or `compare_<dataset>`."""
  return experiment.output.experiment_name or f'compare_{experiment.data.dataset}'


def run_comparison(experiment: config.ExperimentConfig, comparison: ComparisonConfig, *,
                   stream=None, hparams: Optional[Mapping[str, Any]] = None
                   ) -> tuple[str, list[str], str]:
  """Runs every (algorithm, seed) and writes the table and plots.

  Args:
    experiment: the settings shared by every run (its algorithm and seed are replaced per run).
    comparison: the algorithms, seeds and target.
    stream: where progress goes (default stdout).
    hparams: what the comparison's hparams.csv records (default: the settings and comparison).

  Returns:
    (the Markdown table, the plot files, the comparison directory).
  """
  root = os.path.join(experiment.output.output_dir, comparison_name(experiment))
  os.makedirs(root, exist_ok=True)
  if hparams is None:
    hparams = experiment_lib.hparams_record(
        experiment, algorithms=list(comparison.algorithms), seeds=list(comparison.seeds),
        target_accuracy=comparison.target_accuracy)
    hparams.update(dataclasses.asdict(experiment.hparams))  # every method's, read per run
    for name in ('algorithm', 'client_loss', 'aggregator', 'seed', 'proximal_term'):  # per run
      hparams.pop(name, None)
  metrics_io.write_hparams(os.path.join(root, training_loop.HPARAMS_FILE), hparams)
  data = datasets.load(experiment.data)
  seeds = comparison.seeds
  runs: dict[str, list[list[dict[str, Any]]]] = {alg: [] for alg in comparison.algorithms}
  for seed in seeds:
    seed_config = experiment.with_seed(seed)
    task = experiment_lib.load_task(seed_config, data=data)
    if seed == seeds[0]:
      print(f'{len(comparison.algorithms)} algorithms x {len(seeds)} seed(s) on '
            f'{experiment.data.dataset}: {len(task.train_data.client_ids)} clients, '
            f'{experiment.training.clients_per_round} per round, {experiment.training.rounds} '
            f'rounds, model {task.model_name} -> {root}', file=stream or sys.stdout, flush=True)
    for algorithm in comparison.algorithms:
      run_config = seed_config.replace(algorithm=config.AlgorithmConfig(algorithm))
      result = experiment_lib.run_experiment(
          run_config, task=task, experiment_dir=os.path.join(root, algorithm, f'seed{seed}'),
          label=f'{algorithm} seed {seed}', stream=stream)
      runs[algorithm].append(result.rows)
  summaries = [summarize(alg, per_seed, comparison.target_accuracy)
               for alg, per_seed in runs.items()]
  table = markdown_table(summaries, comparison.target_accuracy)
  files.write_text_atomically(
      os.path.join(root, 'summary.md'),
      f'# {experiment.data.dataset}: {experiment.training.rounds} rounds, '
      f'{experiment.training.clients_per_round} clients per round, seeds '
      f'{[str(s) for s in seeds]}\n\n{table}')
  plots = write_plots(runs, root)
  return table, plots, root


def main(unused_argv):
  flags_lib.quiet_logs()
  apply_preset()
  experiment, comparison = check_flags()
  cli.prepare_output_dir(os.path.join(experiment.output.output_dir, comparison_name(experiment)))
  runtime.set_local_context()
  cli.install_context(experiment)
  table, plots, root = run_comparison(experiment, comparison)
  print()
  print(table)
  print(f'table: {os.path.join(root, "summary.md")}')
  for path in plots:
    print(f'plot: {path}')


if __name__ == '__main__':
  cli.run(main)

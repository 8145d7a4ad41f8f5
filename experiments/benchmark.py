"""Benchmarks every method against FedAvg over data regimes, local epochs and seeds, tuned on a
validation split: `python -m experiments.benchmark --preset=smoke --output_dir=/tmp/bench` writes
report.md, runs.csv and plots under `<output_dir>/<experiment_name>/` (docs/experiments.md)."""

from experiments import interrupts  # pylint: disable=g-bad-import-order
if __name__ == '__main__':   # Ctrl-C / SIGTERM before main (TensorFlow loading): 130 / 143 at once
  interrupts.exit_on_signals()

import datetime
import os
import platform
import sys
import time
from typing import Any

# Quiet before TensorFlow is imported (its C++ logs read the environment then); TensorFlow must be
# imported before absl's app.run() parses flags (BUILD_NOTES.md, Keras pitfalls).
import tff_conflict
tff_conflict.quiet()
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top

from experiments import cli  # pylint: disable=g-import-not-at-top
from experiments import config as experiment_config
from experiments import flags_lib
from experiments import experiment_lib
from experiments import metrics_io
from experiments import presets
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import methods as methods_lib

FLAGS = flags.FLAGS

ALL_REGIMES = ('digits:iid', 'digits:dir(0.1)', 'digits:dir(0.5)', 'digits:dir(1)',
               'digits:#C=2', 'digits:qty(0.5)', 'synthetic(0,0)', 'synthetic(0.5,0.5)',
               'synthetic(1,1)')

# The benchmark's flag defaults are its config's (`experiments.benchmarking.config`).
_B, _T = config_lib.BenchmarkConfig, config_lib.TuningConfig
_D = experiment_config.default


def _list(cls, field):
  return [f'{v:g}' if isinstance(v, float) else str(v) for v in _D(cls, field)]


with flags_lib.record_group('benchmark'):
  flags.DEFINE_string('regimes', ','.join(ALL_REGIMES),
                      'Comma-separated regimes (tff_conflict.data.regimes): DATASET:iid, '
                      'DATASET:dir(ALPHA), DATASET:#C=K, DATASET:qty(BETA), '
                      'synthetic(ALPHA,BETA), emnist:natural; @K sets the population.')
  flags.DEFINE_string('methods', ','.join(methods_lib.METHODS),
                      'Comma-separated methods: names of experiments.benchmarking.methods.METHODS '
                      'or ALGORITHM[key=value,...] variants.')
  flags.DEFINE_list('epochs', _list(_B, 'epochs'), 'Local epochs E of the grid.')
  flags.DEFINE_list('report_seeds', _list(_B, 'report_seeds'), 'Reporting seeds.')
  flags.DEFINE_string('models', '', 'DATASET:MODEL,... (experiments.architectures.MODELS); default '
                      'each dataset\'s model (digits: digits_cnn, synthetic: '
                      'logistic_regression).')
  flags.DEFINE_string('baseline', _D(_B, 'baseline'), 'The method every other is compared with.')
  flags.DEFINE_enum('primary_statistic', _D(_B, 'primary_statistic'),
                    list(config_lib.PRIMARY_STATISTICS), 'The one statistic the tables compare, '
                    'named before the runs: last_k_accuracy (the mean test accuracy over the last '
                    '--tuning_last_k rounds) or final_accuracy (the last round\'s).')
  flags.DEFINE_float('equivalence_margin', _D(_B, 'equivalence_margin'), 'A method ties the '
                     'baseline only when the 95% interval of their difference lies inside +- '
                     'this margin.')
  flags.DEFINE_bool('variants_inherit', _D(_B, 'variants_inherit'), 'A variant whose parent '
                    'method is in --methods runs at the parent\'s tuned values, changing only '
                    'what it fixes; --novariants_inherit tunes it on the parent\'s grids.')
  flags.DEFINE_string('detect', '', 'DATASET:DIFFERENCE,...: the accuracy difference to detect '
                      'at 80% power, for the seed count the report prints (default synthetic '
                      '0.02, other datasets 0.01).')
  flags.DEFINE_bool('vary_partition', _D(_B, 'vary_partition'), 'Draw each seed\'s partition (and Synthetic data) '
                    'with that seed; --novary_partition uses --data_seed for all.')
  flags.DEFINE_bool('tune', _D(_T, 'tune'), 'Tune on a validation split first; --tune=false uses the '
                    'given values (the learning-rate and method flags).')
  flags.DEFINE_list('tuning_seeds', _list(_T, 'tuning_seeds'), 'Seeds of the tuning runs (disjoint from '
                    '--report_seeds).')
  flags.DEFINE_string('tuning_regimes', '', 'Regimes tuned on, one per dataset (e.g. '
                      'digits:dir(0.1),synthetic(1,1); DATASET:REGIME also works); default '
                      'digits:dir(0.1) for digits, synthetic(1,1) for synthetic, else the '
                      'dataset\'s first regime.')
  flags.DEFINE_list('tune_epochs', _list(_T, 'tune_epochs'), 'Local epochs tuned at (default: every --epochs); an '
                    'untuned E uses the nearest tuned E\'s values.')
  flags.DEFINE_list('client_lr_grid', _list(_T, 'client_lr_grid'), 'Client learning rates tried by '
                    'every method.')
  flags.DEFINE_list('server_lr_grid', _list(_T, 'server_lr_grid'), 'Server learning rates tried by '
                    'every method (with --tune_server_lr).')
  flags.DEFINE_bool('tune_server_lr', _D(_T, 'tune_server_lr'), 'Every method, the baseline '
                    'included, searches --server_lr_grid; --notune_server_lr: none does.')
  flags.DEFINE_string('grids', '', 'METHOD.ARGUMENT=V1/V2/...,...: replaces a method\'s '
                      'default grid of that builder argument.')
  flags.DEFINE_enum('tuning_strategy', _D(_T, 'strategy'), ['staged', 'product'],
                    'staged: client lr first, then the method\'s grid; product: every '
                    'combination.')
  flags.DEFINE_enum('tuning_schedule', _D(_T, 'schedule'), ['full', 'halving'],
                    'full: every candidate runs every round; halving: successive halving over '
                    'rounds (the best third of each rung runs 3x longer).')
  flags.DEFINE_integer('tuning_last_k', _D(_T, 'last_k'), 'A tuning run\'s score: mean validation accuracy of '
                       'its last K rounds.')
  flags.DEFINE_integer('tuning_edge_steps', _D(_T, 'edge_steps'), 'When a numeric grid\'s best '
                       'value (client or server lr, a method argument) is at its edge, extend '
                       'the grid past it geometrically at most this many times per side; 0: '
                       'never. A best value still at an edge is marked in the report.')
  flags.DEFINE_float('tuning_edge_factor', _D(_T, 'edge_factor'), 'Factor of each extension.')
  flags.DEFINE_integer('plateau_window', _D(_T, 'plateau_window'), 'The report\'s plateau '
                       'criterion: the baseline\'s tuned validation accuracy has plateaued when '
                       'the mean of its last K rounds is within --plateau_tolerance of the mean '
                       'of the K before.')
  flags.DEFINE_float('plateau_tolerance', _D(_T, 'plateau_tolerance'), 'Tolerance of the '
                     'plateau criterion (accuracy).')
  flags.DEFINE_float('validation_fraction', _D(_T, 'validation_fraction'), 'Share of each client\'s training examples '
                     'held out for tuning.')
  flags.DEFINE_string('results_md', None, 'Also write this RESULTS.md (machine, date, command, '
                      'wall time, report) and copy its data to docs/results/ beside it.')
  flags.DEFINE_bool('positive_control', False, 'Also run the positive control first (FedProx '
                    'mu = 1 against FedAvg on Synthetic(1, 1), E = 20, the FedProx paper\'s '
                    'effect; experiments.presets.POSITIVE_CONTROL) under OUTPUT/positive_control '
                    'and report it.')
  flags.DEFINE_bool('report_only', False, 'Only rewrite the report from the runs on disk.')
  flags.DEFINE_string('description', '', 'A sentence for the report\'s Setup section.')

flags_lib.register_validators()

# Flags of train/compare that mean nothing here, and what to use instead.
_NOT_HERE = {
    'dataset': '--regimes', 'num_clients': '@K in --regimes', 'alpha': '--regimes',
    'synthetic_alpha': '--regimes', 'synthetic_beta': '--regimes',
    'emnist_only_digits': '--regimes=emnist_digits:natural', 'model': '--models',
    'client_epochs': '--epochs', 'eval_every': 'nothing (every round is evaluated)',
    'checkpoint_every': 'nothing (finished runs are kept)', 'keep_checkpoints': 'nothing',
    'client_optimizer': 'nothing (client SGD)', 'server_optimizer': 'nothing (server SGD)',
    'server_momentum': 'nothing', 'client_weighting': 'a method variant, METHOD[...]',
    'workers': 'nothing (local runtimes only)', 'seed': '--report_seeds',
    'leaf_name': '--regimes=leaf_femnist:natural (or leaf_synthetic, leaf_celeba)',
}

def apply_preset() -> None:
  """Sets the preset's values (`presets.BENCHMARK`) on every flag not given on the command
  line."""
  flags_lib.apply_preset(presets.BENCHMARK)


def _numbers(flag: str, cast: type = int) -> tuple:
  return experiment_config.parse_numbers(flag, FLAGS[flag].value, cast)


def given_values() -> dict[str, dict[str, Any]]:
  """Each algorithm's builder arguments from the method flags (the order seed aside; a flag
  left unset, None, leaves the builder's default)."""
  return {algorithm: {keyword: FLAGS[flag].value for keyword, flag in table.items()
                      if keyword != 'seed' and FLAGS[flag].value is not None}
          for algorithm, table in experiment_lib.ALGORITHM_HPARAMS.items()}


def config_from_flags() -> config_lib.BenchmarkConfig:
  """The benchmark's config from the flags (after the preset): the flags shared with the
  binaries give the config's parts (`flags_lib.experiment_config`), the benchmark's own the
  grid and tuning.

  Raises:
    experiment_config.ConfigError: a flag that does not apply, or a bad value.
  """
  for name, instead in _NOT_HERE.items():
    if name in FLAGS and FLAGS[name].present:
      raise experiment_config.ConfigError(
          name, FLAGS[name].value, reason=f'does not apply to experiments.benchmark; use {instead}')
  parts = flags_lib.experiment_config()
  tuning = config_lib.TuningConfig(
      tune=FLAGS.tune, tuning_seeds=_numbers('tuning_seeds'),
      tuning_regimes=config_lib.parse_tuning_regimes(FLAGS.tuning_regimes),
      tune_epochs=_numbers('tune_epochs'), client_lr_grid=_numbers('client_lr_grid', float),
      server_lr_grid=_numbers('server_lr_grid', float), tune_server_lr=FLAGS.tune_server_lr,
      grids=config_lib.parse_grids(FLAGS.grids),
      strategy=FLAGS.tuning_strategy, schedule=FLAGS.tuning_schedule,
      last_k=FLAGS.tuning_last_k,
      edge_steps=FLAGS.tuning_edge_steps, edge_factor=FLAGS.tuning_edge_factor,
      validation_fraction=FLAGS.validation_fraction,
      plateau_window=FLAGS.plateau_window, plateau_tolerance=FLAGS.plateau_tolerance)
  config = config_lib.BenchmarkConfig(
      regimes=tuple(config_lib.split_top_level(FLAGS.regimes)),
      methods=tuple(config_lib.split_top_level(FLAGS.methods)), epochs=_numbers('epochs'),
      report_seeds=_numbers('report_seeds'),
      models=config_lib.parse_mapping('models', FLAGS.models), given=given_values(),
      vary_partition=FLAGS.vary_partition, baseline=FLAGS.baseline,
      primary_statistic=FLAGS.primary_statistic, variants_inherit=FLAGS.variants_inherit,
      equivalence_margin=FLAGS.equivalence_margin,
      detect=config_lib.parse_mapping('detect', FLAGS.detect, float),
      description=FLAGS.description, tuning=tuning,
      loop=parts.training, client=parts.client, server=parts.server, data=parts.data,
      output=parts.output, runtime=parts.runtime)
  # The method flags reach the methods by algorithm (`given_values`): refuse one none reads.
  flags_lib.check_method_flags_apply([
      experiment_config.AlgorithmConfig(m.algorithm)
      for m in map(methods_lib.parse_method, config.methods)
      if m.algorithm in experiment_lib.ALGORITHM_HPARAMS])
  return config


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or 'unknown CPU'


def _memory_gib() -> str:
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemTotal:'):
          return f'{int(line.split()[1]) / 2**20:.0f} GiB'
  except OSError:
    pass
  return 'unknown'


def machine_description() -> str:
  return (f'{_cpu_model()}, {os.cpu_count()} CPU cores, {_memory_gib()} RAM, '
          f'{platform.system()} {platform.release()}, Python {platform.python_version()}, '
          f'TensorFlow {tf.__version__}')


def _load() -> str:
  try:
    return ', '.join(f'{v:.2f}' for v in os.getloadavg())
  except OSError:
    return 'unknown'


def main(unused_argv):
  flags_lib.quiet_logs()
  apply_preset()
  config = config_from_flags()
  if not FLAGS.report_only:
    cli.prepare_output_dir(config.root)
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  command = 'python -m experiments.benchmark ' + ' '.join(sys.argv[1:])
  from experiments.benchmarking import engine as engine_lib  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import grid  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import report as report_lib  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import results  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import tables  # pylint: disable=g-import-not-at-top
  started = datetime.datetime.now()
  load_before = _load()
  start = time.monotonic()
  if FLAGS.report_only:
    if not os.path.isdir(config.root):
      raise experiment_config.ConfigError('output_dir', FLAGS.output_dir, reason='--report_only '
                                          f'needs an existing benchmark directory, {config.root} '
                                          'is missing')
    try:
      report_path = report_lib.write_report(config.root)
    except results.DamagedRunsFile as e:
      raise cli.Failure(f'{e}; run the same command without --report_only: it rebuilds runs.csv '
                        'from each run\'s result.json and runs only what is not finished') from None
    failures = []
  else:
    if FLAGS.positive_control:   # the checks of run_benchmark, before the control runs
      grid.check_finished_runs(config)
      grid.check_regimes(config, engine_lib.default_loader(config))
      control_outcome = grid.run_benchmark(config_lib.control_config(config), command=command)
      if control_outcome['failures']:
        print(f'positive control: {len(control_outcome["failures"])} runs failed', flush=True)
    outcome = grid.run_benchmark(config, command=command)
    report_path, failures = outcome['report'], outcome['failures']
    print(f'\n{outcome["runs_done"]} runs run, {outcome["runs_skipped"]} found finished, '
          f'{len(failures)} failed; {outcome["processes_built"]} learning processes built in '
          f'{outcome["build_seconds"]:.0f} s of {outcome["wall_seconds"]:.0f} s')
  wall = time.monotonic() - start
  print(f'report: {report_path}')
  print(f'runs: {os.path.join(config.root, "runs.csv")}')
  if FLAGS.results_md:
    header = {
        'Command': f'`{command}`',
        'Date': started.isoformat(timespec='seconds'),
        'Machine': machine_description(),
        'Load average (1, 5, 15 min) at start / end': f'{load_before} / {_load()}',
        'Wall time of this command': tables.duration(wall),
        'Wall time of the benchmark (every invocation, see Time)': tables.duration(
            results.total_wall_seconds(config.root)),
        'Git commit': metrics_io.provenance().get('git_commit') or 'unknown',
    }
    target = report_lib.write_results_md(FLAGS.results_md, config.root, header=header)
    print(f'results: {FLAGS.results_md} (data and plots in {target})')
  if failures:
    for label, message in failures:
      print(f'failed: {label}: {message}', file=sys.stderr)
    raise cli.Failure(f'{len(failures)} runs failed (the lines above; each run directory '
                      'holds its error.txt); once the cause is fixed, the same command runs '
                      'them again and keeps the finished ones')


if __name__ == '__main__':
  cli.run(main)

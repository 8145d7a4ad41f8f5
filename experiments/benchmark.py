"""Benchmarks every method against FedAvg over data regimes, local epochs and seeds, tuned on a
validation split: `python -m experiments.benchmark --preset=smoke --output_dir=/tmp/bench` writes
report.md, runs.csv and plots under `<output_dir>/<experiment_name>/` (docs/experiments.md)."""

from tff_conflict import _interrupts as interrupts  # pylint: disable=g-bad-import-order
if __name__ == '__main__':   # Ctrl-C / SIGTERM before main (TensorFlow loading): 130 / 143 at once
  interrupts.exit_on_signals()

import dataclasses
import datetime
import functools
import os
import platform
import sys
import time

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
from experiments import presets
from tff_conflict.simulation import training_loop
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import lookups
from experiments.benchmarking import methods as methods_lib

FLAGS = flags.FLAGS

# The benchmark's own flags: one per setting of its config with a flag, read by its `parse`; a
# setting without a default (a list of names, a mapping, grids) is text.
_TEXT_DEFAULTS = {'regimes': 'digits:iid,digits:dir(0.1),digits:dir(0.5),digits:dir(1),digits:#C=2,'
                  'digits:qty(0.5),synthetic(0,0),synthetic(0.5,0.5),synthetic(1,1)',
                  'methods': ','.join(methods_lib.METHODS)}
_SETTINGS = [(experiment_config.flag_of(f), f) for f in dataclasses.fields(
    config_lib.BenchmarkConfig) if experiment_config.flag_of(f)]
for _flag, _field in _SETTINGS:
  _define, _default = flags_lib.definer(_field, _TEXT_DEFAULTS.get(_flag, '') if (
      _field.default is dataclasses.MISSING) else _field.default)
  _define(_flag, _default, help=_field.metadata['help'])
flags.DEFINE_string('results_md', None, 'Also write this RESULTS.md (machine, date, command, '
                    'wall time, report) and copy its data to docs/results/ beside it.')
flags.DEFINE_bool('positive_control', False, 'Also run the positive control first (FedProx '
                  'mu = 1 against FedAvg on Synthetic(1, 1), E = 20, the FedProx paper\'s '
                  'effect; experiments.presets.POSITIVE_CONTROL) under OUTPUT/positive_control '
                  'and report it.')
flags.DEFINE_bool('report_only', False, 'Only rewrite the report from the runs on disk.')

# Flags of train/compare that mean nothing here, and what to use instead.
_NOT_HERE = {
    'dataset': '--regimes', 'num_clients': '@K in --regimes', 'alpha': '--regimes',
    'synthetic_alpha': '--regimes', 'synthetic_beta': '--regimes',
    'emnist_only_digits': '--regimes=emnist_digits:natural', 'model': '--models',
    'client_epochs': '--epochs', 'eval_every': 'nothing (every round is evaluated)',
    'checkpoint_every': 'nothing (finished runs are kept)', 'keep_checkpoints': 'nothing',
    'client_optimizer': 'nothing (client SGD)', 'server_optimizer': 'nothing (server SGD)',
    'server_momentum': 'nothing', 'client_weighting': 'a method variant, METHOD[...]',
    'tff_workers': 'nothing (local runtimes only; --executor and --workers run runs in parallel)',
    'seed': '--report_seeds',
    'leaf_name': '--regimes=leaf_femnist:natural (or leaf_synthetic, leaf_celeba)',
}


apply_preset = functools.partial(flags_lib.apply_preset, presets.BENCHMARK)


def config_from_flags() -> config_lib.BenchmarkConfig:
  """The benchmark's config from the flags (after the preset); raises `ConfigError`."""
  flags_lib.refuse_flags({name: f'does not apply to experiments.benchmark; use {instead}'
                          for name, instead in _NOT_HERE.items()})
  parts = flags_lib.experiment_config()
  values = {field.name: field.metadata['parse'](flag, FLAGS[flag].value)
            if 'parse' in field.metadata else FLAGS[flag].value for flag, field in _SETTINGS}
  if not (values['tune'] or FLAGS['dataset_settings'].present):   # a preset's grids: unread
    values['dataset_settings'] = {d: {k: v for k, v in s.items() if k == 'rounds'}
                                  for d, s in values['dataset_settings'].items()}
  config = config_lib.BenchmarkConfig(
      **values, given=config_lib.given_arguments(lambda flag: FLAGS[flag].value),
      loop=parts.training, client=parts.client, server=parts.server,
      data=parts.data, output=parts.output)
  own = {d for d, settings in config.dataset_settings.items() if 'rounds' in settings}
  if FLAGS['rounds'].present and set(lookups.datasets(config)) <= own:
    raise experiment_config.ConfigError('rounds', FLAGS.rounds, reason='no regime reads it: '
                                        f'--dataset_settings sets the rounds of {sorted(own)}')
  # The method flags reach the methods by algorithm (`given`): refuse one none reads.
  flags_lib.check_method_flags_apply([
      experiment_config.AlgorithmConfig(m.algorithm)
      for m in map(methods_lib.parse_method, config.methods)
      if m.algorithm in experiment_lib.ALGORITHM_HPARAMS])
  return config


def control_config(config: config_lib.BenchmarkConfig) -> config_lib.BenchmarkConfig:
  """The positive control (`presets.POSITIVE_CONTROL`) under `config.root`, with its seeds,
  runtime and data directories."""
  control = presets.POSITIVE_CONTROL
  description = (
      f'{control["methods"][1]} against {control["baseline"]} on `{control["regimes"][0]}`: '
      f'E = {control["epochs"][0]}, batch {control["batch_size"]}, client learning rate '
      f'{control["client_learning_rate"]}, {control["clients_per_round"]} clients per round, '
      f'{control["rounds"]} rounds, untuned, the data of seed {control["data_seed"]} for every '
      'seed (seeds vary the initial model and the clients sampled), the global model\'s '
      'training loss evaluated every round')
  return config_lib.replace_settings(
      config, **control, models={}, datasets={}, model_fns={}, detect={}, vary_partition=False,
      eval_train_loss=True, client_momentum=0.0, server_learning_rate=1.0, tune=False,
      tune_epochs=(), grids={}, output_dir=config.root, experiment_name=config_lib.CONTROL_DIR,
      description=f'Positive control: {description}.')


def interrupted_message(root: str, error: BaseException) -> str:
  """What a benchmark stopped by Ctrl-C, SIGTERM or a closed stdout keeps: its finished runs."""
  from experiments.benchmarking import runs as runs_lib  # pylint: disable=g-import-not-at-top
  finished = sum(runs_lib.RESULT_FILE in names for _, _, names in os.walk(root))
  what = ('standard output closed' if isinstance(error, interrupts.OutputClosed)
          else 'terminated (SIGTERM)' if isinstance(error, interrupts.Terminated)
          else 'interrupted')
  return (f'{what}: the {finished} finished runs under {root} are kept; a run in progress '
          'is not and starts over: rerun the same command to run only what is not finished')


def _proc(path: str, key: str) -> str:
  """The value of the line starting with `key` in `path` (/proc/cpuinfo, ...), or ''."""
  try:
    with open(path) as f:
      return next((l.split(':', 1)[1].strip() for l in f if l.startswith(key)), '')
  except OSError:
    return ''


def machine_description() -> str:
  memory = _proc('/proc/meminfo', 'MemTotal:').split()
  return (f'{_proc("/proc/cpuinfo", "model name") or platform.processor() or "unknown CPU"}, '
          f'{os.cpu_count()} CPU cores, '
          f'{f"{int(memory[0]) / 2**20:.0f} GiB" if memory else "unknown"} RAM, '
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
    try:
      if FLAGS.positive_control:   # the checks of run_benchmark, before the control runs
        grid.check_finished_runs(config)
        grid.check_regimes(config, engine_lib.default_loader(config))
        control_outcome = grid.run_benchmark(control_config(config), command=command)
        if control_outcome['failures']:
          print(f'positive control: {len(control_outcome["failures"])} runs failed', flush=True)
      outcome = grid.run_benchmark(config, command=command)
    except (KeyboardInterrupt, interrupts.OutputClosed) as e:
      e.args = (interrupted_message(config.root, e),)
      raise
    report_path, failures = outcome['report'], outcome['failures']
    workers = outcome.get('workers') or 1
    print(f'\n{outcome["runs_done"]} runs run, {outcome["runs_skipped"]} found finished, '
          f'{len(failures)} failed; {outcome["processes_built"]} learning processes built in '
          f'{outcome["build_seconds"]:.0f} s' + (f' (summed over {workers} workers)'
                                                   if workers > 1 else '')
          + f'; {outcome["wall_seconds"]:.0f} s in all')
    if outcome['incomplete']:
      print(f'incomplete searches (no choice, their reporting runs not run): '
            f'{"; ".join(outcome["incomplete"])}; the same command completes them')
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
        'Wall time of the benchmark (every invocation recorded, see Time)': tables.duration(
            results.total_wall_seconds(config.root)),
        'Git commit': training_loop.provenance().get('git_commit') or 'unknown',
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

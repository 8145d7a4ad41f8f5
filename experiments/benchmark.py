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
                    'effect; experiments.benchmarking.control) under OUTPUT/positive_control '
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

# The results preset: RESULTS.md under the protocol its report states (a fixed test split, the
# same learning-rate search for every method, the primary statistic named before the runs,
# divergence at chance, Holm), with 10 reporting seeds: a 3-seed pilot (run before the test
# split was fixed, which made seeds differ more) asked 5 and 14 seeds for one
# point on the digits regimes and 9 for two on Synthetic at 80% power (`stats.seeds_needed`);
# the report prints each regime's minimal detectable difference, so a shortfall shows.
# Regimes, chosen before the runs: today's three, plus two where differences can show:
# `digits:dir(0.1)@50` (more clients with fewer examples, about 29 each: updates of smaller
# clients conflict more often) and `digits:#C=1` (the strongest label skew, one class per
# client: every pair of clients of different classes conflicts). E = 1 with one tuning seed: E in
# {1, 5} with two tuning seeds does not fit a working session (`python -m perf.benchmark_grid
# --preset=results`; BENCHMARKS.md); `--epochs=1,5` runs E = 5.
RESULTS_REGIMES = ('digits:dir(0.1)', 'digits:#C=2', 'synthetic(1,1)', 'digits:dir(0.1)@50',
                   'digits:#C=1')
RESULTS_SEEDS = [str(s) for s in range(10)]
# The seeds' baselines (FedNova, SCAFFOLD, FedDecorr, FedGH on FedAvg and FedProx), every method
# at its defaults, then the compositions of the methods' own halves no single paper runs: FedGA's
# calibrated loss, FedMGC's focal loss and FedLD's margin loss, each with FedGH's harmonization.
RESULTS_METHODS = ('fedavg', 'fedprox', 'fednova', 'scaffold', 'feddecorr', 'fedavg+fedgh',
                   'fedprox+fedgh', 'fedgh', 'fedmgc', 'fedga', 'fedld', 'fed_corrective',
                   'custom[loss=calibrated,aggregator=fedgh]',
                   'custom[loss=focal,aggregator=fedgh]',
                   'custom[loss=margin,aggregator=fedgh]')
RESULTS_DESCRIPTION = (
    'The results preset (`--preset=results`): the seeds\' baselines (FedNova, SCAFFOLD, '
    'FedDecorr, FedGH on FedAvg and FedProx), every method at its defaults and the compositions '
    'of the methods\' own halves with FedGH, 10 reporting seeds (the 3-seed pilot, run before '
    'the test split was fixed, asked 5-14 for one point on digits and 9 for two on Synthetic at '
    '80% power; each regime\'s minimal detectable difference is below), one tuning seed, 50 '
    'rounds, E = 1 (E in {1, 5} with two tuning seeds does not fit a working session: '
    'BENCHMARKS.md); '
    'regimes chosen before the runs: digits Dirichlet 0.1 and #C=2 and '
    'Synthetic(1, 1) as before, digits Dirichlet 0.1 over 50 clients (more clients with fewer '
    'examples) and digits #C=1 (one class per client, the strongest skew). The diagnosis '
    'variants have their own preset (`--preset=diagnosis`).')
# The diagnosis variants (`benchmarking.methods.VARIANTS`) beside their parents: each runs at
# its parent's tuned values and changes one thing (`--variants_inherit`).
DIAGNOSIS_METHODS = ('fedavg', 'fedga', 'fedld', 'fedmgc', 'fed_corrective',
                     'fedga_paper', 'fedga_clip', 'fedga_paper_clip', 'fedavg_clip',
                     'fedld_projection', 'fedld_model', 'fedld_preserve_norms',
                     'fedld_margin_only', 'fedld_principal_only', 'fedmgc_focal_only',
                     'fedmgc_dgc_only', 'fedavg_uniform', 'fed_corrective_alpha1')
# FedGA's federation on other data (100 clients, 10 per round, 2 local epochs, batch 64; the FedGA
# code's equal-size per-client Dirichlet split), its forms with and without clipping against
# FedAvg clipped alike: a loop of its own, so a preset of its own.
FEDGA_SETTING_METHODS = ('fedavg', 'fedga', 'fedga_paper', 'fedavg_clip', 'fedga_clip',
                         'fedga_paper_clip')


# One preset per paper table, on the offline regimes in the paper's local-training setting where
# it is cheap (docs/experiments.md, "The papers' comparisons", lists the papers' numbers and the
# settings that differ). Each method is tuned as any method; LEAF / EMNIST: add --regimes (e.g.
# leaf_femnist:natural with --leaf_dir).
PAPER_TABLES: dict[str, dict[str, Any]] = {
    # FedGH Table II: each baseline without and with FedGH; Table I: K = 20, C = 20, E = 5,
    # B = 64, SGD momentum 0.9, 100 rounds, Dirichlet 0.1 and 1.0.
    'fedgh_table': dict(
        regimes='digits:dir(0.1)@20,digits:dir(1.0)@20,synthetic(1,1)@20',
        methods='fedavg,fedavg+fedgh,fedprox,fedprox+fedgh,fednova,fednova+fedgh,feddecorr,'
        'feddecorr+fedgh',
        epochs=['5'], tune_epochs=['5'], report_seeds=['0', '1', '2'], rounds=100,
        tuning_regimes='digits:digits:dir(0.1)@20,synthetic:synthetic(1,1)@20',
        clients_per_round=20, client_batch_size=64, client_momentum=0.9,
        description='The FedGH paper\'s Table II (`--preset=fedgh_table`): FedAvg, FedProx, '
        'FedNova and FedDecorr, each without and with FedGH, in its Table I setting (20 '
        'clients, all per round, E = 5, batch 64, SGD momentum 0.9, 100 rounds, Dirichlet 0.1 '
        'and 1.0) on digits and Synthetic(1, 1) instead of CIFAR and LEAF.'),
    # FedMGC Sec. V: FedAvg, FedProx, SCAFFOLD, FedNova; SGD lr 0.001 (tuned here), batch 128,
    # E = 10, 10 clients all per round, Dirichlet 0.5 and 1.
    'fedmgc_table': dict(
        regimes='digits:dir(0.5)@10,digits:dir(1.0)@10',
        methods='fedavg,fedprox,fednova,scaffold,fedmgc',
        epochs=['10'], tune_epochs=['10'], report_seeds=['0', '1', '2'], rounds=100,
        tuning_regimes='digits:digits:dir(0.5)@10',
        clients_per_round=10, client_batch_size=128,
        description='The FedMGC paper\'s comparison (`--preset=fedmgc_table`, its Figs. 10-12): '
        'FedAvg, FedProx, FedNova, SCAFFOLD and FedMGC with 10 clients, all per round, E = 10, '
        'batch 128, Dirichlet 0.5 and 1, 100 rounds, on digits instead of CIFAR-10 / FMNIST.'),
    # FedLD Table 1: FedAvg, FedProx, FedGH (FedBN and FedPAC are not here); 5 clients, all per
    # round, E = 1, batch 50, Dirichlet 100 / 0.5 / 0.1 (Retina splits 1-3).
    'fedld_table': dict(
        regimes='digits:dir(100)@5,digits:dir(0.5)@5,digits:dir(0.1)@5',
        methods='fedavg,fedprox,fedgh,fedld',
        epochs=['1'], tune_epochs=['1'], report_seeds=['0', '1', '2'], rounds=100,
        tuning_regimes='digits:digits:dir(0.1)@5',
        clients_per_round=5, client_batch_size=50,
        description='The FedLD paper\'s Table 1 (`--preset=fedld_table`): FedAvg, FedProx, '
        'FedGH and FedLD with 5 clients, all per round, E = 1, batch 50, the Retina splits\' '
        'Dirichlet 100 / 0.5 / 0.1 on digits, 100 rounds instead of 200.'),
    # FedGA Table 1: FedAvg, FedProx (FedRL, CLIMB, FedNTD are not here); the fedga_setting loop.
    'fedga_table': dict(
        regimes='digits:client_dir(0.1)@100,digits:client_dir(0.5)@100,'
        'digits:client_dir(1.0)@100',
        methods='fedavg,fedprox,fedga',
        epochs=['2'], tune_epochs=['2'], report_seeds=['0', '1', '2'], rounds=50,
        tuning_regimes='digits:digits:client_dir(0.1)@100',
        clients_per_round=10, client_batch_size=64,
        description='The FedGA paper\'s Table 1 (`--preset=fedga_table`): FedAvg, FedProx and '
        'FedGA in its setting (100 clients of equal size, 10 per round, E = 2, batch 64), '
        'per-client Dirichlet 0.1 / 0.5 / 1.0 on digits instead of MNIST / CIFAR, 50 rounds.'),
}
for _name, _preset in PAPER_TABLES.items():
  _preset.update(models='digits:mlp', tune=True, tuning_seeds=['100'], runtime='inprocess',
                 experiment_name=_name)

PRESETS: dict[str, dict[str, Any]] = {
    'smoke': dict(regimes='digits:iid@8,digits:#C=2@8', methods='fedavg,fedgh', epochs=['1'],
                  report_seeds=['0', '1'], rounds=3, clients_per_round=4, client_batch_size=32,
                  models='digits:logistic_regression', tune=False, experiment_name='smoke'),
    'results': dict(regimes=','.join(RESULTS_REGIMES), methods=','.join(RESULTS_METHODS),
                    epochs=['1'], report_seeds=RESULTS_SEEDS, rounds=50,
                    clients_per_round=10, client_batch_size=20, models='digits:mlp',
                    tune=True, tuning_seeds=['100'], tune_server_lr=True,
                    eval_train_loss=True, primary_statistic='last_k_accuracy',
                    runtime='inprocess', experiment_name='results', positive_control=True,
                    description=RESULTS_DESCRIPTION),
    'diagnosis': dict(regimes='digits:dir(0.1),digits:#C=2,synthetic(1,1)',
                      methods=','.join(DIAGNOSIS_METHODS), epochs=['1'],
                      report_seeds=RESULTS_SEEDS, rounds=50, clients_per_round=10,
                      client_batch_size=20, models='digits:mlp', tune=True,
                      tuning_seeds=['100'], tune_server_lr=True, variants_inherit=True,
                      eval_train_loss=True, runtime='inprocess', experiment_name='diagnosis',
                      description='The diagnosis variants (`--preset=diagnosis`): each '
                      'variant beside its parent, at the parent\'s tuned values with one '
                      'thing changed, 10 reporting seeds, the regimes of the results preset '
                      'before this protocol.'),
    'fedga_setting': dict(regimes='digits:client_dir(0.1)@100,synthetic(1,1)@100',
                          methods=','.join(FEDGA_SETTING_METHODS), epochs=['2'],
                          report_seeds=RESULTS_SEEDS, rounds=50, clients_per_round=10,
                          client_batch_size=64, models='digits:mlp', tune=True,
                          tune_epochs=['2'], tuning_seeds=['100'],
                          tuning_regimes='digits:digits:client_dir(0.1)@100,'
                                         'synthetic:synthetic(1,1)@100', runtime='inprocess',
                          experiment_name='fedga_setting',
                          description='FedGA\'s federation on other data (`--preset=fedga_setting`): '
                          '100 clients of equal size (per-client Dirichlet 0.1 on digits), 10 '
                          'per round, E = 2, batch 64, 50 rounds; FedGA\'s two forms with and '
                          'without clipping at 5.0, the clipped ones against FedAvg clipped '
                          'alike; tuned on the same regimes with one tuning seed; 10 reporting '
                          'seeds.'),
    **PAPER_TABLES,
}


def apply_preset() -> None:
  """Sets the preset's values (`PRESETS`) on every flag not given on the command line."""
  flags_lib.apply_preset(PRESETS)


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
      from experiments.benchmarking import control  # pylint: disable=g-import-not-at-top
      control_outcome = grid.run_benchmark(control.control_config(config), command=command)
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
        'Git commit': flags_lib.hparams(()).get('git_commit') or 'unknown',
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

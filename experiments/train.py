"""Trains one algorithm on one dataset (`python -m experiments.train --algorithm=fedgh
--dataset=digits`): metrics.csv, hparams.csv, checkpoints under `<output_dir>/<experiment_name>/`;
rerunning an interrupted command resumes it (`--noresume` starts over)."""

from tff_conflict import _interrupts as interrupts  # pylint: disable=g-bad-import-order
if __name__ == '__main__':   # Ctrl-C / SIGTERM before main (TensorFlow loading): 130 / 143 at once
  interrupts.exit_on_signals()

import os

# Quiet before TensorFlow is imported (its C++ logs read the environment then); TensorFlow must be
# imported before absl's app.run() parses flags (BUILD_NOTES.md, Keras pitfalls).
import tff_conflict
tff_conflict.quiet()
import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
from absl import flags  # pylint: disable=g-import-not-at-top

from experiments import cli  # pylint: disable=g-import-not-at-top
from experiments import config
from experiments import experiment_lib
from tff_conflict import _files as files
from experiments import flags_lib
from tff_conflict.simulation import training_loop

FLAGS = flags.FLAGS

_DEFAULTS = config.ExperimentConfig()

flags.DEFINE_enum('algorithm', _DEFAULTS.algorithm.name,
                  list(experiment_lib.ALGORITHM_HPARAMS) + [config.CUSTOM_ALGORITHM], 'Method '
                  '(tff_conflict.learning.ALGORITHMS), or custom: --client_loss with --aggregator.')
flags.DEFINE_enum('client_loss', None, list(experiment_lib.LOSS_HPARAMS),
                  'With --algorithm=custom: the client loss (tff_conflict.learning.LOSSES).')
flags.DEFINE_enum('aggregator', None, list(experiment_lib.AGGREGATOR_HPARAMS),
                  'The server aggregator (tff_conflict.learning.AGGREGATORS): with '
                  '--algorithm=custom, or on top of a baseline whose builder takes one '
                  '(fedavg, fedprox, fednova, feddecorr, scaffold).')
flags.DEFINE_integer('seed', _DEFAULTS.seed, 'Seed of the model initialisation, client '
                     'sampling, local shuffling and randomized aggregators.')
flags_lib.register_validators()


def main(unused_argv):
  flags_lib.quiet_logs()
  flags_lib.refuse_flags({name: 'applies to compare and the benchmark, which run several runs '
                          '(train runs one)' for name in ('executor', 'workers', 'ray_address',
                                                          'worker_cpus', 'worker_gpus')})
  experiment = flags_lib.check_common_flags()
  experiment_dir = cli.prepare_output_dir(experiment.experiment_dir)
  with files.one_writer(experiment_dir):   # before anything in it is read or written
    if experiment.training.resume:   # before any work: a rerun never cuts a longer run
      training_loop.check_rounds(experiment_dir, experiment.training.rounds)
    cli.install_context(experiment)
    task = experiment_lib.load_task(experiment)
    print(f'{experiment.algorithm.label} on {experiment.data.dataset} ({len(task[0].client_ids)} '
          f'clients, {experiment.training.clients_per_round} per round, model '
          f'{experiment_lib.model_name(experiment)}) -> {experiment_dir}', flush=True)
    last = experiment_lib.run_experiment(experiment, task=task)[0][-1]
    print(f'round {last["round_num"]}: test_accuracy {last["test_accuracy"]:.4f}  '
          f'test_macro_f1 {last["test_macro_f1"]:.4f}  test_loss {last["test_loss"]:.4f}')
    print(f'metrics: {os.path.join(experiment_dir, training_loop.METRICS_FILE)}')


if __name__ == '__main__':
  cli.run(main)

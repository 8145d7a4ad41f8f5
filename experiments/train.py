"""Trains one federated algorithm on one dataset and writes metrics, hparams and checkpoints.

    python -m experiments.train --algorithm=fedgh --dataset=digits --rounds=30
    python -m experiments.train --algorithm=custom --client_loss=focal --aggregator=fedgh
    python -m experiments.train --dataset=emnist --cache_dir=~/data --clients_per_round=50

Outputs under `<output_dir>/<experiment_name>/` (default experiment name
`<dataset>_<algorithm>_seed<seed>`): `metrics.csv` (one row per round, see
`experiments/metrics_io.py`), `hparams.csv` (every flag, the seed, package versions) and
`checkpoints/` (the server state after every round by default, `--checkpoint_every`). Rerunning
the same command after an interruption (Ctrl-C, SIGTERM, a kill, a crash) prints `resuming from
round N` and continues after the last saved round, with the same results as an uninterrupted run;
`--noresume` starts over.

Every flag value is checked before any TFF work starts; a bad one ends the command with one line
naming the flag and the value, exit status 2 (`experiments/cli.py`).

Algorithms: the named methods of `tff_conflict.learning.ALGORITHMS` (fedavg, fedprox, fedgh,
fedmgc, fedga, fedld, fed_corrective), or `custom`: any `--client_loss` with any `--aggregator`
(plus the FedProx term when `--proximal_strength` is given), e.g. FedAvg(ce)+DGC or
FedProx+FedGH as in the papers' ablations.
"""

import os

# Quiet before TensorFlow is imported (its C++ logs read the environment then); TensorFlow must be
# imported before absl's app.run() parses flags (BUILD_NOTES.md, Keras pitfalls).
import tff_conflict
tff_conflict.quiet()
import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from experiments import cli  # pylint: disable=g-import-not-at-top
from experiments import config
from experiments import experiment_lib
from experiments import flags_lib
from experiments import training_loop
from tff_conflict import runtime

FLAGS = flags.FLAGS

_ALGORITHM_NAMES = list(experiment_lib.ALGORITHM_HPARAMS) + [experiment_lib.CUSTOM_ALGORITHM]

with flags_lib.record_group('algorithm'):
  flags.DEFINE_enum('algorithm', config.default(config.AlgorithmConfig, 'name'),
                    _ALGORITHM_NAMES, 'Method (tff_conflict.learning.ALGORITHMS), or custom: '
                    '--client_loss with --aggregator.')
  flags.DEFINE_enum('client_loss', None, list(experiment_lib.LOSS_HPARAMS),
                    'With --algorithm=custom: the client loss (tff_conflict.learning.LOSSES).')
  flags.DEFINE_enum('aggregator', None, list(experiment_lib.AGGREGATOR_HPARAMS),
                    'With --algorithm=custom: the server aggregator '
                    '(tff_conflict.learning.AGGREGATORS).')
  flags.DEFINE_integer('seed', config.default(config.LoopConfig, 'seed'),
                       'Seed of the model initialisation, client sampling, local shuffling and '
                       'randomized aggregators.', lower_bound=0)


flags_lib.register_validators()


def check_flags() -> config.ExperimentConfig:
  """Cross-flag checks of this binary; returns the typed config of the flags.

  Raises:
    app.UsageError: naming the flag and its value.
  """
  experiment = flags_lib.check_common_flags()
  if FLAGS.client_clip_norm is not None and not experiment_lib.takes_clip_norm(FLAGS.algorithm):
    raise app.UsageError(f'--client_clip_norm applies only to --algorithm in '
                         f'{[a for a in _ALGORITHM_NAMES if experiment_lib.takes_clip_norm(a)]}, got '
                         f'--algorithm={FLAGS.algorithm}')
  return experiment


def main(argv):
  cli.check_no_arguments(argv)
  flags_lib.quiet_logs()
  experiment = check_flags()
  experiment_dir = cli.prepare_output_dir(experiment.experiment_dir)
  runtime.set_local_context()
  cli.install_context(experiment)
  task = experiment_lib.load_task(experiment)
  print(f'{experiment.algorithm.name} on {experiment.data.dataset} '
        f'({len(task.train_data.client_ids)} clients, '
        f'{experiment.training.clients_per_round} per round, model {task.model_name}) -> '
        f'{experiment_dir}', flush=True)
  try:
    result = experiment_lib.run_experiment(experiment, task=task,
                                           label=experiment.algorithm.name)
  except training_loop.ResumeError as e:
    raise cli.Failure(str(e)) from None
  last = result.rows[-1]
  print(f'round {last["round_num"]}: test_accuracy {last["test_accuracy"]:.4f}  '
        f'test_macro_f1 {last["test_macro_f1"]:.4f}  test_loss {last["test_loss"]:.4f}')
  print(f'metrics: {os.path.join(experiment_dir, training_loop.METRICS_FILE)}')


if __name__ == '__main__':
  cli.run(main)

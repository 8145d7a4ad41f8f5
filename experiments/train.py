"""Trains one federated algorithm on one dataset and writes metrics, hparams and checkpoints.

    python -m experiments.train --algorithm=fedgh --dataset=digits --rounds=30
    python -m experiments.train --algorithm=custom --client_loss=focal --aggregator=fedgh
    python -m experiments.train --dataset=emnist --cache_dir=~/data --clients_per_round=50

Outputs under `<output_dir>/<experiment_name>/` (default experiment name
`<dataset>_<algorithm>_seed<seed>`): `metrics.csv` (one row per round, see
`experiments/metrics_io.py`), `hparams.csv` (every flag, the seed, package versions) and
`checkpoints/`. Rerunning the same command after an interruption continues from the latest
checkpoint, with the same results as an uninterrupted run; `--noresume` starts over.

Algorithms: the named methods of `tff_conflict.learning.ALGORITHMS` (fedavg, fedprox, fedgh,
fedmgc, fedga, fedld, fed_corrective), or `custom`: any `--client_loss` with any `--aggregator`
(plus the FedProx term when `--proximal_strength` is given), e.g. FedAvg(ce)+DGC or
FedProx+FedGH as in the papers' ablations.
"""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# TensorFlow must be imported before absl's app.run() parses flags (BUILD_NOTES.md, Keras
# pitfalls).
import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from experiments import config  # pylint: disable=g-import-not-at-top
from experiments import experiment_lib
from experiments import flags_lib
from experiments import registry
from experiments import training_loop
from tff_conflict import runtime

FLAGS = flags.FLAGS

_ALGORITHM_NAMES = list(registry.ALGORITHM_HPARAMS) + [registry.CUSTOM_ALGORITHM]

with flags_lib.record_group('algorithm'):
  flags.DEFINE_enum('algorithm', 'fedavg', _ALGORITHM_NAMES,
                    'Method (tff_conflict.learning.ALGORITHMS), or custom: --client_loss with '
                    '--aggregator.')
  flags.DEFINE_enum('client_loss', None, list(registry.LOSS_HPARAMS),
                    'With --algorithm=custom: the client loss (tff_conflict.learning.LOSSES).')
  flags.DEFINE_enum('aggregator', None, list(registry.AGGREGATOR_HPARAMS),
                    'With --algorithm=custom: the server aggregator '
                    '(tff_conflict.learning.AGGREGATORS).')
  flags.DEFINE_integer('seed', 0, 'Seed of the model initialisation, client sampling, local '
                       'shuffling and randomized aggregators.', lower_bound=0)


flags_lib.register_validators()


def check_flags() -> config.ExperimentConfig:
  """Cross-flag checks of this binary; returns the typed config of the flags.

  Raises:
    app.UsageError: naming the flag and its value.
  """
  return flags_lib.check_common_flags()


def flag_values() -> dict:
  """The flag values as a mapping (`experiment_lib` accepts it; the config is the typed form)."""
  values = FLAGS.flag_values_dict()
  values['proximal_strength_present'] = FLAGS['proximal_strength'].present
  return values


def default_experiment_name(values) -> str:
  """`<dataset>_<algorithm>_seed<seed>` of a config (or of a flag-value mapping)."""
  experiment = experiment_lib.as_config(values)
  return experiment.default_experiment_name


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  flags_lib.quiet_logs()
  runtime.set_local_context()
  experiment = check_flags()
  experiment_lib.install_context(experiment)
  task = experiment_lib.load_task(experiment)
  experiment_dir = experiment.experiment_dir
  print(f'{experiment.algorithm.name} on {experiment.data.dataset} '
        f'({len(task.train_data.client_ids)} clients, '
        f'{experiment.training.clients_per_round} per round, model {task.model_name}) -> '
        f'{experiment_dir}', flush=True)
  try:
    result = experiment_lib.run_experiment(experiment, task=task,
                                           label=experiment.algorithm.name)
  except training_loop.HparamsMismatchError as e:
    sys.exit(f'train: {e}')
  if result.resumed_from:
    print(f'resumed from the checkpoint of round {result.resumed_from}')
  last = result.rows[-1]
  print(f'round {last["round_num"]}: test_accuracy {last["test_accuracy"]:.4f}  '
        f'test_macro_f1 {last["test_macro_f1"]:.4f}  test_loss {last["test_loss"]:.4f}')
  print(f'metrics: {os.path.join(experiment_dir, training_loop.METRICS_FILE)}')


if __name__ == '__main__':
  app.run(main)

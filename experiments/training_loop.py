"""The run loop shared by `experiments.train` and `experiments.compare`: rounds, evaluation,
metrics, checkpoints, resume.

`run_training(process, ...)` trains a `tff.learning.templates.LearningProcess` (or any runner
with the same `initialize()` / `next(state, client_datasets)`) and writes, under
`experiment_dir`:

  metrics.csv    one row per round (`metrics_io`): training loss and accuracy, test accuracy,
                 loss and macro-F1 on evaluation rounds, round and evaluation time, and every
                 metric of the process flattened (`aggregator/conflict_fraction_before`, ...)
  hparams.csv    every flag value, seed, package versions (written by the caller's `hparams`)
  checkpoints/   the server state every `checkpoint_every` rounds and after the last round

Reproducibility. Everything random is a function of the seeds: the partition (`--data_seed`), the
model initialisation (seeded initializers, `experiments.models`), the clients of round r
(`sample_clients(ids, k, seed=seed, round_num=r)`, from `numpy.random.default_rng([seed, r])`),
and the shuffling of client i of round r (a tf.data seed derived from (seed, r, i)). Nothing
depends on earlier rounds except the server state, so a run resumed from the checkpoint of round
r reproduces the uninterrupted run exactly, and two runs with the same flags give identical
metrics except the timing columns (`metrics_io.TIMING_COLUMNS`).

Resume. With `resume=True` the loop restores the newest readable checkpoint (round r), drops
the rows after r from metrics.csv, removes checkpoints after r, and continues with round r + 1.
An earlier run whose hyperparameters differ (other than `RESUMABLE_CHANGES`, e.g. more
`--rounds`) is refused with a ValueError naming the differences.
"""

import dataclasses
import os
import shutil
import time
from typing import Any, Callable, Mapping, Optional, Sequence, TextIO

from absl import logging
import numpy as np
import tensorflow as tf

from experiments import checkpoints as checkpoints_lib
from experiments import config as config_lib
from experiments import metrics_io
from experiments import progress as progress_lib

METRICS_FILE = 'metrics.csv'
HPARAMS_FILE = 'hparams.csv'
CHECKPOINT_DIR = 'checkpoints'

# Hyperparameters that may change between an interrupted run and its resumption.
RESUMABLE_CHANGES = frozenset({
    'rounds', 'eval_every', 'checkpoint_every', 'keep_checkpoints', 'output_dir', 'resume',
    'progress', 'runtime', 'workers', 'git_commit'})

# Metric names (last path components) of the training loss and accuracy in TFF's metrics.
_TRAIN_LOSS = 'client_work/train/loss'
_TRAIN_ACCURACY = 'client_work/train/sparse_categorical_accuracy'

TEST_COLUMNS = ('test_accuracy', 'test_loss', 'test_macro_f1')

class HparamsMismatchError(ValueError):
  """An earlier run in the experiment directory used other hyperparameters."""


EvaluateFn = Callable[[Any], Mapping[str, float]]


# The run loop's settings live with the other settings (experiments.config).
LoopConfig = config_lib.LoopConfig


@dataclasses.dataclass
class RunResult:
  """What `run_training` did.

  Attributes:
    experiment_dir: where the outputs are.
    rows: every metrics.csv row, rounds 1..rounds (including rows of an earlier run kept on
      resume).
    resumed_from: the round of the checkpoint the run continued from (0: started fresh).
    final_state: the server state after the last round.
  """
  experiment_dir: str
  rows: list[dict[str, Any]]
  resumed_from: int
  final_state: Any


def sample_clients(client_ids: Sequence[str], num_clients: int, *, seed: int,
                   round_num: int) -> list[str]:
  """The clients of round `round_num`: a function of (seed, round_num) only.

  Draws `num_clients` distinct positions of `client_ids` with
  `numpy.random.default_rng([seed, round_num])` and returns them in ascending position order.
  """
  if not 1 <= num_clients <= len(client_ids):
    raise ValueError(f'num_clients must be in [1, {len(client_ids)}], got {num_clients}')
  rng = np.random.default_rng([int(seed), int(round_num)])
  chosen = np.sort(rng.choice(len(client_ids), size=num_clients, replace=False))
  return [client_ids[i] for i in chosen]


def shuffle_seed(seed: int, round_num: int, client_index: int) -> int:
  """A tf.data shuffle seed derived from (seed, round, position of the client in the round)."""
  return int(np.random.default_rng([int(seed), int(round_num), int(client_index), 1])
             .integers(0, 2**31 - 1))


def preprocess(dataset: tf.data.Dataset, config: LoopConfig, *, round_num: int = 0,
               client_index: int = 0) -> tf.data.Dataset:
  """Shuffle (seeded) -> repeat `client_epochs` -> batch `batch_size`."""
  if config.shuffle_buffer > 0:
    dataset = dataset.shuffle(config.shuffle_buffer,
                              seed=shuffle_seed(config.seed, round_num, client_index),
                              reshuffle_each_iteration=False)
  if config.client_epochs > 1:
    dataset = dataset.repeat(config.client_epochs)
  return dataset.batch(config.batch_size)


def _check_hparams(path: str, hparams: Mapping[str, Any]) -> None:
  """Refuses to resume a run whose stored hyperparameters differ from `hparams`."""
  if not os.path.exists(path):
    return
  stored = metrics_io.read_hparams(path)
  current = {k: metrics_io._hparam_str(v) for k, v in hparams.items()}  # pylint: disable=protected-access
  ignored = lambda k: k in RESUMABLE_CHANGES or k.startswith('version/')
  # A setting one side does not record at all counts as empty (e.g. a setting added later).
  diffs = sorted(k for k in set(stored) | set(current)
                 if not ignored(k) and stored.get(k, '') != current.get(k, ''))
  if diffs:
    details = ', '.join(f'{k}: {stored.get(k)!r} -> {current.get(k)!r}' for k in diffs)
    raise HparamsMismatchError(
        f'{path} records a run with other hyperparameters ({details}); resume needs the same '
        'settings. Use --noresume to start over, or another --experiment_name.')


def _clear_outputs(experiment_dir: str) -> None:
  for name in (METRICS_FILE, HPARAMS_FILE):
    path = os.path.join(experiment_dir, name)
    if os.path.exists(path):
      os.remove(path)
  shutil.rmtree(os.path.join(experiment_dir, CHECKPOINT_DIR), ignore_errors=True)


def _headline(metrics: Mapping[str, float]) -> dict[str, Optional[float]]:
  return {'train_loss': metrics.get(_TRAIN_LOSS), 'train_accuracy': metrics.get(_TRAIN_ACCURACY)}


def run_training(process: Any, *, train_data: Any, evaluate_fn: EvaluateFn, config: LoopConfig,
                 experiment_dir: str, hparams: Mapping[str, Any], runner: Any = None,
                 client_ids: Optional[Sequence[str]] = None, label: str = '',
                 show_progress: bool = True, stream: Optional[TextIO] = None,
                 test_columns: Sequence[str] = TEST_COLUMNS) -> RunResult:
  """Runs rounds 1..config.rounds (or the rest of them, when resuming).

  Args:
    process: the learning process; used for `initialize()` (the structure of checkpoints) and
      `get_model_weights(state)`.
    train_data: a `tff.simulation.datasets.ClientData` of unbatched examples.
    evaluate_fn: model weights (`tff.learning.models.ModelWeights`) -> test metrics, a mapping
      whose keys are among `test_columns`.
    config: the loop settings.
    experiment_dir: outputs go here (created if missing).
    hparams: written to hparams.csv; compared with an earlier run's before resuming.
    runner: what runs `initialize` / `next` (an execution backend); default `process`.
    client_ids: the population to sample from; default `train_data.client_ids`.
    label: shown in the progress output (e.g. the algorithm).
    show_progress: print progress (a bar on a TTY, plain lines otherwise).
    stream: where progress goes; default stdout.
    test_columns: the columns `evaluate_fn` may fill (empty on rounds without evaluation), so
      that every row has the same columns.

  Returns:
    A `RunResult`.

  Raises:
    ValueError: if clients_per_round exceeds the population.
    HparamsMismatchError: (a ValueError) if an earlier run under `experiment_dir` has other
      hyperparameters and `config.resume` is set.
  """
  runner = process if runner is None else runner
  client_ids = list(train_data.client_ids if client_ids is None else client_ids)
  if config.clients_per_round > len(client_ids):
    raise ValueError(f'clients_per_round={config.clients_per_round} is larger than the '
                     f'population of {len(client_ids)} clients')
  os.makedirs(experiment_dir, exist_ok=True)
  hparams_path = os.path.join(experiment_dir, HPARAMS_FILE)
  if config.resume:
    _check_hparams(hparams_path, hparams)
  else:
    _clear_outputs(experiment_dir)
  metrics_io.write_hparams(hparams_path, hparams)

  manager = checkpoints_lib.CheckpointManager(os.path.join(experiment_dir, CHECKPOINT_DIR),
                                              keep_total=config.keep_checkpoints)
  initial_state = runner.initialize()
  state, done = (manager.load_latest(initial_state) if config.resume else (None, 0))
  if state is None:
    state, done = initial_state, 0
  else:
    logging.info('Resuming %s from the checkpoint of round %d', experiment_dir, done)
  done = min(done, config.rounds)
  manager.remove_after(done)
  writer = metrics_io.MetricsWriter(os.path.join(experiment_dir, METRICS_FILE),
                                    keep_through_round=done)
  if done and len(writer.rows) != done:
    # metrics.csv lost rows the checkpoint covers (deleted by hand?): their metrics cannot be
    # recomputed without rerunning those rounds, so start over rather than write a gap.
    logging.warning('%s has %d rows for a checkpoint at round %d; starting over.',
                    experiment_dir, len(writer.rows), done)
    state, done = initial_state, 0
    manager.remove_after(0)
    writer = metrics_io.MetricsWriter(os.path.join(experiment_dir, METRICS_FILE))

  bar = None
  if show_progress and done < config.rounds:
    bar = progress_lib.ProgressBar(config.rounds, first_round=done, label=label, stream=stream)
  try:
    for round_num in range(done + 1, config.rounds + 1):
      sampled = sample_clients(client_ids, config.clients_per_round, seed=config.seed,
                               round_num=round_num)
      datasets = [preprocess(train_data.create_tf_dataset_for_client(cid), config,
                             round_num=round_num, client_index=i)
                  for i, cid in enumerate(sampled)]
      start = time.monotonic()
      output = runner.next(state, datasets)
      round_time = time.monotonic() - start
      state = output.state
      metrics = metrics_io.flatten_metrics(output.metrics)
      row: dict[str, Any] = _headline(metrics)
      row.update({c: None for c in test_columns})
      row.update({'round_time_s': round_time, 'eval_time_s': None})
      accuracy = None
      if config.is_eval_round(round_num):
        start = time.monotonic()
        test_metrics = dict(evaluate_fn(process.get_model_weights(state)))
        unknown = sorted(set(test_metrics) - set(test_columns))
        if unknown:
          raise ValueError(f'evaluate_fn returned {unknown}, which are not in test_columns')
        row['eval_time_s'] = time.monotonic() - start
        row.update(test_metrics)
        accuracy = test_metrics.get('test_accuracy')
      row.update(metrics)
      writer.append(round_num, row)
      if config.is_checkpoint_round(round_num):
        manager.save(state, round_num)
      if bar is not None:
        loss = row.get('train_loss')
        bar.update(round_num, accuracy=accuracy,
                   extra='' if loss is None else f'train_loss {loss:.4f}')
  finally:
    if bar is not None:
      bar.close()
  return RunResult(experiment_dir=experiment_dir, rows=writer.rows, resumed_from=done,
                   final_state=state)

"""The run loop every run goes through: rounds, evaluation, metrics, checkpoints and an exact
resume (docs/design.md, "Experiments")."""

import asyncio
import collections
import csv
import os
import shutil
import sys
import time
from typing import Any, Callable, Mapping, Optional, Sequence, TextIO

import numpy as np
import tensorflow_federated as tff

from experiments import checkpoints as checkpoints_lib
from experiments import interrupts
from experiments import config as config_lib
from experiments import files
from experiments import metrics_io
from experiments import progress as progress_lib
from experiments import round_data
from tff_conflict.learning import client_controls as client_controls_lib
from tff_conflict.learning import scaffold as scaffold_lib

METRICS_FILE = metrics_io.METRICS_FILE
HPARAMS_FILE = 'hparams.csv'
CHECKPOINT_DIR = 'checkpoints'
# Hyperparameters that may change between an interrupted run and its resumption.
RESUMABLE_CHANGES = frozenset({
    'rounds', 'eval_every', 'checkpoint_every', 'keep_checkpoints', 'output_dir', 'resume',
    'progress', 'runtime', 'workers', 'git_commit'})
TEST_COLUMNS = ('test_accuracy', 'test_loss', 'test_macro_f1')
preprocess = round_data.preprocess


class ResumeError(files.Failure, ValueError):
  """An earlier run's outputs cannot be resumed as they are; the message says what to do."""


class HparamsMismatchError(ResumeError):
  """An earlier run in the experiment directory used other hyperparameters."""


def sample_clients(client_ids: Sequence[str], num_clients: int, *, seed: int,
                   round_num: int) -> list[str]:
  """`num_clients` distinct clients drawn by `numpy.random.default_rng([seed, round_num])`, in
  the order of `client_ids`: a function of (seed, round_num) only."""
  if not 1 <= num_clients <= len(client_ids):
    raise ValueError(f'num_clients must be in [1, {len(client_ids)}], got {num_clients}')
  rng = np.random.default_rng([int(seed), int(round_num)])
  return [client_ids[i] for i in np.sort(rng.choice(len(client_ids), num_clients, replace=False))]


def _check_hparams(path: str, hparams: Mapping[str, Any]) -> None:
  """Refuses to resume a run whose stored hyperparameters differ from `hparams`."""
  if not os.path.exists(path):
    return
  try:
    stored = metrics_io.read_hparams(path)
  except (OSError, ValueError, csv.Error) as e:
    raise ResumeError(
        f'{path} cannot be read ({e}), so the settings of the earlier run in this directory are '
        'unknown and resuming it is refused. Use --noresume to start over, or another '
        '--experiment_name.') from None
  current = {k: metrics_io._hparam_str(v) for k, v in hparams.items()}  # pylint: disable=protected-access
  # A method flag the run does not read is not recorded (earlier versions recorded every one);
  # a setting one side does not record at all counts as empty (e.g. a setting added later).
  ignored = lambda k: (k in RESUMABLE_CHANGES or k.startswith('version/')
                       or (k in config_lib.METHOD_FLAGS and k not in current))
  diffs = sorted(k for k in set(stored) | set(current)
                 if not ignored(k) and stored.get(k, '') != current.get(k, ''))
  if diffs:
    details = ', '.join(f'{k}: {stored.get(k)!r} -> {current.get(k)!r}' for k in diffs)
    raise HparamsMismatchError(
        f'{path} records a run with other hyperparameters ({details}); resume needs the same '
        'settings. Use --noresume to start over, or another --experiment_name.')


def _rounds(first: int, last: int) -> str:
  return f'round {first}' if first == last else f'rounds {first}-{last}'


def _short(error: Exception) -> str:
  text = ' '.join(str(error).split())
  text = f'{type(error).__name__}: {text}' if text else type(error).__name__
  return text if len(text) <= 160 else text[:157] + '...'


class _ClientState:
  """The clients' state a process keeps between rounds (SCAFFOLD's controls; none for the other
  processes), checkpointed with the server state as `OrderedDict(state=..., client_controls=...)`.
  """

  def __init__(self, process: Any, client_ids: Sequence[str]):
    self.controls = None
    if scaffold_lib.control_layout(process) is not None:
      self.controls = client_controls_lib.ClientControls.for_process(process, client_ids)

  def inputs(self, sampled: Sequence[str], datasets: list) -> list:
    return datasets if self.controls is None else self.controls.for_cohort(sampled, datasets)

  def metrics(self, sampled: Sequence[str], output: Any, round_num: int) -> Any:
    """The round's metrics; the clients' new state is kept (and left out of the metrics)."""
    if self.controls is None:
      return output.metrics
    return self.controls.update(sampled, output, version=round_num)

  def checkpoint(self, state: Any, round_num: int) -> Any:
    """The saved value of round `round_num`: the state, with that round's controls (a later
    update undone)."""
    if self.controls is None:
      return state
    return collections.OrderedDict(
        state=state, client_controls=self.controls.arrays(version=round_num))

  def restored(self, saved: Any) -> Any:
    """The server state of a loaded checkpoint; the controls are restored from it."""
    if self.controls is None:
      return saved
    self.controls.restore(saved['client_controls'])
    return saved['state']


def _restore(manager, metrics_path: str, initial_state: Any, rounds: int,
             notify: Callable[[str], None], client_state: _ClientState) -> tuple:
  """(state, round, rows 1..round, columns) of the newest readable checkpoint that metrics.csv's
  intact rows cover, else the initial state; each disagreement between the two (a crash, an
  edit) is reported in one line naming the file.

  Raises:
    ResumeError: metrics.csv exists but cannot be read at all (permissions).
  """
  start = (initial_state, 0, [], None)
  versions = [v for v in manager.versions() if v <= rounds]
  newest = max(versions, default=0)
  if not os.path.exists(metrics_path):
    if newest:
      notify(f'warning: {metrics_path} is missing but {manager.root_dir} holds the state after '
             f'round {newest}; the metrics of those rounds exist nowhere else, so the run starts '
             'over from round 1')
    return start
  try:
    found, columns, problem = metrics_io.read_metrics(metrics_path)
  except OSError as e:
    raise ResumeError(f'{metrics_path} cannot be read ({e.strerror or e}); fix it, or use '
                      '--noresume to start over') from None
  intact = len(found)
  template = client_state.checkpoint(initial_state, 0)
  for version in reversed([v for v in versions if v <= intact]):
    try:
      state = client_state.restored(asyncio.run(manager.load(version, template)))
    except Exception as e:  # pylint: disable=broad-except
      notify(f'warning: the checkpoint {manager.path(version)} cannot be read ({_short(e)}); '
             'trying an older one')
      continue
    start = (state, version, found[:version], columns)
    break
  outcome = f'resuming from round {start[1]}' if start[1] else 'starting over from round 1'
  if problem:
    kept = f'its intact rows are {_rounds(1, intact)}' if intact else 'no row is intact'
    notify(f'warning: {metrics_path} {problem} ({kept}); {outcome}')
  elif newest > intact:
    notify(f'warning: {metrics_path} has rows for {_rounds(1, intact) if intact else "no round"} '
           f'but {manager.root_dir} holds the state after round {newest}; {outcome} and '
           'recomputing the rounds after it')
  elif intact and not versions and not start[1]:
    notify(f'warning: {metrics_path} has rows for {_rounds(1, intact)} but {manager.root_dir} '
           'holds no checkpoint to continue from; starting over from round 1')
  return start


def run_training(process: Any, *, train_data: Any, evaluate_fn: Callable[[Any], Mapping],
                 config: config_lib.LoopConfig, experiment_dir: str, hparams: Mapping[str, Any],
                 runner: Any = None, initial_state: Any = None, label: str = '',
                 show_progress: bool = True, stream: Optional[TextIO] = None,
                 test_columns: Sequence[str] = TEST_COLUMNS,
                 on_round: Callable[[], None] = lambda: None,
                 release_managers: Sequence[tff.program.ReleaseManager] = ()) -> tuple:
  """Runs rounds 1..config.rounds of `process` on clients sampled from `train_data` (through
  `runner`, default the process, from `initial_state`, default `runner.initialize()`), or the
  rest of them when the run in `experiment_dir` with the same `hparams` is resumed; returns
  (the metrics rows of rounds 1..rounds, the final state, the round resumed from).

  `evaluate_fn` maps model weights to metrics among `test_columns` (every row has them);
  `release_managers` (`tff.program.ReleaseManager`s) receive each round's row after metrics.csv,
  key: the round. Ctrl-C or SIGTERM saves the last finished round and re-raises with a message
  saying how to resume. Raises `ResumeError` for a run that cannot be resumed (other
  hyperparameters, unreadable files, other columns; `config.resume` False starts over)."""
  runner = process if runner is None else runner
  client_ids = list(train_data.client_ids)
  if config.clients_per_round > len(client_ids):
    raise ValueError(f'clients_per_round={config.clients_per_round} is larger than the '
                     f'population of {len(client_ids)} clients')
  prefix = f'{label}: ' if label else ''

  def notify(text: str) -> None:
    out = stream or sys.stdout
    out.write(f'{prefix}{text}\n')
    out.flush()

  def model_weights(state):
    # A composed process's weights are in its state; else the runner's own (an in-process run
    # never goes through TFF's runtime, which would start a worker_binary).
    weights = getattr(state, 'global_model_weights', None)
    if isinstance(weights, tff.learning.models.ModelWeights):
      return weights
    return (getattr(runner, 'get_model_weights', None) or process.get_model_weights)(state)

  os.makedirs(experiment_dir, exist_ok=True)
  hparams_path = os.path.join(experiment_dir, HPARAMS_FILE)
  metrics_path = os.path.join(experiment_dir, METRICS_FILE)
  if config.resume:
    _check_hparams(hparams_path, hparams)
  else:
    for name in (METRICS_FILE, metrics_io.PER_CLIENT_FILE, HPARAMS_FILE):
      if os.path.exists(os.path.join(experiment_dir, name)):
        os.remove(os.path.join(experiment_dir, name))
    shutil.rmtree(os.path.join(experiment_dir, CHECKPOINT_DIR), ignore_errors=True)
  metrics_io.write_hparams(hparams_path, hparams)

  manager = checkpoints_lib.CheckpointManager(os.path.join(experiment_dir, CHECKPOINT_DIR),
                                              keep_total=config.keep_checkpoints)
  state = runner.initialize() if initial_state is None else initial_state
  client_state = _ClientState(process, client_ids)
  state, done, rows, columns = (state, 0, [], None)
  if config.resume:
    state, done, rows, columns = _restore(manager, metrics_path, state, config.rounds, notify,
                                          client_state)
  manager.remove_after(done)
  # Rows are synced only where a rerun resumes from a checkpoint.
  writer = metrics_io.MetricsReleaseManager(experiment_dir, rows=rows, columns=columns,
                                            always=test_columns, sync=config.checkpoint_every > 0)
  managers = [writer, *release_managers]
  if done == config.rounds:
    notify(f'all {config.rounds} rounds are already done ({metrics_path})')
  elif done:
    notify(f'resuming from round {done}: running {_rounds(done + 1, config.rounds)} of '
           f'{config.rounds}')

  make_datasets = round_data.RoundData(train_data, config)
  events = asyncio.new_event_loop()   # one for the run's releases and saves
  bar = None
  if show_progress and done < config.rounds:
    bar = progress_lib.Progress(config.rounds, done=done, label=label, stream=stream)
  finished_state, finished_round, saved_round = state, done, done
  latest_accuracy = None
  try:
    for round_num in range(done + 1, config.rounds + 1):
      interrupts.raise_if_interrupted()   # a signal whose exception Python dropped in a callback
      sampled = sample_clients(client_ids, config.clients_per_round, seed=config.seed,
                               round_num=round_num)
      datasets = client_state.inputs(sampled, make_datasets(sampled, round_num))
      start_time = time.monotonic()
      output = runner.next(state, datasets)
      round_time = time.monotonic() - start_time
      state = output.state
      round_metrics = client_state.metrics(sampled, output, round_num)
      flat = metrics_io.flatten_metrics(round_metrics)
      row: dict[str, Any] = {
          'train_loss': flat.get('client_work/train/loss'),
          'train_accuracy': flat.get('client_work/train/sparse_categorical_accuracy'),
          'round_time_s': round_time, 'eval_time_s': None}
      if config.is_eval_round(round_num):
        start_time = time.monotonic()
        test_metrics = dict(evaluate_fn(model_weights(state)))
        unknown = sorted(set(test_metrics) - set(test_columns))
        if unknown:
          raise ValueError(f'evaluate_fn returned {unknown}, which are not in test_columns')
        row['eval_time_s'] = time.monotonic() - start_time
        row.update(test_metrics)
        latest_accuracy = test_metrics.get('test_accuracy', latest_accuracy)
      row.update(round_metrics)
      try:
        events.run_until_complete(_release(managers, row, round_num))
      except ValueError as e:
        if round_num != done + 1 or not done:
          raise
        raise ResumeError(f'{metrics_path} has other columns than the metrics of this run '
                          f'({e}); it was edited, or written by another version: use '
                          '--noresume to start over') from None
      finished_state, finished_round = state, round_num
      if config.is_checkpoint_round(round_num):
        events.run_until_complete(manager.save(client_state.checkpoint(state, round_num),
                                               round_num))
        saved_round = round_num
      on_round()
      interrupts.raise_if_interrupted()
      if bar is not None:
        loss = row.get('train_loss')
        bar.tick(postfix=f'test_accuracy {_figure(latest_accuracy)}'
                 + ('' if loss is None else f'  train_loss {loss:.4f}'))
  except KeyboardInterrupt as e:
    if bar is not None:
      bar.close()
      bar = None
    if config.checkpoint_every > 0 and finished_round > saved_round:
      events.run_until_complete(
          manager.save(client_state.checkpoint(finished_state, finished_round), finished_round))
      saved_round = finished_round
    e.args = (_interrupted_message(prefix, finished_round, saved_round, config.rounds,
                                   manager.root_dir),)
    raise
  finally:
    events.close()
    if bar is not None:
      bar.close()
  return writer.rows, state, done


async def _release(managers, value, key: int) -> None:
  for manager in managers:
    await manager.release(value, key)


def _figure(value: Optional[float]) -> str:
  return '-' if value is None else f'{value:.4f}'


def _interrupted_message(prefix: str, finished: int, saved: int, rounds: int,
                         checkpoint_dir: str) -> str:
  if not finished:
    return f'{prefix}interrupted before round 1 finished; nothing to resume from'
  if not saved:
    return (f'{prefix}interrupted after round {finished} of {rounds}; no checkpoint is kept '
            '(checkpoint_every is 0), so a rerun starts over')
  return (f'{prefix}interrupted after round {finished} of {rounds}; the state after round '
          f'{saved} is saved in {checkpoint_dir}: rerun the same command to resume from it')

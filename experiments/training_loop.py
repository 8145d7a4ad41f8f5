"""The run loop of `experiments.train` and `experiments.compare`: rounds, evaluation, metrics,
checkpoints, and an exact resume (docs/design.md, "Experiments")."""

import asyncio
import collections
import csv
import dataclasses
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

# Metric names (last path components) of the training loss and accuracy in TFF's metrics.
_TRAIN_LOSS = 'client_work/train/loss'
_TRAIN_ACCURACY = 'client_work/train/sparse_categorical_accuracy'

TEST_COLUMNS = ('test_accuracy', 'test_loss', 'test_macro_f1')

class ResumeError(files.Failure, ValueError):
  """An earlier run's outputs cannot be resumed as they are (damaged or other settings); the
  message names the file and what to do."""


class HparamsMismatchError(ResumeError):
  """An earlier run in the experiment directory used other hyperparameters."""


EvaluateFn = Callable[[Any], Mapping[str, float]]


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


shuffle_seed = round_data.shuffle_seed
preprocess = round_data.preprocess


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
  # A method flag the run does not read is not recorded (earlier versions recorded every one).
  ignored = lambda k: (k in RESUMABLE_CHANGES or k.startswith('version/')
                       or (k in config_lib.METHOD_FLAGS and k not in current))
  # A setting one side does not record at all counts as empty (e.g. a setting added later).
  diffs = sorted(k for k in set(stored) | set(current)
                 if not ignored(k) and stored.get(k, '') != current.get(k, ''))
  if diffs:
    details = ', '.join(f'{k}: {stored.get(k)!r} -> {current.get(k)!r}' for k in diffs)
    raise HparamsMismatchError(
        f'{path} records a run with other hyperparameters ({details}); resume needs the same '
        'settings. Use --noresume to start over, or another --experiment_name.')


def _clear_outputs(experiment_dir: str) -> None:
  for name in (METRICS_FILE, metrics_io.PER_CLIENT_FILE, HPARAMS_FILE):
    path = os.path.join(experiment_dir, name)
    if os.path.exists(path):
      os.remove(path)
  shutil.rmtree(os.path.join(experiment_dir, CHECKPOINT_DIR), ignore_errors=True)


def _headline(metrics: Mapping[str, float]) -> dict[str, Optional[float]]:
  return {'train_loss': metrics.get(_TRAIN_LOSS), 'train_accuracy': metrics.get(_TRAIN_ACCURACY)}


def _rounds(first: int, last: int) -> str:
  return f'round {first}' if first == last else f'rounds {first}-{last}'


def _short(error: Exception) -> str:
  text = ' '.join(str(error).split())
  text = f'{type(error).__name__}: {text}' if text else type(error).__name__
  return text if len(text) <= 160 else text[:157] + '...'


@dataclasses.dataclass
class _Start:
  """Where a run starts: the state after round `done`, and the metrics rows 1..done."""
  state: Any
  done: int
  rows: list[dict[str, Any]]
  columns: Optional[list[str]]


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
    """What is saved as round `round_num`: the server state alone, or with the controls of that
    round (`ClientControls.arrays`, which undoes a later update)."""
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


def _restore(manager: checkpoints_lib.CheckpointManager, metrics_path: str, initial_state: Any,
             rounds: int, notify: Callable[[str], None],
             client_state: Optional[_ClientState] = None) -> _Start:
  """The newest checkpoint that metrics.csv's intact rows cover, and those rows.

  metrics.csv and the checkpoints are written one after the other, so they can disagree after a
  crash or a change made by hand. Each disagreement is reported in one line naming the file, and
  what can be rebuilt is: the run resumes from the newest readable checkpoint whose round has an
  intact row (rows and checkpoints after it are recomputed, identically), or starts over when
  there is none.

  Raises:
    ResumeError: metrics.csv exists but cannot be read at all (permissions).
  """
  versions = [v for v in manager.versions() if v <= rounds]
  newest = max(versions, default=0)
  if os.path.exists(metrics_path):
    try:
      found = metrics_io.read_metrics(metrics_path)
    except OSError as e:
      raise ResumeError(f'{metrics_path} cannot be read ({e.strerror or e}); fix it, or use '
                        '--noresume to start over') from None
  elif newest:
    notify(f'warning: {metrics_path} is missing but {manager.root_dir} holds the state after '
           f'round {newest}; the metrics of those rounds exist nowhere else, so the run starts '
           'over from round 1')
    return _Start(initial_state, 0, [], None)
  else:
    return _Start(initial_state, 0, [], None)
  intact = len(found.rows)
  covered = [v for v in versions if v <= intact]
  template = initial_state if client_state is None else client_state.checkpoint(initial_state, 0)
  start = _Start(initial_state, 0, [], None)
  for version in reversed(covered):
    try:
      saved = asyncio.run(manager.load(version, template))
      state = saved if client_state is None else client_state.restored(saved)
    except Exception as e:  # pylint: disable=broad-except
      notify(f'warning: the checkpoint {manager.path(version)} cannot be read ({_short(e)}); '
             'trying an older one')
      continue
    start = _Start(state, version, found.rows[:version], found.columns)
    break
  outcome = (f'resuming from round {start.done}' if start.done
             else 'starting over from round 1')
  if found.problem:
    kept = f'its intact rows are {_rounds(1, intact)}' if intact else 'no row is intact'
    notify(f'warning: {metrics_path} {found.problem} ({kept}); {outcome}')
  elif newest > intact:
    notify(f'warning: {metrics_path} has rows for {_rounds(1, intact) if intact else "no round"} '
           f'but {manager.root_dir} holds the state after round {newest}; {outcome} and '
           'recomputing the rounds after it')
  elif intact and not versions and not start.done:
    notify(f'warning: {metrics_path} has rows for {_rounds(1, intact)} but {manager.root_dir} '
           'holds no checkpoint to continue from; starting over from round 1')
  return start


def run_training(process: Any, *, train_data: Any, evaluate_fn: EvaluateFn,
                 config: config_lib.LoopConfig, experiment_dir: str, hparams: Mapping[str, Any],
                 runner: Any = None,
                 client_ids: Optional[Sequence[str]] = None, label: str = '',
                 show_progress: bool = True, stream: Optional[TextIO] = None,
                 test_columns: Sequence[str] = TEST_COLUMNS,
                 release_managers: Sequence[tff.program.ReleaseManager] = ()) -> RunResult:
  """Runs rounds 1..config.rounds (or the rest of them, when resuming).

  Prints `resuming from round N` when it continues an earlier run, and one line for each
  disagreement it finds between metrics.csv and the checkpoints (see `_restore`).

  When Ctrl-C (KeyboardInterrupt) or a SIGTERM turned into one (`experiments.cli.Terminated`)
  stops the loop, the state of the last finished round is saved first (unless
  `checkpoint_every` is 0), and the exception is raised again with a message saying what was
  saved and how to resume.

  Args:
    process: the learning process; its `get_model_weights(state)` gives the evaluated weights
      when `runner` has none.
    train_data: a `tff.simulation.datasets.ClientData` of unbatched examples.
    evaluate_fn: model weights (`tff.learning.models.ModelWeights`) -> test metrics, a mapping
      whose keys are among `test_columns`.
    config: the loop settings.
    experiment_dir: outputs go here (created if missing).
    hparams: written to hparams.csv; compared with an earlier run's before resuming.
    runner: what runs `initialize` / `next`, and `get_model_weights` when it has one (an
      execution backend, e.g. `tff_conflict.runtime.InProcessRunner`); default `process`.
    client_ids: the population to sample from; default `train_data.client_ids`.
    label: shown in the progress output (e.g. the algorithm).
    show_progress: print progress (a bar on a TTY, plain lines otherwise).
    stream: where progress and notices go; default stdout.
    test_columns: the columns `evaluate_fn` may fill (empty on rounds without evaluation), so
      that every row has the same columns.
    release_managers: more `tff.program.ReleaseManager`s (e.g. `tff.program.
      TensorBoardReleaseManager`, `LoggingReleaseManager`) that receive each round's
      measurements after metrics.csv does (`metrics_io.MetricsReleaseManager`), key: the round.

  Returns:
    A `RunResult`.

  Raises:
    ValueError: if clients_per_round exceeds the population.
    ResumeError: (a ValueError) an earlier run under `experiment_dir` cannot be resumed: other
      hyperparameters (`HparamsMismatchError`), a hparams.csv or metrics.csv that cannot be read,
      or a metrics.csv whose columns are not this run's; not raised with `config.resume` False,
      which starts over.
    KeyboardInterrupt: the loop was interrupted (after saving the last finished round).
  """
  runner = process if runner is None else runner
  # The runner's own `get_model_weights` where it has one: the in-process runner's runs in this
  # process, while the process's goes through TFF's runtime (and would start a worker_binary).
  model_weights = getattr(runner, 'get_model_weights', None) or process.get_model_weights
  client_ids = list(train_data.client_ids if client_ids is None else client_ids)
  if config.clients_per_round > len(client_ids):
    raise ValueError(f'clients_per_round={config.clients_per_round} is larger than the '
                     f'population of {len(client_ids)} clients')
  out = stream if stream is not None else sys.stdout
  prefix = f'{label}: ' if label else ''

  def notify(text: str) -> None:
    out.write(f'{prefix}{text}\n')
    out.flush()

  os.makedirs(experiment_dir, exist_ok=True)
  hparams_path = os.path.join(experiment_dir, HPARAMS_FILE)
  metrics_path = os.path.join(experiment_dir, METRICS_FILE)
  if config.resume:
    _check_hparams(hparams_path, hparams)
  else:
    _clear_outputs(experiment_dir)
  metrics_io.write_hparams(hparams_path, hparams)

  manager = checkpoints_lib.CheckpointManager(os.path.join(experiment_dir, CHECKPOINT_DIR),
                                              keep_total=config.keep_checkpoints)
  initial_state = runner.initialize()
  client_state = _ClientState(process, client_ids)
  start = _Start(initial_state, 0, [], None)
  if config.resume:
    start = _restore(manager, metrics_path, initial_state, config.rounds, notify, client_state)
  state, done = start.state, start.done
  manager.remove_after(done)
  # Rows are synced only where a rerun resumes from a checkpoint; without checkpoints it starts
  # over, so a row lost in a crash costs nothing.
  writer = metrics_io.MetricsReleaseManager(experiment_dir, rows=start.rows,
                                            columns=start.columns, always=test_columns,
                                            sync=config.checkpoint_every > 0)
  managers = [writer, *release_managers]
  if done == config.rounds:
    notify(f'all {config.rounds} rounds are already done ({metrics_path})')
  elif done:
    notify(f'resuming from round {done}: running {_rounds(done + 1, config.rounds)} of '
           f'{config.rounds}')

  make_datasets = round_data.RoundData(train_data, config)
  # One event loop for the run's releases and saves (asyncio.run makes and closes one per call).
  events = asyncio.new_event_loop()
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
      datasets = make_datasets(sampled, round_num)
      start_time = time.monotonic()
      output = runner.next(state, client_state.inputs(sampled, datasets))
      round_time = time.monotonic() - start_time
      state = output.state
      round_metrics = client_state.metrics(sampled, output, round_num)
      row: dict[str, Any] = _headline(metrics_io.flatten_metrics(round_metrics))
      row.update({'round_time_s': round_time, 'eval_time_s': None})
      accuracy = None
      if config.is_eval_round(round_num):
        start_time = time.monotonic()
        test_metrics = dict(evaluate_fn(model_weights(state)))
        unknown = sorted(set(test_metrics) - set(test_columns))
        if unknown:
          raise ValueError(f'evaluate_fn returned {unknown}, which are not in test_columns')
        row['eval_time_s'] = time.monotonic() - start_time
        row.update(test_metrics)
        accuracy = test_metrics.get('test_accuracy')
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
      interrupts.raise_if_interrupted()
      if bar is not None:
        if accuracy is not None:
          latest_accuracy = accuracy
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
  return RunResult(experiment_dir=experiment_dir, rows=writer.rows, resumed_from=done,
                   final_state=state)


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

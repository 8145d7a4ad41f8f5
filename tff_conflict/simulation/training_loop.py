"""The run loop (TFF's `tff.simulation.run_training_process`, here with an exact resume): rounds,
evaluation, metrics.csv, hparams.csv and checkpoints of a process in a directory; a rerun with the
same hparams continues it (docs/design.md, "Experiments")."""

import asyncio
import contextlib
import csv
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, Collection, Mapping, Optional, Sequence, TextIO

import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import _files
from tff_conflict import _interrupts
from tff_conflict.simulation import checkpoints as checkpoints_lib
from tff_conflict.simulation import metrics as metrics_lib
from tff_conflict.simulation import progress as progress_lib
from tff_conflict.simulation import rounds as rounds_lib

METRICS_FILE = metrics_lib.METRICS_FILE
HPARAMS_FILE = 'hparams.csv'
CHECKPOINT_DIR = 'checkpoints'
# Hyperparameters that may change between an interrupted run and its resumption.
RESUMABLE_CHANGES = frozenset({
    'rounds', 'eval_every', 'checkpoint_every', 'keep_checkpoints', 'output_dir', 'resume',
    'progress', 'runtime', 'workers', 'tff_workers', 'executor', 'ray_address',
    'worker_cpus', 'worker_gpus', 'git_commit'})
TEST_COLUMNS = ('test_accuracy', 'test_loss', 'test_macro_f1')


class ResumeError(_checks.Failure, ValueError):
  """An earlier run's outputs cannot be resumed as they are; the message says what to do."""


def hparam_str(value) -> str:
  if isinstance(value, (list, tuple)):
    return ','.join(str(v) for v in value)
  return '' if value is None else str(value)


def write_hparams(path: str, hparams: Mapping[str, Any]) -> None:
  """`hparams.csv`: a header of names and one row of values (lists comma-joined)."""
  _files.write_csv_atomically(path, list(hparams), [{k: hparam_str(v) for k, v in hparams.items()}])


def read_hparams(path: str) -> dict[str, str]:
  """`hparams.csv` as name -> string value."""
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  if len(rows) != 1:
    raise ValueError(f'{path} must hold exactly one row of values, found {len(rows)}')
  return dict(rows[0])


def provenance() -> dict[str, str]:
  """`version/<package>` of Python and the packages results depend on, `git_commit` (or '')."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  import tff_conflict  # pylint: disable=g-import-not-at-top
  values = {'version/python': platform.python_version()}
  for package in ('tensorflow', 'tensorflow-federated', 'numpy', 'absl-py', 'scikit-learn',
                  'tensorflow-datasets'):
    try:
      values[f'version/{package}'] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      values[f'version/{package}'] = 'not installed'
  values['version/tff_conflict'], values['git_commit'] = tff_conflict.__version__, ''
  repository = os.path.dirname(os.path.abspath(tff_conflict.__file__))   # git looks upward
  with contextlib.suppress(OSError, subprocess.SubprocessError):
    git = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True, timeout=5,
                         check=False, cwd=repository)
    values['git_commit'] = git.stdout.strip() if git.returncode == 0 else ''
  return values


def _check_hparams(path: str, hparams: Mapping[str, Any], optional: Collection[str] = ()) -> None:
  """Refuses to resume a run whose stored hyperparameters differ from `hparams` (one of `optional`
  that `hparams` leaves out is not compared)."""
  if not os.path.exists(path):
    return
  try:
    stored = read_hparams(path)
  except (OSError, ValueError, csv.Error) as e:
    raise ResumeError(
        f'{path} cannot be read ({e}), so the settings of the earlier run in this directory are '
        'unknown and resuming it is refused. Use --noresume to start over, or another '
        '--experiment_name.') from None
  current = {k: hparam_str(v) for k, v in hparams.items()}
  # A setting one side lacks counts as empty.
  ignored = lambda k: (k in RESUMABLE_CHANGES or k.startswith('version/')
                       or (k in optional and k not in current))
  diffs = sorted(k for k in set(stored) | set(current)
                 if not ignored(k) and stored.get(k, '') != current.get(k, ''))
  if diffs:
    details = ', '.join(f'{k}: {stored.get(k)!r} -> {current.get(k)!r}' for k in diffs)
    raise ResumeError(
        f'{path} records a run with other hyperparameters ({details}); resume needs the same '
        'settings. Use --noresume to start over, or another --experiment_name.')


def check_rounds(experiment_dir: str, rounds: int) -> None:
  """`ResumeError` for rerunning the run in `experiment_dir` with fewer rounds than it has
  recorded (intact metrics.csv rows, checkpoints): a rerun never cuts it."""
  metrics_path = os.path.join(experiment_dir, METRICS_FILE)
  try:
    intact = len(metrics_lib.read_metrics(metrics_path)[0]) if os.path.exists(metrics_path) else 0
  except OSError:
    intact = 0   # `_resume` names the unreadable file
  saved = checkpoints_lib.saved_versions(os.path.join(experiment_dir, CHECKPOINT_DIR))
  recorded = max([intact, *saved])
  if recorded <= rounds:
    return
  held = ([f'{METRICS_FILE} rows for {_rounds(1, intact)}'] if intact else []) + (
      [f'checkpoints of {_rounds(saved[0], saved[-1])}'] if saved else [])
  raise ResumeError(
      f'{experiment_dir} holds a run of {recorded} rounds ({", ".join(held)}), more than '
      f'--rounds={rounds} (rounds: {recorded} -> {rounds}); a rerun keeps what is recorded: use '
      f'--rounds={recorded} or more to continue it, --noresume to start over, or another '
      '--experiment_name')


def _rounds(first: int, last: int) -> str:
  return f'round {first}' if first == last else f'rounds {first}-{last}'


def _short(error: Exception) -> str:
  text = ' '.join(str(error).split())
  text = f'{type(error).__name__}: {text}' if text else type(error).__name__
  return text if len(text) <= 160 else text[:157] + '...'


def _resume(manager, metrics_path: str, state: Any, rounds: int, controls: Any,
            notify: Callable[[str], None]) -> tuple:
  """(state, round, rows 1..round, columns) of the newest readable checkpoint that metrics.csv's
  intact rows cover, else (`state`, 0, [], None); each disagreement said in one line naming the
  file; `ResumeError` for an unreadable metrics.csv. Restores the controls saved with it."""
  start = (None, 0, [], None)
  versions = [v for v in manager.versions() if v <= rounds]
  newest = max(versions, default=0)
  if not os.path.exists(metrics_path):
    if newest:
      notify(f'warning: {metrics_path} is missing but {manager.root_dir} holds the state after '
             f'round {newest}; the metrics of those rounds exist nowhere else, so the run starts '
             'over from round 1')
    return state, 0, [], None
  try:
    found, columns, problem = metrics_lib.read_metrics(metrics_path)
  except OSError as e:
    raise ResumeError(f'{metrics_path} cannot be read ({e.strerror or e}); fix it, or use '
                      '--noresume to start over') from None
  intact = len(found)
  for version in reversed([v for v in versions if v <= intact]):
    try:
      start = (asyncio.run(manager.load(version, rounds_lib.checkpointed(state, controls, 0))),
               version, found[:version], columns)
      break
    except Exception as e:  # pylint: disable=broad-except
      notify(f'warning: the checkpoint {manager.path(version)} cannot be read ({_short(e)}); '
             'trying an older one')
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
  loaded, done, rows, columns = start
  if loaded is not None:
    loaded = rounds_lib.restored(loaded, controls)
  if done == rounds:
    notify(f'all {rounds} rounds are already done ({metrics_path})')
  elif done:
    notify(f'resuming from round {done}: running {_rounds(done + 1, rounds)} of {rounds}')
  return (state if loaded is None else loaded), done, rows, columns


def run_training(process: Any, *, train_data: Any, evaluate_fn: Callable[[Any], Mapping],
                 config: Any, experiment_dir: str, hparams: Mapping[str, Any],
                 runner: Any = None, initial_state: Any = None, label: str = '',
                 show_progress: bool = True, stream: Optional[TextIO] = None,
                 test_columns: Sequence[str] = TEST_COLUMNS,
                 on_round: Callable[[], None] = lambda: None,
                 release_managers: Sequence[tff.program.ReleaseManager] = (),
                 optional_hparams: Collection[str] = ()) -> tuple:
  """Runs rounds 1..config.rounds of `process` (through `runner`, from `initial_state`; defaults:
  the process, `runner.initialize()`), or the rest of the run in `experiment_dir` with the same
  `hparams`; returns (metrics rows of rounds 1..rounds, final state, round resumed from).
  `config`: the binaries' `LoopConfig` or any object with its attributes and `is_*_round` methods.
  `evaluate_fn`: weights -> metrics among `test_columns`; `release_managers` get each row after
  metrics.csv. Ctrl-C, SIGTERM (`_interrupts.raise_if_interrupted` raises one Python dropped) or
  a closed standard output (`_interrupts.OutputClosed`) saves the last finished round and
  re-raises saying how to resume.
  `ArgumentError` for more clients per round than `train_data` has."""
  runner = process if runner is None else runner
  client_ids = list(train_data.client_ids)
  if config.clients_per_round > len(client_ids):
    raise _checks.ArgumentError.must_be('clients_per_round', config.clients_per_round,
                                        f'at most the population of {len(client_ids)} clients')
  prefix = f'{label}: ' if label else ''

  def notify(text: str) -> None:
    print(f'{prefix}{text}', file=stream or sys.stdout, flush=True)

  controls = rounds_lib.scaffold_controls(process, client_ids)
  metrics_path = _prepare(experiment_dir, config, hparams, optional_hparams)
  manager = checkpoints_lib.CheckpointManager(os.path.join(experiment_dir, CHECKPOINT_DIR),
                                              keep_total=config.keep_checkpoints)
  state = runner.initialize() if initial_state is None else initial_state
  done, rows, columns = 0, [], None
  if config.resume:
    state, done, rows, columns = _resume(manager, metrics_path, state, config.rounds, controls,
                                         notify)
  manager.remove_after(done)
  # Rows are synced only where a rerun resumes from a checkpoint.
  writer = metrics_lib.MetricsReleaseManager(experiment_dir, rows=rows, columns=columns,
                                            always=test_columns, sync=config.checkpoint_every > 0)
  make_datasets = rounds_lib.RoundData(train_data, config)
  events = asyncio.new_event_loop()   # one for the run's releases and saves
  bar = progress_lib.Progress(config.rounds, done=done, label=label, stream=stream,
                              enabled=show_progress and done < config.rounds)
  finished_state, finished_round, saved_round, accuracy = state, done, done, None
  try:
    for round_num in range(done + 1, config.rounds + 1):
      _interrupts.raise_if_interrupted()   # a signal whose exception Python dropped in a callback
      sampled = rounds_lib.sample_clients(client_ids, config.clients_per_round,
                                          seed=config.seed, round_num=round_num)
      datasets = make_datasets(sampled, round_num)
      start_time = time.monotonic()
      state, round_metrics = rounds_lib.train_round(runner, state, sampled, datasets,
                                                    controls=controls, round_num=round_num)
      row, untrained = _headline(round_metrics, time.monotonic() - start_time)
      if config.is_eval_round(round_num):
        row.update(_evaluate(evaluate_fn, _model_weights(process, runner, state), test_columns))
        accuracy = row.get('test_accuracy', accuracy)
      row.update(round_metrics)
      _release(events, (writer, *release_managers), row, round_num,
               resumed=done and round_num == done + 1, metrics_path=metrics_path)
      finished_state, finished_round = state, round_num
      if config.is_checkpoint_round(round_num):
        events.run_until_complete(
            manager.save(rounds_lib.checkpointed(state, controls, round_num), round_num))
        saved_round = round_num
      on_round()
      _interrupts.raise_if_interrupted()
      bar.tick(postfix=_postfix(accuracy, row['train_loss'], untrained))
  except (KeyboardInterrupt, _interrupts.OutputClosed) as e:
    if config.checkpoint_every > 0 and finished_round > saved_round:
      events.run_until_complete(
          manager.save(rounds_lib.checkpointed(finished_state, controls, finished_round),
                       finished_round))
      saved_round = finished_round
    e.args = (_interrupted_message(
        prefix, finished_round, saved_round, config.rounds, manager.root_dir,
        'standard output closed' if isinstance(e, _interrupts.OutputClosed) else 'interrupted'),)
    raise
  finally:
    events.close()
    with contextlib.suppress(_interrupts.OutputClosed):   # nothing more is shown then
      bar.close()
  return writer.rows, state, done


def _prepare(experiment_dir: str, config: Any, hparams: Mapping[str, Any],
             optional_hparams: Collection[str]) -> str:
  """Checks a resumed run (or clears its outputs), writes hparams.csv; returns metrics.csv."""
  os.makedirs(experiment_dir, exist_ok=True)
  hparams_path = os.path.join(experiment_dir, HPARAMS_FILE)
  if config.resume:
    _check_hparams(hparams_path, hparams, optional_hparams)
    check_rounds(experiment_dir, config.rounds)
  else:
    for name in (METRICS_FILE, metrics_lib.PER_CLIENT_FILE, HPARAMS_FILE):
      if os.path.exists(os.path.join(experiment_dir, name)):
        os.remove(os.path.join(experiment_dir, name))
    shutil.rmtree(os.path.join(experiment_dir, CHECKPOINT_DIR), ignore_errors=True)
  write_hparams(hparams_path, hparams)
  return os.path.join(experiment_dir, METRICS_FILE)


def _model_weights(process: Any, runner: Any, state: Any) -> Any:
  """A composed process's weights are in its state; else the runner's (not TFF's runtime)."""
  weights = getattr(state, 'global_model_weights', None)
  if isinstance(weights, tff.learning.models.ModelWeights):
    return weights
  return (getattr(runner, 'get_model_weights', None) or process.get_model_weights)(state)


def _headline(round_metrics: Any, round_time: float) -> tuple:
  """(a round's headline cells, whether no client trained: then no train loss)."""
  flat = metrics_lib.flatten_metrics(round_metrics)
  untrained = metrics_lib.trained_nothing(flat)
  row = {'train_loss': None if untrained else flat.get('client_work/train/loss'),
         'train_accuracy': (None if untrained
                            else flat.get('client_work/train/sparse_categorical_accuracy')),
         'round_time_s': round_time, 'eval_time_s': None}
  return row, untrained


def _release(events, managers: Sequence[Any], row: Mapping[str, Any], round_num: int, *,
             resumed: bool, metrics_path: str) -> None:
  """Releases `row`; `ResumeError` where a resumed run's first row has other columns."""
  try:
    for release_manager in managers:
      events.run_until_complete(release_manager.release(row, round_num))
  except ValueError as e:
    if not resumed:
      raise
    raise ResumeError(f'{metrics_path} has other columns than the metrics of this run '
                      f'({e}); it was edited, or written by another version: use '
                      '--noresume to start over') from None


def _evaluate(evaluate_fn: Callable[[Any], Mapping], weights: Any,
              test_columns: Sequence[str]) -> dict[str, Any]:
  """`eval_time_s` and `evaluate_fn(weights)`; ValueError for a metric not in `test_columns`."""
  start_time = time.monotonic()
  test_metrics = dict(evaluate_fn(weights))
  unknown = sorted(set(test_metrics) - set(test_columns))
  if unknown:
    raise ValueError(f'evaluate_fn returned {unknown}, which are not in test_columns')
  return {'eval_time_s': time.monotonic() - start_time, **test_metrics}


def _postfix(accuracy: Optional[float], loss: Optional[float], untrained: bool) -> str:
  shown = '-' if accuracy is None else f'{accuracy:.4f}'
  return f'test_accuracy {shown}' + ('  train_loss n/a (no client trained)' if untrained
                                     else '' if loss is None else f'  train_loss {loss:.4f}')


def _interrupted_message(prefix: str, finished: int, saved: int, rounds: int,
                         checkpoint_dir: str, what: str = 'interrupted') -> str:
  if not finished:
    return f'{prefix}{what} before round 1 finished; nothing to resume from'
  if not saved:
    return (f'{prefix}{what} after round {finished} of {rounds}; no checkpoint is kept '
            '(--checkpoint_every=0), so a rerun starts over')
  return (f'{prefix}{what} after round {finished} of {rounds}; the state after round '
          f'{saved} is saved in {checkpoint_dir}: rerun the same command to resume from it')

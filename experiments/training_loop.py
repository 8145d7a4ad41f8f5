"""The run loop every run goes through: the round's client datasets, rounds, evaluation, metrics,
checkpoints and an exact resume (docs/design.md, "Experiments")."""

import asyncio
import collections
import contextlib
import csv
import os
import shutil
import sys
import time
import weakref
from typing import Any, Callable, Mapping, Optional, Sequence, TextIO

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import checkpoints as checkpoints_lib
from experiments import interrupts
from experiments import config as config_lib
from experiments import files
from experiments import metrics_io
from experiments import progress as progress_lib
from tff_conflict.learning import client_controls as client_controls_lib
from tff_conflict.learning import scaffold as scaffold_lib

METRICS_FILE = metrics_io.METRICS_FILE
HPARAMS_FILE = 'hparams.csv'
CHECKPOINT_DIR = 'checkpoints'
# Hyperparameters that may change between an interrupted run and its resumption.
RESUMABLE_CHANGES = frozenset({
    'rounds', 'eval_every', 'checkpoint_every', 'keep_checkpoints', 'output_dir', 'resume',
    'progress', 'runtime', 'workers', 'tff_workers', 'executor', 'ray_address',
    'worker_cpus', 'worker_gpus', 'git_commit'})
TEST_COLUMNS = ('test_accuracy', 'test_loss', 'test_macro_f1')


class ResumeError(files.Failure, ValueError):
  """An earlier run's outputs cannot be resumed as they are; the message says what to do."""


def sample_clients(client_ids: Sequence[str], num_clients: int, *, seed: int,
                   round_num: int) -> list[str]:
  """`num_clients` distinct clients by `default_rng([seed, round_num])`, in `client_ids`' order."""
  if not 1 <= num_clients <= len(client_ids):
    raise config_lib.ConfigError('num_clients', num_clients,
                                 f'an integer in [1, {len(client_ids)}]')
  rng = np.random.default_rng([int(seed), int(round_num)])
  return [client_ids[i] for i in np.sort(rng.choice(len(client_ids), num_clients, replace=False))]


def _shuffle_seed(config: config_lib.LoopConfig, round_num: int, client_index: int) -> Any:
  """The shuffle seed of (seed, round, the client's position in the round); None: no shuffle."""
  if config.shuffle_buffer <= 0:
    return None
  return int(np.random.default_rng([int(config.seed), int(round_num), int(client_index), 1])
             .integers(0, 2**31 - 1))


def _pipeline(dataset: tf.data.Dataset, config: config_lib.LoopConfig, seed: Any):
  if config.shuffle_buffer > 0:
    dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=False)
  if config.client_epochs > 1:
    dataset = dataset.repeat(config.client_epochs)
  return dataset.batch(config.batch_size)


def preprocess(dataset: tf.data.Dataset, config: config_lib.LoopConfig, *, round_num: int = 0,
               client_index: int = 0) -> tf.data.Dataset:
  """Shuffle (seeded by seed, round and position) -> repeat `client_epochs` -> batch."""
  return _pipeline(dataset, config, _shuffle_seed(config, round_num, client_index))


# Traced cohort functions per client data (alive as long as it is), kept across runs.
_COHORT_FUNCTIONS: 'weakref.WeakKeyDictionary[Any, dict[tuple, Any]]' = weakref.WeakKeyDictionary()


class RoundData:
  """A round's `preprocess`ed datasets, traced as one function per cohort size where possible."""

  def __init__(self, train_data: Any, config: config_lib.LoopConfig):
    self._train_data, self._config = train_data, config
    try:
      self._functions = _COHORT_FUNCTIONS.setdefault(train_data, {})
    except TypeError:  # not weakly referenceable: traced per run
      self._functions = {}
    self._element_spec, self._traceable = None, True

  def _trace(self, k: int):
    dataset_fn, config, specs = self._train_data.serializable_dataset_fn, self._config, []

    def make(client_ids, seeds):
      datasets = [_pipeline(dataset_fn(client_ids[i]), config, seeds[i]) for i in range(k)]
      specs.extend(d.element_spec for d in datasets)
      return [tf.data.experimental.to_variant(d) for d in datasets]

    signature = [tf.TensorSpec([k], tf.string), tf.TensorSpec([k], tf.int64)]
    return tf.function(make, input_signature=signature,
                       autograph=False).get_concrete_function(), specs

  def _one_by_one(self, client_ids, round_num):
    return [preprocess(self._train_data.create_tf_dataset_for_client(cid), self._config,
                       round_num=round_num, client_index=i)
            for i, cid in enumerate(client_ids)]

  def __call__(self, client_ids: Sequence[str], round_num: int) -> list[tf.data.Dataset]:
    """The datasets of `client_ids` (in this order) in round `round_num`."""
    config, k = self._config, len(client_ids)
    if not self._traceable or not k:
      return self._one_by_one(client_ids, round_num)
    if self._element_spec is None:
      self._element_spec = self._one_by_one(client_ids[:1], round_num)[0].element_spec
    key = (config.shuffle_buffer, config.client_epochs, config.batch_size, k)
    if key not in self._functions:
      try:
        self._functions[key] = self._trace(k)
      except Exception:  # pylint: disable=broad-except
        self._traceable = False  # e.g. a dataset function that runs Python on the client id
        return self._one_by_one(client_ids, round_num)
    function, specs = self._functions[key]
    if any(spec != self._element_spec for spec in specs):
      self._traceable = False  # traced, the datasets would have other shapes or types
      return self._one_by_one(client_ids, round_num)
    seeds = [_shuffle_seed(config, round_num, i) or 0 for i in range(k)]
    variants = function(tf.constant(list(client_ids), tf.string), tf.constant(seeds, tf.int64))
    return [tf.data.experimental.from_variant(v, self._element_spec) for v in variants]


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
  current = {k: metrics_io.hparam_str(v) for k, v in hparams.items()}
  # An unread method flag is not recorded; a setting one side lacks counts as empty.
  ignored = lambda k: (k in RESUMABLE_CHANGES or k.startswith('version/')
                       or (k in config_lib.METHOD_FLAGS and k not in current))
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
    intact = len(metrics_io.read_metrics(metrics_path)[0]) if os.path.exists(metrics_path) else 0
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


def _resume(manager, metrics_path: str, state: Any, rounds: int, saved: Callable,
            controls: Any, notify: Callable[[str], None]) -> tuple:
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
    found, columns, problem = metrics_io.read_metrics(metrics_path)
  except OSError as e:
    raise ResumeError(f'{metrics_path} cannot be read ({e.strerror or e}); fix it, or use '
                      '--noresume to start over') from None
  intact = len(found)
  for version in reversed([v for v in versions if v <= intact]):
    try:
      start = (asyncio.run(manager.load(version, saved(state, 0))), version, found[:version],
               columns)
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
  if controls is not None and loaded is not None:
    controls.restore(loaded['client_controls'])
    loaded = loaded['state']
  if done == rounds:
    notify(f'all {rounds} rounds are already done ({metrics_path})')
  elif done:
    notify(f'resuming from round {done}: running {_rounds(done + 1, rounds)} of {rounds}')
  return (state if loaded is None else loaded), done, rows, columns


def run_training(process: Any, *, train_data: Any, evaluate_fn: Callable[[Any], Mapping],
                 config: config_lib.LoopConfig, experiment_dir: str, hparams: Mapping[str, Any],
                 runner: Any = None, initial_state: Any = None, label: str = '',
                 show_progress: bool = True, stream: Optional[TextIO] = None,
                 test_columns: Sequence[str] = TEST_COLUMNS,
                 on_round: Callable[[], None] = lambda: None,
                 release_managers: Sequence[tff.program.ReleaseManager] = ()) -> tuple:
  """Runs rounds 1..config.rounds of `process` (through `runner`, from `initial_state`; defaults:
  the process, `runner.initialize()`), or the rest of the run in `experiment_dir` with the same
  `hparams`; returns (metrics rows of rounds 1..rounds, final state, round resumed from).
  `evaluate_fn`: weights -> metrics among `test_columns`; `release_managers` get each row after
  metrics.csv. Ctrl-C or SIGTERM saves the last finished round, re-raises saying how to resume."""
  runner = process if runner is None else runner
  client_ids = list(train_data.client_ids)
  if config.clients_per_round > len(client_ids):
    raise config_lib.ConfigError('clients_per_round', config.clients_per_round,
                                 f'at most the population of {len(client_ids)} clients')
  prefix = f'{label}: ' if label else ''

  def notify(text: str) -> None:
    print(f'{prefix}{text}', file=stream or sys.stdout, flush=True)

  controls, saved = _controls(process, client_ids)
  metrics_path = _prepare(experiment_dir, config, hparams)
  manager = checkpoints_lib.CheckpointManager(os.path.join(experiment_dir, CHECKPOINT_DIR),
                                              keep_total=config.keep_checkpoints)
  state = runner.initialize() if initial_state is None else initial_state
  done, rows, columns = 0, [], None
  if config.resume:
    state, done, rows, columns = _resume(manager, metrics_path, state, config.rounds, saved,
                                         controls, notify)
  manager.remove_after(done)
  # Rows are synced only where a rerun resumes from a checkpoint.
  writer = metrics_io.MetricsReleaseManager(experiment_dir, rows=rows, columns=columns,
                                            always=test_columns, sync=config.checkpoint_every > 0)
  make_datasets = RoundData(train_data, config)
  events = asyncio.new_event_loop()   # one for the run's releases and saves
  bar = progress_lib.Progress(config.rounds, done=done, label=label, stream=stream,
                              enabled=show_progress and done < config.rounds)
  finished_state, finished_round, saved_round, accuracy = state, done, done, None
  try:
    for round_num in range(done + 1, config.rounds + 1):
      interrupts.raise_if_interrupted()   # a signal whose exception Python dropped in a callback
      sampled = sample_clients(client_ids, config.clients_per_round, seed=config.seed,
                               round_num=round_num)
      datasets = make_datasets(sampled, round_num)
      if controls is not None:
        datasets = controls.for_cohort(sampled, datasets)
      state, round_metrics, row, untrained = _train_round(runner, state, datasets, controls,
                                                          sampled, round_num)
      if config.is_eval_round(round_num):
        row.update(_evaluate(evaluate_fn, _model_weights(process, runner, state), test_columns))
        accuracy = row.get('test_accuracy', accuracy)
      row.update(round_metrics)
      _release(events, (writer, *release_managers), row, round_num,
               resumed=done and round_num == done + 1, metrics_path=metrics_path)
      finished_state, finished_round = state, round_num
      if config.is_checkpoint_round(round_num):
        events.run_until_complete(manager.save(saved(state, round_num), round_num))
        saved_round = round_num
      on_round()
      interrupts.raise_if_interrupted()
      bar.tick(postfix=_postfix(accuracy, row['train_loss'], untrained))
  except (KeyboardInterrupt, interrupts.OutputClosed) as e:
    if config.checkpoint_every > 0 and finished_round > saved_round:
      events.run_until_complete(
          manager.save(saved(finished_state, finished_round), finished_round))
      saved_round = finished_round
    e.args = (_interrupted_message(
        prefix, finished_round, saved_round, config.rounds, manager.root_dir,
        'standard output closed' if isinstance(e, interrupts.OutputClosed) else 'interrupted'),)
    raise
  finally:
    events.close()
    with contextlib.suppress(interrupts.OutputClosed):   # nothing more is shown then
      bar.close()
  return writer.rows, state, done


def _prepare(experiment_dir: str, config: config_lib.LoopConfig,
             hparams: Mapping[str, Any]) -> str:
  """Checks a resumed run (or clears its outputs), writes hparams.csv; returns metrics.csv."""
  os.makedirs(experiment_dir, exist_ok=True)
  hparams_path = os.path.join(experiment_dir, HPARAMS_FILE)
  if config.resume:
    _check_hparams(hparams_path, hparams)
    check_rounds(experiment_dir, config.rounds)
  else:
    for name in (METRICS_FILE, metrics_io.PER_CLIENT_FILE, HPARAMS_FILE):
      if os.path.exists(os.path.join(experiment_dir, name)):
        os.remove(os.path.join(experiment_dir, name))
    shutil.rmtree(os.path.join(experiment_dir, CHECKPOINT_DIR), ignore_errors=True)
  metrics_io.write_hparams(hparams_path, hparams)
  return os.path.join(experiment_dir, METRICS_FILE)


def _model_weights(process: Any, runner: Any, state: Any) -> Any:
  """A composed process's weights are in its state; else the runner's (not TFF's runtime)."""
  weights = getattr(state, 'global_model_weights', None)
  if isinstance(weights, tff.learning.models.ModelWeights):
    return weights
  return (getattr(runner, 'get_model_weights', None) or process.get_model_weights)(state)


def _controls(process: Any, client_ids: Sequence[str]) -> tuple:
  """(SCAFFOLD's client controls or None, (state, round) -> what that round's checkpoint holds)."""
  if scaffold_lib.control_layout(process) is None:
    return None, lambda state, round_num: state
  controls = client_controls_lib.ClientControls.for_process(process, client_ids)
  return controls, lambda state, round_num: collections.OrderedDict(
      state=state, client_controls=controls.arrays(version=round_num))


def _train_round(runner: Any, state: Any, datasets: list, controls: Any, sampled: list[str],
                 round_num: int) -> tuple:
  """(new state, round metrics, headline cells, whether no client trained: then no train loss)."""
  start_time = time.monotonic()
  output = runner.next(state, datasets)
  round_time = time.monotonic() - start_time
  round_metrics = (output.metrics if controls is None
                   else controls.update(sampled, output, version=round_num))
  flat = metrics_io.flatten_metrics(round_metrics)
  untrained = metrics_io.trained_nothing(flat)
  row = {'train_loss': None if untrained else flat.get('client_work/train/loss'),
         'train_accuracy': (None if untrained
                            else flat.get('client_work/train/sparse_categorical_accuracy')),
         'round_time_s': round_time, 'eval_time_s': None}
  return output.state, round_metrics, row, untrained


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

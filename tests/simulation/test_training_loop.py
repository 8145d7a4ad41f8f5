"""The shared run loop: resume equal to an uninterrupted run, determinism,
hyperparameter checks on resume; and the checkpoint manager."""

import asyncio
import collections
import functools
import io
import math
import os
import signal
import weakref

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_conflict import _interrupts as interrupts
from experiments import config as config_lib
from tff_conflict import _checks
from tff_conflict import models
from tests.experiments import conftest
from tff_conflict.simulation import checkpoints
from tff_conflict.simulation import metrics as metrics_lib
from tff_conflict.simulation import rounds
from tff_conflict.simulation import training_loop

no_tff_runtime = conftest.no_tff_runtime   # the experiments' fixture, for the in-process run


def test_loop_config_rounds_schedule_and_validation():
  config = config_lib.LoopConfig(rounds=7, clients_per_round=2, eval_every=3,
                                    checkpoint_every=2)
  assert [r for r in range(1, 8) if config.is_eval_round(r)] == [3, 6, 7]
  assert [r for r in range(1, 8) if config.is_checkpoint_round(r)] == [2, 4, 6, 7]
  final_only = config_lib.LoopConfig(rounds=4, clients_per_round=1, eval_every=0,
                                        checkpoint_every=0)
  assert [r for r in range(1, 5) if final_only.is_eval_round(r)] == [4]
  assert not any(final_only.is_checkpoint_round(r) for r in range(1, 5))
  with pytest.raises(ValueError, match='clients_per_round'):
    config_lib.LoopConfig(rounds=1, clients_per_round=0)
  with pytest.raises(ValueError, match='eval_every'):
    config_lib.LoopConfig(rounds=1, clients_per_round=1, eval_every=-1)


@pytest.fixture(scope='module')
def tiny():
  """One FedGH process on tiny data, shared by the tests of this module (building is slow)."""
  return _tiny_setup()


def _tiny_setup(seed=0):
  from tff_conflict import evaluation  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  train, test = conftest.make_tiny_client_data()
  config = config_lib.LoopConfig(rounds=1, clients_per_round=2, batch_size=4, seed=seed)
  spec = rounds.preprocess(train.create_tf_dataset_for_client('c0'), config).element_spec
  keras_model_fn = functools.partial(models.logistic_regression, (4,), 3, seed=seed)
  process = learning.build_fedgh(
      keras_model_fn, input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1), seed=seed)
  test_ds = test.create_tf_dataset_for_client('all')

  def evaluate_fn(weights):
    result = evaluation.evaluate(keras_model_fn, weights, test_ds, num_classes=3)
    return {'test_accuracy': result['accuracy'], 'test_loss': result['loss'],
            'test_macro_f1': result['macro_f1']}

  return process, train, evaluate_fn


def _run(process, train, evaluate_fn, experiment_dir, rounds, *, resume=True, hparams=None,
         checkpoint_every=2, seed=0, runner=None, stream=None, **loop_kwargs):
  config = config_lib.LoopConfig(rounds=rounds, clients_per_round=2, batch_size=4,
                                 client_epochs=2, seed=seed, eval_every=2,
                                 checkpoint_every=checkpoint_every, resume=resume)
  return training_loop.run_training(
      process, train_data=train, evaluate_fn=evaluate_fn, config=config,
      experiment_dir=str(experiment_dir), hparams=hparams or {'lr': 0.1, 'rounds': rounds},
      show_progress=False, runner=runner, stream=stream or io.StringIO(), **loop_kwargs)


def _assert_same_rows(a, b):
  a, b = conftest.non_timing(a), conftest.non_timing(b)
  assert [sorted(r) for r in a] == [sorted(r) for r in b]
  for ra, rb in zip(a, b):
    for key in ra:
      same = (ra[key] == rb[key]) or (isinstance(ra[key], float) and math.isnan(ra[key])
                                      and math.isnan(rb[key]))
      assert same, (ra['round_num'], key, ra[key], rb[key])


def test_resume_after_round_2_equals_an_uninterrupted_run_and_runs_are_deterministic(
    tmp_path, tiny):
  process, train, evaluate_fn = tiny
  full = _run(process, train, evaluate_fn, tmp_path / 'full', 4)
  again = _run(process, train, evaluate_fn, tmp_path / 'again', 4)
  _assert_same_rows(full[0], again[0])  # determinism: same flags and seed

  # "Interrupted" after round 3 with a checkpoint at round 2: row 3 exists without checkpoint.
  first = _run(process, train, evaluate_fn, tmp_path / 'resumed', 3, checkpoint_every=2,
               hparams={'lr': 0.1, 'rounds': 4})
  with open(tmp_path / 'resumed' / 'checkpoints' / 'round_3.npz', 'r+b') as f:
    f.truncate(100)  # damaged: the loop falls back to round 2
  assert first[2] == 0 and len(first[0]) == 3
  resumed = _run(process, train, evaluate_fn, tmp_path / 'resumed', 4)
  assert resumed[2] == 2
  assert [r['round_num'] for r in resumed[0]] == [1, 2, 3, 4]
  _assert_same_rows(full[0], resumed[0])
  on_disk = metrics_lib.read_csv(str(tmp_path / 'resumed' / 'metrics.csv'))
  assert [r['round_num'] for r in on_disk] == [1, 2, 3, 4]  # rewritten, not duplicated
  _assert_same_rows(full[0], on_disk)
  assert any(k.startswith('aggregator/') and 'conflict_fraction_before' in k
             for k in on_disk[0])
  np.testing.assert_allclose(
      process.get_model_weights(resumed[1]).trainable[0],
      process.get_model_weights(full[1]).trainable[0], rtol=0, atol=0)

  # A finished run is not rerun.
  done = _run(process, train, evaluate_fn, tmp_path / 'resumed', 4)
  assert done[2] == 4 and len(done[0]) == 4


def test_resume_refuses_other_hyperparameters_and_noresume_starts_over(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  _run(process, train, evaluate_fn, tmp_path, 2, hparams={'lr': 0.1, 'rounds': 2})
  with pytest.raises(ValueError, match=r"lr: '0.1' -> '0.2'.*--noresume"):
    _run(process, train, evaluate_fn, tmp_path, 3, hparams={'lr': 0.2, 'rounds': 3})
  fresh = _run(process, train, evaluate_fn, tmp_path, 1, resume=False,
               hparams={'lr': 0.2, 'rounds': 1})
  assert fresh[2] == 0 and len(fresh[0]) == 1
  assert training_loop.read_hparams(str(tmp_path / 'hparams.csv'))['lr'] == '0.2'
  assert checkpoints.CheckpointManager(str(tmp_path / 'checkpoints')).versions() == [1]


def test_clients_per_round_larger_than_population(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  config = config_lib.LoopConfig(rounds=1, clients_per_round=5)
  with pytest.raises(_checks.ArgumentError,
                     match='clients_per_round must be at most the population of 4 clients, got 5'):
    training_loop.run_training(process, train_data=train, evaluate_fn=evaluate_fn,
                               config=config, experiment_dir=str(tmp_path), hparams={},
                               show_progress=False)


def test_checkpoint_manager_round_trip_keep_and_remove_after(tmp_path, tiny):
  process, _, _ = tiny
  state = process.initialize()
  manager = checkpoints.CheckpointManager(str(tmp_path), keep_total=2)
  assert asyncio.run(manager.load_latest(state)) == (None, 0)
  weights = process.get_model_weights(state)
  for r in (1, 2, 3):
    asyncio.run(manager.save(state, r))
  assert manager.versions() == [2, 3]
  asyncio.run(manager.save(state, 3))  # replacing an existing version is allowed
  loaded, version = asyncio.run(manager.load_latest(state))
  assert version == 3
  for a, b in zip(process.get_model_weights(loaded).trainable, weights.trainable):
    np.testing.assert_array_equal(a, b)
  manager.remove_after(2)
  assert manager.versions() == [2]


class _VaryingCohortRunner:
  """A runner whose cohort loses a client on even rounds (10 updates, then 9, ...), reporting
  one corrective weight per client that took part, as `fed_corrective` does."""

  def initialize(self):
    return np.zeros(2, np.float32)

  def next(self, state, datasets):
    del datasets
    state = state + 1
    size = 10 if int(state[0]) % 2 else 9
    weights = np.arange(size, dtype=np.float32) * state[0]
    metrics = collections.OrderedDict(
        client_work=collections.OrderedDict(train=collections.OrderedDict(loss=1.0 / state[0])),
        aggregator=collections.OrderedDict(corrective_weights=weights,
                                           conflict_fraction_before=np.float32(0.5)))
    return collections.namedtuple('Output', 'state metrics')(state, metrics)

  def get_model_weights(self, state):
    return state


def _varying_run(tmp_path, rounds, release_managers=(), eval_every=2):
  ids = [f'c{i}' for i in range(10)]
  train = tff.simulation.datasets.TestClientData(
      {c: collections.OrderedDict(x=np.zeros((2, 1), np.float32), y=np.zeros(2, np.int32))
       for c in ids})
  config = config_lib.LoopConfig(rounds=rounds, clients_per_round=10, batch_size=2,
                                 eval_every=eval_every, keep_checkpoints=0)
  return training_loop.run_training(
      None, train_data=train, evaluate_fn=lambda s: {'test_accuracy': float(s[0]) / 10},
      config=config, experiment_dir=str(tmp_path), hparams={'rounds': 4}, show_progress=False,
      runner=_VaryingCohortRunner(), test_columns=('test_accuracy',), stream=io.StringIO(),
      release_managers=release_managers)


def test_a_varying_cohort_keeps_metrics_columns_and_writes_every_client_value(tmp_path):
  memory = tff.program.MemoryReleaseManager()
  tensorboard = tff.program.TensorBoardReleaseManager(str(tmp_path / 'tensorboard'))
  result = _varying_run(tmp_path / 'run', 4, [memory, tensorboard])
  name = 'aggregator/corrective_weights'
  assert [(r[f'{name}/count'], r[f'{name}/max']) for r in result[0]] == [
      (10, 9.0), (9, 16.0), (10, 27.0), (9, 32.0)]
  assert [r[f'{name}/mean'] for r in result[0]] == pytest.approx([4.5, 8.0, 13.5, 16.0])
  assert not any(c.startswith(f'{name}/') and c.split('/')[-1].isdigit() for c in result[0][0])
  per_client = metrics_lib.read_csv(str(tmp_path / 'run' / 'per_client.csv'))
  assert [(r['round_num'], r['client_index'], r['value']) for r in per_client] == [
      (r, i, float(i * r)) for r in range(1, 5) for i in range(10 if r % 2 else 9)]
  assert {r['name'] for r in per_client} == {name}
  # The other release managers got each round's measurements, the vector whole.
  released = dict(memory.values())
  assert sorted(released) == [1, 2, 3, 4]
  np.testing.assert_array_equal(released[2]['aggregator']['corrective_weights'],
                                np.arange(9) * 2.0)
  assert released[2]['test_accuracy'] == 0.2 and 'test_accuracy' not in released[1]
  assert os.listdir(tmp_path / 'tensorboard')


def test_a_varying_cohort_run_resumed_after_round_3_equals_the_uninterrupted_run(tmp_path):
  full = _varying_run(tmp_path / 'full', 4, eval_every=1)
  _varying_run(tmp_path / 'cut', 3, eval_every=1)
  resumed = _varying_run(tmp_path / 'cut', 4, eval_every=1)
  assert resumed[2] == 3
  _assert_same_rows(full[0], resumed[0])
  assert (metrics_lib.read_csv(str(tmp_path / 'full' / 'per_client.csv'))
          == metrics_lib.read_csv(str(tmp_path / 'cut' / 'per_client.csv')))


@pytest.fixture(scope='module')
def full_run(tmp_path_factory, tiny):
  """The rows of an uninterrupted 4-round run of the `tiny` process."""
  process, train, evaluate_fn = tiny
  return _run(process, train, evaluate_fn, tmp_path_factory.mktemp('full'), 4)[0]


def _three_rounds_saved_every_round(tiny, experiment_dir):
  process, train, evaluate_fn = tiny
  _run(process, train, evaluate_fn, experiment_dir, 3, checkpoint_every=1,
       hparams={'lr': 0.1, 'rounds': 4})
  return experiment_dir / 'metrics.csv'


def test_a_truncated_metrics_file_resumes_from_the_checkpoint_its_intact_rows_cover(
    tmp_path, tiny, full_run):
  process, train, evaluate_fn = tiny
  metrics = _three_rounds_saved_every_round(tiny, tmp_path)
  metrics.write_bytes(metrics.read_bytes()[:-5])  # round 3's row cut short
  out = io.StringIO()
  resumed = _run(process, train, evaluate_fn, tmp_path, 4, stream=out)
  lines = out.getvalue().splitlines()
  assert lines == [
      f'warning: {metrics} ends in a line cut short after round 2 (its intact rows are rounds '
      '1-2); resuming from round 2',
      'resuming from round 2: running rounds 3-4 of 4'], lines
  assert resumed[2] == 2
  _assert_same_rows(full_run, resumed[0])
  _assert_same_rows(full_run, metrics_lib.read_csv(str(metrics)))


def test_a_missing_metrics_file_starts_over(tmp_path, tiny, full_run):
  process, train, evaluate_fn = tiny
  metrics = _three_rounds_saved_every_round(tiny, tmp_path)
  metrics.unlink()
  out = io.StringIO()
  resumed = _run(process, train, evaluate_fn, tmp_path, 4, stream=out)
  assert out.getvalue() == (
      f'warning: {metrics} is missing but {tmp_path / "checkpoints"} holds the state after round '
      '3; the metrics of those rounds exist nowhere else, so the run starts over from round 1\n')
  assert resumed[2] == 0
  _assert_same_rows(full_run, metrics_lib.read_csv(str(metrics)))


def test_rows_missing_for_saved_rounds_are_recomputed(tmp_path, tiny, full_run):
  process, train, evaluate_fn = tiny
  metrics = _three_rounds_saved_every_round(tiny, tmp_path)
  metrics.write_bytes(b''.join(metrics.read_bytes().splitlines(True)[:2]))  # rows 2-3 removed
  out = io.StringIO()
  resumed = _run(process, train, evaluate_fn, tmp_path, 4, stream=out)
  assert out.getvalue().splitlines()[0] == (
      f'warning: {metrics} has rows for round 1 but {tmp_path / "checkpoints"} holds the state '
      'after round 3; resuming from round 1 and recomputing the rounds after it')
  assert resumed[2] == 1
  _assert_same_rows(full_run, resumed[0])


def test_an_unreadable_checkpoint_is_named_and_an_older_one_used(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  _three_rounds_saved_every_round(tiny, tmp_path)
  damaged = tmp_path / 'checkpoints' / 'round_3.npz'
  damaged.write_bytes(b'not a checkpoint')
  out = io.StringIO()
  resumed = _run(process, train, evaluate_fn, tmp_path, 3, stream=out)
  assert out.getvalue().startswith(f'warning: the checkpoint {damaged} cannot be read (')
  assert resumed[2] == 2 and len(resumed[0]) == 3


def test_a_damaged_hparams_file_refuses_to_resume(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  _three_rounds_saved_every_round(tiny, tmp_path)
  (tmp_path / 'hparams.csv').write_text('lr,rounds\n0.1,4\n0.2,4\n')
  with pytest.raises(training_loop.ResumeError,
                     match=f'{tmp_path / "hparams.csv"} cannot be read .*--noresume'):
    _run(process, train, evaluate_fn, tmp_path, 4)


def test_a_metrics_file_with_other_columns_refuses_to_resume(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  metrics = _three_rounds_saved_every_round(tiny, tmp_path)
  metrics.write_text(metrics.read_text().replace('train_loss', 'my_loss', 1))
  with pytest.raises(training_loop.ResumeError,
                     match=f"{metrics} has other columns .*'my_loss'.*--noresume"):
    _run(process, train, evaluate_fn, tmp_path, 4)


def test_a_finished_run_says_so(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  _run(process, train, evaluate_fn, tmp_path, 2)
  out = io.StringIO()
  again = _run(process, train, evaluate_fn, tmp_path, 2, stream=out)
  assert out.getvalue() == f'all 2 rounds are already done ({tmp_path / "metrics.csv"})\n'
  assert again[2] == 2


class _InterruptedRunner:
  """Runs `process`, but raises `error` (default: Ctrl-C's) in its `at_round`-th round."""

  def __init__(self, process, at_round, error=KeyboardInterrupt):
    self._process = process
    self._at_round = at_round
    self._error = error
    self._rounds = 0

  def initialize(self):
    return self._process.initialize()

  def next(self, state, data):
    self._rounds += 1
    if self._rounds == self._at_round:
      raise self._error()
    return self._process.next(state, data)


def test_a_closed_standard_output_stops_the_run_as_ctrl_c_does(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  runner = _InterruptedRunner(process, at_round=2, error=interrupts.OutputClosed)
  with pytest.raises(interrupts.OutputClosed, match='^standard output closed after round 1 of 3; '
                     'the state after round 1 is saved'):
    _run(process, train, evaluate_fn, tmp_path, 3, runner=runner)
  assert checkpoints.CheckpointManager(str(tmp_path / 'checkpoints')).versions() == [1]


def test_ctrl_c_saves_the_last_finished_round_and_the_rerun_resumes_from_it(
    tmp_path, tiny, full_run):
  process, train, evaluate_fn = tiny
  with pytest.raises(KeyboardInterrupt) as info:
    _run(process, train, evaluate_fn, tmp_path, 4, checkpoint_every=2,
         runner=_InterruptedRunner(process, at_round=4))
  assert str(info.value) == (
      f'interrupted after round 3 of 4; the state after round 3 is saved in '
      f'{tmp_path / "checkpoints"}: rerun the same command to resume from it')
  assert checkpoints.CheckpointManager(str(tmp_path / 'checkpoints')).versions() == [2, 3]
  resumed = _run(process, train, evaluate_fn, tmp_path, 4, checkpoint_every=2)
  assert resumed[2] == 3
  _assert_same_rows(full_run, resumed[0])


class _DroppedSigtermRunner(_InterruptedRunner):
  """Runs `process`; in its `at_round`-th round a SIGTERM arrives whose exception Python drops
  (raised by the handler inside a weakref callback), so the round finishes normally."""

  def next(self, state, data):
    self._rounds += 1
    if self._rounds == self._at_round:

      class Referent:
        pass

      referent = Referent()
      ref = weakref.ref(referent, lambda _: interrupts.raise_interrupt(signal.SIGTERM, None))
      del referent   # the callback runs now; its exception is printed and dropped
      assert ref() is None
    return self._process.next(state, data)


@pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')
def test_a_sigterm_whose_exception_python_dropped_still_stops_the_run(
    tmp_path, tiny, monkeypatch):
  process, train, evaluate_fn = tiny
  monkeypatch.setattr(interrupts, '_received', [])
  with pytest.raises(interrupts.Terminated) as info:
    _run(process, train, evaluate_fn, tmp_path, 4, checkpoint_every=2,
         runner=_DroppedSigtermRunner(process, at_round=2))
  assert str(info.value).startswith('interrupted after round 2 of 4; the state after round 2 '
                                    'is saved')
  assert checkpoints.CheckpointManager(str(tmp_path / 'checkpoints')).versions() == [2]


def test_an_in_process_run_uses_no_tff_runtime_and_matches_the_cpp_run(
    tmp_path, tiny, full_run, no_tff_runtime):
  # Rounds, evaluation (the runner's get_model_weights) and checkpoints all stay in this process:
  # TFF's execution context, which would start a worker_binary, refuses every call here.
  from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top
  process, train, evaluate_fn = tiny
  runner = inprocess.InProcessRunner(process)
  result = _run(process, train, evaluate_fn, tmp_path, 4, runner=runner)
  expected, actual = conftest.non_timing(full_run), conftest.non_timing(result[0])
  assert [sorted(r) for r in actual] == [sorted(r) for r in expected]
  assert [r['test_accuracy'] is None for r in actual] == [True, False, True, False]
  for got, want in zip(actual, expected):
    for key, value in want.items():
      if isinstance(value, float):
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), key
      else:
        assert got[key] == value, key
  assert checkpoints.CheckpointManager(str(tmp_path / 'checkpoints')).versions() == [2, 4]

  # Stopped after round 2 (saved) and resumed, still in-process: the checkpoint's state goes
  # back into the runner and the rows equal the uninterrupted run's.
  first = _run(process, train, evaluate_fn, tmp_path / 'resumed', 2, runner=runner,
               hparams={'lr': 0.1, 'rounds': 4})
  assert first[2] == 0 and len(first[0]) == 2
  resumed = _run(process, train, evaluate_fn, tmp_path / 'resumed', 4, runner=runner)
  assert resumed[2] == 2
  _assert_same_rows(result[0], resumed[0])


# SCAFFOLD: the clients' controls are kept, checkpointed and restored with the server state.


@pytest.fixture(scope='module')
def tiny_scaffold():
  """A SCAFFOLD process on the tiny data (4 clients, 2 per round: cohorts change)."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  _, train, evaluate_fn = _tiny_setup()
  config = config_lib.LoopConfig(rounds=1, clients_per_round=2, batch_size=4)
  spec = rounds.preprocess(train.create_tf_dataset_for_client('c0'), config).element_spec
  process = learning.build_scaffold(
      functools.partial(models.logistic_regression, (4,), 3, seed=0), input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      num_clients=len(train.client_ids))
  return process, train, evaluate_fn


class _StopAfterRecording(tff.program.ReleaseManager):
  """Raises KeyboardInterrupt when round `at_round`'s row is released: after the loop kept that
  round's client controls, before it recorded the round as finished."""

  def __init__(self, at_round):
    self._at_round = at_round

  async def release(self, value, key):
    del value
    if key == self._at_round:
      raise KeyboardInterrupt()


def _saved_controls(experiment_dir, round_num):
  with np.load(os.path.join(str(experiment_dir), 'checkpoints', f'round_{round_num}.npz')) as f:
    return [f[n] for n in sorted(f.files) if n.startswith('leaf_')]


def test_scaffold_resumed_or_interrupted_equals_the_uninterrupted_run(tmp_path, tiny_scaffold):
  process, train, evaluate_fn = tiny_scaffold
  full = _run(process, train, evaluate_fn, tmp_path / 'full', 4, checkpoint_every=1)
  state_c = process.get_model_weights(full[1])
  assert not any(k.startswith('client_controls') for k in full[0][0])
  assert np.any(full[1].client_work['control'] != 0)

  # Stopped after round 2, resumed: the controls of round 2 come back from the checkpoint.
  first = _run(process, train, evaluate_fn, tmp_path / 'resumed', 2, checkpoint_every=1,
               hparams={'lr': 0.1, 'rounds': 4})
  assert len(first[0]) == 2
  leaves = _saved_controls(tmp_path / 'resumed', 2)
  controls = [a for a in leaves if a.shape == (len(train.client_ids), 4 * 3 + 3)]  # [N, d]
  assert len(controls) == 1 and np.count_nonzero(np.abs(controls[0]).sum(axis=1)) >= 2
  resumed = _run(process, train, evaluate_fn, tmp_path / 'resumed', 4, checkpoint_every=1)
  assert resumed[2] == 2
  _assert_same_rows(full[0], resumed[0])
  for a, b in zip(process.get_model_weights(resumed[1]).trainable, state_c.trainable):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(resumed[1].client_work['control'],
                                full[1].client_work['control'])

  # Ctrl-C after round 3's controls were kept but before round 3 was recorded: round 2 is saved
  # with round 2's controls (the update of round 3 undone), and the rerun equals the full run.
  config = config_lib.LoopConfig(rounds=4, clients_per_round=2, batch_size=4, client_epochs=2,
                                 seed=0, eval_every=2, checkpoint_every=4, resume=True)
  run = lambda **kw: training_loop.run_training(
      process, train_data=train, evaluate_fn=evaluate_fn, config=config,
      experiment_dir=str(tmp_path / 'stopped'), hparams={'lr': 0.1, 'rounds': 4},
      show_progress=False, stream=io.StringIO(), **kw)
  with pytest.raises(KeyboardInterrupt, match='the state after round 2 is saved'):
    run(release_managers=[_StopAfterRecording(3)])
  for a, b in zip(_saved_controls(tmp_path / 'stopped', 2), _saved_controls(tmp_path / 'full', 2)):
    np.testing.assert_array_equal(a, b)
  again = run()
  assert again[2] == 2
  _assert_same_rows(full[0], again[0])
  for a, b in zip(process.get_model_weights(again[1]).trainable, state_c.trainable):
    np.testing.assert_array_equal(a, b)


def test_hparams_round_trip(tmp_path):
  path = str(tmp_path / 'hparams.csv')
  training_loop.write_hparams(path, {'rounds': 3, 'workers': ['a:1', 'b:2'], 'cache_dir': None,
                                     'lr': 0.1})
  assert training_loop.read_hparams(path) == {'rounds': '3', 'workers': 'a:1,b:2',
                                              'cache_dir': '', 'lr': '0.1'}


def test_resume_ignores_method_flags_the_run_no_longer_records(tmp_path):
  path = str(tmp_path / 'hparams.csv')
  training_loop.write_hparams(path, {'algorithm': 'fedgh', 'fedgh_order': 'random',
                                     'focal_gamma': 0.5})   # an earlier version recorded every flag
  check = functools.partial(training_loop._check_hparams, path)  # pylint: disable=protected-access
  check({'algorithm': 'fedgh', 'fedgh_order': 'random'}, config_lib.METHOD_FLAGS)
  with pytest.raises(training_loop.ResumeError, match='focal_gamma'):   # not optional: compared
    check({'algorithm': 'fedgh', 'fedgh_order': 'random'})
  with pytest.raises(training_loop.ResumeError, match='fedgh_order'):
    check({'algorithm': 'fedgh', 'fedgh_order': 'index'}, config_lib.METHOD_FLAGS)
  with pytest.raises(training_loop.ResumeError, match='proximal_term'):
    check({'algorithm': 'fedgh', 'fedgh_order': 'random', 'proximal_term': True},
          config_lib.METHOD_FLAGS)


def test_a_rerun_with_fewer_rounds_is_refused_and_keeps_the_longer_run(tmp_path, tiny):
  process, train, evaluate_fn = tiny
  _run(process, train, evaluate_fn, tmp_path, 4, checkpoint_every=1)
  before = {p: p.read_bytes() for p in sorted(tmp_path.rglob('*')) if p.is_file()}
  assert checkpoints.saved_versions(str(tmp_path / 'checkpoints')) == [2, 3, 4]
  for rounds in (2, 3):
    with pytest.raises(training_loop.ResumeError) as refused:
      _run(process, train, evaluate_fn, tmp_path, rounds, checkpoint_every=1)
    assert str(refused.value) == (
        f'{tmp_path} holds a run of 4 rounds (metrics.csv rows for rounds 1-4, checkpoints of '
        f'rounds 2-4), more than --rounds={rounds} (rounds: 4 -> {rounds}); a rerun keeps what is '
        'recorded: use --rounds=4 or more to continue it, --noresume to start over, or another '
        '--experiment_name')
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob('*')) if p.is_file()} == before
  # Checkpoints beyond --rounds count even where metrics.csv lost its rows.
  metrics = tmp_path / 'metrics.csv'
  metrics.write_bytes(b''.join(metrics.read_bytes().splitlines(True)[:2]))
  with pytest.raises(training_loop.ResumeError, match='holds a run of 4 rounds .*round 1, '
                     'checkpoints of rounds 2-4'):
    _run(process, train, evaluate_fn, tmp_path, 2, checkpoint_every=1)
  assert checkpoints.saved_versions(str(tmp_path / 'checkpoints')) == [2, 3, 4]
  assert checkpoints.saved_versions(str(tmp_path / 'missing')) == []


class _ExcludedRoundRunner(_VaryingCohortRunner):
  """Round 2 leaves every client out (as non-finite): its clients trained on no example."""

  def next(self, state, datasets):
    output = super().next(state, datasets)
    untrained = int(output.state[0]) == 2
    output.metrics['client_work']['train'] = collections.OrderedDict(
        loss=0.0 if untrained else 0.5, sparse_categorical_accuracy=0.0 if untrained else 0.7,
        num_examples=0 if untrained else 20)
    return output


def test_a_round_in_which_no_client_trained_has_no_training_loss(tmp_path):
  ids = [f'c{i}' for i in range(10)]
  train = tff.simulation.datasets.TestClientData(
      {c: collections.OrderedDict(x=np.zeros((2, 1), np.float32), y=np.zeros(2, np.int32))
       for c in ids})
  config = config_lib.LoopConfig(rounds=3, clients_per_round=10, batch_size=2)
  out = io.StringIO()
  rows = training_loop.run_training(
      None, train_data=train, evaluate_fn=lambda s: {'test_accuracy': 0.5}, config=config,
      experiment_dir=str(tmp_path), hparams={'rounds': 3}, runner=_ExcludedRoundRunner(),
      test_columns=('test_accuracy',), stream=out)[0]
  assert [(r['train_loss'], r['train_accuracy']) for r in rows] == [
      (0.5, 0.7), (None, None), (0.5, 0.7)]
  on_disk = metrics_lib.read_csv(str(tmp_path / 'metrics.csv'))
  assert [r['train_loss'] for r in on_disk] == [0.5, None, 0.5]
  lines = [line for line in out.getvalue().splitlines() if 'test_accuracy' in line]
  assert any('train_loss n/a' in line for line in lines), out.getvalue()
  assert not any('train_loss 0.0000' in line for line in lines), out.getvalue()

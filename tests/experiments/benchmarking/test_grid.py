"""A tiny tuned benchmark end to end on TFF: the test split is never read while tuning, each
process is built once and reused, finished runs are skipped, and a reused process gives the
same run as a freshly built one."""

import functools
import io
import json
import os
import re

import numpy as np
import pytest
import tensorflow_federated as tff

from experiments import config as experiment_config
from experiments import executors
from tff_conflict.simulation import training_loop
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import grid
from experiments.benchmarking import plan
from experiments.benchmarking import results
from experiments.benchmarking import runs
from experiments.benchmarking import search
from tff_conflict import _files as files
from tff_conflict import models
from tests.experiments import conftest
from tff_conflict.simulation import metrics as metrics_lib
from tff_conflict.simulation import rounds


class GuardedClientData(tff.simulation.datasets.ClientData):
  """A test split that raises when read before `allow()`; counts the reads after."""

  def __init__(self, inner):
    super().__init__()
    self._inner = inner
    self.allowed = False
    self.reads = 0

  def allow(self):
    self.allowed = True

  def _read(self):
    if not self.allowed:
      raise AssertionError('the test split was read during tuning')
    self.reads += 1

  @property
  def client_ids(self):
    return self._inner.client_ids

  @property
  def serializable_dataset_fn(self):
    self._read()
    return self._inner.serializable_dataset_fn

  @property
  def element_type_structure(self):
    return self._inner.element_type_structure

  def create_tf_dataset_for_client(self, client_id):
    self._read()
    return self._inner.create_tf_dataset_for_client(client_id)

  def create_tf_dataset_from_all_clients(self, seed=None):
    self._read()
    return self._inner.create_tf_dataset_from_all_clients(seed)


def _config(root, *, rounds=2, clients_per_round=3, eval_train_loss=False, runtime='cpp',
            leaf_dir=None, **changes):
  args = dict(regimes=('digits:iid@6', 'digits:#C=2@6'), methods=('fedavg', 'fedgh'),
              epochs=(1,), report_seeds=(0, 1), models={'digits': 'logistic_regression'},
              loop=experiment_config.LoopConfig(rounds=rounds, clients_per_round=clients_per_round,
                                                batch_size=32, eval_train_loss=eval_train_loss),
              data=experiment_config.DataConfig(leaf_dir=leaf_dir),
              output=experiment_config.OutputConfig(output_dir=str(root), experiment_name='tiny',
                                                    progress=False, runtime=runtime),
              tuning_seeds=(7,), client_lr_grid=(0.05, 0.2),
               tuning_regimes={'digits': 'digits:#C=2@6'}, last_k=2, edge_steps=0)
  args.update(changes)
  return config_lib.BenchmarkConfig(**args)


class _GuardedLoader:
  def __init__(self, config):
    self._load = engine_lib.default_loader(config)
    self.guards = []
    self.tuning_over = False

  def __call__(self, regime, seed):
    train, test = self._load(regime, seed)
    guard = GuardedClientData(test)
    guard.seed = seed
    if self.tuning_over:
      guard.allow()
    self.guards.append(guard)
    return train, guard

  def allow(self):
    self.tuning_over = True
    for guard in self.guards:
      guard.allow()


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  root = tmp_path_factory.mktemp('bench')
  config = _config(root)
  loader = _GuardedLoader(config)
  outcome = grid.run_benchmark(config, loader=loader, after_tuning=loader.allow,
                               stream=open(os.devnull, 'w'))
  return config, loader, outcome


def test_tuning_never_reads_the_test_split(tiny):
  config, loader, outcome = tiny
  assert outcome['failures'] == []
  # Tuning loaded the tuning regime's data (guarded) and ran 2 methods x (2 client lrs + the 2
  # other server lrs of the grid, searched by every method) x 1 seed.
  assert outcome['runs_done'] == 8 + 8
  # The tuning data (seed 7) had a guarded test split that raises if read during tuning; the
  # test splits of the reporting seeds were read, after tuning.
  assert [g.reads for g in loader.guards if g.seed == 7] == [0]
  assert all(g.reads > 0 for g in loader.guards if g.seed != 7)
  assert [c['method'] for c in outcome['choices']] == ['fedavg', 'fedgh']
  assert all(c['client_lr'] in (0.05, 0.2) for c in outcome['choices'])
  spec = plan.report_specs(plan.make(config), outcome['choices'])[0]
  tuned_dir = os.path.join(config.root, 'tuning', 'digits_C2_6', 'E1', 'fedavg')
  candidate = sorted(os.listdir(tuned_dir))[0]
  rows = metrics_lib.read_csv(os.path.join(tuned_dir, candidate, 'seed7', 'metrics.csv'))
  assert 'val_accuracy' in rows[0] and not any(k.startswith('test') for k in rows[0])
  assert spec.client_lr == outcome['choices'][0]['client_lr']
  # The chosen candidates' validation curves, one row per method and tuning seed, as their runs
  # recorded them.
  curves = metrics_lib.read_csv(os.path.join(config.root, 'validation_curves.csv'))
  assert [(r['method'], r['seed']) for r in curves] == [('fedavg', 7), ('fedgh', 7)]
  for row, choice in zip(curves, outcome['choices']):
    assert row['candidate'] == search.candidate_name(
        dict(client_lr=choice['client_lr'], server_lr=choice['server_lr']))
    chosen = metrics_lib.read_csv(os.path.join(
        config.root, 'tuning', 'digits_C2_6', 'E1', row['method'],
        runs.slug(row['candidate']), 'seed7', 'metrics.csv'))
    assert runs.decode_curve(row['accuracy_curve']) == pytest.approx(
        [r['val_accuracy'] for r in chosen], abs=1e-5)


def test_one_process_per_method_and_the_same_start_per_seed(tiny):
  config, _, outcome = tiny
  assert outcome['processes_built'] == 2  # reused across regimes, seeds and learning rates
  rows = outcome['rows']
  assert len(rows) == 2 * 2 * 2
  assert {(r['regime'], r['method'], r['seed']) for r in rows} == {
      (g, m, s) for g in config.regimes for m in config.methods for s in (0, 1)}
  first_loss = {}
  for r in rows:
    metrics = metrics_lib.read_csv(os.path.join(
        runs.report_run_dir(config.root, r['regime'], 1, r['method'], r['seed']), 'metrics.csv'))
    first_loss[(r['regime'], r['method'], r['seed'])] = metrics[0]['train_loss']
  for regime in config.regimes:
    for seed in (0, 1):  # same model, partition and clients: the same round-1 training loss
      assert first_loss[(regime, 'fedavg', seed)] == first_loss[(regime, 'fedgh', seed)]
    assert first_loss[(regime, 'fedavg', 0)] != first_loss[(regime, 'fedavg', 1)]
  text = open(outcome['report']).read()
  assert 'Δ vs fedavg [95% CI]' in text and '## Tuning' in text
  # #C=2: every client holds exactly 2 classes (with 6 clients, the classes none drew are out).
  # The test examples column: regimes.json's `test_examples` ('not recorded' before grid.py
  # writes it).
  assert re.search(r'\| `digits:iid@6` \| 6 \| 1438 \| (\d+|not recorded) \| 239 / 240 / 240 \| '
                   r'10\.00 \|', text)
  assert '| `digits:#C=2@6` | 6 |' in text and '| 2.00 |' in text


def test_finished_runs_are_skipped_and_settings_changes_refused(tiny):
  config, loader, outcome = tiny
  again = grid.run_benchmark(config, loader=loader, stream=open(os.devnull, 'w'))
  # 8 tuning runs (2 methods x (2 client lrs + 2 more server lrs)) and 8 reporting runs.
  assert again['runs_done'] == 0 and again['runs_skipped'] == 16
  assert again['processes_built'] == 0
  assert [r['final_accuracy'] for r in again['rows']] == [
      r['final_accuracy'] for r in outcome['rows']]
  victim = runs.report_run_dir(config.root, 'digits:iid@6', 1, 'fedgh', 1)
  os.remove(os.path.join(victim, runs.RESULT_FILE))  # as if killed before it finished
  third = grid.run_benchmark(config, loader=loader, stream=open(os.devnull, 'w'))
  assert third['runs_done'] == 1 and third['runs_skipped'] == 15
  assert [r['final_accuracy'] for r in third['rows']] == [
      r['final_accuracy'] for r in outcome['rows']]
  with pytest.raises(engine_lib.SettingsChangedError, match='rounds: 2 -> 3'):
    grid.run_benchmark(_config(config.output.output_dir, rounds=3), loader=loader,
                       stream=open(os.devnull, 'w'))


def test_a_shorter_rung_of_halving_is_no_settings_change(tmp_path):
  # A rung's run is one of its own (its name says its rounds): resuming a halving benchmark
  # finds it finished, not changed; the full-length run's rounds are still checked.
  config = _config(tmp_path, rounds=9, schedule='halving', last_k=1)
  made = plan.make(config)
  dataset, epochs, method = made.tuning[0]
  candidate = dict(client_lr=0.05, server_lr=1.0)
  for rounds in (3, None):
    spec = plan.tuning_spec(made, dataset, epochs, method, candidate, 7, rounds)
    os.makedirs(spec.directory(config.root))
    runs.write_result(spec.directory(config.root), {'spec': spec.to_dict(), 'summary': {}})
  grid.check_finished_runs(config)
  with pytest.raises(engine_lib.SettingsChangedError, match='rounds: 9 -> 12'):
    grid.check_finished_runs(_config(tmp_path, rounds=12, schedule='halving', last_k=1))


def test_tuning_csv_has_every_candidates_score_at_every_rung(tmp_path):
  # Halving over 3 client lrs (rungs of 3 and 9 rounds): 3 rung rows and 2 full-length ones
  # per method, then stage 2's 2 other server lrs at full length, each row with a finite score;
  # `chosen` only on the winner's full-length row.
  config = _config(tmp_path, rounds=9, schedule='halving', last_k=1,
                   client_lr_grid=(0.05, 0.1, 0.2))
  made = plan.make(config)
  choices = []
  for tuned, epochs, method in made.tuning:
    requests = search.search(made.search[made.dataset_of(tuned), method.name], method,
                             dataset=made.dataset_of(tuned), regime=tuned, epochs=epochs)
    wave = next(requests)
    try:
      while True:
        wave = requests.send([(c['client_lr'] * (9 if r is None else r), 1) for c, r in wave])
    except StopIteration as e:
      choices.append(e.value)
  grid._write_tuning(made, str(tmp_path), choices)
  rows = metrics_lib.read_csv(os.path.join(tmp_path, 'tuning.csv'))
  assert [(r['method'], r['rounds']) for r in rows] == [
      (m, n) for m in ('fedavg', 'fedgh') for n in (3, 3, 3, 9, 9, 9, 9)]
  assert all(np.isfinite(r['validation_score']) for r in rows)
  chosen = [(r['method'], r['candidate'], r['rounds']) for r in rows if str(r['chosen']) == 'True']
  assert chosen == [(m, 'clr=0.2,slr=1', 9) for m in ('fedavg', 'fedgh')]


def _record(root):
  out = {}
  for name in results.RECORD_FILES:
    path = os.path.join(root, name)
    out[name] = open(path, 'rb').read() if os.path.exists(path) else None
  return out


def test_a_refused_rerun_leaves_the_record_byte_identical(tiny, monkeypatch):
  config, loader, _ = tiny
  before = _record(config.root)
  assert before['config.json'] is not None and before['runs.csv'] is not None
  with open(os.path.join(config.root, results.FAMILY_FILE)) as f:   # named before the runs
    assert json.load(f) == json.loads(json.dumps(results.family_members(
        config_lib.flat_settings(json.loads(before['config.json'])))))
  changed = _config(config.output.output_dir,
                    loop=experiment_config.LoopConfig(rounds=2, clients_per_round=3,
                                                      batch_size=10))
  loads = len(loader.guards)
  with pytest.raises(engine_lib.SettingsChangedError, match='batch_size: 32 -> 10'):
    grid.run_benchmark(changed, loader=loader, stream=open(os.devnull, 'w'))
  assert _record(config.root) == before
  assert len(loader.guards) == loads   # refused before any data was loaded
  # Found only when a run comes (as for the values tuning chooses): the record is restored.
  monkeypatch.setattr(grid, 'check_finished_runs', lambda config, plan=None: None)
  with pytest.raises(engine_lib.SettingsChangedError, match='batch_size: 32 -> 10'):
    grid.run_benchmark(changed, loader=loader, stream=open(os.devnull, 'w'))
  assert _record(config.root) == before


def test_a_reused_process_runs_as_a_fresh_one(tmp_path):
  from tff_conflict import learning
  config = _config(tmp_path, tune=False)
  engine = engine_lib.Engine(config.root)
  fedgh = plan.report_specs(plan.make(config), [])
  first = next(s for s in fedgh if s.method == 'fedgh')
  target = runs.RunSpec(**dict(first.to_dict(), kwargs=first.kwargs, regime='digits:#C=2@6',
                               seed=1, data_seed=1, client_lr=0.2, server_lr=1.5))
  engine.run(first)  # builds the process with the first run's seed and learning rates
  engine.run(target)
  assert engine.num_processes == 1
  reused = metrics_lib.read_csv(os.path.join(target.directory(config.root), 'metrics.csv'))

  train, test = engine.data('digits:#C=2@6', 1)
  loop = experiment_config.LoopConfig(rounds=2, clients_per_round=3, batch_size=32, seed=1,
                                      checkpoint_every=0)
  spec = rounds.preprocess(train.create_tf_dataset_for_client(train.client_ids[0]),
                           loop).element_spec
  process = learning.build_fedgh(
      functools.partial(models.logistic_regression, (8, 8, 1), 10, seed=1),
      input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.5), seed=1)
  evaluate, columns = engine.evaluator(
      functools.partial(models.logistic_regression, (8, 8, 1), 10), test, 10,
      model_key='fresh', train_data=train)
  fresh = training_loop.run_training(
      process, train_data=train, evaluate_fn=evaluate, config=loop,
      experiment_dir=str(tmp_path / 'fresh'), hparams={}, show_progress=False,
      test_columns=columns)[0]
  assert reused[-1]['aggregator/num_projections'] > 0  # FedGH did project
  for a, b in zip(conftest.non_timing(reused), conftest.non_timing(fresh)):
    assert a.keys() == b.keys()
    for key in a:
      np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_an_in_process_benchmark_run_uses_no_tff_runtime(tmp_path, no_tff_runtime):
  # Rounds and evaluation (the runner's get_model_weights) stay in this process: TFF's execution
  # context, which would start a worker_binary, refuses every call here.
  config = _config(tmp_path, runtime='inprocess', regimes=('digits:iid@6',), methods=('fedavg',),
                   report_seeds=(0,), rounds=1, tune=False)
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert outcome['failures'] == [] and len(outcome['rows']) == 1
  assert outcome['rows'][0]['final_accuracy'] > 0


def test_a_diverging_run_completes_is_recorded_and_counts_at_chance(tmp_path):
  # A learning rate no model survives: every client's update turns non-finite and is zeroed
  # (the clients report loss 0 and no example); the run is recorded (never a failed run),
  # diverged, collapsed, at chance in the statistics.
  config = _config(tmp_path, runtime='inprocess', regimes=('digits:iid@6',), methods=('fedavg',),
                   report_seeds=(0,), rounds=3, models={'digits': 'mlp'},
                   tune=False,
                   client=experiment_config.OptimizerConfig(learning_rate=1e6))
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert outcome['failures'] == [] and len(outcome['rows']) == 1
  row = outcome['rows'][0]
  assert row['diverged'] is True and row['collapsed'] is True
  assert row['final_accuracy'] == pytest.approx(0.1) and row['diverged_round'] >= 1
  # The zeroed updates are counted as what they are (FedAvg's client work counts them).
  assert row['excluded_nonfinite_updates'] > 0


def test_a_leaf_regime_takes_its_shape_and_classes_from_the_files(tmp_path):
  from tests.data import leaf_fixtures  # pylint: disable=g-import-not-at-top
  leaf_fixtures.synthetic(str(tmp_path / 'leaf'), num_users=4, dim=60, num_classes=5)
  config = _config(tmp_path / 'out', regimes=('leaf_synthetic:natural',), methods=('fedavg',),
                   report_seeds=(0,), rounds=1, clients_per_round=2, models={},
                   leaf_dir=str(tmp_path / 'leaf' / 'data' / 'synthetic'),
                   tune=False, eval_train_loss=True)
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert outcome['failures'] == [] and len(outcome['rows']) == 1
  assert outcome['rows'][0]['model'] == 'logistic_regression'
  result = runs.read_result(runs.report_run_dir(config.root, 'leaf_synthetic:natural', 1,
                                                'fedavg', 0))
  assert np.asarray(result['confusion_matrix']).shape == (5, 5)
  # The global model's loss on the pooled training data, evaluated every round.
  row = outcome['rows'][0]
  assert len(runs.decode_curve(row['global_train_loss_curve'])) == 1
  assert row['final_global_train_loss'] > 0


def test_a_full_disk_ends_the_benchmark_instead_of_failing_each_run(tmp_path, monkeypatch):
  import errno  # pylint: disable=g-import-not-at-top
  config = _config(tmp_path, tune=False)
  engine = engine_lib.Engine(config.root)
  spec = plan.report_specs(plan.make(config), [])[0]

  def train(error):
    def fail(*args):
      raise error
    return fail

  monkeypatch.setattr(engine, '_train', train(ValueError('a bad run')))
  assert engine.run(spec) is None and len(engine.failures) == 1   # a run's own failure
  monkeypatch.setattr(engine, '_train',
                      train(OSError(errno.ENOSPC, 'No space left on device', 'x')))
  with pytest.raises(OSError, match='No space left'):
    engine.run(spec)


@pytest.mark.parametrize('changes, message', [
    (dict(regimes=('digits:iid@360',)),
     "--regimes=digits:iid@360: regime 'digits:iid@360': num_clients must be at most 359"),
    (dict(regimes=('digits:iid@2',)),
     "--clients_per_round=3: regime 'digits:iid@2' has 2 clients: use at most 2"),
    (dict(regimes=('emnist:natural',), models={},
          data=experiment_config.DataConfig(cache_dir='/no/such/cache')),
     '--regimes=emnist:natural: Federated EMNIST needs'),
    (dict(tuning_seeds=(7,), tuning_regimes={'digits': 'digits:iid@2'}),
     "--clients_per_round=3: regime 'digits:iid@2' has 2 clients"),
])
def test_a_regime_that_cannot_run_is_refused_before_anything_is_written(tmp_path, changes,
                                                                        message):
  config = _config(tmp_path, **changes)
  with pytest.raises(experiment_config.ConfigError) as info:
    grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  assert message in info.value.flag_message()
  assert not os.path.exists(os.path.join(config.root, 'config.json'))


def test_a_refusal_while_running_restores_every_file_the_report_reads(tiny, monkeypatch):
  # Whatever the run had rewritten when the refusal came (tuning's files included) is put back.
  config, loader, _ = tiny
  before = _record(config.root)
  assert before[results.CURVES_FILE] is not None

  def rewrite_then_refuse(config, *unused, **unused_too):
    for name in results.RECORD_FILES:
      with open(os.path.join(config.root, name), 'w') as f:
        f.write('rewritten')
    raise engine_lib.SettingsChangedError('a run changed')

  monkeypatch.setattr(grid, '_run', rewrite_then_refuse)
  with pytest.raises(engine_lib.SettingsChangedError):
    grid.run_benchmark(config, loader=loader, stream=open(os.devnull, 'w'))
  assert _record(config.root) == before


def test_a_failed_run_is_named_in_the_report_and_the_rest_goes_on(tmp_path, monkeypatch):
  config = _config(tmp_path, tune=False, runtime='inprocess', report_seeds=(0,))
  train = engine_lib.Engine._train

  def failing(self, spec, run_dir):
    if spec.method == 'fedgh' and spec.regime == 'digits:#C=2@6':
      raise FloatingPointError('made to fail')
    return train(self, spec, run_dir)
  monkeypatch.setattr(engine_lib.Engine, '_train', failing)
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  label = 'report digits:#C=2@6 E=1 fedgh seed 0'
  assert outcome['failures'] == [(label, 'FloatingPointError: made to fail')]
  assert len(outcome['rows']) == 3   # the other runs finished
  report = open(outcome['report']).read()
  assert (f'- {label}: FloatingPointError: made to fail '
          '(`runs/digits_C2_6/E1/fedgh/seed0/error.txt`)') in report


def _files(root):
  return {os.path.join(d, n): open(os.path.join(d, n), 'rb').read()
          for d, _, names in os.walk(root) for n in names}


def test_a_rerun_on_other_data_is_refused_in_one_line_with_every_file_intact(tmp_path):
  from tests.data import idx_fixtures  # pylint: disable=g-import-not-at-top
  for name, seed in (('a', 0), ('b', 1)):
    idx_fixtures.fashion_mnist_dir(tmp_path / name, train_per_class=3, test_per_class=1,
                                   seed=seed)
  config = lambda folder: _config(
      tmp_path, regimes=('fashion_mnist:iid@3',), methods=('fedavg',), report_seeds=(0,),
      rounds=2, tune=False, models={'fashion_mnist': 'logistic_regression'}, tuning_regimes={},
      dataset_settings={'fashion_mnist': {'rounds': 1}},
      data=experiment_config.DataConfig(data_dir=str(tmp_path / folder)))
  stream = io.StringIO()
  grid.run_benchmark(config('a'), stream=stream)
  # The header says which rounds win: the dataset's own.
  assert (", 1 rounds each (fashion_mnist: --dataset_settings's, which win over --rounds=2) ->"
          in stream.getvalue()), stream.getvalue()
  recorded = runs.read_result(os.path.join(config('a').root, 'runs', 'fashion_mnist_iid_3', 'E1',
                                           'fedavg', 'seed0'))['spec']
  assert recorded['data_location'] == str(tmp_path / 'a') and recorded['data_digest']
  described = results.read_json(os.path.join(config('a').root, 'regimes.json'), [])
  assert described[0]['data_location'] == str(tmp_path / 'a')
  before = _files(config('a').root)
  with pytest.raises(engine_lib.SettingsChangedError) as info:
    grid.run_benchmark(config('b'), stream=open(os.devnull, 'w'))
  assert '\n' not in str(info.value)
  assert f"data_location: '{tmp_path / 'a'}' -> '{tmp_path / 'b'}'" in str(info.value)
  assert _files(config('a').root) == before


@pytest.mark.parametrize('failing', ['fedavg', 'fedgh'])
def test_a_search_with_a_failed_run_chooses_nothing_until_the_rerun_completes_it(tmp_path,
                                                                                 failing):
  # A file where one tuning candidate's run directory should be fails that run: its search makes
  # no choice, its reporting runs (everyone's, for the baseline) wait; the plain rerun, the file
  # gone, completes the search and runs them.
  config = _config(tmp_path, regimes=('digits:#C=2@6',), report_seeds=(0,),
                   tune_server_lr=False, tune_method_grids=False)
  blocker = os.path.join(config.root, 'tuning', 'digits_C2_6', 'E1', failing, runs.slug(
      search.candidate_name(dict(client_lr=0.2, server_lr=1.0))), 'seed7')
  os.makedirs(os.path.dirname(blocker))
  open(blocker, 'w').close()
  stream = io.StringIO()
  outcome = grid.run_benchmark(config, stream=stream)
  assert [label for label, _ in outcome['failures']] == [
      f'tune digits:#C=2@6 E=1 {failing} clr=0.2,slr=1 seed 7']
  assert 'is a file where the run\'s directory should be' in outcome['failures'][0][1]
  assert outcome['incomplete'] == [f'{failing} on digits:#C=2@6, E = 1']
  assert [c['method'] for c in outcome['choices']] == [m for m in ('fedavg', 'fedgh')
                                                       if m != failing]
  chosen = results.read_json(os.path.join(config.root, 'tuning_choices.json'), [])
  assert [c['method'] for c in chosen] == [c['method'] for c in outcome['choices']]
  assert {r['method'] for r in outcome['rows']} == (set() if failing == 'fedavg' else {'fedavg'})
  report = open(outcome['report']).read()
  assert 'Incomplete searches' in report and f'{failing} on digits:#C=2@6, E = 1' in report
  assert 'Traceback' not in report and ' failed:' not in report.replace('Runs that failed', '')
  os.remove(blocker)
  outcome = grid.run_benchmark(config, stream=stream)
  assert outcome['failures'] == [] and outcome['incomplete'] == []
  assert [c['method'] for c in outcome['choices']] == ['fedavg', 'fedgh']
  assert outcome['runs_done'] == 1 + (2 if failing == 'fedavg' else 1)
  choice = {c['method']: c['client_lr'] for c in outcome['choices']}
  assert sorted((r['method'], r['client_lr']) for r in outcome['rows']) == sorted(choice.items())


def test_a_reporting_run_made_at_another_choice_is_replaced_with_a_line(tiny, monkeypatch):
  config, loader, outcome = tiny
  monkeypatch.setattr(loader, 'tuning_over', True)
  specs = [s for s in plan.report_specs(plan.make(config), outcome['choices'])
           if s.method == 'fedgh']
  spec = specs[0]
  other = 0.05 if spec.client_lr == 0.2 else 0.2
  for stale in specs:   # as an older invocation's choice left them
    result = runs.read_result(stale.directory(config.root))
    runs.write_result(stale.directory(config.root),
                      dict(result, spec=dict(result['spec'], client_lr=other)))
  stream = io.StringIO()
  again = grid.run_benchmark(config, loader=loader, stream=stream)
  assert again['runs_done'] == len(specs) == 4 and again['failures'] == []
  assert stream.getvalue().count('replacing') == 1
  assert ('replacing the reporting runs of fedgh made at another tuned choice '
          f'(client_lr: {other!r} -> {spec.client_lr!r}), e.g. {spec.directory(config.root)}'
          ) in stream.getvalue()
  assert runs.read_result(spec.directory(config.root))['spec']['client_lr'] == spec.client_lr


def test_an_executor_that_never_starts_adds_no_invocation_to_timing(tmp_path, monkeypatch):
  """A Ray join that fails ran nothing: timing.json (the report's Time table) gains no entry,
  and no time in it is negative."""
  config = _config(tmp_path, tune=False, report_seeds=(0,), regimes=('digits:iid@6',))

  def refuse(*args, **kwargs):
    del args, kwargs
    raise experiment_config.ConfigError('ray_address', '127.0.0.1:1', reason='nothing answers')
  monkeypatch.setattr(executors, 'make', refuse)
  with pytest.raises(experiment_config.ConfigError):
    grid.run_benchmark(config, stream=io.StringIO())
  assert not os.path.exists(os.path.join(config.root, 'timing.json'))
  monkeypatch.undo()
  outcome = grid.run_benchmark(config, stream=io.StringIO())
  timing = results.read_json(os.path.join(config.root, 'timing.json'), [])
  assert len(timing) == 1 and outcome['runs_done'] == 2 and timing[0]['ended'] is True
  assert min(timing[0][k] for k in ('starting_seconds', 'tuning_seconds',
                                    'reporting_seconds')) >= 0


def test_a_running_invocation_rewrites_its_timing_entry_as_runs_come_back(tmp_path, monkeypatch):
  """At its first finished run (then at most every TIMING_EVERY_SECONDS) an invocation writes its
  entry with `ended` false; its end replaces that entry, after the earlier invocations'."""
  config = _config(tmp_path, tune=False, report_seeds=(0, 1), regimes=('digits:iid@6',))
  path = os.path.join(config.root, 'timing.json')
  os.makedirs(config.root)
  with open(path, 'w') as f:
    json.dump([{'finished': 'before', 'wall_seconds': 5.0}], f)
  seen, write = [], files.write_json_atomically

  def spy(target, value, **kwargs):
    if target == path:
      seen.append([dict(e) for e in value])
    write(target, value, **kwargs)
  monkeypatch.setattr(files, 'write_json_atomically', spy)
  monkeypatch.setattr(grid, 'TIMING_EVERY_SECONDS', 3600.0)
  outcome = grid.run_benchmark(config, stream=io.StringIO())
  assert outcome['runs_done'] == 4 and len(seen) == 2   # the first run back, then the end
  running, ended = seen
  assert running[0] == ended[0] == {'finished': 'before', 'wall_seconds': 5.0}
  assert running[1]['ended'] is False and running[1]['runs_done'] == 1
  assert ended[1]['ended'] is True and ended[1]['runs_done'] == 4
  assert results.read_json(path, []) == ended

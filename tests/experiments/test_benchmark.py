"""experiments.benchmark: flags to config (one-line errors naming the flag), presets, and the
smoke preset end to end as a process (report with the interval column, runs.csv, no worker
left), the same runs.csv from local worker processes, and a killed driver's grid resumed."""

import csv
import json
import os
import re
import signal
import subprocess
import time
import uuid

from absl import flags
from absl.testing import flagsaver
import pytest

from experiments import benchmark
from experiments import cli
from tff_conflict import _interrupts as interrupts
from experiments import presets
from experiments import stats
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import plan
from experiments.benchmarking import results
from experiments.benchmarking import runs
from tests.experiments import conftest

FLAGS = flags.FLAGS


def test_smoke_preset_values_and_explicit_flags_win():
  with flagsaver.as_parsed(preset='smoke', rounds='2'):
    benchmark.apply_preset()
    config = benchmark.config_from_flags()
  assert config.loop.rounds == 2 and config.methods == ('fedavg', 'fedgh')
  assert config.report_seeds == (0, 1) and config.epochs == (1,) and not config.tune
  assert config.root.endswith(os.path.join('results', 'smoke'))


def test_results_preset_is_the_protocols_grid():
  with flagsaver.as_parsed(preset='results'):
    benchmark.apply_preset()
    config = benchmark.config_from_flags()
    positive_control = benchmark.FLAGS.positive_control
  assert {r.split('(')[0].split(':')[0] for r in config.regimes} == {'digits', 'synthetic'}
  # Today's regimes, and the ones chosen before the runs where differences can show.
  assert set(config.regimes) >= {'digits:dir(0.1)', 'digits:#C=2', 'synthetic(1,1)',
                                 'digits:dir(0.1)@50', 'digits:#C=1'}
  assert len(config.report_seeds) >= 10 and 1 in config.epochs and config.tune
  assert config.loop.rounds >= 50 and config.loop.eval_train_loss
  assert set(config.tuning_seeds).isdisjoint(config.report_seeds)
  assert config.tune_server_lr and config.primary_statistic == 'last_k_accuracy'
  assert set(config.methods) >= {'fedavg', 'fedprox', 'fedgh', 'fedmgc', 'fedga', 'fedld',
                                 'fed_corrective', 'custom[loss=calibrated,aggregator=fedgh]',
                                 'custom[loss=focal,aggregator=fedgh]'}
  # The diagnosis variants have their own preset.
  assert not set(config.methods) & set(presets.DIAGNOSIS_METHODS) - {
      'fedavg', 'fedga', 'fedld', 'fedmgc', 'fed_corrective'}
  assert positive_control
  # The seeds' baselines.
  assert set(config.methods) >= {'fednova', 'scaffold', 'feddecorr', 'fedavg+fedgh',
                                 'fedprox+fedgh'}


def test_diagnosis_preset_runs_each_variant_beside_its_parent():
  from experiments.benchmarking import plan  # pylint: disable=g-import-not-at-top
  with flagsaver.as_parsed(preset='diagnosis'):
    benchmark.apply_preset()
    config = benchmark.config_from_flags()
  assert len(config.report_seeds) >= 10 and config.variants_inherit
  made = plan.make(config)
  inherits = made.inherits
  assert inherits['fedld_projection'] == 'fedld' and inherits['fedga_paper_clip'] == 'fedga'
  assert inherits['fedavg_clip'] == 'fedavg' and inherits['fedga'] is None
  assert {m.name for _, _, m in made.tuning} == {'fedavg', 'fedga', 'fedld', 'fedmgc',
                                                 'fed_corrective'}


def test_fedga_setting_preset_is_the_papers_setting_tuned_where_it_reports():
  with flagsaver.as_parsed(preset='fedga_setting'):
    benchmark.apply_preset()
    config = benchmark.config_from_flags()
  assert config.epochs == (2,) and config.loop.batch_size == 64
  assert config.loop.clients_per_round == 10 and config.loop.rounds >= 50
  assert set(config.tuning_regimes.values()) == set(config.regimes)
  assert {'fedavg_clip', 'fedga_clip', 'fedga_paper', 'fedga_paper_clip'} <= set(config.methods)


def _paper_config(preset, **flag_values):
  with flagsaver.as_parsed(preset=preset, **flag_values):
    benchmark.apply_preset()
    return benchmark.config_from_flags()


@pytest.mark.parametrize('preset', sorted(set(presets.PAPER_TABLES) - {'fedga_table'}))
def test_paper_table_presets_are_tuned_grids_of_registered_methods(preset):
  leaf = 'leaf_' in presets.PAPER_TABLES[preset]['regimes']
  config = _paper_config(preset, **({'leaf_dir': '/data/shakespeare'} if leaf else {}))
  assert config.tune and len(config.report_seeds) == 3
  assert set(config.tuning_regimes.values()) <= set(config.regimes)
  assert 'fedavg' in config.methods


@pytest.mark.parametrize('preset', sorted(n for n, p in presets.BENCHMARK.items()
                                           if p.get('tune')))
def test_every_preset_that_tunes_extends_its_grids_past_their_edges(preset):
  leaf = 'leaf_' in presets.BENCHMARK[preset]['regimes']
  config = _paper_config(preset, **({'leaf_dir': '/data/shakespeare'} if leaf else {}))
  assert config.tune and config.edge_steps > 0


_FEDGH_TABLE = tuple(m for b in ('fedavg', 'fedprox', 'fednova', 'feddecorr')
                     for m in (b, f'{b}+fedgh'))


def test_fedgh_table_is_each_baseline_without_and_with_fedgh_on_fashion_mnist():
  config = _paper_config('fedgh_table')
  assert config.methods == _FEDGH_TABLE
  # Table I's CIFAR-10 setting: K = 20 clients, C = 20, E = 5, T = 100, B = 64, lr 0.01.
  assert config.regimes == ('fashion_mnist:dir(0.1)@20', 'fashion_mnist:dir(1)@20')
  assert config.client.momentum == 0.9 and config.epochs == (5,)
  assert config.loop.clients_per_round == 20 and config.loop.batch_size == 64
  assert config.loop.rounds == 100 and 0.01 in config.client_lr_grid
  assert dict(config.models) == {'fashion_mnist': 'emnist_cnn'}


def test_fedgh_table_shakespeare_is_table_one_with_leafs_lstm():
  config = _paper_config('fedgh_table_shakespeare', leaf_dir='/data/shakespeare')
  assert config.methods == _FEDGH_TABLE
  # Table I: K = 660, C = 50, E = 1, T = 50, B = 64, lr 1.0.
  assert config.regimes == ('leaf_shakespeare:natural@660',)
  assert config.loop.clients_per_round == 50 and config.epochs == (1,)
  assert config.loop.rounds == 50 and config.loop.batch_size == 64
  assert 1.0 in config.client_lr_grid and config.client.momentum == 0
  assert dict(config.models) == {'leaf_shakespeare': 'leaf_shakespeare_lstm'}


def test_fedga_table_is_the_authors_mnist_setting_untuned():
  config = _paper_config('fedga_table')
  # Xiao-Chenguang/FedGA's configs/sgd-param.csv and config_default.yaml (MNIST rows).
  assert config.regimes == tuple(f'mnist:client_dir({a})@100' for a in ('0.05', '0.1', '0.5',
                                                                          '1', '10'))
  assert config.methods == ('fedavg', 'fedprox', 'fedga') and not config.tune
  assert config.report_seeds == (0, 1, 2, 3, 4) and config.epochs == (2,)
  assert config.loop.rounds == 100 and config.loop.clients_per_round == 10
  assert config.loop.batch_size == 64 and dict(config.models) == {'mnist': 'torch_mlp'}
  assert (config.client.learning_rate, config.client.momentum) == (0.1, 0.0)
  assert config.server.learning_rate == 1.0
  assert config.given['fedprox'] == {'proximal_strength': 0.001, 'clip_norm': 5.0}
  assert config.given['fedga'] == {'counts': 'batch', 'form': 'soft_target', 'clip_norm': 5.0}
  assert config.given['fedavg'] == {'clip_norm': 5.0}


def test_fedmgc_table_is_its_fashion_mnist_comparison():
  config = _paper_config('fedmgc_table')
  # Figs. 11-12: 100 clients, 10 a round (no SCAFFOLD, which the paper drops there), E = 10,
  # batch 128, lr 0.001, Dir(alpha p) with alpha 0.5 and 1, FedMGC's FMNIST CNN.
  assert config.methods == ('fedavg', 'fedprox', 'fednova', 'fedmgc')
  assert config.regimes == ('fashion_mnist:client_dir(0.5)@100',
                            'fashion_mnist:client_dir(1)@100')
  assert config.loop.clients_per_round == 10 and config.epochs == (10,)
  assert config.loop.batch_size == 128 and 0.001 in config.client_lr_grid
  assert dict(config.models) == {'fashion_mnist': 'fedmgc_fmnist_cnn'}


def test_tuning_regimes_are_regimes_or_dataset_regime_pairs():
  for value in ('digits:dir(0.1),synthetic(1,1)', 'digits:digits:dir(0.1),synthetic(1,1)'):
    with flagsaver.as_parsed(tuning_regimes=value, regimes='digits:dir(0.1),synthetic(1,1)',
                             models='synthetic:mlp'):   # FedDecorr, a default method, needs it
      config = benchmark.config_from_flags()
    assert dict(config.tuning_regimes) == {'digits': 'digits:dir(0.1)',
                                                  'synthetic': 'synthetic(1,1)'}


def test_given_values_come_from_the_method_flags():
  with flagsaver.as_parsed(proximal_strength='0.5', tune='false', models='synthetic:mlp'):
    config = benchmark.config_from_flags()
  assert config.given['fedprox'] == {'proximal_strength': 0.5}
  assert 'seed' not in config.given['fedgh']


def test_the_python_path_records_every_builder_argument_as_the_flags_do():
  settings = dict(regimes=('digits:iid',), methods=('fedavg', 'fedprox', 'fedld'), tune=False)
  with flagsaver.as_parsed(regimes='digits:iid', methods='fedavg,fedprox,fedld', tune='false'):
    from_flags = benchmark.config_from_flags()
  from_python = config_lib.BenchmarkConfig(**settings)
  assert from_python.given == from_flags.given
  assert config_lib.as_dict(from_python)['given'] == config_lib.as_dict(from_flags)['given']

  def recorded(config):   # runs.csv's hparams cell of each method's reporting runs
    return {s.method: runs.run_row(s, {})['hparams']
            for s in plan.report_specs(plan.make(config), [])}
  assert recorded(from_python) == recorded(from_flags)
  assert recorded(from_python)['fedprox'] == '{"proximal_strength": 0.01}'
  assert '"margin_weight": 0.01' in recorded(from_python)['fedld']
  # A value given from Python wins over the flag's default, the others kept.
  given = config_lib.BenchmarkConfig(**settings, given={'fedld': {'margin_weight': 0.5}}).given
  assert given['fedld'] == dict(from_flags.given['fedld'], margin_weight=0.5)


@pytest.mark.parametrize('flag_values,message', [
    (dict(preset='fast'), "--preset must be one of 'diagnosis', 'fedga_setting', "
     "'fedga_table', 'fedgh_table', 'fedgh_table_shakespeare', 'fedld_table', 'fedmgc_table', "
     "'real_data', 'results', 'smoke', got 'fast'"),
    (dict(preset='fedgh_table_shakespeare'), "--leaf_dir must be LEAF's data/<name> folder "
     "for the regimes of ['leaf_shakespeare'], got None"),
    (dict(regimes='digits:dir(0)'), "--regimes=digits:dir(0): regime 'digits:dir(0)'"),
    (dict(methods='fedavg,sgd'), "--methods=sgd: unknown method 'sgd'"),
    (dict(epochs='1,x'), "--epochs must be integers, got ['1', 'x']"),
    (dict(client_lr_grid='0.1,x'), "--client_lr_grid must be numbers, got ['0.1', 'x']"),
    (dict(report_seeds='100'), '--tuning_seeds must be disjoint from --report_seeds'),
    (dict(client_lr_grid='0.1,-1'), '--client_lr_grid must be a non-empty list of finite'),
    (dict(grids='fedprox=1'), '--grids must be entries METHOD.ARGUMENT=V1/V2'),
    (dict(models='digits:resnet'), "--models must be one of 'cifar_cnn'"),
    (dict(alpha='0.5'), '--alpha=0.5: does not apply to experiments.benchmark; use --regimes'),
    (dict(client_epochs='2'), '--client_epochs=2: does not apply to experiments.benchmark; use '
     '--epochs'),
    (dict(methods='fedavg,custom[aggregator=median]'),
     "--methods=custom[aggregator=median]: method 'custom[aggregator=median]': aggregator must "
     "be one of 'corrective', 'dgc', 'fedgh', 'mean', 'measured_mean', 'principal', got "
     "'median'"),
    (dict(methods='fedavg,fedgh[gamma=2]'),
     "gamma=2: its builder (fedgh) takes no argument 'gamma'"),
    (dict(tuning_regimes='dir(0.1)'), "--tuning_regimes=dir(0.1): regime 'dir(0.1)' must be"),
    (dict(methods='fedavg,fedgh', proximal_strength='0.5'),
     '--proximal_strength=0.5: does not apply to --algorithm=fedavg, --algorithm=fedgh'),
    (dict(methods='fedavg,fedga', focal_gamma='2'),
     '--focal_gamma=2.0: does not apply to --algorithm=fedavg, --algorithm=fedga'),
    (dict(regimes='digits:iid', methods='fedavg', rounds='5',
          dataset_settings='digits.rounds=3'),
     "--rounds=5: no regime reads it: --dataset_settings sets the rounds of ['digits']"),
    (dict(regimes='digits:iid', methods='fedavg', data_dir='/data/fm'),
     "--data_dir=/data/fm: no regime reads it"),
    (dict(methods='fedavg,fedprox', grids='fedprox.proximal_strength=0.1/1', tune='false'),
     '--grids=fedprox.proximal_strength=0.1/1: does not apply with --notune, which tunes '
     'nothing (the method flags give the values); drop --grids or --notune'),
])
def test_bad_flags_are_one_line_errors_naming_the_flag(flag_values, message):
  with flagsaver.as_parsed(**flag_values):
    with conftest.flag_error(re.escape(message)):
      benchmark.apply_preset()
      benchmark.config_from_flags()


@pytest.fixture(scope='module')
def smoke(tmp_path_factory):
  """The smoke preset run as a user runs it: (its directory, the process's result, its token)."""
  tmp_path = tmp_path_factory.mktemp('smoke')
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', '--preset=smoke',
                               f'--output_dir={tmp_path}', '--noprogress', token=token)
  return tmp_path / 'smoke', result, token


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


_TIMING_COLUMNS = ('seconds_per_round', 'first_round_s', 'run_seconds')


def _without_timing(rows):
  return [{k: v for k, v in r.items() if k not in _TIMING_COLUMNS} for r in rows]


def test_smoke_preset_end_to_end_leaves_no_worker(smoke):
  root, result, token = smoke
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  report = (root / 'report.md').read_text()
  assert 'Δ vs fedavg [95% CI]' in report and 'Holm p' in report
  assert '### `digits:iid@8`, E=1' in report and '### `digits:#C=2@8`, E=1' in report
  with open(root / 'runs.csv') as f:
    rows = list(csv.DictReader(f))
  keys = [(r['regime'], r['method'], r['seed']) for r in rows]
  assert sorted(keys) == sorted((g, m, s) for g in ('digits:iid@8', 'digits:#C=2@8')
                                for m in ('fedavg', 'fedgh') for s in ('0', '1'))
  assert all(r['epochs'] == '1' and r['final_accuracy'] for r in rows)
  # The diagnosis columns (`results.summarize_run`) of every reporting run: the mean logit, and
  # the errors between classes that rarely share a client (#C=2 has pairs sharing none).
  assert all(r['final_mean_logit'] and r['final_common_pair_error'] for r in rows)
  assert all(r['final_rare_pair_error'] for r in rows if r['regime'] == 'digits:#C=2@8')
  assert '## Diagnosis' in report and '### fedgh' in report
  assert f'report: {root / "report.md"}' in result.stdout
  assert conftest.workers_with_token(token) == []


def test_local_workers_give_the_inline_runs_csv_and_leave_no_process(smoke, tmp_path):
  root, inline, _ = smoke
  assert inline.returncode == 0
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', '--preset=smoke', '--executor=local',
                               '--workers=2', f'--output_dir={tmp_path}', '--noprogress',
                               token=token)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  local = _rows(tmp_path / 'smoke' / 'runs.csv')
  assert len(local) == 8 and _without_timing(local) == _without_timing(_rows(root / 'runs.csv'))
  timing = json.loads((tmp_path / 'smoke' / 'timing.json').read_text())[-1]
  assert (timing['executor'], timing['workers'], timing['runs_done']) == ('local', 2, 8)
  assert conftest.workers_with_token(token) == []
  assert conftest.processes_with_token(token) == []


@pytest.mark.slow
def test_a_two_node_ray_cluster_gives_the_inline_runs_csv_and_leaves_no_process(
    smoke, tmp_path, ray_cluster):
  root, inline, _ = smoke
  assert inline.returncode == 0
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', '--preset=smoke', '--executor=ray',
                               f'--ray_address={ray_cluster.address}', f'--output_dir={tmp_path}',
                               '--noprogress', token=token)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  ray_rows = _rows(tmp_path / 'smoke' / 'runs.csv')
  assert _without_timing(ray_rows) == _without_timing(_rows(root / 'runs.csv'))
  timing = json.loads((tmp_path / 'smoke' / 'timing.json').read_text())[-1]
  assert (timing['executor'], timing['workers'], timing['runs_done']) == ('ray', 2, 8)
  # Two actors of 1 CPU on two nodes of 1 CPU: one ran on each node. Both ended with the driver.
  from tests.experiments import ray_cluster as cluster_lib  # pylint: disable=g-import-not-at-top

  def actors():   # the raylets end a finished job's workers, within seconds
    return [p for p in cluster_lib.leftover_ray_processes(ray_cluster.marker)
            if '_RayWorker' in ' '.join(p.cmdline())]
  deadline = time.monotonic() + 30
  while actors() and time.monotonic() < deadline:
    time.sleep(0.5)
  assert actors() == []
  assert conftest.processes_with_token(token) == []


def test_a_composition_that_cannot_be_built_is_refused_before_any_run(tmp_path):
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', '--preset=smoke',
                               '--methods=fedavg,fednova+corrective', f'--output_dir={tmp_path}',
                               token=token, timeout=300)
  assert result.returncode == 2
  assert 'Traceback' not in result.stderr + result.stdout
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith('benchmark: --methods=fednova+corrective: '), lines[0]
  assert 'normalised averaging cannot be combined with the corrective aggregator' in lines[0]
  assert not list((tmp_path / 'smoke').rglob('result.json'))
  assert not (tmp_path / 'smoke' / 'config.json').exists()


@pytest.mark.slow
@pytest.mark.parametrize('signum, status', [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_grid_of_local_workers_ends_cleanly_and_leaves_no_process(
    tmp_path, signum, status):
  token = uuid.uuid4().hex
  process = subprocess.Popen(
      conftest.binary_command('experiments.benchmark', '--preset=smoke', '--executor=local',
                              '--workers=2', '--rounds=6', f'--output_dir={tmp_path}',
                              '--noprogress'),
      cwd=conftest.REPO_ROOT, env=conftest.binary_env(token), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  root = tmp_path / 'smoke'
  deadline = time.monotonic() + 540
  while time.monotonic() < deadline and not list(root.rglob('result.json')):
    time.sleep(0.2)
  process.send_signal(signum)
  out, err = process.communicate(timeout=120)
  assert process.returncode == status, out[-2000:] + err[-2000:]
  assert 'Traceback' not in out + err
  assert 'finished runs' in err and 'are kept' in err, err
  time.sleep(1)
  assert conftest.processes_with_token(token) == []


@pytest.mark.slow
def test_a_killed_driver_leaves_no_worker_and_a_rerun_runs_only_the_unfinished(tmp_path):
  token = uuid.uuid4().hex
  args = ('--preset=smoke', '--executor=local', '--workers=2', '--rounds=6',
          f'--output_dir={tmp_path}', '--noprogress')
  process = subprocess.Popen(conftest.binary_command('experiments.benchmark', *args),
                             cwd=conftest.REPO_ROOT, env=conftest.binary_env(token),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  root = tmp_path / 'smoke'
  deadline = time.monotonic() + 540
  while time.monotonic() < deadline and len(list(root.rglob('result.json'))) < 3:
    time.sleep(0.2)
  process.kill()
  process.wait()
  finished = len(list(root.rglob('result.json')))
  assert 3 <= finished < 8
  time.sleep(3)   # the workers see their parent gone
  assert conftest.processes_with_token(token) == [] and conftest.workers_with_token(token) == []
  result = conftest.run_binary('experiments.benchmark', *args, token=token)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  killed, timing = json.loads((root / 'timing.json').read_text())
  # The killed invocation's entry, written at its first finished run, says it never ended.
  assert killed['ended'] is False and 1 <= killed['runs_done'] <= finished
  assert timing['ended'] is True
  assert (timing['runs_skipped'], timing['runs_done']) == (finished, 8 - finished)
  assert len(_rows(root / 'runs.csv')) == 8


def test_a_bad_flag_ends_in_one_line_without_traceback(tmp_path):
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', '--methods=fedavg,sgd',
                               f'--output_dir={tmp_path}', token=token, timeout=300)
  assert result.returncode == 2
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert "--methods=sgd: unknown method 'sgd'" in lines[0]
  assert 'Traceback' not in result.stderr + result.stdout
  assert not os.listdir(tmp_path)
  assert conftest.workers_with_token(token) == []


_FASHION_MNIST = ("--regimes=fashion_mnist:dir(0.1)@100", '--methods=fedavg,fedgh', '--rounds=2',
                  '--report_seeds=0', '--notune', '--noprogress')


def test_fashion_mnist_absent_ends_in_one_line_naming_apt_get(tmp_path):
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', *_FASHION_MNIST,
                               f'--data_dir={tmp_path}/none', f'--output_dir={tmp_path}/out',
                               token=token, timeout=300)
  assert result.returncode == 2
  assert 'Traceback' not in result.stderr + result.stdout
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("benchmark: --regimes=fashion_mnist:dir(0.1)@100: Fashion-MNIST is "
                             f"not in data_dir='{tmp_path}/none': install it with `apt-get "
                             "install dataset-fashion-mnist`"), lines[0]
  assert conftest.workers_with_token(token) == []


@pytest.mark.slow
def test_fashion_mnist_runs_on_the_installed_files(tmp_path):
  from tff_conflict.data import fashion_mnist_data  # pylint: disable=g-import-not-at-top
  try:
    fashion_mnist_data.find_dir()
  except FileNotFoundError:
    pytest.skip('Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)')
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.benchmark', *_FASHION_MNIST, '--epochs=1',
                               f'--output_dir={tmp_path}', token=token)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  with open(tmp_path / 'benchmark' / 'runs.csv') as f:
    rows = list(csv.DictReader(f))
  assert sorted(r['method'] for r in rows) == ['fedavg', 'fedgh']
  assert all(r['model'] == 'small_mlp' and float(r['final_accuracy']) > 0.1 for r in rows)


def test_report_only_and_results_md_from_the_files_on_disk(tmp_path, capsys):
  from tests.experiments.benchmarking import test_report  # pylint: disable=g-import-not-at-top
  test_report._write_benchmark(str(tmp_path / 'unit'))  # pylint: disable=protected-access
  results_md = tmp_path / 'RESULTS.md'
  with flagsaver.as_parsed(report_only='true', output_dir=str(tmp_path), experiment_name='unit',
                           results_md=str(results_md), methods='fedavg,fedgh,fedld',
                           regimes='digits:iid,digits:#C=2'):
    benchmark.main(['benchmark'])
  out = capsys.readouterr().out
  assert f'report: {tmp_path / "unit" / "report.md"}' in out
  assert (tmp_path / 'unit' / 'report.md').stat().st_size > 0
  text = results_md.read_text()
  assert '- Command: `python -m experiments.benchmark ' in text and '- Machine: ' in text
  assert test_report.tables_not_in(str(results_md)) == []
  assert (tmp_path / 'docs' / 'results' / 'runs.csv').exists()
  with flagsaver.as_parsed(report_only='true', output_dir=str(tmp_path / 'none'),
                           models='synthetic:mlp'):   # FedDecorr, a default method, needs it
    with conftest.flag_error('--output_dir=.*none: --report_only needs an existing benchmark'):
      benchmark.main(['benchmark'])
  runs_csv = tmp_path / 'unit' / 'runs.csv'
  text = runs_csv.read_text()
  for cut in (len(text) // 2, len(text.splitlines()[0]) // 2):   # a row, the header cut short
    runs_csv.write_text(text[:cut])
    with flagsaver.as_parsed(report_only='true', output_dir=str(tmp_path),
                             experiment_name='unit', methods='fedavg,fedgh,fedld',
                             regimes='digits:iid,digits:#C=2'):
      with pytest.raises(cli.Failure, match=r'runs.csv is damaged \(.*\): it was cut short or '
                         'edited; run the same command without --report_only: it rebuilds '
                         'runs.csv'):
        benchmark.main(['benchmark'])


@pytest.mark.parametrize('stop, first_words', [
    (KeyboardInterrupt, 'interrupted'), (interrupts.Terminated, 'terminated (SIGTERM)'),
    (interrupts.OutputClosed, 'standard output closed')])
def test_a_stopped_benchmark_says_what_it_keeps_in_its_own_words(tmp_path, monkeypatch, stop,
                                                                  first_words):
  from experiments.benchmarking import grid  # pylint: disable=g-import-not-at-top
  root = tmp_path / 'smoke'
  for finished in ('runs/a/E1/fedavg/seed0', 'tuning/a/E1/fedgh/lr/seed9'):
    (root / finished).mkdir(parents=True)
    (root / finished / 'result.json').write_text('{}')
  (root / 'runs/a/E1/fedgh/seed0').mkdir(parents=True)   # the run in progress

  def stopped(config, **kwargs):
    raise stop('fedgh: interrupted after round 2 of 4; no checkpoint is kept '
               '(--checkpoint_every=0), so a rerun starts over')

  monkeypatch.setattr(grid, 'run_benchmark', stopped)
  with flagsaver.as_parsed(preset='smoke', output_dir=str(tmp_path)):
    with pytest.raises(stop) as info:
      benchmark.main(['benchmark'])
  assert str(info.value) == (
      f'{first_words}: the 2 finished runs under {root} are kept; a run in progress is not '
      'and starts over: rerun the same command to run only what is not finished')
  assert 'checkpoint_every' not in str(info.value)


def test_a_presets_grids_are_dropped_with_notune_and_given_ones_refused():
  config = _paper_config('real_data', leaf_dir='/data/shakespeare', tune='false')
  assert config.dataset_settings == {'leaf_shakespeare': {}, 'digits': {'rounds': 150}}
  with flagsaver.as_parsed(regimes='digits:iid', methods='fedavg', tune='false',
                           dataset_settings='digits.client_lr_grid=0.1/0.3'):
    with conftest.flag_error(re.escape('--dataset_settings must be an entry of rounds with '
                                       '--notune')):
      benchmark.config_from_flags()


def test_the_best_of_baselines_default_reaches_the_config_as_names():
  # A tuple setting's flag is a list flag: its default must reach the config as the names.
  config = _paper_config('real_data', leaf_dir='/data/shakespeare')
  assert config.best_of == config_lib.BASELINES
  assert _paper_config('real_data', leaf_dir='/data/shakespeare',
                       best_of='fedavg,scaffold').best_of == ('fedavg', 'scaffold')


def test_real_data_tunes_each_regime_on_itself_at_its_pilots_rounds():
  config = _paper_config('real_data', leaf_dir='/data/shakespeare')
  assert presets.SHAKESPEARE_REGIME == 'leaf_shakespeare:natural(max=64,test=150)@100'
  assert config.primary_regimes == ('fashion_mnist:dir(0.1)@100', 'fashion_mnist:#C=2@100',
                                    presets.SHAKESPEARE_REGIME)
  assert config.regimes == config.primary_regimes + ('digits:dir(0.1)',)   # sanity: outside
  assert config.dataset_settings == {'leaf_shakespeare': {'client_lr_grid': (0.3, 1.0, 3.0)},
                                     'digits': {'rounds': 150}}
  made = plan.make(config)
  assert {d: s.rounds for d, s in made.datasets.items()} == {
      'fashion_mnist': 200, 'leaf_shakespeare': 200, 'digits': 150}
  assert all(s.tuned_on == {r: r for r in s.regimes} for s in made.datasets.values())
  shakespeare = made.datasets['leaf_shakespeare']
  assert shakespeare.client_lr_grid == (0.3, 1.0, 3.0)
  assert shakespeare.server_lr_grid == config.server_lr_grid == (0.5, 1.0, 2.0)
  assert (config.last_k, config.primary_statistic) == (20, 'last_k_accuracy')
  assert config.family_methods == ('fedgh', 'fedmgc', 'fedga', 'fedld', 'fed_corrective')
  # config.json records it where the report reads it: family.json names 5 x 5 x 3 members.
  recorded = config_lib.flat_settings(dict(config_lib.as_dict(config),
                                           plan=made.description))
  assert recorded['family_methods'] == list(config.family_methods)
  assert len(results.family_members(recorded)['members']) == 75
  committed = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'results',
                           'family.json')
  with open(committed) as f:   # the family named before the grid's runs is the preset's
    assert json.load(f) == json.loads(json.dumps(results.family_members(recorded)))
  # docs/experiments.md: the paired sd that detects 0.02 at 10 seeds, 180 members or 75.
  for members, sd in ((180, 0.009), (75, 0.010)):
    found = stats.minimal_detectable_difference(sd, 10, alpha=0.05 / members, power=0.8)
    assert 0.0195 <= found <= 0.0205, (members, found)
  assert config.vary_partition and config.edge_steps == 3
  assert len(config.tuning_seeds) == 3 and len(config.report_seeds) == 10


def test_the_summary_line_says_the_build_time_is_summed_over_workers(tmp_path, monkeypatch,
                                                                       capsys):
  from experiments.benchmarking import grid  # pylint: disable=g-import-not-at-top
  outcome = dict(runs_done=8, runs_skipped=0, processes_built=4, build_seconds=46.0,
                 wall_seconds=44.0, workers=2, failures=[], report='report.md',
                 incomplete=['fedavg on digits:#C=2@8, E = 1'])
  monkeypatch.setattr(grid, 'run_benchmark', lambda config, **kwargs: outcome)
  with flagsaver.as_parsed(preset='smoke', output_dir=str(tmp_path)):
    benchmark.main(['benchmark'])
  out = capsys.readouterr().out
  assert ('4 learning processes built in 46 s (summed over 2 workers); 44 s in all' in out), out
  assert ('incomplete searches (no choice, their reporting runs not run): fedavg on '
          'digits:#C=2@8, E = 1; the same command completes them') in out


@pytest.mark.parametrize('module', ['experiments.benchmark', 'experiments.train',
                                    'experiments.compare'])
def test_help_exits_0(module):
  result = conftest.run_binary(module, '--help', token=uuid.uuid4().hex, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '--helpfull' in result.stdout

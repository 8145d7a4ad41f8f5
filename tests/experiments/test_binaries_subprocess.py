"""The binaries as processes, as a user runs them.

* Every bad input ends before any TFF work in one line on stderr naming the flag and the value,
  exit status 1 or 2, no traceback, and no TFF worker left; so do parse errors and --help.
* A run killed with SIGKILL after its 3rd round resumes at round 4 on rerun (the default flags
  save every round), and its metrics equal an uninterrupted run's.
* Ctrl-C and SIGTERM end a run with one line saying what was saved, and leave no worker.
"""

import concurrent.futures
import os
import re
import signal
import subprocess
import uuid

from absl.testing import flagsaver
import pytest

from experiments import train
from tests import conftest as root_conftest
from tests.data import leaf_fixtures
from tests.experiments import conftest
from tff_conflict.simulation import metrics as metrics_lib

# Tiny runs: a few clients of scikit-learn digits, softmax regression.
_TINY = ('--num_clients=6', '--clients_per_round=3', '--model=logistic_regression',
         '--client_batch_size=32')


def _unwritable_dir(tmp_path):
  if os.geteuid() != 0:
    locked = tmp_path / 'locked'
    locked.mkdir(mode=0o500)
    return str(locked / 'results')
  if not os.path.isdir('/sys'):
    pytest.skip('needs /sys (a file system root cannot write to)')
  return '/sys/tff_conflict_results'


def _blocked_dir(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('in the way\n')
  return str(blocker / 'results')


# (case, flags besides --output_dir, what the one line must contain, exit status)
_BAD_INPUTS = [
    ('emnist without its file', lambda tmp: ['--dataset=emnist', f'--cache_dir={tmp}/empty'],
     ['--cache_dir=', 'empty: Federated EMNIST needs', 'emnist_all.sqlite'], 2),
    ('client learning rate inf', lambda tmp: ['--client_learning_rate=inf'],
     ['--client_learning_rate must be a finite number > 0, got inf'], 2),
    ('server learning rate inf', lambda tmp: ['--server_learning_rate=inf'],
     ['--server_learning_rate must be a finite number > 0, got inf'], 2),
    ('alpha nan', lambda tmp: ['--alpha=nan'], ['--alpha must be a finite number > 0, got nan'],
     2),
    ('more clients than digits has', lambda tmp: ['--num_clients=1000'],
     ['--num_clients must be at most 359 (one held-out example per client), got 1000'], 2),
    ('selection ratio 2', lambda tmp: ['--selection_ratio=2'],
     ['--selection_ratio must be a number in (0, 1], got 2.0'], 2),
    ('focal gamma nan', lambda tmp: ['--focal_gamma=nan'],
     ['--focal_gamma must be a finite number >= 0, got nan'], 2),
    ('unwritable output dir', lambda tmp: [f'--output_dir={_unwritable_dir(tmp)}'],
     ['--output_dir=', 'cannot write the results directory'], 2),
    ('output dir blocked by a file', lambda tmp: [f'--output_dir={_blocked_dir(tmp)}'],
     ['--output_dir=', 'Not a directory'], 2),
    ('zero rounds', lambda tmp: ['--rounds=0'], ['--rounds must be an integer >= 1, got 0'], 2),
    ('unknown algorithm', lambda tmp: ['--algorithm=bogus'], ['--algorithm=bogus'], 2),
    ('a positional argument', lambda tmp: ['fedgh'], ["unexpected arguments ['fedgh']"], 2),
    ('leaf without its files', lambda tmp: ['--dataset=leaf', f'--leaf_dir={tmp}/no_leaf'],
     ['--leaf_dir=', "no_leaf: LEAF root '", "no_leaf' does not exist"], 2),
    ('fashion_mnist without its files',
     lambda tmp: ['--dataset=fashion_mnist', f'--data_dir={tmp}/no_fm'],
     ['--data_dir=', "no_fm: Fashion-MNIST is not in data_dir='",
      '`apt-get install dataset-fashion-mnist`'], 2),
    ('momentum with adam', lambda tmp: ['--client_optimizer=adam', '--client_momentum=0.9'],
     ['--client_momentum must be 0 with optimizer', 'got 0.9'], 2),
    ('feddecorr on softmax regression', lambda tmp: ['--algorithm=feddecorr'],
     ['--model=logistic_regression: --algorithm=feddecorr cannot train it', 'no gradient'], 2),
    ('scaffold with momentum', lambda tmp: ['--algorithm=scaffold', '--client_momentum=0.9'],
     ['train: --client_momentum=0.9: not with --algorithm=scaffold: the client optimizer must '
      'be plain SGD'], 2),
    ('fednova with adam', lambda tmp: ['--algorithm=fednova', '--client_optimizer=adam'],
     ['train: --client_optimizer=adam: not with --algorithm=fednova:', 'got Adam, whose '
      'normalisation is unknown'], 2),
]


def _command_line(tmp_path, make_flags):
  given = make_flags(tmp_path)
  names = {f.split('=')[0] for f in given}
  base = [f for f in _TINY if f.split('=')[0] not in names]
  if '--output_dir' not in names:
    base.append(f'--output_dir={tmp_path}/results')
  return ['--rounds=2', *base, *given]


# One case of each kind runs by default (an absl validator, a check across flags, the library
# refusing a value or a method's settings, the data missing, the disk refusing, a stray
# argument); the others are slow.
_ONE_OF_EACH_KIND = ('emnist without its file', 'zero rounds', 'momentum with adam',
                     'scaffold with momentum', 'unknown algorithm', 'more clients than digits has',
                     'unwritable output dir', 'a positional argument')
assert set(_ONE_OF_EACH_KIND) <= {case[0] for case in _BAD_INPUTS}


@pytest.fixture(scope='module')
def bad_input_runs(request, tmp_path_factory):
  """The selected bad inputs run through `python -m experiments.train`, a few at a time."""
  selected = {item.callspec.params['case'] for item in request.session.items
              if item.originalname == 'test_a_bad_input_ends_in_one_line_naming_the_flag'}
  cases = [case for case in _BAD_INPUTS if case[0] in selected]

  def run(case_and_dir):
    (name, make_flags, _, _), tmp_path = case_and_dir
    token = uuid.uuid4().hex
    result = conftest.run_binary('experiments.train', *_command_line(tmp_path, make_flags),
                                 token=token, timeout=300)
    return name, result, conftest.workers_with_token(token)

  dirs = [tmp_path_factory.mktemp('bad') for _ in cases]  # here: mktemp is not threadsafe
  with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
    return {name: (result, workers) for name, result, workers in pool.map(run, zip(cases, dirs))}


@pytest.mark.parametrize('case, expected, status', [
    pytest.param(c[0], c[2], c[3], marks=() if c[0] in _ONE_OF_EACH_KIND else pytest.mark.slow)
    for c in _BAD_INPUTS])
def test_a_bad_input_ends_in_one_line_naming_the_flag(bad_input_runs, case, expected, status):
  result, workers = bad_input_runs[case]
  output = result.stdout + result.stderr
  lines = result.stderr.splitlines()
  assert 'Traceback' not in output, output[-3000:]
  assert result.returncode == status, output[-3000:]
  assert len(lines) == 1 and lines[0].startswith('train: '), result.stderr
  for text in expected:
    assert text in lines[0], lines[0]
  assert result.stdout == ''  # nothing started: no header line, no progress
  assert 'object at 0x' not in lines[0] and 'optimizer_fn' not in lines[0], lines[0]
  assert workers == []


@pytest.mark.parametrize('flag', [pytest.param('--help', marks=pytest.mark.slow), '--helpfull'])
def test_help_ends_without_stray_output(tmp_path, flag):
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.train', flag, token=token, timeout=300)
  output = result.stdout + result.stderr
  assert 'Traceback' not in output and 'Exception ignored' not in output, output[-3000:]
  assert '--algorithm' in output  # the binary's own flags; --helpfull adds the shared ones
  if flag == '--helpfull':
    assert '--checkpoint_every' in output
    assert re.search(r"--runtime: <inprocess\|cpp>:.*?\(default: 'inprocess'\)", output, re.S)
  assert conftest.workers_with_token(token) == []


def _rows_without_timing(path):
  return conftest.non_timing(metrics_lib.read_csv(str(path)))


def test_killed_after_round_3_resumes_after_its_last_checkpoint_as_an_uninterrupted_run(
    tmp_path):
  # Default checkpoint flags (every round); TFF's C++ runtime, whose worker must not outlive the
  # kill. The kill follows round 3's progress line, but the binary runs on while this test reads
  # the pipe: on a loaded machine it may finish more rounds first. A round's checkpoint is saved
  # before its line is printed, so the rerun resumes from the last round printed or the next.
  rounds = 60
  flags = [f'--rounds={rounds}', *_TINY, '--seed=2', '--runtime=cpp']
  token = uuid.uuid4().hex
  command = conftest.binary_command('experiments.train', *flags, f'--output_dir={tmp_path}',
                                    '--experiment_name=run')
  proc = subprocess.Popen(command, cwd=conftest.REPO_ROOT, env=conftest.binary_env(token),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  seen = []
  try:
    for line in proc.stdout:  # plain progress lines: stdout is not a terminal
      seen.append(line)
      if re.match(rf'fedavg round +3/{rounds} ', line):
        proc.kill()  # SIGKILL: no Python code runs
        break
    seen += proc.stdout.readlines()   # what it printed before the kill landed
    proc.wait(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert proc.returncode == -signal.SIGKILL, ''.join(seen)[-3000:]
  assert root_conftest.workers_left(token) == []  # the kernel ended the worker
  printed = max(int(m[1]) for m in (re.match(rf'fedavg round +(\d+)/{rounds} ', l) for l in seen)
                if m)
  assert 3 <= printed < rounds, printed

  rerun = subprocess.run(command, cwd=conftest.REPO_ROOT, env=conftest.binary_env(token),
                         capture_output=True, text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert 'Traceback' not in rerun.stdout + rerun.stderr
  resumed_at = re.search(rf'fedavg: resuming from round (\d+): running rounds (\d+)-{rounds} of '
                         rf'{rounds}', rerun.stdout)
  assert resumed_at, rerun.stdout
  done = int(resumed_at[1])
  assert done in (printed, printed + 1) and int(resumed_at[2]) == done + 1, (printed, done)
  progress = [l for l in rerun.stdout.splitlines() if l.startswith('fedavg round')]
  assert re.match(rf'fedavg round +{done + 1}/{rounds} ', progress[0]), rerun.stdout
  assert conftest.workers_with_token(token) == []

  with flagsaver.as_parsed(**dict(f[2:].split('=', 1) for f in flags),
                           output_dir=str(tmp_path), experiment_name='uninterrupted',
                           progress='false'):
    train.main(['train'])
  resumed = _rows_without_timing(tmp_path / 'run' / 'metrics.csv')
  uninterrupted = _rows_without_timing(tmp_path / 'uninterrupted' / 'metrics.csv')
  assert [r['round_num'] for r in resumed] == list(range(1, rounds + 1))
  assert resumed == uninterrupted


def _after_round_2(tmp_path, token, act, *extra_flags, stderr=subprocess.STDOUT):
  """Runs train for 500 rounds, calls `act(process)` once round 2 is done, and waits for its
  end; returns (process, stdout read until then, the rest of stdout, stderr)."""
  proc = subprocess.Popen(
      conftest.binary_command('experiments.train', '--rounds=500', *_TINY, *extra_flags,
                              f'--output_dir={tmp_path}'),
      cwd=conftest.REPO_ROOT, env=conftest.binary_env(token), stdout=subprocess.PIPE,
      stderr=stderr, text=True)
  seen = []
  try:
    for line in proc.stdout:
      seen.append(line)
      if re.match(r'fedavg round +2/500 ', line):
        act(proc)
        break
    rest, errors = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  return proc, ''.join(seen), rest or '', errors or ''


def _interrupt(tmp_path, sig, *extra_flags):
  """Runs train, sends `sig` once round 2 is done; returns (process, its output, token)."""
  token = uuid.uuid4().hex
  proc, seen, rest, _ = _after_round_2(tmp_path, token, lambda p: p.send_signal(sig),
                                       *extra_flags)
  root_conftest.workers_left(token)   # waits for the workers to end
  return proc, seen + rest, token


def test_ctrl_c_ends_in_one_line_and_leaves_no_worker(tmp_path):
  proc, output, token = _interrupt(tmp_path, signal.SIGINT, '--runtime=cpp')
  assert proc.returncode == 130, output[-3000:]
  assert 'Traceback' not in output, output[-3000:]
  last = output.splitlines()[-1]
  assert last.startswith('train: fedavg: interrupted after round '), last
  assert 'rerun the same command to resume from it' in last
  assert conftest.workers_with_token(token) == []


def test_a_closed_output_pipe_ends_in_one_line_with_the_last_round_saved(tmp_path):
  # `train ... | head -3`: the reader goes away; the next progress line finds the pipe closed.
  token = uuid.uuid4().hex
  proc, _, _, errors = _after_round_2(tmp_path, token, lambda p: p.stdout.close(),
                                      '--checkpoint_every=100', stderr=subprocess.PIPE)
  assert proc.returncode == 128 + signal.SIGPIPE, errors[-3000:]
  lines = errors.splitlines()
  assert len(lines) == 1, errors[-3000:]
  match = re.fullmatch(r'train: fedavg: standard output closed after round (\d+) of 500; the '
                       r'state after round \1 is saved in (.*): rerun the same command to '
                       r'resume from it', lines[0])
  assert match, lines[0]
  finished, run_dir = int(match[1]), tmp_path / 'digits_fedavg_seed0'
  assert finished >= 2 and match[2] == str(run_dir / 'checkpoints')
  assert (run_dir / 'checkpoints' / f'round_{finished}.npz').exists()
  assert len(metrics_lib.read_csv(str(run_dir / 'metrics.csv'))) == finished
  assert conftest.workers_with_token(token) == []


@pytest.mark.slow
def test_sigterm_saves_the_last_finished_round_before_exiting(tmp_path):
  proc, output, token = _interrupt(tmp_path, signal.SIGTERM, '--checkpoint_every=100')
  assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
  assert 'Traceback' not in output, output[-3000:]
  last = output.splitlines()[-1]
  finished = int(last.split('interrupted after round ')[1].split()[0])
  assert finished >= 2
  assert f'the state after round {finished} is saved' in last, last
  checkpoint = tmp_path / 'digits_fedavg_seed0' / 'checkpoints' / f'round_{finished}.npz'
  assert checkpoint.exists()
  assert conftest.workers_with_token(token) == []


@pytest.mark.slow
def test_compare_finishes_and_leaves_no_worker(tmp_path):
  token = uuid.uuid4().hex
  result = conftest.run_binary(
      'experiments.compare', '--algorithms=fedavg,fedld', '--rounds=2', '--num_clients=6',
      '--clients_per_round=3', '--model=logistic_regression', f'--output_dir={tmp_path}',
      token=token)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '| fedld |' in result.stdout
  assert conftest.workers_with_token(token) == []


def _train_on_leaf(tmp_path, make, name):
  make(str(tmp_path / 'leaf'))
  token = uuid.uuid4().hex
  result = conftest.run_binary(
      'experiments.train', '--dataset=leaf', f'--leaf_dir={tmp_path / "leaf" / "data" / name}',
      '--rounds=2', '--clients_per_round=2', '--noprogress', f'--output_dir={tmp_path / "out"}',
      token=token)
  assert result.returncode == 0, result.stderr[-3000:]
  assert conftest.workers_with_token(token) == []
  return result.stdout


def test_train_on_leaf_synthetic_finishes_and_leaves_no_worker(tmp_path):
  out = _train_on_leaf(tmp_path, leaf_fixtures.synthetic, 'synthetic')
  assert 'fedavg on leaf (4 clients, 2 per round, model logistic_regression)' in out
  assert 'round 2: test_accuracy' in out


@pytest.mark.slow
@pytest.mark.parametrize('make, name, model', [
    (leaf_fixtures.femnist, 'femnist', 'leaf_femnist_cnn'),
    (leaf_fixtures.celeba, 'celeba', 'leaf_celeba_cnn'),
])
def test_train_on_leaf_images_with_leafs_models(tmp_path, make, name, model):
  out = _train_on_leaf(tmp_path, make, name)
  assert f'model {model})' in out and 'round 2: test_accuracy' in out


def test_compare_refuses_a_bad_flag_in_one_line(tmp_path):
  token = uuid.uuid4().hex
  result = conftest.run_binary('experiments.compare', '--algorithms=fedavg,fedavg',
                               f'--output_dir={tmp_path}', token=token, timeout=300)
  assert result.returncode == 2 and 'Traceback' not in result.stdout + result.stderr
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith('compare: --algorithms must be a non-empty '
                                                 'list of distinct algorithms of [')
  assert lines[0].endswith("got ['fedavg', 'fedavg']")
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  assert all(f"'{name}'" in lines[0] for name in learning.ALGORITHMS)

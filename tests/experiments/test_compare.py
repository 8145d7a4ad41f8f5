"""experiments.compare: the table's numbers from hand-made rows, presets, and a 2-round smoke
run of two algorithms on tiny digits data."""

from absl import flags
from absl.testing import flagsaver
import pytest

from experiments import compare
from tff_conflict.simulation import training_loop
from tests.experiments import conftest
from tff_conflict.simulation import metrics as metrics_lib

FLAGS = flags.FLAGS


def _rows(accuracies, f1=0.5, times=(9.0, 1.0, 3.0)):
  return [{'round_num': r + 1, 'test_accuracy': a, 'test_macro_f1': None if a is None else f1,
           'round_time_s': times[r % len(times)]} for r, a in enumerate(accuracies)]


def test_summary_and_table_from_hand_made_rows():
  seed0 = _rows([0.5, None, 0.9], f1=0.4)
  seed1 = _rows([0.6, 0.85, 0.7], f1=0.6)
  summary = compare.summarize([seed0, seed1], target_accuracy=0.8)
  assert summary['final_accuracy'] == [0.9, 0.7]
  assert summary['last_k_accuracy'] == pytest.approx([0.7, (0.6 + 0.85 + 0.7) / 3])
  assert summary['final_macro_f1'] == [0.4, 0.6]
  assert summary['rounds_to_target'] == [3, 2]
  assert summary['seconds_per_round'] == [2.0, 2.0]  # rounds >= 2 only
  never = compare.summarize([_rows([0.1, 0.2, 0.3])], target_accuracy=0.8)
  table = compare.markdown_table({'fedgh': summary, 'fedavg': never}, 0.8)
  lines = table.splitlines()
  assert lines[0] == ('| algorithm | test accuracy, mean of last 5 rounds | final test accuracy '
                      '| final macro-F1 | first round at 0.8 test accuracy | mean round time (s) '
                      '| diverged / collapsed |')
  # ± the sample standard deviation (ddof=1) over the 2 seeds, as the benchmark's tables.
  assert lines[2] == ('| fedgh | 0.7083 ± 0.0118 | 0.8000 ± 0.1414 | 0.5000 ± 0.1414 | '
                      '2.5 (2/2 seeds) | 2.00 | no |')
  assert lines[3] == '| fedavg | 0.2000 | 0.3000 | 0.5000 | not reached | 2.00 | no |'


def test_diverged_and_collapsed_runs_are_flagged_as_the_benchmark_does():
  healthy = _rows([0.5, 0.8, 0.9])
  at_chance = _rows([0.1, 0.1003, 0.1003])             # below COLLAPSE_FACTOR x 1/10
  diverged = _rows([0.4, 0.5, 0.3])
  diverged[1]['test_loss'] = float('nan')
  one_class = [[0] * 10 for _ in range(10)]
  for row in one_class:
    row[3] = 5                                          # every example predicted as class 3
  summaries = {
      'fedavg': compare.summarize([healthy, healthy], 0.8, num_classes=10),
      'fedgh': compare.summarize([healthy, at_chance], 0.8, num_classes=10),
      'fedmgc': compare.summarize([diverged], 0.8, num_classes=10),
      'fedga': compare.summarize([healthy, healthy, healthy], 0.8, num_classes=10,
                                 confusions=[None, one_class]),
  }
  assert summaries['fedgh']['collapsed'] == [False, True]
  assert summaries['fedmgc']['diverged_round'] == [2]
  # From its divergence on, a run counts as chance (runs.summarize): not its raw 0.3.
  assert summaries['fedmgc']['final_accuracy'] == [0.1]
  rows = {line.split(' | ')[0][2:]: line.rsplit(' | ', 1)[1][:-2]
          for line in compare.markdown_table(summaries, 0.8).splitlines()[2:]}
  assert rows == {'fedavg': 'no', 'fedgh': 'collapsed (1/2 seeds)',
                  'fedmgc': 'diverged at round 2, collapsed', 'fedga': 'collapsed (1/3 seeds)'}


def test_preset_fills_only_flags_not_given():
  with flagsaver.as_parsed(preset='readme', rounds='3'):
    compare.apply_preset()
    assert FLAGS.rounds == 3
    assert FLAGS.num_clients == 20 and FLAGS.clients_per_round == 10 and FLAGS.alpha == 0.1
    assert FLAGS.algorithms == ['fedavg', 'fedprox', 'fedgh', 'fedmgc', 'fedga', 'fedld',
                                'fed_corrective']
    assert FLAGS.runtime == 'inprocess'  # `make run` (the readme preset) uses the default


def test_unknown_preset_is_refused():
  with flagsaver.as_parsed(preset='smoke'):
    with conftest.flag_error(r"--preset must be one of 'readme', got 'smoke'"):
      compare.apply_preset()


@pytest.mark.parametrize('flag_values, message', [
    (dict(algorithms='fedavg,sgd'), '--algorithms must be a non-empty list'),
    (dict(algorithms='fedavg,fedavg'), '--algorithms must be a non-empty list of distinct'),
    (dict(seeds='0,x'), r"--seeds must be integers, got \['0', 'x'\]"),
    (dict(seeds='0,-1'), r'--seeds must be distinct non-negative integers, got \[0, -1\]'),
    (dict(target_accuracy='1.5'), r'--target_accuracy must be a number in \(0, 1\], got 1.5'),
    (dict(algorithms='fedavg,fedgh', focal_gamma='2'),
     '--focal_gamma=2.0: does not apply to --algorithm=fedavg, --algorithm=fedgh'),
    (dict(algorithms='fedavg,fedgh', proximal_strength='0.5'),   # as train and the benchmark
     '--proximal_strength=0.5: does not apply to --algorithm=fedavg, --algorithm=fedgh'),
    (dict(algorithms='fedavg,scaffold', client_momentum='0.9'),   # the library's check
     '^--client_momentum=0.9: not with --algorithm=scaffold: the client optimizer must be plain '
     'SGD'),
    (dict(algorithms='fedavg,fednova', client_weighting='loss'),
     '^--client_weighting=loss: not with --algorithm=fednova: FedNova'),
])
def test_cross_flag_checks(flag_values, message):
  with flagsaver.as_parsed(**flag_values):
    with conftest.flag_error(message):
      compare.check_flags()


def test_two_algorithms_two_rounds_on_tiny_digits(tmp_path, capfd, no_tff_runtime):
  # In-process: no round, evaluation or checkpoint goes through TFF's runtime (no worker_binary).
  with flagsaver.as_parsed(
      algorithms='fedavg,fedgh', dataset='digits', num_clients='6', clients_per_round='3',
      model='logistic_regression', rounds='2', client_batch_size='32',
      output_dir=str(tmp_path), experiment_name='cmp', target_accuracy='0.05',
      runtime='inprocess', fedgh_order='index'):  # train's smoke test covers the C++ runtime
    compare.main(['compare'])
  out = capfd.readouterr().out
  root = tmp_path / 'cmp'
  assert '| fedavg |' in out and '| fedgh |' in out
  assert '| diverged / collapsed |' in out
  assert f'plot: {root / "accuracy.png"}' in out
  assert f'plot: {root / "conflict_fraction.png"}' in out
  for name in ('summary.md', 'accuracy.png', 'conflict_fraction.png', 'hparams.csv'):
    assert (root / name).stat().st_size > 0
  runs = {alg: metrics_lib.read_csv(str(root / alg / 'seed0' / 'metrics.csv'))
          for alg in ('fedavg', 'fedgh')}
  assert [r['round_num'] for r in runs['fedgh']] == [1, 2]
  # Same clients per round: the same number of training examples in each round.
  examples = {alg: [r['client_work/train/num_examples'] for r in rows]
              for alg, rows in runs.items()}
  assert examples['fedavg'] == examples['fedgh']
  # Same initial model: round 1 starts from the same weights, so the first-round training loss
  # (computed during local training of the same clients) is identical for the same client loss.
  assert runs['fedavg'][0]['train_loss'] == runs['fedgh'][0]['train_loss']
  hparams = training_loop.read_hparams(str(root / 'fedgh' / 'seed0' / 'hparams.csv'))
  assert hparams['algorithm'] == 'fedgh' and hparams['seed'] == '0'
  assert hparams['fedgh_order'] == 'index'   # a method flag reaches the method's runs
  assert 'algorithms' not in hparams


def test_a_rerun_with_fewer_rounds_is_refused_before_any_work(tmp_path, capfd):
  run_dir = tmp_path / 'cmp' / 'fedgh' / 'seed1'
  (run_dir / 'checkpoints').mkdir(parents=True)
  metrics = run_dir / 'metrics.csv'
  metrics.write_text('round_num,train_loss\n' + ''.join(f'{r},0.5\n' for r in range(1, 7)))
  for r in (4, 5, 6):
    (run_dir / 'checkpoints' / f'round_{r}.npz').write_bytes(b'saved')
  before = {p: p.read_bytes() for p in sorted(tmp_path.rglob('*')) if p.is_file()}
  with flagsaver.as_parsed(algorithms='fedavg,fedgh', seeds='0,1', rounds='2',
                           output_dir=str(tmp_path), experiment_name='cmp'):
    experiment, algorithms, seeds, target = compare.check_flags()
    with pytest.raises(training_loop.ResumeError, match=f'{run_dir} holds a run of 6 rounds '
                       r'.*rounds: 6 -> 2'):
      compare.run_comparison(experiment, algorithms, seeds, target)
  assert capfd.readouterr().out == ''
  assert {p: p.read_bytes() for p in sorted(tmp_path.rglob('*')) if p.is_file()} == before


@pytest.mark.slow
def test_local_workers_give_the_inline_comparison(tmp_path):
  tables = {}
  for executor in ('inline', 'local'):
    extra = ['--executor=local', '--workers=2'] if executor == 'local' else []
    result = conftest.run_binary(
        'experiments.compare', '--algorithms=fedavg,fedgh,scaffold', '--seeds=0,1',
        '--num_clients=6', '--clients_per_round=3', '--model=logistic_regression', '--rounds=2',
        '--client_batch_size=32', '--noprogress', f'--output_dir={tmp_path / executor}', *extra,
        token='compare-executors')
    assert result.returncode == 0, result.stderr[-3000:]
    summary = (tmp_path / executor / 'compare_digits' / 'summary.md').read_text().splitlines()
    tables[executor] = [l.rsplit('|', 3)[0] for l in summary if l.startswith('| ')]   # no times
    for alg in ('fedavg', 'fedgh', 'scaffold'):
      for seed in (0, 1):
        rows = metrics_lib.read_csv(str(tmp_path / executor / 'compare_digits' / alg / f'seed{seed}'
                                        / 'metrics.csv'))
        tables[executor].append([(r['round_num'], r['test_accuracy'], r['train_loss'])
                                 for r in rows])
  assert tables['local'] == tables['inline']

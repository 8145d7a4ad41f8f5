"""runs.csv read, compared and summarized: a damaged file, paired comparisons and their verdicts,
the columns a reporting run adds from its metrics rows."""

import pytest

from experiments.benchmarking import results
from experiments.benchmarking import runs
from tests.experiments.benchmarking import report_rows


def _rows(accuracies, losses=None, **columns):
  rows = []
  for k, acc in enumerate(accuracies):
    row = {'round_num': k + 1, 'test_accuracy': acc,
           'train_loss': None if losses is None else losses[k]}
    for name, values in columns.items():
      row[name] = values[k]
    rows.append(row)
  return rows


def test_summarize_run():
  rows = _rows([0.5, 0.8, 0.7, None], [2.0, 1.0, 1.4, 1.2],
               test_rare_pair_error=[None, 0.1, 0.3, None], test_mean_logit=[0.1, 2.0, 3.0, None],
               **{'aggregator/mean_update_norm': [0.5, 0.7, 0.6, 0.8],
                  'aggregator/max_mean_update_norm': [9.0, 9.0, 9.0, 9.0]})
  out = results.summarize_run(rows)
  assert out['accuracy_drop'] == pytest.approx(0.1)   # best 0.8 - final 0.7
  assert out['train_loss_rise'] == pytest.approx(0.4)
  assert out['final_rare_pair_error'] == 0.3           # the last evaluated round's
  assert out['final_mean_logit'] == 3.0
  assert out['final_common_pair_error'] is None         # not measured
  assert out['mean_update_norm'] == pytest.approx(0.65)  # not the max_mean_update_norm column
  assert out['final_global_train_loss'] is None and out['tail_global_train_loss'] is None
  with pytest.raises(ValueError, match='no test_accuracy'):
    results.summarize_run(_rows([None]))
  # A run that diverged in its first round is recorded, not refused.
  nan = results.summarize_run(_rows([float('nan'), float('nan')], [float('nan')] * 2))
  assert nan['accuracy_drop'] is None and nan['train_loss_rise'] is None
  with pytest.raises(ValueError, match='at least one'):
    results.summarize_run([])


def test_summarize_run_global_training_loss():
  losses = [3.0, 2.0, 2.5, 1.0, 1.5, 1.2, 1.1, 0.9]
  out = results.summarize_run(_rows([0.5] * 8, global_train_loss=losses))
  assert out['final_global_train_loss'] == 0.9
  assert out['tail_global_train_loss'] == pytest.approx((1.1 + 0.9) / 2)  # last 8 // 4 rounds
  assert out['global_train_loss_rise'] == pytest.approx(0.5)


def test_ties_only_inside_the_equivalence_margin():
  rows = []
  for seed, (a, b) in enumerate([(0.900, 0.901), (0.910, 0.909), (0.920, 0.921), (0.93, 0.93)]):
    for method, value in (('fedavg', a), ('fedgh', b)):
      rows.append({'regime': 'digits:iid', 'dataset': 'digits', 'method': method, 'epochs': 1,
                   'seed': seed, 'last_k_accuracy': value, 'final_accuracy': value})
  c = results.comparisons(rows, report_rows.CONFIG)[('digits:iid', 1, 'fedgh')]
  assert results.verdict(c, 0.01) == 'ties' and results.verdict(c, 0.0005) == 'inconclusive'


@pytest.mark.parametrize('cut, problem', [
    (lambda text: text[:len(text) // 2], r'(in the middle of a line|line \d+ has \d+ of)'),
    (lambda text: text.replace('\n0,', '\n,', 1), 'lacks its regime/method/epochs/seed'),
    (lambda text: 'x' + text[text.index(','):], "header lacks \\['seed'\\]")])
def test_a_damaged_runs_file_is_refused(tmp_path, cut, problem):
  path = str(tmp_path / 'runs.csv')
  rows = [{'regime': 'digits:iid', 'method': 'fedavg', 'epochs': 1, 'seed': s,
           'final_accuracy': 0.5} for s in range(3)]
  results.write_csv(path, rows, ['seed', 'regime', 'method', 'epochs'])
  assert [r['seed'] for r in results.read_runs(path)] == [0, 1, 2]
  with open(path) as f:
    text = f.read()
  with open(path, 'w') as f:
    f.write(cut(text))
  with pytest.raises(results.DamagedRunsFile, match=problem):
    results.read_runs(path)


def test_a_benchmark_without_its_config_is_refused(tmp_path):
  with pytest.raises(results.DamagedRunsFile, match='config.json is missing or damaged'):
    results.load(str(tmp_path))
  (tmp_path / 'config.json').write_text('{"baseline": ')
  with pytest.raises(results.DamagedRunsFile, match='config.json is missing or damaged'):
    results.load(str(tmp_path))


def test_comparisons_against_another_method_are_their_own_holm_family():
  rows = report_rows.rows()
  every = results.comparisons(rows, report_rows.CONFIG)
  some = results.comparisons(rows, report_rows.CONFIG, [('fedgh', 'fedavg'), ('fedld', 'fedgh')])
  for (regime, e, method), d in some.items():
    cell = results.group(rows)[(regime, e)]
    if method == 'fedgh':   # against the baseline: the Results tables' adjustment
      assert str(d) == str(every[(regime, e, method)])   # an identical one's p: NaN in both
    else:                   # fedld - fedgh, Holm over its 3 cells alone
      raw = results.difference(cell, 'fedld', 'fedgh')
      assert d.mean == raw.mean and d.p_value >= raw.p_value
  ps = sorted(results.difference(results.group(rows)[k[:2]], 'fedld', 'fedgh').p_value
              for k in some if k[2] == 'fedld')
  assert len(ps) == 3 and min(d.p_value for k, d in some.items() if k[2] == 'fedld') == (
      pytest.approx(min(1.0, 3 * ps[0])))

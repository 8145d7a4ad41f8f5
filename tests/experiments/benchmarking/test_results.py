"""runs.csv read, compared and summarized: a damaged file, paired comparisons and their verdicts,
the columns a reporting run adds from its metrics rows."""

import os

import numpy as np
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


def _with_baselines():
  """report_rows' runs with scaffold beside them (fedavg + 0.03 in every seed, +- 0.01)."""
  rows = report_rows.rows()
  extra = [dict(r, method='scaffold', algorithm='scaffold',
                last_k_accuracy=r['last_k_accuracy'] + 0.03 + 0.01 * (r['seed'] - 1) ** 2,
                final_accuracy=r['final_accuracy'] + 0.03)
           for r in rows if r['method'] == 'fedavg']
  config = dict(report_rows.CONFIG, methods=['fedavg', 'scaffold', 'fedgh', 'fedld'],
                primary_regimes=['digits:#C=2'])
  return rows + extra, config


def test_the_references_are_the_baseline_and_every_other_baseline_that_ran():
  config = dict(report_rows.CONFIG, best_of=['fedprox', 'fedavg', 'scaffold'])
  assert results.references(config) == ['fedavg']   # neither is among the methods run
  config['methods'] = ['fedavg', 'fedprox', 'scaffold', 'fedgh', 'fedld']
  assert results.references(config) == ['fedavg', 'fedprox', 'scaffold']
  rows, _ = _with_baselines()
  cell = results.group(rows)[('digits:#C=2', 1)]
  assert results.cell_references(cell, config) == ['fedavg', 'scaffold']   # fedprox never ran


def _iut_rows():
  """`_with_baselines` with fedprox (fedavg + 0.05, +- 0.01) and `strong` (fedavg + 0.2,
  +- 0.002) beside them."""
  rows, config = _with_baselines()
  extra = [dict(r, method=m, algorithm=m, last_k_accuracy=r['last_k_accuracy'] + gain
                + noise * (r['seed'] - 1) ** 2)
           for r in rows if r['method'] == 'fedavg'
           for m, gain, noise in (('fedprox', 0.05, 0.01), ('strong', 0.2, 0.002))]
  return rows + extra, dict(config, methods=config['methods'] + ['fedprox', 'strong'])


def test_beats_every_baseline_only_where_it_beats_each_one_holm_over_every_comparison():
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  rows, config = _iut_rows()
  found = results.every_baseline(rows, config)
  # A plain loop: every (method, baseline) of the primary regime, a paired t-test each, Holm
  # over all of them; beats every baseline = beats each; loses = loses to any one.
  cell = results.group(rows)[('digits:#C=2', 1)]
  keys = [(m, b) for m in ('fedgh', 'fedld', 'strong') for b in ('fedavg', 'fedprox', 'scaffold')]
  values = lambda m: [cell[m][s]['last_k_accuracy'] for s in range(3)]
  raw = [scipy_stats.ttest_rel(values(m), values(b)) for m, b in keys]
  adjusted = report_rows.holm_reference([t.pvalue for t in raw])
  words = {}
  for (m, b), t, p in zip(keys, raw, adjusted):
    words.setdefault(m, []).append('beats' if p < 0.05 and t.statistic > 0 else
                                   'loses' if p < 0.05 else 'other')
  for m, per in words.items():
    expected = ('loses to a baseline' if 'loses' in per else 'beats every baseline'
                if all(w == 'beats' for w in per) else 'inconclusive')
    assert found[('digits:#C=2', 1, m)][0] == expected, (m, per)
  assert found[('digits:#C=2', 1, 'strong')][0] == 'beats every baseline'
  assert found[('digits:#C=2', 1, 'fedld')][0] == 'loses to a baseline'
  assert set(found[('digits:#C=2', 1, 'strong')][1]) == {'fedavg', 'fedprox', 'scaffold'}
  assert results.against_every(['beats', 'inconclusive']) == 'inconclusive'
  assert results.against_every(['beats', 'loses']) == 'loses to a baseline'
  assert results.against_every(['ties', 'ties']) == 'ties every baseline'
  assert results.against_every([]) == 'inconclusive'


def test_each_comparison_has_its_own_detectable_difference_at_the_first_holm_level():
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  rows, config = _iut_rows()
  level = results.holm_level(rows, config)
  assert level == pytest.approx(results.ALPHA / 9)
  for (regime, e, m, b), d in results.family(rows, config).items():
    cell = results.group(rows)[(regime, e)]
    diffs = [cell[m][s]['last_k_accuracy'] - cell[b][s]['last_k_accuracy'] for s in range(3)]
    sd = float(np.std(diffs, ddof=1))
    got = results.detectable(d, level)
    # A plain search: the smallest difference (steps of 1e-5 sd) whose noncentral-t power at
    # the Holm level reaches 80%.
    crit = scipy_stats.t.ppf(1 - level / 2, 2)
    power = lambda delta: (scipy_stats.nct.sf(crit, 2, delta * 3 ** 0.5 / sd)
                           + scipy_stats.nct.cdf(-crit, 2, delta * 3 ** 0.5 / sd))
    assert power(got) == pytest.approx(0.8, abs=1e-6) and power(0.99 * got) < 0.8
  assert results.detectable(None, level) is None


def test_the_primary_family_is_every_method_against_both_references_in_its_regimes():
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  rows, config = _with_baselines()
  family = results.family(rows, config)
  # One primary regime (digits:#C=2, E=1), 2 methods (scaffold is a baseline), the 2 baselines
  # that ran.
  assert sorted(family) == [('digits:#C=2', 1, m, b) for m in ('fedgh', 'fedld')
                            for b in ('fedavg', 'scaffold')]
  cell = results.group(rows)[('digits:#C=2', 1)]
  keys = sorted(family)
  raw = [scipy_stats.ttest_rel([cell[m][s]['last_k_accuracy'] for s in range(3)],
                               [cell[b][s]['last_k_accuracy'] for s in range(3)]).pvalue
         for _, _, m, b in keys]
  for key, p in zip(keys, report_rows.holm_reference(raw)):
    assert family[key].p_value == pytest.approx(p) and family[key].family == results.PRIMARY
  assert results.family_size(family) == 4
  assert results.holm_level(rows, config) == pytest.approx(results.ALPHA / 4)
  # Against fedavg the Results tables show the family's p; outside it no test and no words.
  found = results.comparisons(rows, config)
  assert found[('digits:#C=2', 1, 'fedgh')].p_value == family[('digits:#C=2', 1, 'fedgh',
                                                              'fedavg')].p_value
  outside = found[('digits:iid', 1, 'fedgh')]       # digits:iid is not a primary regime
  assert not results.tested(outside) and results.verdict(outside, 0.01) == results.NOT_TESTED
  baseline = found[('digits:#C=2', 1, 'scaffold')]   # a baseline against fedavg
  assert baseline.n == 3 and not results.tested(baseline)
  assert not results.significant(baseline._replace(p_value=0.0))


def test_the_family_file_names_every_member_the_family_tests_before_any_run():
  rows, config = _with_baselines()
  named = results.family_members(config)
  members = {tuple(m) for m in named['members']}
  assert set(results.family(rows, config)) <= members
  # Named from the config alone: every compared method against every reference, in every
  # primary regime and E, whether or not it ran.
  references = results.references(config)
  assert len(members) == len(results.primary_regimes(config)) * len(config['epochs']) * len(
      [m for m in config['methods'] if m not in references]) * len(references)
  assert (named['alpha'], named['margin'], named['detect']) == (
      results.ALPHA, results.margin(config), {'digits': results.detect_for('digits', config)})
  assert named['statistic'] == 'mean accuracy, last 5 rounds'


def test_family_methods_keep_the_others_out_of_the_family_untested():
  from experiments.benchmarking import tables  # pylint: disable=g-import-not-at-top
  rows, config = _with_baselines()
  named = dict(config, family_methods=['fedld'])
  family = results.family(rows, named)
  assert sorted(family) == [('digits:#C=2', 1, 'fedld', b) for b in ('fedavg', 'scaffold')]
  # Holm over the smaller family: each p-value adjusted over 2 members, not 4.
  whole = results.family(rows, config)
  raw = {k: d.p_value for k, d in whole.items()}
  assert results.holm_level(rows, named) == pytest.approx(results.ALPHA / 2)
  assert family[('digits:#C=2', 1, 'fedld', 'fedavg')].p_value <= raw[
      ('digits:#C=2', 1, 'fedld', 'fedavg')]
  found = results.comparisons(rows, named)
  outside = found[('digits:#C=2', 1, 'fedgh')]
  assert not results.tested(outside) and results.verdict(outside, 0.01) == results.NOT_TESTED
  assert {tuple(m) for m in results.family_members(named)['members']} == {
      ('digits:#C=2', e, 'fedld', b) for e in (1, 5) for b in results.references(named)}
  said = tables.family_description(rows, named)
  assert 'the 1 methods named for it (fedld)' in said and 'Outside it' in said and 'fedgh' in said
  assert 'methods that are not baselines' in tables.family_description(rows, config)


def test_a_window_before_the_last_is_read_from_the_curve_diverged_rounds_at_chance():
  row = {'accuracy_curve': runs.encode_curve([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
         'diverged_round': None, 'chance_accuracy': 0.1}
  assert results.window_statistic(row, 0, 2) == pytest.approx(0.65)
  assert results.window_statistic(row, 1, 2) == pytest.approx(0.45)
  assert results.window_statistic(row, 2, 2) == pytest.approx(0.25)
  assert results.window_statistic(row, 3, 2) is None          # the curve is too short
  diverged = dict(row, diverged_round=6)
  assert results.window_statistic(diverged, 0, 2) == pytest.approx(0.1)
  assert results.window_statistic(diverged, 1, 2) == pytest.approx(0.45)
  # Evaluated rounds only: an unevaluated round (None) is skipped, not counted.
  gaps = dict(row, accuracy_curve=runs.encode_curve([0.1, None, 0.3, None, 0.5]))
  assert results.window_statistic(gaps, 0, 2) == pytest.approx(0.4)


def test_a_transferred_tuning_is_named():
  config = dict(report_rows.CONFIG, plan=dict(report_rows.CONFIG['plan'],
                                              tuning_regimes={'digits': 'digits:iid'}))
  assert results.transferred_from(config, 'digits:#C=2', 'digits') == 'digits:iid'
  assert results.transferred_from(config, 'digits:iid', 'digits') is None
  untuned = dict(config, tuning=dict(config['tuning'], tune=False))
  assert results.transferred_from(untuned, 'digits:#C=2', 'digits') is None


def test_a_baseline_identical_to_the_baseline_is_compared_once():
  rows, config = _with_baselines()
  # scaffold's runs in digits:#C=2 made equal to fedavg's: one computation.
  fedavg = {(r['regime'], r['seed']): r for r in rows if r['method'] == 'fedavg'}
  rows = [dict(r, last_k_accuracy=fedavg[(r['regime'], r['seed'])]['last_k_accuracy'])
          if r['method'] == 'scaffold' and r['epochs'] == 1 else r for r in rows]
  family = results.family(rows, config)
  assert sorted(family) == [('digits:#C=2', 1, m, 'fedavg') for m in ('fedgh', 'fedld')]
  cell = results.group(rows)[('digits:#C=2', 1)]
  assert results.cell_references(cell, config) == ['fedavg']


def test_an_old_row_reads_its_majority_rate_from_result_json_else_keeps_the_old_rule(tmp_path):
  # A runs.csv row written before `majority_rate`: 80 classes, statistic 0.21 (above twice
  # chance 0.025); its run's confusion matrix puts 20 of 100 test examples in one class.
  row = {'regime': 'digits:iid', 'method': 'fedavg', 'epochs': 1, 'seed': 0,
         'last_k_accuracy': 0.21, 'chance_accuracy': 0.0125, 'collapsed': 'False'}
  alone = dict(row)
  results.recheck_collapse(alone, str(tmp_path))   # no result.json: twice chance only
  assert alone['majority_rate'] is None and alone['collapsed'] is False
  run_dir = runs.report_run_dir(str(tmp_path), 'digits:iid', 1, 'fedavg', 0)
  os.makedirs(run_dir)
  confusion = np.diag([20.0] * 5 + [0.0] * 75)
  runs.write_result(run_dir, {'spec': {}, 'confusion_matrix': confusion})
  results.recheck_collapse(row, str(tmp_path))
  assert row['majority_rate'] == pytest.approx(0.2) and row['collapsed'] is True
  # A row's own column comes first; a flag already set stays.
  own = dict(row, majority_rate=0.1, collapsed='False')
  results.recheck_collapse(own, str(tmp_path))
  assert own['majority_rate'] == 0.1 and own['collapsed'] is False
  kept = dict(own, collapsed='True')
  results.recheck_collapse(kept, str(tmp_path))
  assert kept['collapsed'] is True

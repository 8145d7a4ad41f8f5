"""The report's Markdown tables from runs.csv rows made by hand: numbers, Holm, the power line,
the protocol, the effect of E, compositions, variants, tuning."""

import json

import numpy as np
import pytest

from experiments import stats
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import results
from experiments.benchmarking import runs
from experiments.benchmarking import secondary
from experiments.benchmarking import tables
from tests.experiments.benchmarking import report_rows


def test_regime_table_numbers_and_holm_over_every_comparison():
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  rows = report_rows.rows()
  found = results.comparisons(rows, report_rows.CONFIG)
  assert len(found) == 6  # 3 (regime, E) cells x 2 methods against fedavg: one family
  keys = sorted(found)

  def p_value(r, e, m):
    d = np.subtract(report_rows.FINALS[(r, e)][m], report_rows.FINALS[(r, e)]['fedavg'])
    if np.std(d) < 1e-12:  # a constant difference: certain (0) unless it is 0 (1)
      return 0.0 if abs(d.mean()) > 1e-12 else 1.0
    finals = report_rows.FINALS[(r, e)]
    return scipy_stats.ttest_rel(finals[m], finals['fedavg']).pvalue

  # digits:iid E=5: fedgh's runs equal fedavg's in every seed, no test: outside the family.
  identical = ('digits:iid', 5, 'fedgh')
  assert np.isnan(found[identical].p_value) and results.family_size(found) == 5
  keys.remove(identical)
  holm = dict(zip(keys, report_rows.holm_reference([p_value(*k) for k in keys])))
  for key, p in holm.items():
    assert found[key].p_value == pytest.approx(p)
  cell = results.group(rows)[('digits:#C=2', 1)]
  mine = {m: c for (r, e, m), c in found.items() if (r, e) == ('digits:#C=2', 1)}
  table = tables.regime_table(cell, ['fedavg', 'fedgh', 'fedld'], against=['fedavg'],
                              found={'fedavg': mine}, config=report_rows.CONFIG).splitlines()
  assert table[0].startswith('| method | seeds | diverged | collapsed | mean accuracy, last 5 '
                             'rounds | Δ vs fedavg [95% CI] | Holm p | last-round accuracy |')
  assert table[2] == ('| fedavg | 3 | 0 | 0 | 0.6200 ± 0.0200 | — | — | 0.6200 ± 0.0200 | — | '
                      '- | - | 0.50 |')
  # fedgh - fedavg = (0.03, 0.02, 0.04): mean 0.03, sd 0.01, half 4.302653 * 0.01 / sqrt 3;
  # raw p 0.035 but Holm's is above 0.05: no mark.
  fedgh = holm[('digits:#C=2', 1, 'fedgh')]
  assert fedgh > 0.05
  assert table[3].startswith(f'| fedgh | 3 | 0 | 0 | 0.6500 ± 0.0265 | +0.0300 [+0.0052, '
                             f'+0.0548] | {fedgh:.3f} | 0.6500 ± 0.0265 | +0.0300 [+0.0052, '
                             '+0.0548] | 0.400 → 0.100 | - | 0.50 |')
  fedld = holm[('digits:#C=2', 1, 'fedld')]
  assert fedld < 0.05 and '**-0.1000 [-0.1248, -0.0752]** †' in table[4]
  assert results.verdict(mine['fedld'], 0.01) == 'loses'
  assert results.verdict(mine['fedgh'], 0.01) == 'inconclusive'


def test_no_detectable_difference_sentence_when_nothing_varies():
  rows = [dict(r, last_k_accuracy=0.5, final_accuracy=0.5) for r in report_rows.rows()
          if r['regime'] == 'digits:#C=2' and r['seed'] < 2]
  cell = results.group(rows)[('digits:#C=2', 1)]
  assert tables.power_line(cell, baseline='fedavg', config=report_rows.CONFIG) == ''
  (_, _, heading, _), = tables.result_tables(rows, report_rows.CONFIG)
  assert heading == 'Measured conflict fraction 0.400 (mean over conflict-aware methods).'
  # A difference the same in every seed says nothing of the seeds' spread; the others decide.
  varied = [dict(r, last_k_accuracy=0.5 + 0.01 * r['seed']) if r['method'] == 'fedld' else r
            for r in rows]
  cell = results.group(varied)[('digits:#C=2', 1)]
  # fedld - fedavg = (0, 0.01): sd 0.01 / √2, 2 seeds (the detectable difference scales with sd).
  mdd = stats.minimal_detectable_difference(0.01, 2)
  assert tables.power_line(cell, baseline='fedavg', config=report_rows.CONFIG).startswith(
      f'Outside the primary family: minimal detectable differences {mdd / 2 ** 0.5:.4f}-'
      f'{mdd / 2 ** 0.5:.4f} per comparison')


def test_power_line_ranges_over_each_comparisons_own_paired_sd():
  rows = [dict(r, last_k_accuracy=r['last_k_accuracy'] + 0.02 * r['seed'])
          if r['method'] == 'fedld' else r for r in report_rows.rows()]
  cell = results.group(rows)[('digits:#C=2', 1)]
  line = tables.power_line(cell, baseline='fedavg', config=report_rows.CONFIG)
  # Paired sds: fedgh (0.03, 0.02, 0.04) 0.01; fedld (-0.10, -0.09, -0.05) 0.0265; 3 seeds each.
  sds = [0.01, float(np.std([-0.10, -0.09, -0.05], ddof=1))]
  low, high = (stats.minimal_detectable_difference(sd, 3) for sd in sds)
  assert line.startswith(f'Outside the primary family: minimal detectable differences '
                         f'{low:.4f}-{high:.4f} per comparison')
  needed = [stats.seeds_needed(sd, 0.02) for sd in sds]
  assert f'detecting 0.02 takes {needed[0]}-{needed[1]} seeds' in line
  assert results.detect_for('synthetic', report_rows.CONFIG) == config_lib.DEFAULT_DETECT == 0.02
  assert results.detect_for('digits', report_rows.CONFIG) == config_lib.DEFAULT_DETECT
  assert results.detect_for('synthetic', dict(report_rows.CONFIG,
                                              detect={'synthetic': 0.05})) == 0.05


def test_the_protocol_comes_first_and_says_what_the_runs_did():
  rows = report_rows.rows()
  unequal = tables.protocol_section(dict(report_rows.CONFIG, plan={'methods': [
      {'name': 'fedavg', 'server_lrs': [1.0]}, {'name': 'fedld', 'server_lrs': [1.0, 2.0]}]}),
      rows)
  assert 'UNEQUAL: fedld searched server learning rates that fedavg did not (fedavg: [1.0])' in (
      unequal)
  # 6 comparisons, one identical (no test): 5 in the family.
  assert '3 reporting seeds (fewer than 10' in unequal
  # fedavg is the one baseline among the methods: no intersection-union words.
  assert ('each against fedavg (the one baseline run), in the regimes `digits:iid`, '
          '`digits:#C=2`: 5 comparisons, each (method, regime) one member, Holm-adjusted '
          'together') in ' '.join(unequal.split())
  assert 'beats every baseline' not in unequal
  more = ' '.join(tables.family_description(rows, dict(
      report_rows.CONFIG, methods=['fedavg', 'fedgh', 'fedld', 'fedprox'])).split())
  assert ('each against fedavg and against every other baseline that ran (fedprox), in the '
          'regimes') in more and '"beats every baseline" only where it beats each one' in more
  new = tables.protocol_section(dict(report_rows.CONFIG, plan={'methods': [
      {'name': 'fedavg', 'server_lrs': [1.0, 2.0]},
      {'name': 'fedld', 'server_lrs': [1.0, 2.0]}]}), rows)
  assert new.startswith('- Test split: fixed for every seed and never read by tuning')
  assert 'the baseline included, searched the same client learning rates' in new
  for symbol in ('"a ± b"', '"Holm p"', '"norm ratio"', '"collapsed"', '"Δ"'):
    assert symbol in new


def test_epoch_effect_and_losses():
  rows = report_rows.rows()
  effect = tables.epoch_effect_table(rows, report_rows.CONFIG).splitlines()
  assert effect[0] == ('| method | E=1: mean Δ (Holm > 0 / Holm < 0) | E=5: mean Δ (Holm > 0 / '
                       'Holm < 0) |')
  # fedgh gains exactly 0.02 on every seed of digits:iid (a zero-width interval, p = 0).
  assert effect[2].startswith('| fedgh | +0.0250 (1 / 0 of 2) | +0.0000 (0 / 0 of 1) |')
  losses = tables.losses_list(rows, report_rows.CONFIG)
  assert ('- fedld against fedavg, digits:#C=2, E=1: Δ -0.1000 [-0.1248, -0.0752], Holm p'
          in losses)
  assert 'norm ratio 0.800' in losses
  assert 'fedld against fedavg, digits:iid, E=1' not in losses  # its interval straddles 0


def test_a_value_at_a_grids_edge_is_flagged():
  choice = {'dataset': 'digits', 'regime': 'digits:dir(0.1)', 'epochs': 1, 'method': 'fedavg',
            'client_lr': 2.7, 'server_lr': 1.0, 'tuned': {}, 'score': 0.8,
            'scores': [{'candidate': 'a', 'score': 0.8, 'seeds': 2}], 'at_edge': ['client_lr'],
            'client_lrs_tried': [0.3, 0.9, 2.7], 'server_lrs_tried': [1.0]}
  config = dict(report_rows.CONFIG, tuning=dict(report_rows.CONFIG['tuning'], edge_steps=3,
                                                edge_factor=3.0))
  text = tables.tuning_section([choice], config)
  assert ('| fedavg (at edge: client_lr) | 2.7 | 1 | - | 0.8000 | - | 1 | 0.3, 0.9, 2.7 | 1 |'
          in text)
  assert 'The baseline (fedavg) searched every server learning rate any method searched.' in text
  assert 'at most 3 times per side without one' in tables.setup_section(config)
  # A search with halving's rungs: the runner-up is the best other full-length score (the
  # winner's shorter rung is none), each candidate counted once; a value at a bound is named.
  rungs = [{'candidate': 'clr=2.7,slr=1', 'rounds': 10, 'score': 0.9, 'seeds': 2},
           {'candidate': 'clr=0.9,slr=1', 'rounds': 10, 'score': 0.7, 'seeds': 2},
           {'candidate': 'clr=2.7,slr=1', 'rounds': 30, 'score': 0.8, 'seeds': 2},
           {'candidate': 'clr=0.9,slr=1', 'rounds': 30, 'score': 0.75, 'seeds': 2}]
  halving = dict(choice, rounds=30, scores=rungs, candidates=2, at_edge=[],
                 at_bound=['server_lr'])
  assert ('| fedavg (at bound: server_lr) | 2.7 | 1 | - | 0.8000 | clr=0.9,slr=1: 0.7500 | 2 |'
          in tables.tuning_section([halving], config))


def test_composition_table_compares_with_its_baseline_and_with_fedavg():
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  finals = {'fedavg': [0.60, 0.62, 0.64], 'fednova': [0.61, 0.62, 0.66],
            'fednova+fedgh': [0.64, 0.64, 0.69]}
  rows = [dict(report_rows.rows()[0], method=m, algorithm=m.split('+')[0], final_accuracy=f,
               last_k_accuracy=f, seed=seed, data_seed=seed)
          for m, fs in finals.items() for seed, f in enumerate(fs)]
  config = dict(report_rows.CONFIG, methods=list(finals), best_of=['fedavg'])
  table = tables.composition_table(rows, config).splitlines()
  assert table[0].startswith('| regime | E | composition | its baseline |')
  # fednova+fedgh - fednova = (0.03, 0.02, 0.03); - fedavg = (0.04, 0.02, 0.05);
  # fednova - fedavg = (0.01, 0.00, 0.02). fednova is no reference here (`best_of` fedavg only):
  # against it the composition is outside the primary family, an interval without a test.
  assert table[2].startswith('| `digits:iid` | 1 | fednova+fedgh | fednova | +0.0267 [')
  assert '| no test |' in table[2]
  assert table[2].endswith('| +0.0367 [-0.0013, +0.0746] | +0.0100 [-0.0148, +0.0348] |')
  # fednova one of the baselines: the comparison is the primary family's, adjusted over its 2
  # comparisons (against fedavg and against fednova), never over this table.
  best = dict(config, best_of=['fedavg', 'fednova'])
  raw = [scipy_stats.ttest_rel(finals['fednova+fedgh'], finals[b]).pvalue
         for b in ('fedavg', 'fednova')]
  adjusted = report_rows.holm_reference(raw)[1]
  table = tables.composition_table(rows, best).splitlines()
  assert adjusted < 0.05 and table[2].startswith(
      '| `digits:iid` | 1 | fednova+fedgh | fednova | **+0.0267 [')
  assert f'| {adjusted:.3f} |' in table[2], table[2]
  assert tables.composition_table(report_rows.rows(), report_rows.CONFIG) == ''


def test_what_a_variant_changes_is_read_from_its_runs():
  rows = []
  for seed in (0, 1):
    for method, hparams, lr in (('fedld', {'margin_weight': 0.9}, 0.1),
                                ('fedld_projection', {'margin_weight': 0.9,
                                                      'revision': 'projection'}, 0.1),
                                ('fedld_model', {'margin_weight': 0.01,
                                                 'granularity': 'model'}, 0.3)):
      rows.append({'regime': 'digits:iid', 'dataset': 'digits', 'method': method, 'epochs': 1,
                   'seed': seed, 'client_lr': lr, 'server_lr': 1.0,
                   'hparams': json.dumps(hparams), 'last_k_accuracy': 0.9})
  config = dict(report_rows.CONFIG, methods=['fedld', 'fedld_projection', 'fedld_model'],
                plan={'methods': [{'name': 'fedld', 'parent': None},
                                  {'name': 'fedld_projection', 'parent': 'fedld'},
                                  {'name': 'fedld_model', 'parent': 'fedld'}]})
  found = {m: (p, k, d) for m, p, k, d in tables.variant_differences(rows, config)}
  assert found['fedld_projection'] == ('fedld', ['revision'],
                                       ['revision: - -> projection (digits:iid)'])
  assert found['fedld_model'][1] == ['client_lr', 'granularity', 'margin_weight']
  text = tables.variants_section(rows, config)
  assert '- fedld_model against fedld (3 settings differ, not one):' in text
  assert '- fedld_projection against fedld: revision' in text


def test_excluded_non_finite_updates_shown_beside_the_diverged_count():
  rows = report_rows.rows()
  for row in rows:
    if (row['regime'], row['epochs'], row['method']) == ('digits:#C=2', 1, 'fedgh'):
      row['excluded_nonfinite_updates'] = row['seed']  # 0 + 1 + 2 over the seeds
  cell = results.group(rows)[('digits:#C=2', 1)]
  found = {m: c for (r, e, m), c in results.comparisons(rows, report_rows.CONFIG).items()
           if (r, e) == ('digits:#C=2', 1)}
  table = tables.regime_table(cell, ['fedavg', 'fedgh', 'fedld'], against=['fedavg'],
                              found={'fedavg': found}, config=report_rows.CONFIG).splitlines()
  assert table[2].startswith('| fedavg | 3 | 0 | 0 |')  # none excluded: nothing added
  assert table[3].startswith('| fedgh | 3 | 0 (3 updates excluded) | 0 |')


def test_identical_and_all_chance_comparisons_say_so():
  rows = report_rows.rows()
  same = results.comparisons(rows, report_rows.CONFIG)[('digits:iid', 5, 'fedgh')]
  assert results.identical(same) and results.verdict(same, 0.01) == 'identical'   # never 'ties'
  assert tables.delta_cell(same, False, mark=True) == 'identical in every seed (no test)'
  assert tables.delta_cell(same, False, mark=True, pair=('fedavg+fedgh', 'fedgh')) == (
      'identical in every seed (no test): the same computation: FedGH is FedAvg with the fedgh '
      'aggregator')
  table = tables.regime_table(results.group(rows)[('digits:iid', 5)], ['fedavg', 'fedgh'],
                              against=['fedavg'], found={'fedavg': {'fedgh': same}},
                              config=report_rows.CONFIG).splitlines()
  assert table[3].startswith('| fedgh | 3 | 0 | 0 | 0.8600 ± 0.0100 | identical in every seed '
                             '(no test): reason unknown | - | 0.8600 ± 0.0100 | identical in '
                             'every seed (no test) |')
  chance = [dict(r, collapsed=True) for r in rows]
  c = results.comparisons(chance, report_rows.CONFIG)[('digits:#C=2', 1, 'fedld')]
  cell = results.group(chance)[('digits:#C=2', 1)]
  assert results.at_chance(cell, 'fedld', 'fedavg')
  assert not results.at_chance(results.group(rows)[('digits:#C=2', 1)], 'fedld', 'fedavg')
  assert results.significant(c) and not results.significant(c, chance=True)
  assert results.verdict(c, 0.01, chance=True) == 'both collapsed'
  table = tables.regime_table(cell, ['fedavg', 'fedld'], against=['fedavg'],
                              found={'fedavg': {'fedld': c}}, config=report_rows.CONFIG)
  assert '†' not in table and table.count('(both collapsed: no comparison)') == 2
  # The power line leaves out every comparison with a collapsed side.
  assert tables.power_line(cell, baseline='fedavg', config=report_rows.CONFIG) == ''


def test_the_summary_says_identical_never_ties():
  from experiments.benchmarking import summary  # pylint: disable=g-import-not-at-top
  rows = report_rows.rows()
  # fednova's runs renamed from fedgh's: identical to fedavg's in digits:iid E=5, a known reason.
  renamed = [dict(r, method='fednova') if r['method'] == 'fedgh' else r for r in rows]
  config = dict(report_rows.CONFIG, methods=['fedavg', 'fednova', 'fedld'])
  lines = summary.verdict_lines(renamed, config, [('fednova', 'fedavg'), ('fedld', 'fedavg')])
  line = next(line for line in lines if line.startswith('- `digits:iid`, E=5'))
  assert ('identical: fednova in every seed (FedNova is FedAvg when every client takes the same '
          'number of local steps)') in line
  assert 'ties' not in line


def test_the_windows_table_lists_the_verdicts_that_change_before_the_last_window():
  # fedgh gains 0.05 on every seed's last two rounds only; fedld 0.05 on every round: with
  # windows of 2 rounds, fedgh ties fedavg before the last window and beats it there, fedld
  # beats it on all four.
  rows = []
  for seed in range(4):
    base = [0.50 + 0.01 * seed + 0.001 * r for r in range(8)]
    noise = [(0.002, -0.002, 0.0, 0.0)[seed]] * 8   # mean 0 over the seeds
    curves = {'fedavg': base,
              'fedgh': [b + n + (0.05 if r >= 6 else 0.0) for r, (b, n) in
                        enumerate(zip(base, noise))],
              'fedld': [b + 0.05 + n for b, n in zip(base, noise)]}
    for method, curve in curves.items():
      rows.append(dict(report_rows.rows()[0], method=method, algorithm=method, seed=seed,
                       data_seed=seed, accuracy_curve=runs.encode_curve(curve),
                       last_k_accuracy=sum(curve[-2:]) / 2, final_accuracy=curve[-1],
                       diverged_round=None, chance_accuracy=0.1))
  config = dict(report_rows.CONFIG, methods=['fedavg', 'fedgh', 'fedld'],
                tuning=dict(report_rows.CONFIG['tuning'], last_k=2))
  text = tables.windows_table(rows, config)
  assert '1 of 2 verdicts are the same on all four windows' in ' '.join(text.split())
  line = next(l for l in text.splitlines() if l.startswith('| `digits:iid` | 1 | fedgh |'))
  assert line.endswith('| fedavg | ties | ties | ties | beats |'), line
  assert '| fedld |' not in text
  assert tables.windows_table(rows, dict(config, primary_statistic='final_accuracy')) == ''


def test_rounds_to_the_target_count_a_run_that_never_reaches_it():
  rows = report_rows.rows()
  # digits:iid, E=1: fedavg's statistics 0.80, 0.82, 0.84, target 0.9 x 0.82 = 0.738; each curve
  # is final x (1, 2, 3, 4) / 4, so fedavg reaches it at round 4 in every seed; fedld (0.70, 0.80,
  # 0.90) never in seed 0 (horizon 4 + 1), at round 4 in seed 1 and seed 2 (0.675 at round 3).
  target, per = results.speed(rows, report_rows.CONFIG)[('digits:iid', 1)]
  assert target == pytest.approx(0.738)
  assert per['fedavg'] == ({0: 4, 1: 4, 2: 4}, 0) and per['fedld'] == ({0: 5, 1: 4, 2: 4}, 1)
  table = secondary.speed_table(rows, report_rows.CONFIG)
  assert '| `digits:iid` | 1 | 0.7380 | fedld | 4.3 | 1 of 3 | +0.3 [-1.1, +1.8] |' in table
  assert results.rounds_to({'accuracy_curve': '0.1;;0.8'}, 0.5) == (3, True)


def test_collapse_section_names_runs_at_the_majority_rate_and_tests_against_the_baseline(
    tmp_path):
  # #C=2: fedld's seeds 0 and 1 end at 0.50 and 0.51, within 0.02 of a majority-class rate of
  # 0.495; seed 2 (0.55) and every fedavg run stay above it. digits:iid's rows record no majority
  # rate and have no result.json on disk: twice chance (0.2) alone applies there, and flags none.
  rows = report_rows.rows()
  for row in rows:
    row['chance_accuracy'] = 0.1
    if row['regime'] == 'digits:#C=2':
      row['majority_rate'] = 0.495
    results.recheck_collapse(row, str(tmp_path))
  flagged = [(r['regime'], r['method'], r['seed']) for r in rows if r['collapsed']]
  assert flagged == [('digits:#C=2', 'fedld', 0), ('digits:#C=2', 'fedld', 1)]
  text = ' '.join(secondary.collapse_section(rows, report_rows.CONFIG).split())
  # Fisher's exact test of 2 of 3 against 0 of 3, two-sided: the tables [[2, 1], [0, 3]] and
  # [[0, 3], [2, 1]] each have probability C(3,2) C(3,0) / C(6,2) = 3/15: p = 0.4.
  assert ('`digits:#C=2`, E=1, fedld: 2 of 3 (seed 0 0.500 (majority rate 0.4950), seed 1 0.510 '
          '(majority rate 0.4950)); fedavg 0 of 3, Fisher p 0.400') in text, text
  assert '(differs)' not in text
  assert 'unknown for 18 of 27 runs' in text
  # 10 seeds, fedld collapsed in 6 against none: P(a) = C(10,a) C(10,6-a) / C(20,6), and only
  # a = 6 and a = 0 are as unlikely as the table seen (210 / 38760 each): p = 420 / 38760.
  ten = [dict(r, seed=s, collapsed=r['method'] == 'fedld' and s < 6) for s in range(10)
         for r in rows if (r['regime'], r['epochs'], r['seed']) == ('digits:iid', 1, 0)
         and r['method'] != 'fedgh']
  config = dict(report_rows.CONFIG, regimes=['digits:iid'], epochs=[1],
                report_seeds=list(range(10)))
  text = ' '.join(secondary.collapse_section(ten, config).split())
  assert 'fedld: 6 of 10 (seed 0 0.700, seed 1 0.700' in text
  assert f'fedavg 0 of 10, Fisher p {420 / 38760:.3f} (differs)' in text, text


def test_noise_table_against_a_quarter_of_the_target():
  rows = report_rows.rows()
  for row in rows:   # one noisy run; every other curve is a line (final x r / 4): no noise
    if (row['regime'], row['epochs'], row['method'], row['seed']) == ('digits:iid', 1, 'fedld', 0):
      row['accuracy_curve'] = runs.encode_curve([0.7, 0.6, 0.7, 0.6])
  config = dict(report_rows.CONFIG, tuning=dict(report_rows.CONFIG['tuning'], last_k=4))
  table = secondary.noise_table(rows, config, [{'regime': 'digits:iid', 'test_examples': 100}])
  # fedavg's mean statistic 0.82 on 100 examples: sqrt(0.82 x 0.18 / 100) = 0.0384 > 0.02 / 4.
  # The noisy run: 0.1 x sqrt(0.1) (test_stats' hand-worked 0, 1, 0, 1) = 0.0316, the median 0.
  assert ('| `digits:iid` | 1 | 100 | 0.0384 **above** | 0.0000 | 0.0316 **above** | 0.0050 |'
          in table), table
  assert '| `digits:#C=2` | 1 | not recorded | not recorded | 0.0000 | 0.0000 | 0.0050 |' in table
  assert '(27 runs in all)' in ' '.join(table.split())
  assert secondary.noise_table(rows, dict(config, primary_statistic='final_accuracy'), []) == ''


def test_the_baselines_test_curve_is_checked_for_a_plateau():
  # fedavg's curves are final x (1, 2, 3, 4) / 4 with finals 0.80, 0.82, 0.84 on digits:iid, E=1:
  # the mean curve 0.82 x (0.25, 0.5, 0.75, 1): last 2 rounds 0.7175, the 2 before 0.3075.
  config = dict(report_rows.CONFIG, rounds=4, tuning=dict(
      report_rows.CONFIG['tuning'], tune=False, plateau_window=2, plateau_tolerance=0.01))
  text = tables.plateau_lines([], config, report_rows.rows())
  assert ('  - `digits:iid`, E=1, test (3 reporting seeds): NOT plateaued: last 2 rounds 0.7175, '
          'the 2 before 0.3075 (+0.4100, still climbing).') in text.splitlines(), text
  assert 'Not checked: no tuning' in text


def test_the_setup_says_a_seed_does_not_vary_a_natural_partition():
  config = dict(report_rows.CONFIG, regimes=['digits:iid', 'leaf_shakespeare:natural@10'],
                tuning=dict(report_rows.CONFIG['tuning'], tune=False))
  setup = ' '.join(tables.setup_section(config).split())
  assert ('the partition of the training pool is drawn with the seed too. A natural partition '
          '(`leaf_shakespeare:natural@10`) is the clients themselves: there a seed varies the '
          'initial model, the clients sampled and the batch order, not the data.') in setup
  assert 'A natural partition' not in tables.setup_section(dict(config, regimes=['digits:iid']))
  assert 'A natural partition' not in tables.setup_section(dict(config, vary_partition=False))

"""Tuning candidates (staged and product) and the choice, with a made-up scorer (no training)."""

import math

import pytest

from experiments import config as experiment_config
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import methods
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import search as tuning


def _config(name, strategy='staged', client_lrs=(0.03, 0.1, 0.3), rounds=5, **changes):
  """The benchmark config of `name`'s search (server lrs tuned only for FedLD) and `name`."""
  settings = dict(client_lr_grid=client_lrs, server_lr_grid=(1.0, 3.0),
                  tune_server_lr=name == 'fedld', strategy=strategy, edge_steps=0)
  settings.update(changes)
  config = config_lib.BenchmarkConfig(
      regimes=('digits:iid',), methods=(name,), baseline=name,
      given={'fedprox': {'proximal_strength': 0.01}} if name == 'fedprox' else {},
      loop=experiment_config.LoopConfig(rounds=rounds, clients_per_round=2),
      **settings)
  return config, methods.parse_method(name)


def _search(name, *args, **changes):
  """`name`'s search settings on digits (`plan.make`) and `name`."""
  config, method = _config(name, *args, **changes)
  return plan_lib.make(config).search['digits', method.name], method


def _drive(search, evaluate):
  """Runs a search generator, answering each (candidate, rounds) request by `evaluate(candidate)`
  (`evaluate(candidate, rounds=n)` for a rung of n rounds); returns its value."""
  try:
    requests = next(search)
    while True:
      requests = search.send([evaluate(c) if rounds is None else evaluate(c, rounds=rounds)
                              for c, rounds in requests])
  except StopIteration as e:
    return e.value


def _tune(search, evaluate):
  return _drive(tuning.search(*search, dataset='digits', regime='digits:iid', epochs=1), evaluate)


def test_candidates():
  prox, fedld, fedavg = (_search(n) for n in ('fedprox', 'fedld', 'fedavg'))
  one = tuning.candidates(*prox)
  assert [c['client_lr'] for c in one] == [0.03, 0.1, 0.3]
  assert all(c == dict(client_lr=c['client_lr'], server_lr=1.0, proximal_strength=0.01)
             for c in one)
  two = tuning.candidates(*prox, 0.1)
  assert [c['proximal_strength'] for c in two] == [0.001, 0.01, 0.1, 1.0]
  assert (tuning.candidate_name(two[1]) == tuning.candidate_name(one[1])
          == 'clr=0.1,slr=1,proximal_strength=0.01')
  assert tuning.candidates(*fedavg, 0.1) == []
  ld = tuning.candidates(*fedld, 0.3)
  assert len(ld) == 2 * 2 * 2 and {c['server_lr'] for c in ld} == {1.0, 3.0}
  assert len(tuning.candidates(*_search('fedld', 'product'))) == 3 * 8
  assert tuning.max_candidates(*prox) == 3 + 4   # stage 2 at the first lr, repeats included
  assert len(tuning.candidates(*_search('fedprox', 'product'))) == 12


def _scorer(table, calls):
  def evaluate(candidate):
    calls.append(tuning.candidate_name(candidate))
    return table(candidate), 2
  return evaluate


def test_staged_choice_reuses_stage_one_and_picks_the_best():
  calls = []
  def table(c):  # best lr 0.1; best mu 0.1; NaN for mu = 1 (diverged)
    mu = c['proximal_strength']
    if mu == 1.0:
      return float('nan')
    return 0.5 + (0.2 if c['client_lr'] == 0.1 else 0.0) + (0.05 if mu == 0.1 else 0.0)
  choice = _tune(_search('fedprox'), _scorer(table, calls))
  assert len(calls) == len(set(calls)) == 6  # stage 2's mu = 0.01 at lr 0.1 is not run again
  assert (choice['client_lr'], choice['server_lr'], choice['tuned']) == (
      0.1, 1.0, {'proximal_strength': 0.1})
  assert choice['score'] == pytest.approx(0.75)
  assert [s['candidate'] for s in choice['scores']] == calls


def test_ties_go_to_the_first_and_nan_never_wins():
  a, b, c = (dict(client_lr=lr, server_lr=1.0) for lr in (0.1, 0.2, 0.3))
  assert tuning.best([(a, 0.5, 1), (b, 0.5, 1), (c, 0.4, 1)]) == (a, 0.5)
  assert tuning.best([(a, float('nan'), 1), (b, 0.1, 1)]) == (b, 0.1)
  winner, score = tuning.best([(a, float('nan'), 1), (b, float('nan'), 1)])
  assert winner == a and math.isnan(score)


def test_score_needs_every_seed_finished_and_finite():
  assert tuning.score([{'last_k_accuracy': 0.5}, {'last_k_accuracy': 0.7}]) == (
      pytest.approx(0.6), 2)
  assert math.isnan(tuning.score([{'last_k_accuracy': 0.5}, None])[0])
  assert math.isnan(tuning.score([{'last_k_accuracy': float('nan')}])[0])


def test_a_best_value_at_an_edge_extends_the_grid_until_it_is_interior():
  # FedAvg's best client lr is 0.9 (past the grid's 0.3): one extension x3 finds it, a second
  # (2.7) shows it interior.
  search = _search('fedavg', edge_steps=3)
  calls = []
  choice = _tune(search, _scorer(lambda c: -abs(math.log(c['client_lr'] / 0.9)), calls))
  assert [float(n.split(',')[0][4:]) for n in calls] == pytest.approx([0.03, 0.1, 0.3, 0.9, 2.7])
  assert choice['client_lr'] == pytest.approx(0.9) and choice['at_edge'] == []
  # 3 client lrs, the extensions to the learning rates' bounds: 0.9, 2.7, 8.1, 10 above, six
  # (0.01 ... 0.000123, then 1e-4) below.
  assert tuning.LR_BOUNDS['client_lr'] == (1e-4, 10.0)
  assert tuning.max_candidates(*search) == 3 + 4 + 6


def test_the_client_lr_is_extended_after_stage_two_changes_the_methods_value():
  # Staged: the client lrs are tried at mu = 0.01 (the grid's first), stage two picks mu = 0.001
  # at lr 0.3, the top of the lrs tried. The edge is that of every lr tried, so 0.9 is tried
  # with mu = 0.001 although no other lr was tried with that mu.
  calls = []
  choice = _tune(_search('fedprox', edge_steps=3),
                 _scorer(lambda c: -abs(math.log(c['client_lr'] / 0.9))
                         - abs(math.log(c['proximal_strength'] / 0.001)), calls))
  assert 'clr=0.9,slr=1,proximal_strength=0.001' in calls
  assert 'clr=0.9,slr=1,proximal_strength=0.000333333' in calls   # mu extended too
  assert choice['client_lr'] == pytest.approx(0.9) and choice['at_edge'] == []


def test_a_value_still_at_an_edge_is_reported():
  # The score keeps rising with mu: three extensions past 1 (3, 9, 27), then at_edge.
  calls = []
  choice = _tune(_search('fedprox', edge_steps=3),
                 _scorer(lambda c: c['proximal_strength'] - abs(c['client_lr'] - 0.1), calls))
  assert choice['tuned'] == {'proximal_strength': 27.0}
  assert choice['at_edge'] == ['proximal_strength']
  assert len(calls) == 3 + 3 + 3  # stage 1, stage 2 (0.01 at 0.1 not again), three extensions
  # Without extensions the edge is reported at once.
  flat = _tune(_search('fedprox'), _scorer(lambda c: c['proximal_strength'], []))
  assert flat['tuned'] == {'proximal_strength': 1.0} and 'proximal_strength' in flat['at_edge']


def test_an_extension_stays_in_the_valid_range():
  # FedMGC's selection ratio lies in (0, 1]: its best, 0.7 at the top, is extended to the
  # range's bound (0.7 x 3 > 1: 1), which wins and is recorded at its bound, not at an edge.
  calls = []
  choice = _tune(_search('fedmgc', edge_steps=2),
                 _scorer(lambda c: c.get('selection_ratio', 0.5) - abs(c.get('gamma', 1.0) - 1.0)
                         - abs(c['client_lr'] - 0.1), calls))
  assert sum('selection_ratio=1,' in n or n.endswith('selection_ratio=1') for n in calls) == 1
  assert choice['tuned']['selection_ratio'] == 1.0 and choice['at_bound'] == ['selection_ratio']
  assert choice['tuned']['gamma'] == 1.0 and choice['at_edge'] == []


def test_a_compositions_aggregator_grid_stays_in_the_aggregators_range():
  # fedprox+dgc tunes DGC's selection ratio (in (0, 1]) beside mu: 0.7 at the top goes to 1.
  choice = _tune(_search('fedprox+dgc', edge_steps=2),
                 _scorer(lambda c: c.get('selection_ratio', 0.5)
                         - abs(math.log10(c.get('proximal_strength', 0.01) / 0.01))
                         - abs(c['client_lr'] - 0.1), []))
  assert choice['tuned']['selection_ratio'] == 1.0 and choice['at_bound'] == ['selection_ratio']
  assert choice['tuned']['proximal_strength'] == 0.01


def test_tuning_choices_record_what_each_method_searched():
  search = _search('fedavg', server_lr_grid=(1.0, 2.0, 3.0), tune_server_lr=True, edge_steps=1)
  out = _tune(search, lambda c: (c['client_lr'] + c['server_lr'] / 10, 1))
  assert out['server_lrs_tried'][:3] == [1.0, 2.0, 3.0] and out['candidates'] == len(
      out['scores'])
  assert out['client_lrs_tried'][:3] == [0.03, 0.1, 0.3]
  assert 9.0 in out['server_lrs_tried']  # extended past the top edge (x 3)


def test_a_diverged_run_never_wins_even_at_a_finite_score():
  assert math.isnan(tuning.score([{'last_k_accuracy': 0.4, 'diverged': True},
                                  {'last_k_accuracy': 0.5, 'diverged': False}])[0])
  assert tuning.score([{'last_k_accuracy': 0.4, 'diverged': 'False'}]) == (0.4, 1)


def test_rungs():
  assert tuning.rungs(50, 9, 5) == [5, 16, 50]
  assert tuning.rungs(50, 8, 5) == [16, 50]
  assert tuning.rungs(50, 27, 5) == [5, 16, 50]  # 50 // 27 = 1 round is below the last k
  assert tuning.rungs(50, 2, 5) == [50]
  assert tuning.rungs(10, 9, 5) == [10]


def _learning_curves(calls):
  """A made-up validation score after `rounds` rounds: each candidate's curve rises to its own
  level, faster for larger client lrs, with noise-free values; the best at 50 rounds is lr 0.1
  with proximal_strength 0.01 (lr 0.3 leads early and is overtaken)."""
  levels = {0.01: 0.60, 0.03: 0.70, 0.1: 0.80, 0.3: 0.74, 1.0: 0.20}
  speeds = {0.01: 0.02, 0.03: 0.05, 0.1: 0.08, 0.3: 0.50, 1.0: 0.50}
  mu_bonus = {0.001: 0.0, 0.01: 0.03, 0.1: 0.01, 1.0: -0.05}

  def evaluate(candidate, rounds=50):
    calls.append((tuning.candidate_name(candidate), rounds))
    lr = candidate['client_lr']
    mu = candidate['proximal_strength']
    return (levels[lr] + mu_bonus[mu]) * (1 - math.exp(-speeds[lr] * rounds)), 2
  return evaluate


def test_halving_chooses_as_the_full_search_with_fewer_full_runs():
  """On a small grid (5 client lrs, then 4 proximal strengths, edges extended), successive
  halving picks the full search's choice; it runs fewer candidates to the end and fewer rounds
  in all."""
  choices, calls = {}, {}
  for schedule in ('full', 'halving'):
    calls[schedule] = []
    choices[schedule] = _tune(
        _search('fedprox', client_lrs=(0.01, 0.03, 0.1, 0.3, 1.0), rounds=50, last_k=5,
                edge_steps=1, schedule=schedule), _learning_curves(calls[schedule]))
  full, halving = choices['full'], choices['halving']
  chosen = lambda c: (c['client_lr'], c['server_lr'], c['tuned'])
  assert chosen(halving) == chosen(full) == (0.1, 1.0, {'proximal_strength': 0.01})
  assert halving['score'] == full['score']
  to_the_end = lambda c: sum(rounds == 50 for _, rounds in c)
  assert to_the_end(calls['halving']) < to_the_end(calls['full'])
  assert sum(r for _, r in calls['halving']) < sum(r for _, r in calls['full'])
  # Every run is recorded with its length and a finite score: candidates stopped early at
  # their last rung's, and were never run to the end.
  assert [(s['candidate'], s['rounds']) for s in halving['scores']] == calls['halving']
  assert all(math.isfinite(s['score']) and s['seeds'] == 2 for s in halving['scores'])
  full_length = {s['candidate'] for s in halving['scores'] if s['rounds'] == 50}
  stopped = {s['candidate'] for s in halving['scores']} - full_length
  assert stopped and not {(n, 50) for n in stopped} & set(calls['halving'])
  assert halving['candidates'] == len(full_length | stopped)


def test_halving_chooses_at_full_length_among_at_least_two_finalists():
  """3 and 9 candidates: each rung keeps the best third but at least 2, and the choice is the
  best full-length score: lr 0.3 leads every rung, lr 0.1 (second) wins at 50 rounds."""
  for client_lrs, rungs in (((0.03, 0.1, 0.3), [16, 50]),
                            ((0.01, 0.03, 0.1, 0.3, 1.0, 0.02, 0.05, 0.2, 0.5), [5, 16, 50])):
    calls = []

    def evaluate(c, rounds=50):
      calls.append((c['client_lr'], rounds))
      lr = c['client_lr']
      rung = {0.3: 0.9, 0.1: 0.85}.get(lr, 0.5 + lr / 10)
      return (rung if rounds < 50 else {0.1: 0.8}.get(lr, 0.7)), 1
    choice = _tune(_search('fedavg', 'product', client_lrs=client_lrs, rounds=50, last_k=5,
                           schedule='halving'), evaluate)
    assert sorted({r for _, r in calls}) == rungs
    finalists = [lr for lr, r in calls if r == 50]
    assert len(finalists) == 2 and 0.1 in finalists and 0.3 in finalists
    assert choice['client_lr'] == 0.1 and choice['score'] == 0.8
    assert len(choice['scores']) == len(calls) and choice['candidates'] == len(client_lrs)


def test_edge_extension_goes_past_edge_steps_to_an_interior_learning_rate():
  # The best client lr, 8.1, is 3 factors past the grid's top (0.3); edge_steps = 1 used to stop
  # at 0.9 (at_edge); the learning rates extend until the winner is interior or at a bound.
  calls = []
  choice = _tune(_search('fedavg', edge_steps=1),
                 _scorer(lambda c: -abs(math.log(c['client_lr'] / 8.1)), calls))
  assert [float(n.split(',')[0][4:]) for n in calls] == pytest.approx(
      [0.03, 0.1, 0.3, 0.9, 2.7, 8.1, 10.0])
  assert choice['client_lr'] == pytest.approx(8.1)
  assert (choice['at_edge'], choice['at_bound']) == ([], [])


def test_edge_extension_stops_at_a_learning_rates_hard_bound():
  calls = []
  choice = _tune(_search('fedavg', edge_steps=1), _scorer(lambda c: c['client_lr'], calls))
  assert choice['client_lr'] == tuning.LR_BOUNDS['client_lr'][1] and len(calls) == 3 + 4
  assert (choice['at_edge'], choice['at_bound']) == ([], ['client_lr'])
  # Without extensions (edge_steps 0) the grid's top is at an edge, not at a bound.
  flat = _tune(_search('fedavg'), _scorer(lambda c: c['client_lr'], []))
  assert (flat['client_lr'], flat['at_edge'], flat['at_bound']) == (0.3, ['client_lr'], [])


def _choice(server_lr, scores, at_edge=()):
  return dict(dataset='digits', regime='digits:dir(0.1)', epochs=1, method='fedavg',
              client_lr=0.3, server_lr=server_lr, tuned={}, at_edge=list(at_edge),
              score=max(s for _, s, _ in scores),
              scores=[{'candidate': n, 'score': s, 'seeds': k} for n, s, k in scores])


def _widen(choice, server_lrs, evaluate):
  return _drive(tuning.widen_search(choice, server_lrs), evaluate)


def test_the_baseline_tries_the_server_lrs_others_reached_and_keeps_the_best():
  choice = _choice(1.0, [('clr=0.1,slr=1', 0.90, 1), ('clr=0.3,slr=1', 0.95, 1),
                         ('clr=0.3,slr=2', 0.94, 1), ('clr=0.3,slr=3', 0.93, 1)])
  tried = []

  def evaluate(candidate):
    tried.append(tuning.candidate_name(candidate))
    return {9.0: 0.96, 1 / 3: 0.5}[candidate['server_lr']], 1

  widened = _widen(choice, [1.0, 2.0, 3.0, 9.0, 1 / 3], evaluate)
  assert tried == ['clr=0.3,slr=0.333333', 'clr=0.3,slr=9']   # only the missing ones
  assert (widened['server_lr'], widened['score'], widened['client_lr']) == (9.0, 0.96, 0.3)
  assert widened['at_edge'] == ['server_lr']   # 9 is the largest tried
  assert [s['candidate'] for s in widened['scores']][-2:] == tried
  assert widened['server_lrs_tried'] == pytest.approx([1 / 3, 1.0, 2.0, 3.0, 9.0], rel=1e-5)
  # A new candidate that scores lower leaves the choice as it was (its runs recorded).
  kept = _widen(choice, [9.0], lambda c: (0.5, 1))
  assert (kept['server_lr'], kept['score'], len(kept['scores'])) == (1.0, 0.95, 5)
  assert _widen(choice, [1.0, 2.0], evaluate) is choice
  # A server lr another method extended to the stated bound, winning there, is at the bound.
  bounded = _widen(choice, [10.0], lambda c: (0.99, 1))
  assert (bounded['server_lr'], bounded['at_edge']) == (10.0, [])
  assert bounded['at_bound'] == ['server_lr']


def test_a_datasets_own_rounds_and_grids_drive_its_search_and_its_runs():
  """`dataset_settings`: digits' tuning searches its own client lrs, its halving rungs end at
  its own rounds, and its runs (tuning and reporting) run them; the settings of other datasets
  leave it alone; config.json's plan records the grids searched."""
  config, fedavg = _config('fedavg', strategy='product', rounds=50, schedule='halving',
                           epochs=(1,), dataset_settings={'digits': {
                               'rounds': 20, 'client_lr_grid': (1.0, 2.0, 4.0)}})
  requests = []

  def evaluate(candidate, rounds=None):
    requests.append((candidate['client_lr'], rounds))
    return candidate['client_lr'] * (rounds or 20), 1

  plan = plan_lib.make(config)
  choice = _tune((plan.search['digits', 'fedavg'], fedavg), evaluate)
  assert sorted({lr for lr, _ in requests}) == [1.0, 2.0, 4.0]
  # Halving's rungs of digits' 20 rounds ([6, 20]), not of the flags' 50 ([16, 50]).
  # Two finalists run the full length.
  assert [r for _, r in requests] == [6, 6, 6, None, None] and choice['client_lr'] == 4.0
  tuned = plan.tuning[0][0]
  spec = plan_lib.tuning_spec(plan, tuned, 1, fedavg, dict(client_lr=4.0, server_lr=1.0), 100)
  assert spec.rounds == 20 and spec.candidate == 'clr=4,slr=1'
  short = plan_lib.tuning_spec(plan, tuned, 1, fedavg, dict(client_lr=4.0, server_lr=1.0),
                               100, rounds=6)
  assert short.rounds == 6 and short.candidate == 'clr=4,slr=1 @6 rounds'
  assert {s.rounds for s in plan_lib.report_specs(plan, [dict(choice, regime=tuned)])} == {20}
  assert plan.runs[('tune', 'fedavg', 'digits', 1)] == (3 + 2) * 2  # 3 lrs, 2 finalists; 2 seeds
  searched = plan.description['methods'][0]
  assert searched['client_lrs'] == [1.0, 2.0, 4.0]
  assert searched['searched'] == {'digits': {'client_lrs': [1.0, 2.0, 4.0],
                                             'server_lrs': [1.0], 'grid': {}}}
  assert plan.description['rounds'] == {'digits': 20}
  other = plan_lib.make(config_lib.replace_settings(
      config, dataset_settings={'synthetic': {'rounds': 7}},
      regimes=('digits:iid', 'synthetic(1,1)')))
  assert {s.dataset: s.rounds for s in plan_lib.report_specs(
      other, [dict(choice, dataset=d, regime=r) for d, r in (
          ('digits', tuned), ('synthetic', 'synthetic(1,1)'))])} == {
          'digits': 50, 'synthetic': 7}
  assert other.description['methods'][0]['searched']['digits']['client_lrs'] == [0.03, 0.1, 0.3]

"""The plan: a config resolved once into methods with their grids, tuning tasks and runs."""

from experiments.benchmarking import config as config_lib
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import runs
from experiments.benchmarking import tuning


def _plan(**changes):
  args = dict(regimes=('digits:iid', 'synthetic(1,1)'), methods=('fedavg', 'fedprox'))
  args.update(changes)
  return plan_lib.make_plan(config_lib.BenchmarkConfig(**args))


def test_models_and_tuning_regimes_per_dataset():
  plan = _plan(regimes=('digits:dir(0.10)', 'synthetic( 1 , 1 )', 'digits:iid'))
  assert plan.regimes == ('digits:dir(0.1)', 'synthetic(1,1)', 'digits:iid')
  assert plan.datasets == ('digits', 'synthetic')
  assert plan.models == {'digits': 'digits_cnn', 'synthetic': 'logistic_regression'}
  assert plan.tuning_regimes == {'digits': 'digits:dir(0.1)', 'synthetic': 'synthetic(1,1)'}
  assert _plan(regimes=('mnist:iid',)).tuning_regimes == {'mnist': 'mnist:iid'}
  # The grid's own version of the default split (its population), else the default.
  assert _plan(regimes=('digits:iid@8', 'digits:dir(0.1)@8')).tuning_regimes == {
      'digits': 'digits:dir(0.1)@8'}
  assert _plan(regimes=('digits:iid@8',)).tuning_regimes == {'digits': 'digits:dir(0.1)'}


def test_methods_with_grids_given_values_and_tuned_epochs():
  plan = _plan(epochs=(1, 2, 5), given={'fedprox': {'proximal_strength': 0.5}},
               tuning=config_lib.TuningConfig(tune_epochs=(1, 5), client_lr_grid=(0.1, 0.2),
                                              grids={'fedprox': {'proximal_strength': (1, 2)}}))
  assert plan.tuned_epochs == {1: 1, 2: 1, 5: 5}
  fedavg, fedprox = plan.methods
  assert dict(fedprox.given) == {'proximal_strength': 0.5}
  assert dict(fedprox.method.grid) == {'proximal_strength': (1, 2)}
  assert fedprox.search.client_lrs == (0.1, 0.2)
  # The same learning-rate search for every method, the baseline included.
  assert fedavg.search.server_lrs == fedprox.search.server_lrs == (1.0, 2.0, 3.0)
  # Tuning: per dataset, per tuned E, per method; on the dataset's tuning regime.
  assert [(t.dataset, t.epochs, t.method.name) for t in plan.tuning] == [
      (d, e, m) for d in ('digits', 'synthetic') for e in (1, 5) for m in ('fedavg', 'fedprox')]
  assert plan.tuning[0].regime == 'digits:dir(0.1)' and plan.tuning[0].seeds == (100, 101)
  counts = plan.planned_runs()
  # Stage 1 (2 lrs), stage 2 (2 mus x 3 server lrs), and up to 3 extensions per side of the
  # three numeric dimensions: 2 seeds each.
  assert counts[(runs.TUNE_PHASE, 'fedprox', 'digits', 5)] == (2 + 6 + 2 * 3 * 3) * 2
  assert counts[(runs.REPORT_PHASE, 'fedprox', 'digits', 2)] == 1 * 5
  assert plan.num_runs(runs.REPORT_PHASE) == 2 * 2 * 3 * 5
  assert plan.planned_processes()[('fedprox', 'digits')] == 3  # given 0.5, then 1 and 2


def test_report_runs_take_the_choice_of_their_tuned_epochs():
  plan = _plan(regimes=('digits:iid',), epochs=(1, 2), report_seeds=(0, 1),
               tuning=config_lib.TuningConfig(tune_epochs=(1,)), vary_partition=False)
  choices = [tuning.Choice(dataset='digits', regime='digits:dir(0.1)', epochs=1, method=m,
                           client_lr=0.3, server_lr=1.0, tuned=t, score=0.5, scores=())
             for m, t in (('fedavg', ()), ('fedprox', (('proximal_strength', 0.1),)))]
  specs = plan.report_specs(choices)
  assert [(s.method, s.epochs, s.seed) for s in specs] == [
      (m, e, s) for m in ('fedavg', 'fedprox') for e in (1, 2) for s in (0, 1)]
  assert all(s.client_lr == 0.3 and s.data_seed == 0 for s in specs)
  assert dict(specs[-1].kwargs) == {'proximal_strength': 0.1}
  task = plan.tuning[1]
  candidate = tuning.stage_one(task.method.search)[0]
  spec = plan.tuning_spec(task, candidate, 100)
  assert spec.phase == runs.TUNE_PHASE and spec.regime == 'digits:dir(0.1)'
  assert spec.candidate == candidate.name and spec.rounds == plan.rounds


def test_without_tuning_the_given_values_run():
  plan = _plan(regimes=('digits:iid',), report_seeds=(3,),
               tuning=config_lib.TuningConfig(tune=False))
  assert plan.tuning == () and plan.num_runs(runs.TUNE_PHASE) == 0
  specs = plan.report_specs([])
  assert {(s.client_lr, s.server_lr) for s in specs} == {(plan.methods[0].client_lr, 1.0)}
  assert all(s.data_seed == 3 for s in specs)  # the run's seed draws its partition


def test_the_plan_as_the_report_reads_it():
  import json  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import tables  # pylint: disable=g-import-not-at-top
  config = config_lib.BenchmarkConfig(regimes=('digits:iid@8',), methods=('fedavg', 'fedprox'),
                                      epochs=(1,), report_seeds=(0, 1))
  plan = plan_lib.make_plan(config)
  described = json.loads(json.dumps(plan.describe()))
  assert described['models'] == {'digits': 'digits_cnn'}
  assert described['tuning_regimes'] == {'digits': 'digits:dir(0.1)'}
  assert described['methods'][1]['grid'] == {'proximal_strength': [0.001, 0.01, 0.1, 1.0]}
  assert described['runs'] == {'tune': plan.num_runs(runs.TUNE_PHASE), 'report': 4}
  setup = tables.setup_section(config_lib.flat_settings(
      dict(config_lib.as_dict(config), plan=described)))
  assert '- Models: digits: digits_cnn.' in setup and 'digits: `digits:dir(0.1)`' in setup
  assert 'fedprox: proximal_strength in [0.001, 0.01, 0.1, 1.0]' in setup


def test_server_learning_rates_are_searched_for_every_method_or_for_none():
  config = dict(methods=('fedavg', 'fedgh', 'fedld', 'fedld_server_lr'))
  plan = _plan(**config)
  searched = {m.name: m.search.server_lrs for m in plan.methods}
  assert searched == {'fedavg': (1.0, 2.0, 3.0), 'fedgh': (1.0, 2.0, 3.0),
                      'fedld': (1.0, 2.0, 3.0), 'fedld_server_lr': (4.0,)}  # fixed: its own
  fedavg = plan.methods[0].search
  assert {c.server_lr for c in tuning.candidates(fedavg)} == {1.0, 2.0, 3.0}
  none = _plan(tuning=config_lib.TuningConfig(tune_server_lr=False), **config)
  assert {m.name: m.search.server_lrs for m in none.methods}['fedld'] == (1.0,)
  assert tuning.stage_two(none.methods[0].search, 0.1) == []
  described = none.describe()['methods']
  assert described[0]['server_lrs'] == [1.0] and described[0]['client_lrs'] == [0.03, 0.1, 0.3]


def test_a_variant_runs_at_its_parents_tuned_values_and_changes_one_thing():
  plan = _plan(methods=('fedavg', 'fedld', 'fedld_projection', 'fedld_server_lr', 'fedga',
                        'fedga_clip', 'fedga_paper_clip', 'fedld_margin_only'),
               regimes=('digits:iid',), report_seeds=(0,))
  inherits = {m.name: m.inherits for m in plan.methods}
  assert inherits == {'fedavg': None, 'fedld': None, 'fedld_projection': 'fedld',
                      'fedld_server_lr': 'fedld', 'fedga': None, 'fedga_clip': 'fedga',
                      'fedga_paper_clip': 'fedga', 'fedld_margin_only': 'fedld'}
  assert {t.method.name for t in plan.tuning} == {'fedavg', 'fedld', 'fedga'}  # variants: none
  choices = [tuning.Choice(dataset='digits', regime='digits:dir(0.1)', epochs=e, method=m,
                           client_lr=lr, server_lr=slr, tuned=values, score=0.5, scores=())
             for e in (1, 5) for m, lr, slr, values in (
                 ('fedavg', 0.3, 1.0, ()),
                 ('fedld', 0.1, 3.0, (('margin_weight', 0.9), ('component_ratio', 0.8))),
                 ('fedga', 0.3, 2.0, (('counts', 'batch'),)))]
  specs = {s.method: s for s in plan.report_specs(choices) if s.epochs == 1}
  parent = specs['fedld']
  for name, change in (('fedld_projection', {'revision': 'projection'}),
                       ('fedld_server_lr', {})):
    ours = specs[name]
    assert dict(ours.kwargs) == dict(dict(parent.kwargs), **change), name
    assert ours.client_lr == parent.client_lr
  assert specs['fedld_projection'].server_lr == 3.0 and specs['fedld_server_lr'].server_lr == 4.0
  assert dict(specs['fedga_paper_clip'].kwargs) == dict(dict(specs['fedga'].kwargs),
                                                        form='paper', clip_norm=5.0)
  # A custom variant takes its parent's learning rates, and its tuned values where its loss or
  # aggregator takes the same hyperparameter (FedLD's margin weight for the margin loss).
  assert (specs['fedld_margin_only'].client_lr, specs['fedld_margin_only'].server_lr) == (0.1, 3.0)
  margin = dict(specs['fedld_margin_only'].kwargs)
  assert margin['loss'] == 'margin' and margin['loss_kwargs']['margin_weight'] == 0.9
  assert 'component_ratio' not in margin
  # Without inheritance every variant is tuned on its parent's grids.
  own = _plan(methods=('fedavg', 'fedld', 'fedld_projection'), variants_inherit=False)
  assert [m.inherits for m in own.methods] == [None, None, None] and len(own.tuning) == 3 * 2 * 2

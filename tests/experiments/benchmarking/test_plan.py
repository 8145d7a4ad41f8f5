"""The plan: a config resolved once (`plan.make`) into methods with their grids, each dataset's
settings, tuning tasks and runs."""

import pytest

from experiments.benchmarking import config as config_lib
from experiments.benchmarking import lookups
from experiments.benchmarking import methods
from experiments.benchmarking import plan
from experiments.benchmarking import runs
from experiments.benchmarking import search


def _config(**changes):
  args = dict(regimes=('digits:iid', 'synthetic(1,1)'), methods=('fedavg', 'fedprox'))
  args.update(changes)
  return config_lib.BenchmarkConfig(**args)


def _choice(method, epochs, client_lr, server_lr, tuned):
  return dict(dataset='digits', regime='digits:dir(0.1)', epochs=epochs, method=method,
              client_lr=client_lr, server_lr=server_lr, tuned=dict(tuned), score=0.5, scores=[])


def test_models_and_tuning_regimes_per_dataset():
  config = _config(regimes=('digits:dir(0.10)', 'synthetic( 1 , 1 )', 'digits:iid'))
  assert config.regimes == ('digits:dir(0.1)', 'synthetic(1,1)', 'digits:iid')
  made = plan.make(config)
  assert list(made.datasets) == lookups.datasets(config) == ['digits', 'synthetic']
  assert made.description['models'] == {'digits': 'digits_cnn',
                                        'synthetic': 'logistic_regression'}
  assert [made.datasets[d].tuning_regimes for d in ('digits', 'synthetic')] == [
      ('digits:dir(0.1)',), ('synthetic(1,1)',)]
  assert made.datasets['digits'].tuned_on == {'digits:dir(0.1)': 'digits:dir(0.1)',
                                              'digits:iid': 'digits:dir(0.1)'}
  assert made.datasets['digits'].regimes == ('digits:dir(0.1)', 'digits:iid')
  assert lookups.tuning_regime(_config(regimes=('mnist:iid',)), 'mnist') == 'mnist:iid'
  # The grid's own version of the default split (its population), else the default.
  assert lookups.tuning_regime(_config(regimes=('digits:iid@8', 'digits:dir(0.1)@8')),
                               'digits') == 'digits:dir(0.1)@8'
  assert lookups.tuning_regime(_config(regimes=('digits:iid@8',)), 'digits') == 'digits:dir(0.1)'


def test_each_regime_tuned_on_itself_reports_at_its_own_choice():
  config = _config(regimes=('digits:dir(0.1)@8', 'digits:#C=2@8'), tune_each_regime=True,
                   methods=('fedavg',), report_seeds=(0,), epochs=(1,))
  made = plan.make(config)
  assert made.datasets['digits'].tuned_on == {'digits:dir(0.1)@8': 'digits:dir(0.1)@8',
                                              'digits:#C=2@8': 'digits:#C=2@8'}
  assert [(r, e, m.name) for r, e, m in made.tuning] == [
      ('digits:dir(0.1)@8', 1, 'fedavg'), ('digits:#C=2@8', 1, 'fedavg')]
  assert [t.key for t in made.tasks if t.phase == 'tune'] == [
      ('tune', 'digits:dir(0.1)@8', 1, 'fedavg'), ('widen', 'digits:dir(0.1)@8', 1, 'fedavg'),
      ('tune', 'digits:#C=2@8', 1, 'fedavg'), ('widen', 'digits:#C=2@8', 1, 'fedavg')]
  # A tuning run reads its own regime; each regime reports at the choice made on it.
  spec = plan.tuning_spec(made, 'digits:#C=2@8', 1, made.methods[0],
                          dict(client_lr=0.1, server_lr=1.0), 100)
  assert (spec.regime, spec.dataset, spec.phase) == ('digits:#C=2@8', 'digits', 'tune')
  choices = [dict(_choice('fedavg', 1, lr, 1.0, {}), regime=r)
             for r, lr in (('digits:dir(0.1)@8', 0.1), ('digits:#C=2@8', 0.3))]
  assert {(s.regime, s.client_lr) for s in plan.report_specs(made, choices)} == {
      ('digits:dir(0.1)@8', 0.1), ('digits:#C=2@8', 0.3)}
  assert made.description['tuned_on'] == made.datasets['digits'].tuned_on
  assert made.runs['tune', 'fedavg', 'digits', 1] == 2 * plan.search_lib.max_candidates(
      made.search['digits', 'fedavg'], made.methods[0]) * len(made.tuning_seeds)
  with pytest.raises(config_lib.ConfigError,
                     match='tuning_regimes must be empty with --tune_each_regime'):
    _config(regimes=('digits:dir(0.1)@8',), tune_each_regime=True,
            tuning_regimes={'digits': 'digits:dir(0.1)@8'})


def test_methods_with_grids_given_values_and_tuned_epochs():
  config = _config(epochs=(1, 2, 5), given={'fedprox': {'proximal_strength': 0.5}},
                   tune_epochs=(1, 5), client_lr_grid=(0.1, 0.2),
                   grids={'fedprox': {'proximal_strength': (1, 2)}})
  made = plan.make(config)
  assert [made.tuned_epochs[e] for e in (1, 2, 5)] == [1, 1, 5]
  fedavg, fedprox = made.methods
  assert methods.given_kwargs(config.given, fedprox) == {'proximal_strength': 0.5}
  assert made.given['fedprox'] == {'proximal_strength': 0.5}
  assert dict(fedprox.grid) == {'proximal_strength': (1, 2)}
  # The same learning-rate search for every method, the baseline included.
  rates = lambda m: (made.search['digits', m].client_lrs, made.search['digits', m].server_lrs)
  assert rates('fedprox') == rates('fedavg') == ((0.1, 0.2), (1.0, 2.0, 3.0))
  # Tuning: per tuning regime (one per dataset), per tuned E, per method.
  assert [(r, e, m.name) for r, e, m in made.tuning] == [
      (r, e, m) for r in ('digits:dir(0.1)', 'synthetic(1,1)') for e in (1, 5)
      for m in ('fedavg', 'fedprox')]
  counts = made.runs
  # Stage 1 (2 lrs), stage 2 (2 mus x 3 server lrs), the learning rates' extensions to their
  # bounds (client lr: 4 up to 10, 7 down to 1e-4; server lr: 2 up to 10, 5 down to 0.01) and
  # up to 3 extensions per side of mu (no finite bound): 2 seeds each.
  assert counts[(runs.TUNE_PHASE, 'fedprox', 'digits', 5)] == (2 + 6 + 11 + 7 + 2 * 3) * 2
  assert counts[(runs.REPORT_PHASE, 'fedprox', 'digits', 2)] == 1 * 5
  assert made.description['runs'][runs.REPORT_PHASE] == 2 * 2 * 3 * 5
  assert made.processes[('fedprox', 'digits')] == 3  # given 0.5, then 1 and 2


def test_report_runs_take_the_choice_of_their_tuned_epochs():
  config = _config(regimes=('digits:iid',), epochs=(1, 2), report_seeds=(0, 1),
                   tune_epochs=(1,), vary_partition=False)
  choices = [_choice(m, 1, 0.3, 1.0, t)
             for m, t in (('fedavg', {}), ('fedprox', {'proximal_strength': 0.1}))]
  made = plan.make(config)
  specs = plan.report_specs(made, choices)
  assert [(s.method, s.epochs, s.seed) for s in specs] == [
      (m, e, s) for m in ('fedavg', 'fedprox') for e in (1, 2) for s in (0, 1)]
  assert all(s.client_lr == 0.3 and s.data_seed == 0 for s in specs)
  assert dict(specs[-1].kwargs) == {'proximal_strength': 0.1}
  tuned, epochs, method = made.tuning[1]
  candidate = search.candidates(made.search[made.dataset_of(tuned), method.name], method)[0]
  spec = plan.tuning_spec(made, tuned, epochs, method, candidate, 100)
  assert spec.phase == runs.TUNE_PHASE and spec.regime == 'digits:dir(0.1)'
  assert spec.candidate == search.candidate_name(candidate) and spec.rounds == config.loop.rounds
  # What the run needs besides is in its spec: a worker never reads the config.
  assert (spec.last_k, spec.validation_fraction, spec.eval_train_loss) == (5, 0.2, False)
  assert (specs[0].validation_fraction, specs[0].leaf_dir) == (0.0, config.data.leaf_dir)
  # A shorter rung of successive halving is a run of its own.
  short = plan.tuning_spec(made, tuned, epochs, method, candidate, 100, rounds=2)
  assert short.rounds == 2 and short.candidate == f'{spec.candidate} @2 rounds'


def test_without_tuning_the_given_values_run():
  config = _config(regimes=('digits:iid',), report_seeds=(3,),
                   tune=False)
  made = plan.make(config)
  assert made.tuning == () and made.description['runs'][runs.TUNE_PHASE] == 0
  specs = plan.report_specs(made, [])
  assert {(s.client_lr, s.server_lr) for s in specs} == {(config.client.learning_rate, 1.0)}
  assert all(s.data_seed == 3 for s in specs)  # the run's seed draws its partition


def test_the_plan_as_the_report_reads_it():
  import json  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import tables  # pylint: disable=g-import-not-at-top
  config = config_lib.BenchmarkConfig(regimes=('digits:iid@8',), methods=('fedavg', 'fedprox'),
                                      epochs=(1,), report_seeds=(0, 1))
  described = json.loads(json.dumps(plan.make(config).description))
  assert described['models'] == {'digits': 'digits_cnn'}
  assert described['tuned_on'] == {'digits:iid@8': 'digits:dir(0.1)'}
  assert described['methods'][1]['grid'] == {'proximal_strength': [0.001, 0.01, 0.1, 1.0]}
  assert described['runs'] == {'tune': sum(plan.make(config).runs[k] for k in (
      ('tune', m, 'digits', 1) for m in ('fedavg', 'fedprox'))), 'report': 4}
  setup = tables.setup_section(config_lib.flat_settings(
      dict(config_lib.as_dict(config), plan=described)))
  assert '- Models: digits: digits_cnn.' in setup and '`digits:iid@8`: `digits:dir(0.1)`' in setup
  assert 'fedprox: proximal_strength in [0.001, 0.01, 0.1, 1.0]' in setup
  assert '50 rounds, 10 clients per round' in setup and 'client lr grid [0.03, 0.1, 0.3],' in setup
  own = config_lib.replace_settings(config, dataset_settings={'digits': {
      'rounds': 7, 'client_lr_grid': (1.0, 3.0)}})
  flat = config_lib.flat_settings(dict(config_lib.as_dict(own),
                                       plan=plan.make(own).description))
  setup = tables.setup_section(flat)
  assert '50 (digits: 7) rounds' in setup
  assert 'client lr grid [0.03, 0.1, 0.3] (digits: [1.0, 3.0]),' in setup
  assert tables.plateau_lines([], flat).startswith('- Rounds: 50 (digits: 7), enough when')
  fixed = config_lib.replace_settings(config, tune_server_lr=False)
  setup = tables.setup_section(config_lib.flat_settings(dict(
      config_lib.as_dict(fixed), plan=plan.make(fixed).description)))
  assert 'server lr grid none (--notune_server_lr: 1.0).' in setup, setup


def test_server_learning_rates_are_searched_for_every_method_or_for_none():
  names = ('fedavg', 'fedgh', 'fedld', 'fedld_server_lr')
  config = _config(methods=names)
  made = plan.make(config)
  searched = {m.name: made.search['digits', m.name].server_lrs for m in made.methods}
  assert searched == {'fedavg': (1.0, 2.0, 3.0), 'fedgh': (1.0, 2.0, 3.0),
                      'fedld': (1.0, 2.0, 3.0), 'fedld_server_lr': (4.0,)}  # fixed: its own
  fedavg = made.methods[0]
  settings = made.search['digits', 'fedavg']
  staged = search.candidates(settings, fedavg) + search.candidates(settings, fedavg, 0.1)
  assert {c['server_lr'] for c in staged} == {1.0, 2.0, 3.0}
  none = plan.make(_config(methods=names, tune_server_lr=False))
  assert none.search['digits', 'fedld'].server_lrs == (1.0,)
  assert search.candidates(none.search['digits', 'fedavg'], fedavg, 0.1) == []
  described = none.description['methods']
  assert described[0]['server_lrs'] == [1.0] and described[0]['client_lrs'] == [0.03, 0.1, 0.3]


def test_a_variant_runs_at_its_parents_tuned_values_and_changes_one_thing():
  config = _config(methods=('fedavg', 'fedld', 'fedld_projection', 'fedld_server_lr', 'fedga',
                            'fedga_clip', 'fedga_paper_clip', 'fedld_margin_only'),
                   regimes=('digits:iid',), report_seeds=(0,))
  made = plan.make(config)
  assert made.inherits == {
      'fedavg': None, 'fedld': None, 'fedld_projection': 'fedld', 'fedld_server_lr': 'fedld',
      'fedga': None, 'fedga_clip': 'fedga', 'fedga_paper_clip': 'fedga',
      'fedld_margin_only': 'fedld'}
  # Variants are not tuned.
  assert {m.name for _, _, m in made.tuning} == {'fedavg', 'fedld', 'fedga'}
  choices = [_choice(m, e, lr, slr, values) for e in (1, 5) for m, lr, slr, values in (
      ('fedavg', 0.3, 1.0, {}),
      ('fedld', 0.1, 3.0, {'margin_weight': 0.9, 'component_ratio': 0.8}),
      ('fedga', 0.3, 2.0, {'counts': 'batch'}))]
  specs = {s.method: s for s in plan.report_specs(made, choices) if s.epochs == 1}
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
  own = plan.make(_config(methods=('fedavg', 'fedld', 'fedld_projection'),
                          variants_inherit=False))
  assert set(own.inherits.values()) == {None}
  assert len(own.tuning) == 3 * 2 * 2


def test_without_method_grids_every_method_searches_the_rates_alone_at_its_given_values():
  config = _config(methods=('fedavg', 'fedprox', 'fedmgc'), strategy='product', epochs=(1,),
                   given={'fedprox': {'proximal_strength': 0.5}}, tune_method_grids=False,
                   client_lr_grid=(0.1, 0.3), server_lr_grid=(1.0, 2.0))
  made = plan.make(config)
  assert [m.grid for m in made.methods] == [(), (), ()]
  for method in made.methods:   # the same 2 x 2 product for every method, the baseline included
    found = search.candidates(made.search['digits', method.name], method)
    assert [(c['client_lr'], c['server_lr']) for c in found] == [
        (0.1, 1.0), (0.1, 2.0), (0.3, 1.0), (0.3, 2.0)]
    assert set(found[0]) == {'client_lr', 'server_lr'}
  # A run takes the given value of what is no longer searched (the authors' default if none).
  specs = plan.report_specs(made, [_choice('fedavg', 1, 0.1, 1.0, {}),
                                     _choice('fedprox', 1, 0.1, 1.0, {}),
                                     _choice('fedmgc', 1, 0.3, 2.0, {})], dataset='digits')
  fedprox = next(s for s in specs if s.method == 'fedprox')
  fedmgc = next(s for s in specs if s.method == 'fedmgc')
  assert dict(fedprox.kwargs)['proximal_strength'] == 0.5
  assert dict(fedmgc.kwargs)['gamma'] == 0.5 and (fedmgc.client_lr, fedmgc.server_lr) == (0.3, 2)
  searched = plan.make(_config(methods=('fedavg', 'fedmgc'), strategy='product')).methods[1]
  assert dict(searched.grid)['gamma'] == (0.5, 1.0, 2.0)

"""Methods, variants with fixed arguments, and the builder arguments they give."""

import pytest

from experiments.benchmarking import methods


def test_every_algorithm_has_a_method_with_a_grid_where_the_issue_asks_for_one():
  from tff_conflict import learning
  assert set(methods.METHODS) >= set(learning.ALGORITHMS)
  grid = {name: dict(m.grid) for name, m in methods.METHODS.items()}
  assert grid['fedprox']['proximal_strength'] == (0.001, 0.01, 0.1, 1.0)
  assert grid['fedmgc']['gamma'] == (0.5, 1.0, 2.0) and 'selection_ratio' in grid['fedmgc']
  assert grid['fedga']['counts'] == ('batch', 'dataset')
  assert set(grid['fedld']) == {'margin_weight', 'component_ratio'}
  assert grid['fed_corrective']['alpha'] == (0.1, 0.3, 0.5)
  assert grid['fedavg'] == {} and grid['fedgh'] == {} and grid['fednova'] == {}
  assert grid['feddecorr']['beta'] == (0.01, 0.05, 0.1)


def test_ad_hoc_variant_fixes_arguments_and_drops_them_from_the_grid():
  m = methods.parse_method('fedga[counts=dataset, clip_norm=5]')
  assert m.name == 'fedga[counts=dataset,clip_norm=5]' and m.algorithm == 'fedga'
  assert m.fixed_kwargs == {'counts': 'dataset', 'clip_norm': 5}
  assert m.grid == ()
  fedld = methods.parse_method('fedld[component_ratio=0.5]')
  assert dict(fedld.grid) == {'margin_weight': (0.01, 0.1)}
  assert methods.parse_method('fedavg') is methods.METHODS['fedavg']


@pytest.mark.parametrize('text,match', [
    ('sgd', 'unknown method'), ('bogus[x=1]', 'unknown algorithm'),
    ('fedga[counts]', 'expected key=value'), ('fedga[1x=2]', 'expected key=value'),
])
def test_bad_methods(text, match):
  with pytest.raises(ValueError, match=match):
    methods.parse_method(text)


def test_diagnosis_variants_are_methods_by_name():
  for name, variant in methods.VARIANTS.items():
    method = methods.parse_method(name)
    assert method.name == name and method.algorithm == variant.algorithm, name
  soft = methods.parse_method('fedga_paper')
  assert soft.algorithm == 'fedga' and soft.fixed_kwargs == {'form': 'paper'}
  assert dict(soft.grid) == {'counts': ('batch', 'dataset')}  # the rest of fedga's grid
  server = methods.parse_method('fedld_server_lr')
  assert server.server_lr == 4.0
  custom = methods.parse_method('fedmgc_dgc_only')
  assert custom.algorithm == methods.CUSTOM and custom.fixed_kwargs == {
      'loss': 'ce', 'aggregator': 'dgc'}
  with pytest.raises(ValueError, match='both fixes and tunes'):
    methods.Method('y', 'fedga', fixed=(('counts', 'batch'),), grid=(('counts', ('batch',)),))


def test_builder_kwargs_fix_fedghs_order_seed_in_the_process():
  fedgh = methods.METHODS['fedgh']
  assert methods.builder_kwargs(fedgh) == {'seed': 0}
  prox = methods.parse_method('fedprox[proximal_strength=1]')
  assert methods.builder_kwargs(prox, {'x': 2}) == {'proximal_strength': 1, 'x': 2}


def test_parse_value():
  assert [methods.parse_value(v) for v in ('5', '0.5', 'True', 'none', 'soft_target')] == [
      5, 0.5, True, None, 'soft_target']


def test_methods_from_the_binaries_flag_values():
  ld = methods.method_from_flags('fedld_server_lr', 'fedld', {'server_learning_rate': 2.0,
                                                              'margin_weight': 0.1})
  assert ld.server_lr == 2.0 and ld.client_lr is None
  assert ld.fixed_kwargs == {'margin_weight': 0.1}
  assert dict(ld.grid) == {'component_ratio': (0.5, 0.8)}
  custom = methods.method_from_flags('fedld_margin_only', 'custom', {
      'client_loss': 'margin', 'aggregator': 'mean', 'margin_weight': 0.1,
      'client_weighting': 'uniform'})
  assert custom.algorithm == 'custom' and custom.grid == ()
  assert custom.fixed_kwargs == {'loss': 'margin', 'aggregator': 'mean',
                                 'loss_kwargs': {'margin_weight': 0.1},
                                 'client_weighting': 'uniform'}
  dgc = methods.method_from_flags('dgc_only', 'custom', {'aggregator': 'dgc',
                                                         'selection_ratio': 0.3})
  assert dgc.fixed_kwargs == {'loss': 'ce', 'aggregator': 'dgc',
                              'aggregator_kwargs': {'selection_ratio': 0.3}}
  with pytest.raises(ValueError, match='flag --focal_gamma is no builder argument of fedga'):
    methods.method_from_flags('x', 'fedga', {'focal_gamma': 1.0})


def test_fixed_learning_rates_are_not_tuned():
  from experiments.benchmarking import config as config_lib
  from experiments.benchmarking import plan as plan_lib
  from experiments.benchmarking import tuning
  config = config_lib.BenchmarkConfig(regimes=('digits:iid',),
                                      methods=('fedavg', 'fedld_server_lr'))
  search = plan_lib.make_plan(config).methods[1].search  # fedld, server lr fixed at 4
  assert [c.server_lr for c in tuning.stage_one(search)] == [4.0, 4.0, 4.0]
  assert {c.server_lr for c in tuning.stage_two(search, 0.05)} == {4.0}


def test_compositions_are_baselines_with_an_aggregator_tuned_on_both_grids():
  m = methods.parse_method('fedprox+fedgh')
  assert m.name == 'fedprox+fedgh' and m.algorithm == 'fedprox'
  assert m.fixed_kwargs == {'aggregator': 'fedgh'}
  assert dict(m.grid) == dict(methods.METHODS['fedprox'].grid)
  assert methods.builder_kwargs(m, {'proximal_strength': 0.1}) == {
      'aggregator': 'fedgh', 'aggregator_kwargs': {'seed': 0}, 'proximal_strength': 0.1}
  dgc = methods.parse_method('fednova+dgc')
  assert dict(dgc.grid) == {'selection_ratio': dict(methods.METHODS['fedmgc'].grid)[
      'selection_ratio']}
  assert methods.builder_kwargs(dgc, {'selection_ratio': 0.3}) == {
      'aggregator': 'dgc', 'aggregator_kwargs': {'selection_ratio': 0.3}}
  variant = methods.parse_method('feddecorr+fedgh[order=index,beta=0.05]')
  assert variant.grid == ()
  assert methods.builder_kwargs(variant) == {
      'aggregator': 'fedgh', 'beta': 0.05, 'aggregator_kwargs': {'seed': 0, 'order': 'index'}}
  assert methods.composition_parts('fednova+fedgh[order=index]') == ('fednova', 'fedgh')
  assert methods.composition_parts('fednova') is None
  assert set(methods.composable_algorithms()) >= {'fedavg', 'fedprox', 'fednova', 'feddecorr'}


@pytest.mark.parametrize('text,match', [
    ('fedgh+fedgh', 'no baseline that takes an aggregator'),
    ('fedavg+bogus', 'unknown aggregator'),
])
def test_bad_compositions(text, match):
  with pytest.raises(ValueError, match=match):
    methods.parse_method(text)

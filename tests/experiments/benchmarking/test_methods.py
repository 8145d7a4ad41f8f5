"""Methods, variants with fixed arguments, and the builder arguments they give."""

import pytest

from experiments.benchmarking import methods


def test_every_algorithm_is_a_method():   # its grids: tests/test_hparams.py
  from tff_conflict import learning
  assert set(methods.METHODS) >= set(learning.ALGORITHMS)


def test_ad_hoc_variant_fixes_arguments_and_drops_them_from_the_grid():
  m = methods.parse_method('fedga[counts=dataset, clip_norm=5]')
  assert m.name == 'fedga[counts=dataset,clip_norm=5]' and m.algorithm == 'fedga'
  assert dict(m.fixed) == {'counts': 'dataset', 'clip_norm': 5}
  assert m.grid == ()
  fedld = methods.parse_method('fedld[component_ratio=0.5]')
  assert dict(fedld.grid) == {'margin_weight': (0.01, 0.1)}
  assert methods.parse_method('fedavg') is methods.METHODS['fedavg']
  # A fixed learning rate, and a variant of a named variant.
  assert methods.parse_method('fedld[server_lr=2]').server_lr == 2.0
  clipped = methods.parse_method('fedga_clip[counts=dataset]')
  assert dict(clipped.fixed) == {'clip_norm': 5.0, 'counts': 'dataset'}
  assert clipped.parent == 'fedga_clip' and clipped.grid == ()


@pytest.mark.parametrize('text,match', [
    ('sgd', "unknown method 'sgd': use one of 'fed_corrective', 'fedavg', "),
    ('bogus[x=1]', "unknown algorithm 'bogus'; one of 'fedavg', 'fedprox', "),
    ('fedga[counts]', 'expected key=value'), ('fedga[1x=2]', 'expected key=value'),
    ('fedga[client_lr=fast]', 'client_lr must be a number'),
    ('custom[loss=bogus]', "loss must be one of 'calibrated', 'ce', 'focal', 'margin', got "
     "'bogus'"),
])
def test_bad_methods(text, match):
  with pytest.raises(ValueError, match=match):
    methods.parse_method(text)


# Each variant's method as it was when variants were written as the binaries' flags: a
# variant must keep running exactly this (algorithm, fixed arguments, grid, learning rates).
_VARIANT_METHODS = (
    methods.Method('fedga_paper', 'fedga', fixed=(('form', 'paper'),),
                   grid=(('counts', ('batch', 'dataset')),), parent='fedga'),
    methods.Method('fedga_paper_clip', 'fedga', fixed=(('clip_norm', 5.0), ('form', 'paper')),
                   grid=(('counts', ('batch', 'dataset')),), parent='fedga_clip'),
    methods.Method('fedga_clip', 'fedga', fixed=(('clip_norm', 5.0),),
                   grid=(('counts', ('batch', 'dataset')),), parent='fedga'),
    methods.Method('fedavg_clip', 'fedavg', fixed=(('clip_norm', 5.0),), parent='fedavg'),
    methods.Method('fedga_dataset', 'fedga', fixed=(('counts', 'dataset'),), parent='fedga'),
    methods.Method('fedld_server_lr', 'fedld', grid=(('margin_weight', (0.01, 0.1)),
                                                     ('component_ratio', (0.5, 0.8))),
                   server_lr=4.0, parent='fedld'),
    methods.Method('fedld_preserve_norms', 'fedld', fixed=(('preserve_norms', True),),
                   grid=(('margin_weight', (0.01, 0.1)), ('component_ratio', (0.5, 0.8))),
                   parent='fedld'),
    methods.Method('fedld_projection', 'fedld', fixed=(('revision', 'projection'),),
                   grid=(('margin_weight', (0.01, 0.1)), ('component_ratio', (0.5, 0.8))),
                   parent='fedld'),
    methods.Method('fedld_model', 'fedld', fixed=(('granularity', 'model'),),
                   grid=(('margin_weight', (0.01, 0.1)), ('component_ratio', (0.5, 0.8))),
                   parent='fedld'),
    methods.Method('fedld_authors', 'fedld', fixed=(
        ('client_weighting', 'uniform'), ('first_round_plain_mean', True),
        ('margin_form', 'batch_probabilities')),
                   grid=(('margin_weight', (0.01, 0.1)), ('component_ratio', (0.5, 0.8))),
                   parent='fedld'),
    methods.Method('fedld_margin_only', 'custom',
                   fixed=(('aggregator', 'measured_mean'), ('loss', 'margin')), parent='fedld'),
    methods.Method('fedld_principal_only', 'custom',
                   fixed=(('aggregator', 'principal'), ('loss', 'ce')), parent='fedld'),
    methods.Method('fedmgc_focal_only', 'custom',
                   fixed=(('aggregator', 'measured_mean'), ('loss', 'focal')), parent='fedmgc'),
    methods.Method('fedmgc_dgc_only', 'custom', fixed=(('aggregator', 'dgc'), ('loss', 'ce')),
                   parent='fedmgc'),
    methods.Method('fedavg_uniform', 'fedavg', fixed=(('client_weighting', 'uniform'),),
                   parent='fedavg'),
    methods.Method('fedavg_measured', 'custom',
                   fixed=(('aggregator', 'measured_mean'), ('loss', 'ce')), parent='fedavg'),
    methods.Method('fedprox_mu1', 'fedprox', fixed=(('proximal_strength', 1.0),),
                   parent='fedprox'),
    methods.Method('fed_corrective_alpha1', 'fed_corrective', fixed=(('alpha', 1.0),),
                   parent='fed_corrective'),
)


def test_each_variant_runs_its_parent_with_what_it_changes():
  for expected in _VARIANT_METHODS:   # repr: 5.0 is not 5, True is not 1
    assert repr(methods.parse_method(expected.name)) == repr(expected)
  assert methods.described('fedga_paper_clip') == 'fedga_clip with form=paper'
  assert methods.described('fedld_authors') == (
      'first_round_plain_mean=True, margin_form=batch_probabilities, client_weighting=uniform')
  assert methods.described('fedmgc_dgc_only') == 'custom[loss=ce,aggregator=dgc]'
  assert methods.described('fedavg_uniform') == 'fedavg with client_weighting=uniform'
  with pytest.raises(ValueError, match="both fixes and tunes 'counts'"):
    methods.Method('y', 'fedga', fixed=(('counts', 'batch'),), grid=(('counts', ('batch',)),))


def test_variants_are_valid_methods_of_a_benchmark():
  from experiments.benchmarking import config as config_lib
  from experiments.benchmarking import diagnosis
  config = config_lib.BenchmarkConfig(   # checks every fixed argument against its builder
      regimes=('digits:iid',), methods=('fedavg', *methods.VARIANTS))
  assert config.methods[1:] == tuple(methods.VARIANTS)
  for name, (diagnoses, v) in methods.VARIANTS.items():
    assert diagnoses in methods.METHODS, name
    assert methods.parse_method(name).parent in {*methods.METHODS, *methods.VARIANTS}, name
    assert v.baseline is None or v.baseline in methods.VARIANTS, name
    assert diagnosis._reading(name), name   # the question the report prints (docs/experiments.md)


def test_builder_kwargs_fix_fedghs_order_seed_in_the_process():
  fedgh = methods.METHODS['fedgh']
  assert methods.builder_kwargs(fedgh) == {'seed': 0}
  prox = methods.parse_method('fedprox[proximal_strength=1]')
  assert methods.builder_kwargs(prox, {'x': 2}) == {'proximal_strength': 1, 'x': 2}


def test_parse_value():
  assert [methods.parse_value(v) for v in ('5', '0.5', 'True', 'none', 'soft_target')] == [
      5, 0.5, True, None, 'soft_target']


def test_fixed_learning_rates_are_not_tuned():
  from experiments.benchmarking import config as config_lib
  from experiments.benchmarking import plan as plan_lib
  config = config_lib.BenchmarkConfig(regimes=('digits:iid',),
                                      methods=('fedavg', 'fedld_server_lr'))
  from experiments.benchmarking import search  # pylint: disable=g-import-not-at-top
  made = plan_lib.make(config)
  fedld = made.methods[1]  # fedld, server lr fixed at 4
  settings = made.search['digits', fedld.name]
  assert [c['server_lr'] for c in search.candidates(settings, fedld)] == [4.0, 4.0, 4.0]
  assert {c['server_lr'] for c in search.candidates(settings, fedld, 0.05)} == {4.0}


def test_compositions_are_baselines_with_an_aggregator_tuned_on_both_grids():
  m = methods.parse_method('fedprox+fedgh')
  assert m.name == 'fedprox+fedgh' and m.algorithm == 'fedprox'
  assert dict(m.fixed) == {'aggregator': 'fedgh'}
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
  for baseline in ('fedavg', 'fedprox', 'fednova', 'feddecorr'):   # the baselines compose
    assert methods.parse_method(f'{baseline}+dgc').algorithm == baseline


@pytest.mark.parametrize('text,match', [
    ('fedgh+fedgh', "no baseline that takes an aggregator; one of 'fedavg', 'fedprox', "),
    ('fedavg+bogus', "unknown aggregator 'bogus'; one of 'corrective', 'dgc', "),
])
def test_bad_compositions(text, match):
  with pytest.raises(ValueError, match=match):
    methods.parse_method(text)

"""`tff_conflict.hparams` is the one source of every method hyperparameter: each layer (conflict
kernels, Keras losses, aggregator factories, learning registries and builders, experiment flags)
exposes its default, accepts the same values and refuses the same values with the same message.
"""

import inspect
import math

from absl import flags
from absl.testing import flagsaver
import numpy as np
import pytest
import tensorflow_federated as tff

from experiments import flags_lib
from experiments import experiment_lib
from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as learning_helpers
from tff_conflict import aggregators
from tff_conflict import conflict
from tff_conflict import hparams
from tff_conflict import learning
from tff_conflict import losses
from tff_conflict.learning import process as process_lib
from tff_conflict.learning import scaffold as scaffold_lib

U = np.array([[1.0, 0.0], [-1.0, 0.5], [0.2, 1.0]])
L = np.array([1.0, 2.0, 0.5])
W = np.array([1.0, 1.0, 2.0])


class _Built(Exception):
  """Raised where a builder's composition would start: every argument check has passed."""


@pytest.fixture(autouse=True)
def stop_builders_at_composition(monkeypatch):
  def built(*args, **kwargs):
    raise _Built()
  monkeypatch.setattr(process_lib, '_compose', built)
  monkeypatch.setattr(scaffold_lib, '_compose', built)


def _signature_default(fn, keyword):
  return inspect.signature(fn).parameters[keyword].default


def _builder(builder, **kwargs):
  """Calls a learning builder on the tiny Keras model; `_Built` means it accepted `kwargs`."""
  if 'num_clients' in inspect.signature(builder).parameters:
    kwargs.setdefault('num_clients', 3)

  def call():
    builder(make_tiny_keras_model, input_spec=learning_helpers.input_spec(),
            client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1), **kwargs)
  return call


class Layer:
  """One place a hyperparameter enters: how to read its default and how to pass it a value."""

  def __init__(self, name, default, apply):
    self.name = name
    self.default = default     # () -> the layer's default
    self.apply = apply         # value -> None (accepted) or raises

  def accepts(self, value):
    try:
      self.apply(value)
    except _Built:
      pass


def _kernel(fn, keyword, *args):
  return Layer(f'conflict.{fn.__name__}', lambda: _signature_default(fn, keyword),
               lambda v: fn(*args, **{keyword: v}))


def _loss_kernel(fn, keyword):
  return Layer(f'losses.{fn.__name__}', lambda: _signature_default(fn, keyword),
               lambda v: fn([0, 1], [[0.0, 1.0], [2.0, -1.0]], **{keyword: v}))


def _object(cls, keyword, prefix, **fixed):
  """A class whose instances expose the hyperparameter as an attribute or property."""
  return Layer(f'{prefix}.{cls.__name__}', lambda: getattr(cls(**fixed), keyword),
               lambda v: cls(**fixed, **{keyword: v}))


def _registry(table, name, keyword):
  fn = table[name]
  return Layer(f'registry[{name!r}]', lambda: _signature_default(fn, keyword),
               lambda v: fn(**{keyword: v}))


def _build(builder, keyword, check_default=True):
  default = (lambda: _signature_default(builder, keyword)) if check_default else None
  return Layer(f'learning.{builder.__name__}', default,
               lambda v: _builder(builder, **{keyword: v})())


def _flag(flag):
  return Layer(f'--{flag}', lambda: flags.FLAGS[flag].default, None)


LAYERS = {
    hparams.PROXIMAL_STRENGTH: [
        _build(learning.build_fedprox, 'proximal_strength'),
        # build_process's own default is 0 ("no proximal term"): only its check is shared.
        _build(learning.build_process, 'proximal_strength', check_default=False),
        _flag('proximal_strength')],
    hparams.FEDDECORR_BETA: [
        _build(learning.build_feddecorr, 'beta'),
        _flag('decorr_beta')],
    hparams.FEDDECORR_FORM: [
        Layer('losses.decorrelation_loss',
              lambda: _signature_default(losses.decorrelation_loss, 'form'),
              lambda v: losses.decorrelation_loss([[0.0, 1.0], [2.0, -1.0]], form=v)),
        _build(learning.build_feddecorr, 'form'),
        _flag('decorr_form')],
    hparams.FEDGH_ORDER: [
        _kernel(conflict.harmonize, 'order', U, W),
        _kernel(conflict.harmonize_with_diagnostics, 'order', U, W),
        _object(aggregators.GradientHarmonizationFactory, 'order', 'aggregators'),
        _registry(learning.AGGREGATORS, 'fedgh', 'order'),
        _build(learning.build_fedgh, 'order'),
        _flag('fedgh_order')],
    hparams.FEDGH_SEED: [
        _object(aggregators.GradientHarmonizationFactory, 'seed', 'aggregators'),
        _registry(learning.AGGREGATORS, 'fedgh', 'seed'),
        _build(learning.build_fedgh, 'seed')],
    hparams.FOCAL_GAMMA: [
        _loss_kernel(losses.focal_loss, 'gamma'),
        _object(losses.FocalLoss, 'gamma', 'losses'),
        _registry(learning.LOSSES, 'focal', 'gamma'),
        _build(learning.build_fedmgc, 'gamma'),
        _flag('focal_gamma')],
    hparams.FOCAL_BETA: [
        _loss_kernel(losses.focal_loss, 'beta'),
        _object(losses.FocalLoss, 'beta', 'losses'),
        _registry(learning.LOSSES, 'focal', 'beta'),
        _build(learning.build_fedmgc, 'beta'),
        _flag('focal_beta')],
    hparams.DGC_SELECTION_RATIO: [
        _kernel(conflict.dominant_correction, 'selection_ratio', U, L),
        _kernel(conflict.dominant_correction_with_diagnostics, 'selection_ratio', U, L),
        _object(aggregators.DominantGradientCorrectionFactory, 'selection_ratio', 'aggregators',
                weights_are_losses=True),
        _registry(learning.AGGREGATORS, 'dgc', 'selection_ratio'),
        _build(learning.build_fedmgc, 'selection_ratio'),
        _flag('selection_ratio')],
    hparams.DGC_WEIGHTS_ARE_LOSSES: [
        # Required by the factory (no default to compare): only its checks are shared.
        Layer('aggregators.DominantGradientCorrectionFactory', None,
              lambda v: aggregators.DominantGradientCorrectionFactory(weights_are_losses=v)),
        _registry(learning.AGGREGATORS, 'dgc', 'weights_are_losses')],
    hparams.CALIBRATION_COUNTS: [
        _object(losses.CalibratedLabelLoss, 'counts', 'losses'),
        _registry(learning.LOSSES, 'calibrated', 'counts'),
        _build(learning.build_fedga, 'counts'),
        _flag('calibration_counts')],
    hparams.CALIBRATION_FORM: [
        _loss_kernel(losses.calibrated_label_loss, 'form'),
        _object(losses.CalibratedLabelLoss, 'form', 'losses'),
        _registry(learning.LOSSES, 'calibrated', 'form'),
        _build(learning.build_fedga, 'form'),
        _flag('calibration_form')],
    hparams.CLIENT_CLIP_NORM: [
        *[_build(builder, 'clip_norm') for builder in learning.ALGORITHMS.values()],
        _build(learning.build_process, 'clip_norm'),
        _flag('client_clip_norm')],
    hparams.MARGIN_WEIGHT: [
        _loss_kernel(losses.margin_control_loss, 'margin_weight'),
        _object(losses.MarginControlLoss, 'margin_weight', 'losses'),
        _registry(learning.LOSSES, 'margin', 'margin_weight'),
        _build(learning.build_fedld, 'margin_weight'),
        _flag('margin_weight')],
    hparams.MARGIN_FORM: [
        _loss_kernel(losses.margin_control_loss, 'margin_form'),
        _object(losses.MarginControlLoss, 'margin_form', 'losses'),
        _registry(learning.LOSSES, 'margin', 'margin_form'),
        _build(learning.build_fedld, 'margin_form'),
        _flag('margin_form')],
    hparams.PRINCIPAL_COMPONENT_RATIO: [
        _kernel(conflict.principal_aggregate, 'component_ratio', U, W),
        _kernel(conflict.principal_aggregate_with_diagnostics, 'component_ratio', U, W),
        _object(aggregators.PrincipalGradientFactory, 'component_ratio', 'aggregators'),
        _registry(learning.AGGREGATORS, 'principal', 'component_ratio'),
        _build(learning.build_fedld, 'component_ratio'),
        _flag('component_ratio')],
    hparams.PRINCIPAL_PRESERVE_NORMS: [
        _kernel(conflict.principal_aggregate, 'preserve_norms', U, W),
        _kernel(conflict.principal_aggregate_with_diagnostics, 'preserve_norms', U, W),
        _object(aggregators.PrincipalGradientFactory, 'preserve_norms', 'aggregators'),
        _registry(learning.AGGREGATORS, 'principal', 'preserve_norms'),
        _build(learning.build_fedld, 'preserve_norms'),
        _flag('principal_preserve_norms')],
    hparams.PRINCIPAL_GRANULARITY: [
        _kernel(conflict.principal_aggregate, 'granularity', U, W),
        _kernel(conflict.principal_aggregate_with_diagnostics, 'granularity', U, W),
        _object(aggregators.PrincipalGradientFactory, 'granularity', 'aggregators'),
        _registry(learning.AGGREGATORS, 'principal', 'granularity'),
        _build(learning.build_fedld, 'granularity'),
        _flag('principal_granularity')],
    hparams.PRINCIPAL_REVISION: [
        _kernel(conflict.principal_aggregate, 'revision', U, W),
        _kernel(conflict.principal_aggregate_with_diagnostics, 'revision', U, W),
        _object(aggregators.PrincipalGradientFactory, 'revision', 'aggregators'),
        _registry(learning.AGGREGATORS, 'principal', 'revision'),
        _build(learning.build_fedld, 'revision'),
        _flag('principal_revision')],
    hparams.PRINCIPAL_FIRST_ROUND_PLAIN_MEAN: [
        _object(aggregators.PrincipalGradientFactory, 'first_round_plain_mean', 'aggregators'),
        _registry(learning.AGGREGATORS, 'principal', 'first_round_plain_mean'),
        _build(learning.build_fedld, 'first_round_plain_mean'),
        _flag('principal_first_round_plain_mean')],
    hparams.CORRECTIVE_ALPHA: [
        _kernel(conflict.corrective_weights, 'alpha', U, L),
        _kernel(conflict.corrective_aggregate, 'alpha', U, U, L, W),
        _object(aggregators.CorrectiveGradientFactory, 'alpha', 'aggregators'),
        _registry(learning.AGGREGATORS, 'corrective', 'alpha'),
        _build(learning.build_fed_corrective, 'alpha'),
        _flag('corrective_alpha')],
}

# Values outside each kind's range (NaN, infinities, negatives, out-of-range ratios, wrong types).
BAD = {
    hparams.NONNEGATIVE: [math.nan, math.inf, -math.inf, -0.1, True, '0.5', None],
    hparams.POSITIVE: [0.0, math.nan, math.inf, -1.0, True, '1', None],
    hparams.OPTIONAL_POSITIVE: [0.0, math.nan, math.inf, -1.0, True, '1'],
    hparams.RATIO: [0.0, -0.1, 1.5, math.nan, math.inf, True, '0.5', None],
    hparams.UNIT_INTERVAL: [-0.1, 1.5, math.nan, math.inf, True, '0.5', None],
    hparams.CHOICE: ['nope', '', None, 1],
    hparams.BOOL: [1, 0, 'True', None],
    hparams.SEED: [1.5, '3', True, 2**63, -2**63 - 1],
}
# Values inside each kind's range, boundaries included.
GOOD = {
    hparams.NONNEGATIVE: [0.0, 0, 3.5, np.float32(0.25)],
    hparams.POSITIVE: [1e-6, 2, np.float64(1.2)],
    hparams.OPTIONAL_POSITIVE: [None, 5.0, 1e-3, np.float32(0.5)],
    hparams.RATIO: [1.0, 1e-3, 0.5, np.float32(0.8)],
    hparams.UNIT_INTERVAL: [0.0, 1.0, 0.3, np.float64(0.1)],
    hparams.BOOL: [True, False, np.bool_(True)],
    hparams.SEED: [None, 0, -5, 2**63 - 1, np.int64(7)],
}


def _values(hparam, table):
  if hparam.kind == hparams.CHOICE:
    return list(hparam.choices) if table is GOOD else BAD[hparams.CHOICE]
  return table[hparam.kind]


def _cases(table):
  for hparam, layers in LAYERS.items():
    for layer in layers:
      if layer.apply is None:
        continue
      for value in _values(hparam, table):
        yield pytest.param(hparam, layer, value, id=f'{hparam.keyword}-{layer.name}-{value!r}')


def test_every_hparam_is_checked_in_every_layer_table():
  assert set(LAYERS) == set(hparams.HPARAMS)
  # A keyword names one hyperparameter per method; a flag names one everywhere.
  assert len({(h.method, h.keyword) for h in hparams.HPARAMS}) == len(hparams.HPARAMS)
  flagged = [h.flag for h in hparams.HPARAMS if h.flag is not None]
  assert len(set(flagged)) == len(flagged)


@pytest.mark.parametrize('hparam', hparams.HPARAMS, ids=lambda h: h.keyword)
def test_every_layer_exposes_the_same_default(hparam):
  for layer in LAYERS[hparam]:
    if layer.default is not None:
      assert layer.default() == hparam.default, (layer.name, layer.default(), hparam.default)
  assert hparam.check(hparam.default) == hparam.default


def test_defaults_named_by_the_task():
  # The disagreements that were: FocalLoss gamma 2 vs the registry's 0.5, DGC's weights_are_losses
  # False vs True, focal beta >= 0 vs > 0, corrective alpha [0, 1] vs >= 0.
  assert losses.FocalLoss().gamma == _signature_default(learning.build_fedmgc, 'gamma') == (
      _signature_default(learning.LOSSES['focal'], 'gamma')) == flags.FLAGS[
          'focal_gamma'].default == 0.5
  # The factory makes the caller choose; the registry's 'dgc' (build_process, which sends the
  # losses) reads losses.
  with pytest.raises(TypeError, match='weights_are_losses'):
    aggregators.DominantGradientCorrectionFactory()
  assert learning.resolve_aggregator('dgc').weights_are_losses is True
  with pytest.raises(ValueError, match='beta must be a finite number > 0, got 0.0'):
    learning.LOSSES['focal'](beta=0.0)
  with pytest.raises(ValueError, match=r'alpha must be a number in \[0, 1\], got 2.0'):
    aggregators.CorrectiveGradientFactory(alpha=2.0)


@pytest.mark.parametrize('hparam,layer,value', list(_cases(BAD)))
def test_every_layer_refuses_the_same_values_with_the_same_message(hparam, layer, value):
  with pytest.raises(ValueError) as expected:
    hparam.check(value)
  message = str(expected.value)
  assert message.startswith(f'{hparam.keyword} must be ') and repr(value) in message
  with pytest.raises(ValueError) as got:
    layer.apply(value)
  assert message in str(got.value), layer.name


@pytest.mark.parametrize('hparam,layer,value', list(_cases(GOOD)))
def test_every_layer_accepts_the_same_values(hparam, layer, value):
  layer.accepts(value)


def _flag_hparams():
  return [h for h in hparams.HPARAMS if h.flag in flags_lib.groups()['method']]


def test_method_flags_are_exactly_the_hparams_with_a_flag():
  assert [h.flag for h in _flag_hparams()] == flags_lib.groups()['method']
  assert {h.flag for h in hparams.HPARAMS if h.flag} - set(flags_lib.groups()['method']) == {
      'seed'}   # --seed is the binaries' seed of everything, not a method flag
  for hparam in _flag_hparams():
    assert hparam.valid_range in flags.FLAGS[hparam.flag].help


@pytest.mark.parametrize('hparam', _flag_hparams(), ids=lambda h: h.flag)
def test_flags_validate_at_parse_time(hparam):
  if hparam.kind == hparams.CHOICE:
    bad, good = ['nope'], list(hparam.choices)
  elif hparam.kind == hparams.BOOL:   # absl's bool parser: true/false, 1/0, yes/no ...
    bad, good = ['maybe'], []
    for text, value in (('true', True), ('false', False)):
      with flagsaver.as_parsed(**{hparam.flag: text}):
        assert flags.FLAGS[hparam.flag].value is value
  else:
    bad = [v for v in BAD[hparam.kind] if isinstance(v, float)]
    good = [v for v in GOOD[hparam.kind] if isinstance(v, (float, int))]
  for value in bad:
    with pytest.raises(flags.IllegalFlagValueError) as info:
      with flagsaver.as_parsed(**{hparam.flag: str(value)}):
        pass
    message = str(info.value)
    assert f'--{hparam.flag}' in message and str(value) in message, message
    if hparam.kind not in (hparams.CHOICE, hparams.BOOL):
      assert f'--{hparam.flag} must be {hparam.valid_range}' in message, message
  for value in good:
    with flagsaver.as_parsed(**{hparam.flag: str(value)}):
      assert flags.FLAGS[hparam.flag].value == hparam.check(
          float(value) if hparam.kind != hparams.CHOICE else value)


def test_nan_focal_gamma_flag_message():
  with pytest.raises(flags.IllegalFlagValueError,
                     match='--focal_gamma must be a finite number >= 0, got nan'):
    with flagsaver.as_parsed(focal_gamma='nan'):
      pass


def test_builder_and_registry_keywords_are_the_tables():
  # The core keywords, and the baselines' composition with an aggregator (not hyperparameters).
  core = {'model_fn', 'input_spec', 'client_optimizer_fn', 'server_optimizer_fn',
          'client_weighting', 'metrics', 'num_clients', 'aggregator', 'aggregator_kwargs'}
  for name, builder in learning.ALGORITHMS.items():
    keywords = [k for k in inspect.signature(builder).parameters if k not in core]
    own = [h.keyword for h in hparams.ALGORITHM_HPARAMS[name]]
    if 'proximal_strength' not in own and 'proximal_strength' in keywords:
      # The proximal term composed with the method, off unless given.
      assert inspect.signature(builder).parameters['proximal_strength'].default == 0.0, name
      keywords.remove('proximal_strength')
    assert keywords == own, name
  for name, fn in learning.LOSSES.items():
    assert list(inspect.signature(fn).parameters) == [
        h.keyword for h in hparams.LOSS_HPARAMS[name]], name
  for name, fn in learning.AGGREGATORS.items():
    keywords = [k for k in inspect.signature(fn).parameters if k != 'max_gather_bytes']
    assert keywords == [h.keyword for h in hparams.AGGREGATOR_HPARAMS[name]], name
  assert experiment_lib.ALGORITHM_HPARAMS['fedmgc'] == {
      'gamma': 'focal_gamma', 'beta': 'focal_beta', 'selection_ratio': 'selection_ratio',
      'clip_norm': 'client_clip_norm'}
  assert experiment_lib.AGGREGATOR_HPARAMS['dgc'] == {'selection_ratio': 'selection_ratio'}


def test_markdown_table_lists_every_hparam():
  table = hparams.markdown_table()
  assert len(table.splitlines()) == 2 + len(hparams.HPARAMS)
  for hparam in hparams.HPARAMS:
    assert f'`{hparam.keyword}`' in table and hparam.source in table


def test_a_flag_name_in_the_message_when_asked():
  with pytest.raises(ValueError, match='--corrective_alpha must be a number in \\[0, 1\\], got '
                                       '-1.0'):
    hparams.CORRECTIVE_ALPHA.check(-1.0, name='--corrective_alpha')


def test_every_tuning_grid_lies_in_its_hparams_range():
  for h in hparams.HPARAMS:
    assert [h.check(v) for v in h.grid] == list(h.grid), h.keyword
    assert len(set(h.grid)) == len(h.grid), h.keyword


def test_the_benchmarks_default_grids_are_the_hparams_grids():
  from experiments.benchmarking import methods  # pylint: disable=g-import-not-at-top
  assert dict(methods.METHODS['fedld'].grid) == {
      'margin_weight': hparams.MARGIN_WEIGHT.grid,
      'component_ratio': hparams.PRINCIPAL_COMPONENT_RATIO.grid}
  assert dict(methods.parse_method('fedprox+dgc').grid) == {
      'proximal_strength': hparams.PROXIMAL_STRENGTH.grid,
      'selection_ratio': hparams.DGC_SELECTION_RATIO.grid}
  assert methods.METHODS['fedavg'].grid == ()

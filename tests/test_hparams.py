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

from experiments import config
from experiments import flags_lib
from experiments import experiment_lib
from tests.conftest import make_tiny_hidden_keras_model
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
  """Raised where a builder's composition would start: every argument check has passed; holds
  the composition's keyword arguments (`loss_fn`, `factory`, ...)."""


@pytest.fixture(autouse=True)
def stop_builders_at_composition(monkeypatch):
  def built(*args, **kwargs):
    raise _Built(kwargs)
  monkeypatch.setattr(process_lib, '_compose', built)
  monkeypatch.setattr(scaffold_lib, '_compose', built)


def _signature_default(fn, keyword):
  return inspect.signature(fn).parameters[keyword].default


def _builder(builder, **kwargs):
  """Calls a learning builder on the tiny Keras model; `_Built` means it accepted `kwargs`."""
  if 'num_clients' in inspect.signature(builder).parameters:
    kwargs.setdefault('num_clients', 3)

  def call():
    model_fn = (make_tiny_hidden_keras_model if builder is learning.build_feddecorr
                else make_tiny_keras_model)   # FedDecorr refuses a classifier reading the input
    builder(model_fn, input_spec=learning_helpers.input_spec(),
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


def _entry(entry, keyword):
  """A registry entry: the object it builds exposes the hyperparameter as an attribute."""
  return Layer(f'{entry.kind} {entry.name!r}', lambda: getattr(entry(), keyword),
               lambda v: entry(**{keyword: v}))


def _build(builder, keyword, check_default=True):
  default = (lambda: _signature_default(builder, keyword)) if check_default else None
  return Layer(f'learning.{builder.__name__}', default,
               lambda v: _builder(builder, **{keyword: v})())


# The kernels that read each hyperparameter besides the classes the registries build.
KERNELS = {
    hparams.FEDDECORR_FORM: [
        Layer('losses.decorrelation_loss',
              lambda: _signature_default(losses.decorrelation_loss, 'form'),
              lambda v: losses.decorrelation_loss([[0.0, 1.0], [2.0, -1.0]], form=v))],
    hparams.FEDGH_ORDER: [_kernel(conflict.harmonize, 'order', U, W),
                          _kernel(conflict.harmonize_with_diagnostics, 'order', U, W)],
    hparams.FOCAL_GAMMA: [_loss_kernel(losses.focal_loss, 'gamma')],
    hparams.FOCAL_BETA: [_loss_kernel(losses.focal_loss, 'beta')],
    hparams.DGC_SELECTION_RATIO: [
        _kernel(conflict.dominant_correction, 'selection_ratio', U, L),
        _kernel(conflict.dominant_correction_with_diagnostics, 'selection_ratio', U, L)],
    hparams.DGC_WEIGHTS_ARE_LOSSES: [
        # Required by the factory (no default to compare): only its checks are shared.
        Layer('aggregators.DominantGradientCorrectionFactory', None,
              lambda v: aggregators.DominantGradientCorrectionFactory(weights_are_losses=v))],
    hparams.CALIBRATION_FORM: [_loss_kernel(losses.calibrated_label_loss, 'form')],
    hparams.MARGIN_WEIGHT: [_loss_kernel(losses.margin_control_loss, 'margin_weight')],
    hparams.MARGIN_FORM: [_loss_kernel(losses.margin_control_loss, 'margin_form')],
    **{h: [_kernel(conflict.principal_aggregate, h.keyword, U, W),
           _kernel(conflict.principal_aggregate_with_diagnostics, h.keyword, U, W)]
       for h in (hparams.PRINCIPAL_COMPONENT_RATIO, hparams.PRINCIPAL_PRESERVE_NORMS,
                 hparams.PRINCIPAL_GRANULARITY, hparams.PRINCIPAL_REVISION)},
    hparams.CORRECTIVE_ALPHA: [_kernel(conflict.corrective_weights, 'alpha', U, L),
                               _kernel(conflict.corrective_aggregate, 'alpha', U, U, L, W)],
}


def _layers(hparam):
  """Every place `hparam` enters: its kernels, and from the spec the registry entries, builders
  and flag that take it."""
  layers = list(KERNELS.get(hparam, []))
  for entry in [*learning.LOSSES.values(), *learning.AGGREGATORS.values()]:
    if hparam in entry.hparams:
      layers.append(_entry(entry, hparam.keyword))
  for name, table in hparams.ALGORITHM_HPARAMS.items():
    builder = learning.ALGORITHMS[name]
    if hparam in table:
      layers.append(_build(builder, hparam.keyword,
                           hparam.keyword in inspect.signature(builder).parameters))
  if hparam in hparams.PROCESS_HPARAMS:
    # build_process's own proximal default is 0 ("no proximal term"): only its check is shared.
    layers.append(_build(learning.build_process, hparam.keyword,
                         hparam is not hparams.PROXIMAL_STRENGTH))
  if hparam.flag in config.METHOD_FLAGS:
    layers.append(Layer(f'--{hparam.flag}', lambda: flags.FLAGS[hparam.flag].default, None))
  return layers


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
  for hparam in hparams.HPARAMS:
    for layer in _layers(hparam):
      if layer.apply is None:
        continue
      for value in _values(hparam, table):
        yield pytest.param(hparam, layer, value, id=f'{hparam.keyword}-{layer.name}-{value!r}')


def test_keywords_and_flags_name_one_hyperparameter():
  # A keyword names one hyperparameter per method; a flag names one everywhere.
  assert len({(h.method, h.keyword) for h in hparams.HPARAMS}) == len(hparams.HPARAMS)
  flagged = [h.flag for h in hparams.HPARAMS if h.flag is not None]
  assert len(set(flagged)) == len(flagged)
  for name, spec in hparams.METHODS.items():
    keywords = [h.keyword for h in spec.hparams]
    assert len(set(keywords)) == len(keywords), name
    assert set(spec.hparams) <= set(hparams.HPARAMS), name


@pytest.mark.parametrize('hparam', hparams.HPARAMS, ids=lambda h: h.keyword)
def test_every_layer_exposes_the_same_default(hparam):
  for layer in _layers(hparam):
    if layer.default is not None:
      assert layer.default() == hparam.default, (layer.name, layer.default(), hparam.default)
  assert hparam.check(hparam.default) == hparam.default


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
  return [h for h in hparams.HPARAMS if h.flag in config.METHOD_FLAGS]


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
    # absl refuses what its parser cannot read; the flag's validator, what the range refuses.
    with pytest.raises((flags.IllegalFlagValueError, config.ConfigError)) as info:
      with flagsaver.as_parsed(**{hparam.flag: str(value)}):
        pass
    error = info.value
    message = error.flag_message() if isinstance(error, config.ConfigError) else str(error)
    assert f'--{hparam.flag}' in message and str(value) in message, message
    if hparam.kind not in (hparams.CHOICE, hparams.BOOL):
      assert f'--{hparam.flag} must be {hparam.valid_range}' in message, message
  for value in good:
    with flagsaver.as_parsed(**{hparam.flag: str(value)}):
      assert flags.FLAGS[hparam.flag].value == hparam.check(
          float(value) if hparam.kind != hparams.CHOICE else value)


def _other_value(hparam):
  """A valid value of `hparam` other than its default."""
  return next(v for v in _values(hparam, GOOD) if hparam.check(v) != hparam.default)


def _composition(builder, **kwargs):
  with pytest.raises(_Built) as built:
    _builder(builder, **kwargs)()
  return built.value.args[0]


@pytest.mark.parametrize('name', [n for n, s in hparams.METHODS.items() if s.loss or s.aggregator])
def test_every_builder_hands_each_option_to_its_loss_or_aggregator(name):
  spec, builder = hparams.METHODS[name], learning.ALGORITHMS[name]
  defaults = _composition(builder)
  for hparam in spec.hparams:
    if hparam in spec.own:
      continue
    value = _other_value(hparam)
    got = _composition(builder, **{hparam.keyword: value})
    reader = got['factory'] if hparam in hparams.AGGREGATOR_HPARAMS[spec.aggregator] else (
        got['loss_fn']())
    assert getattr(reader, hparam.keyword) == hparam.check(value), (name, hparam.keyword)
  for keyword, value in spec.fixed:
    assert getattr(defaults['factory'], keyword) == value
  assert isinstance(defaults['factory'], type(learning.AGGREGATORS[spec.aggregator]()))
  if spec.loss:
    assert isinstance(defaults['loss_fn'](), type(learning.LOSSES[spec.loss]()))


def test_builder_keywords_are_their_specs():
  # The core keywords, the proximal term composed with a method (off unless given), and the
  # baselines' composition with an aggregator are not method hyperparameters.
  core = {'model_fn', 'input_spec', 'client_optimizer_fn', 'server_optimizer_fn',
          'client_weighting', 'metrics', 'num_clients', 'aggregator', 'aggregator_kwargs',
          'options'}
  assert list(learning.ALGORITHMS) == list(hparams.METHODS)
  for name, builder in learning.ALGORITHMS.items():
    parameters = inspect.signature(builder).parameters
    keywords = [k for k in parameters if k not in core]
    own = [h.keyword for h in hparams.ALGORITHM_HPARAMS[name]]
    if 'proximal_strength' not in own and 'proximal_strength' in keywords:
      assert parameters['proximal_strength'].default == 0.0, name
      keywords.remove('proximal_strength')
    if 'options' in parameters:   # the further options of its loss and aggregator
      assert keywords == [k for k in own if k in keywords], name
    else:
      assert keywords == own, name


@pytest.mark.parametrize('call, where', [
    (lambda: learning.LOSSES['focal'](gama=1.0), "loss 'focal'"),
    (lambda: learning.AGGREGATORS['principal'](ratio=0.5), "aggregator 'principal'"),
    (_builder(learning.build_fedld, ratio=0.5), 'build_fedld()'),
    (_builder(learning.build_fedmgc, weights_are_losses=False), 'build_fedmgc()'),
])
def test_an_unknown_option_is_named_with_the_accepted_ones(call, where):
  with pytest.raises(TypeError) as info:
    call()
  message = str(info.value)
  assert message.startswith(f'{where} got unexpected keyword arguments [') and 'it takes' in message


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


def _variant_call(diagnoses, variant):
  """(builder, keyword arguments, its hyperparameters) a diagnosis variant runs, untuned: the
  parent's builder (through parent variants) with the fixed arguments, or `build_process`."""
  if variant.ablation:
    process = {k: v for k, v in (('loss', variant.loss), ('aggregator', variant.aggregator)) if v}
    return learning.build_process, dict(process, **dict(variant.fixed)), hparams.PROCESS_HPARAMS
  parent = variant.parent or diagnoses
  if parent in hparams.VARIANTS:
    builder, kwargs, table = _variant_call(*hparams.VARIANTS[parent])
    return builder, dict(kwargs, **dict(variant.fixed)), table
  return learning.ALGORITHMS[parent], dict(variant.fixed), hparams.ALGORITHM_HPARAMS[parent]


def _variant_problems(diagnoses, variant):
  """Why `variant` of `diagnoses` is not a valid diagnosis, or []: its builder must accept what
  it fixes (every argument check passed), a hyperparameter in range and each value not the
  default (a variant that changes nothing diagnoses nothing)."""
  known = {*hparams.METHODS, *hparams.VARIANTS}
  if diagnoses not in hparams.METHODS or not {variant.parent, variant.baseline} <= {None, *known}:
    return [f'unknown method in {diagnoses!r} or {variant}']
  if variant.ablation and not (variant.loss in hparams.LOSS_HPARAMS
                               and variant.aggregator in hparams.AGGREGATOR_HPARAMS):
    return [f'unknown loss or aggregator in {variant}']
  builder, kwargs, table = _variant_call(diagnoses, variant)
  problems = []
  try:
    _builder(builder, **kwargs)()
    problems.append(f'{builder.__name__} composed nothing')   # never reached: _Built
  except _Built:
    pass
  except (TypeError, ValueError) as error:
    problems.append(f'{builder.__name__}({kwargs}): {error}')
  by_keyword = {h.keyword: h for h in table}
  parameters = inspect.signature(builder).parameters
  for keyword, value in variant.fixed:
    if keyword in by_keyword:
      default = by_keyword[keyword].default
      try:   # in range, and as the check returns it (5.0, not 5: a run's identity)
        checked = by_keyword[keyword].check(value)
        if type(checked) is not type(value) or checked != value:
          problems.append(f'{keyword}={value!r} is not normalized')
      except ValueError as error:
        problems.append(str(error))
    else:
      default = parameters[keyword].default if keyword in parameters else None
    if value == default:
      problems.append(f'{keyword}={value!r} is its default')
  for rate in (variant.client_lr, variant.server_lr):
    if rate is not None and not (isinstance(rate, float) and 0 < rate < math.inf):
      problems.append(f'learning rate {rate!r} is no finite float > 0')
  if not variant.changes:
    problems.append('changes nothing')
  return problems


@pytest.mark.parametrize('name', list(hparams.VARIANTS))
def test_each_variant_changes_arguments_its_builder_accepts(name):
  assert _variant_problems(*hparams.VARIANTS[name]) == []


def test_variant_names_are_unique_and_new():
  names = [v.name for spec in hparams.METHODS.values() for v in spec.variants]
  assert len(set(names)) == len(names) == len(hparams.VARIANTS)
  assert not set(names) & set(hparams.METHODS)


@pytest.mark.parametrize('diagnoses, variant', [
    ('fedld', hparams.Variant('x', fixed=(('revision', 'bogus'),))),      # out of range
    ('fedld', hparams.Variant('x', fixed=(('ratio', 0.5),))),             # no such argument
    ('fedld', hparams.Variant('x', fixed=(('preserve_norms', False),))),  # the default
    ('fedld', hparams.Variant('x', fixed=(('component_ratio', 1),))),     # 1 is not 1.0
    ('fedga', hparams.Variant('x', fixed=(('gamma', 2.0),))),             # another method's
    ('fedga', hparams.Variant('x', fixed=(('client_weighting', 'uniform'), ('x', 1)))),
    ('fedmgc', hparams.Variant('x', loss='ce', aggregator='median')),
    ('fedmgc', hparams.Variant('x', loss='ce', aggregator='dgc', fixed=(('gamma', 2.0),))),
    ('fedga', hparams.Variant('x', parent='fedga_bogus', fixed=(('form', 'paper'),))),
    ('fedld', hparams.Variant('x', server_lr=-1.0)),
    ('fedld', hparams.Variant('x')),
])
def test_a_bad_variant_is_found(diagnoses, variant):
  assert _variant_problems(diagnoses, variant)

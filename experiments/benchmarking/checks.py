"""The deeper checks of a `config.BenchmarkConfig` (your own data and models, the methods on
their builders and models, the per-dataset entries): `ConfigError` naming the flag."""

import functools
import re
from typing import Any, Callable, Collection, Mapping, Optional

from experiments import config as _M
from experiments.benchmarking import lookups
from experiments.benchmarking import methods as methods_lib
from tff_conflict import hparams as hparams_lib

ConfigError, must = _M.ConfigError, _M.must


def parsed(argument: str, name: str, own: Collection[str] = ()):
  """The regime (or, for 'methods', the method) `name`, or a `ConfigError` naming `argument`."""
  try:
    return (lookups.parse_regime(name, own) if argument != 'methods'
            else methods_lib.parse_method(name))
  except ValueError as e:
    raise ConfigError(argument, name, reason=str(e)) from None


_OWN_NAME = re.compile(r'^[A-Za-z0-9_.-]+$')
_OWN_ELEMENT = ('client data of unbatched examples OrderedDict(x=float32 tensor of a fixed '
                'shape, y=integer class label of shape [])')


def check_own(datasets: Mapping[str, tuple], model_fns: Mapping[str, Callable[[], Any]],
               models: Mapping[str, str]) -> None:
  """Your own datasets and models: new names, ClientData pairs, callables, a model for each."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import models as models_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict.data import regimes  # pylint: disable=g-import-not-at-top
  for argument, value, builtin in (('datasets', datasets, regimes.DATASETS),
                                   ('model_fns', model_fns, models_lib.MODELS)):
    must('a dict of name -> value', lambda v: isinstance(v, Mapping))(argument, value)
    for name in value:
      must('names of letters, digits, "_", "." and "-" other than the built-in ones '
           f'{sorted(builtin)}', lambda n: isinstance(n, str) and bool(_OWN_NAME.match(n))
           and n not in builtin)(argument, name)
  for name, pair in datasets.items():
    argument = f'datasets[{name!r}]'
    must('a pair (train, test) of tff.simulation.datasets.ClientData',
         lambda p: isinstance(p, (tuple, list)) and len(p) == 2
         and all(isinstance(c, tff.simulation.datasets.ClientData) for c in p))(argument, pair)
    specs = []
    for part, client_data in zip(('train', 'test'), pair):
      must('client data with at least one client', lambda c: bool(c.client_ids))(
          f'{argument} {part}', client_data)
      spec = client_data.element_type_structure
      must(_OWN_ELEMENT, lambda s: (
          isinstance(s, Mapping) and set(s) == {'x', 'y'}
          and all(type(t) is tf.TensorSpec for t in s.values())  # pylint: disable=unidiomatic-typecheck
          and s['x'].dtype == tf.float32 and s['x'].shape.rank
          and s['x'].shape.is_fully_defined() and s['y'].dtype.is_integer
          and s['y'].shape.rank == 0))(f'{argument} {part}', spec)
      specs.append(spec['x'])
    must(f'examples of the training data\'s x {specs[0]}', lambda s: s == specs[0])(
        f'{argument} test', specs[1])
    if name not in models and len(model_fns) != 1:
      raise ConfigError('models', dict(models), f'an entry for your dataset {name!r} (a name '
                        'of model_fns or of tff_conflict.models.MODELS), unless '
                        'model_fns holds one model')
  for name, model_fn in model_fns.items():
    must('a no-argument function returning a new uncompiled tf.keras.Model', callable)(
        f'model_fns[{name!r}]', model_fn)


def check_datasets(config, parsed_regimes) -> None:
  """The per-dataset entries name the regimes' datasets and hold valid values; one LEAF dataset
  at most, with its folder; --data_dir, --leaf_dir, --cache_dir only where a regime reads it."""
  from tff_conflict import models as models_lib  # pylint: disable=g-import-not-at-top
  datasets = {r.dataset for r in parsed_regimes}
  leaf = sorted(d for d in datasets if d.startswith('leaf_'))
  must(f'LEAF\'s data/<name> folder for the regimes of {leaf}', lambda v: not leaf or bool(v))(
      'leaf_dir', config.data.leaf_dir)
  must(f'regimes of one LEAF dataset (one --leaf_dir), not {leaf}', lambda _: len(leaf) <= 1)(
      'regimes', list(config.regimes))
  of_datasets = must(f'entries of the regimes\' datasets {sorted(datasets)}',
                     lambda entry: entry.partition(':')[0] in datasets)
  for dataset, model in config.models.items():
    of_datasets('models', f'{dataset}:{model}')
    _M.one_of(sorted(models_lib.MODELS) + sorted(config.model_fns))('models', model)
  for dataset, difference in config.detect.items():
    of_datasets('detect', f'{dataset}:{difference}')
    _M.FRACTION('detect', difference)
  for dataset, own in config.dataset_settings.items():
    for name, value in own.items():
      entry = f'{dataset}.{name}={value if name == "rounds" else "/".join(map(str, value))}'
      of_datasets('dataset_settings', f'{dataset}:{name}')
      must('an entry of rounds with --notune (only tuning searches a grid)', lambda _, n=name: (
          config.tune or n == 'rounds'))('dataset_settings', entry)
      valid = (value >= 1 if name == 'rounds' else
               bool(value) and all(_M.is_real(x) and x > 0 for x in value))
      must('entries with rounds >= 1 or grids of finite numbers > 0', lambda _, ok=valid: ok)(
          'dataset_settings', entry)
  from tff_conflict.data import registry  # pylint: disable=g-import-not-at-top
  for source in registry.SOURCES:   # LEAF's converted cache is under --cache_dir
    readers = [n for n, e in registry.DATASETS.items()
               if source == e.source or (source, e.source) == ('cache_dir', 'leaf_dir')]
    value = getattr(config.data, source)
    if value is not None and not set(readers) & datasets:
      raise ConfigError(source, value, reason=f'no regime reads it (only those of {readers} do, '
                        f'not of {sorted(datasets)}); drop it')
  for dataset, regime in config.tuning_regimes.items():
    tuned = parsed('tuning_regimes', regime, config.datasets)
    must('entries DATASET:REGIME with a regime of that dataset',
         lambda _: tuned.dataset == dataset)('tuning_regimes', f'{dataset}:{regime}')


def check_methods(config, resolved) -> None:
  """--grids apply, and every method's builder takes its fixed, given and grid values."""
  if config.grids and not config.tune:
    shown = ','.join(f'{m}.{k}={"/".join(map(str, v))}' for m, grid in config.grids.items()
                     for k, v in grid.items())
    raise ConfigError('grids', shown, reason='does not apply with --notune, which tunes nothing '
                      '(the method flags give the values); drop --grids or --notune')
  if config.grids and not config.tune_method_grids:
    raise ConfigError('grids', ','.join(config.grids), reason='does not apply with '
                      '--notune_method_grids, which searches no method\'s grid; drop one')
  for method in config.grids:
    _M.one_of([m.name for m in resolved])('grids', method)
  import inspect  # pylint: disable=g-import-not-at-top
  from experiments import experiment_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  for method in resolved:   # every argument its builder's, in range, fitting the optimizers
    if method.name in config.grids:
      method = method.with_grid(config.grids[method.name])
    given = methods_lib.given_kwargs(config.given, method)
    build = (learning.build_process if method.algorithm == methods_lib.CUSTOM
             else learning.ALGORITHMS[method.algorithm])
    parameters = inspect.signature(build).parameters
    ranges = methods_lib.hparam_ranges(method)   # with a composition's aggregator's
    named = {n for n, p in parameters.items() if p.kind != p.VAR_KEYWORD}
    open_ended = method.algorithm not in hparams_lib.METHODS and len(named) < len(parameters)
    fixed = dict(method.fixed)
    checks = [('methods', k, v) for k, v in fixed.items()]
    checks += [('grids', k, v) for k, values in method.grid for v in values]
    checks += [('methods', k, v) for k, v in given.items() if k not in fixed]
    for argument, keyword, value in checks:
      if not open_ended and keyword not in {*named, *ranges}:
        raise ConfigError(argument, method.name, reason=f'{keyword}={value!r}: its builder '
                          f'({method.algorithm}) takes no argument {keyword!r}')
      if keyword in ranges:
        try:
          ranges[keyword].check(value, name=f'{keyword} of method {method.name!r}')
        except ValueError as e:
          raise ConfigError(argument, method.name, reason=str(e)) from None
    error = experiment_lib.library_refusal(build, methods_lib.builder_kwargs(method, given),
                                           client=config.client, server=config.server)
    if error is None:
      continue
    words = {k: v for k, v in experiment_lib.ARGUMENT_WORDS.items() if k != 'client_weighting'}
    text = experiment_lib.in_flag_words(error, getattr(error, 'argument', None), words=words)
    if getattr(error, 'argument', None) == 'client_optimizer_fn':   # client SGD, its momentum
      raise ConfigError('client_momentum', config.client.momentum,
                        reason=f'not with --methods={method.name}: {text}')
    raise ConfigError('methods', method.name, reason=text)


def check_methods_on_models(config, resolved, regimes) -> None:
  """Every method can train each regime's model (`methods.model_refusal`)."""
  from tff_conflict import models as models_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  refusals: dict[tuple, Optional[str]] = {}
  for regime in regimes:
    model, own = lookups.model_of(config, regime.dataset), config.datasets.get(regime.dataset)
    try:   # the example shape before the data load (LEAF Synthetic's: its files')
      shape = (tuple(own[0].element_type_structure['x'].shape) if own
               else data.dataset_info(regime.dataset).element_shape)
    except ValueError:
      shape = None
    build = (config.model_fns[model] if model in config.model_fns else None if shape is None
             else functools.partial(models_lib.get(model), shape, 2))
    if build is None:
      continue
    for method in resolved:
      key = (method.algorithm, model, shape)
      if key not in refusals:
        try:
          refusals[key] = methods_lib.model_refusal(method, build)
        except ValueError:   # a model that does not fit the data: the run's own error says so
          refusals[key] = None
      if refusals[key]:
        raise ConfigError('methods', method.name, reason=(
            f'cannot run on regime {regime.name!r}, whose model is {model!r} (--models): '
            f'{refusals[key]} (e.g. --models={regime.dataset}:mlp)'))

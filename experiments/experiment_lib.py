"""The one run path of `train`, `compare` and the benchmark: `Runs.execute` builds, runs
(`training_loop`) and evaluates a process; `run_experiment` runs an `ExperimentConfig`."""

import functools
import inspect
import re
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from experiments import config as config_lib
from experiments import datasets
from tff_conflict.simulation import training_loop
from tff_conflict import hparams as hparams_lib
from tff_conflict import models as models_lib
from tff_conflict.simulation import rounds as rounds_lib

# Builder keyword -> flag, per algorithm, loss and aggregator (`tff_conflict.hparams`).
ALGORITHM_HPARAMS, LOSS_HPARAMS, AGGREGATOR_HPARAMS = (
    {name: hparams_lib.flag_table(table) for name, table in tables.items()}
    for tables in (hparams_lib.ALGORITHM_HPARAMS, hparams_lib.LOSS_HPARAMS,
                   hparams_lib.AGGREGATOR_HPARAMS))


def hparam_kwargs(table: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, Any]:
  """Builder keyword arguments from flag values, following `table` (keyword -> flag)."""
  return {keyword: values[flag] for keyword, flag in table.items()}


def population_kwargs(build: Callable[..., Any], train_data: Any) -> dict[str, Any]:
  """`num_clients=<the population>` for a builder that takes it (SCAFFOLD's N), else {}."""
  takes = 'num_clients' in inspect.signature(build).parameters
  return {'num_clients': len(train_data.client_ids)} if takes else {}


def build_optimizer(settings):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  optimizers = tff.learning.optimizers
  if settings.optimizer == 'sgd':
    return optimizers.build_sgdm(learning_rate=settings.learning_rate,
                                 momentum=settings.momentum or None)
  return getattr(optimizers, f'build_{settings.optimizer}')(learning_rate=settings.learning_rate)


def input_spec(train_data: Any, loop: config_lib.LoopConfig):
  first = train_data.create_tf_dataset_for_client(train_data.client_ids[0])
  return rounds_lib.preprocess(first, loop).element_spec


def process_arguments(builder: Callable[..., Any], kwargs: Mapping[str, Any], *,
                      client: config_lib.OptimizerConfig, server: config_lib.OptimizerConfig,
                      train_data: Any, loop: config_lib.LoopConfig) -> dict[str, Any]:
  """`builder`'s keywords besides the model: input spec, optimizers, population, `kwargs`."""
  return dict(input_spec=input_spec(train_data, loop), client_optimizer_fn=build_optimizer(client),
              server_optimizer_fn=build_optimizer(server),
              **population_kwargs(builder, train_data), **kwargs)


def pooled_arrays(client_data) -> tuple[np.ndarray, np.ndarray]:
  """(x, y) of every client's examples, concatenated; `ValueError` for none."""
  batches = list(client_data.create_tf_dataset_from_all_clients().batch(4096).as_numpy_iterator())
  if not batches:
    raise ValueError('a split of the data holds no examples')
  return tuple(np.concatenate([b[k] for b in batches]) for k in ('x', 'y'))


def _assigner(model: tf.keras.Model) -> Callable[[list], None]:
  """Assigns (trainable, then non-trainable) weights to `model` in one traced call."""
  variables = list(model.trainable_weights) + list(model.non_trainable_weights)

  def assign_all(values):
    for variable, value in zip(variables, values):
      variable.assign(value)

  return tf.function(assign_all, autograph=False,
                     input_signature=[[tf.TensorSpec(v.shape, v.dtype) for v in variables]])


class Runs:
  """Runs on one runtime, reusing processes, evaluation arrays and models (docs/design.md)."""

  def __init__(self, runtime: str = 'inprocess'):
    self._runtime = runtime
    self._processes: dict[Any, tuple] = {}
    self._arrays: dict[int, tuple] = {}
    self._models: dict[Any, tuple] = {}   # key -> (model, its assigner)
    self.build_seconds = 0.0
    self.confusion = None   # the confusion matrix of the last evaluation

  @property
  def num_processes(self) -> int:
    return len(self._processes)

  def _pooled(self, client_data) -> tuple[np.ndarray, np.ndarray]:
    if id(client_data) not in self._arrays:   # the data are kept: their id stays theirs
      self._arrays[id(client_data)] = (client_data, *pooled_arrays(client_data))
    return self._arrays[id(client_data)][1:]

  def evaluator(self, model_fn: Callable[[], tf.keras.Model], eval_data: Any, num_classes: int,
                *, model_key: Any = None, prefix: str = 'test', per_class: bool = True,
                train_data: Any = None, global_train: bool = False) -> tuple:
    """(evaluate, columns): model weights -> `evaluation.metrics_row` on the whole `eval_data`
    (`train_data`'s label counts, its loss with `global_train`) of `model_fn()`, cached under
    `model_key` and built at the first call."""
    from tff_conflict import evaluation  # pylint: disable=g-import-not-at-top
    cooccurrence = None
    counts = getattr(train_data, 'label_counts', None)
    if per_class and counts is not None and np.shape(counts)[-1] == num_classes:
      cooccurrence = evaluation.class_cooccurrence(counts)

    def evaluate(model_weights) -> dict[str, float]:
      x, y = self._pooled(eval_data)
      if model_key not in self._models:
        model = model_fn()
        self._models[model_key] = (model, _assigner(model))
      model, assign = self._models[model_key]
      assign(list(model_weights.trainable) + list(model_weights.non_trainable))
      row, confusion = evaluation.metrics_row(
          model, x, y, num_classes, prefix=prefix, per_class=per_class, cooccurrence=cooccurrence,
          train_arrays=self._pooled(train_data) if global_train else None)
      self.confusion = np.asarray(confusion).tolist()
      return row

    return evaluate, evaluation.metric_columns(
        num_classes, prefix=prefix, per_class=per_class, pair_errors=cooccurrence is not None,
        global_train=global_train)

  def execute(self, builder: Callable[..., Any], kwargs: Mapping[str, Any], model_fn, *,
              client: config_lib.OptimizerConfig, server: config_lib.OptimizerConfig,
              train_data: Any, eval_data: Any, num_classes: int, loop: config_lib.LoopConfig,
              experiment_dir: str,
              hparams: Mapping[str, Any], key: Any = None,
              start: Optional[Callable[[Any, Any], Any]] = None, model_key: Any = None,
              prefix: str = 'test', per_class: bool = True, global_train: bool = False,
              **loop_kwargs) -> tuple:
    """`run_training` of `builder(model_fn, ...)` (built once per `key`; None: each call), from
    `start(runner, initial state)` if given, evaluated on `eval_data` (`evaluator`)."""
    from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
    built = self._processes.get(key) if key is not None else None
    if built is None:
      began = time.monotonic()
      process = builder(model_fn, **process_arguments(builder, kwargs, client=client,
                                                       server=server, train_data=train_data,
                                                       loop=loop))
      runner = runtime.make_runner(process, self._runtime)
      built = (process, runner, runner.initialize())
      self.build_seconds += time.monotonic() - began
      # A Keras model created eagerly before TFF traces a model function is invalidated.
      self._models.clear()
      if key is not None:
        self._processes[key] = built
    process, runner, state = built
    if start is not None:
      state = start(runner, state)
    evaluate, columns = self.evaluator(model_fn, eval_data, num_classes, model_key=model_key,
                                       prefix=prefix, per_class=per_class,
                                       train_data=train_data, global_train=global_train)
    self.confusion = None
    return training_loop.run_training(
        process, train_data=train_data, evaluate_fn=evaluate, config=loop,
        experiment_dir=experiment_dir, hparams=hparams, runner=runner, initial_state=state,
        test_columns=columns, optional_hparams=config_lib.METHOD_FLAGS, **loop_kwargs)


def check_composition(algorithm: config_lib.AlgorithmConfig) -> None:
  """`ConfigError` for `--aggregator` unknown or on an algorithm whose builder takes none."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  builder = learning.ALGORITHMS.get(algorithm.name)
  if builder is None or algorithm.aggregator is None:
    return   # custom, or the builder's own check names the algorithm
  if 'aggregator' not in inspect.signature(builder).parameters:
    takers = [n for n, b in learning.ALGORITHMS.items()
              if 'aggregator' in inspect.signature(b).parameters]
    raise config_lib.ConfigError(
        'aggregator', algorithm.aggregator,
        reason=f'does not apply to --algorithm={algorithm.name}, whose builder fixes its '
        f'aggregator (the baselines that take one: {", ".join(takers)})')
  config_lib.one_of(list(AGGREGATOR_HPARAMS))('aggregator', algorithm.aggregator)


# The keywords `build_process` takes that every builder also takes and checks as it does.
_CORE_KEYWORDS = ('client_weighting', 'aggregator', 'aggregator_kwargs', 'clip_norm')


def library_refusal(builder: Callable[..., Any], kwargs: Mapping[str, Any], *,
                    client: config_lib.OptimizerConfig, server: config_lib.OptimizerConfig
                    ) -> Optional[Exception]:
  """The ValueError or TypeError of `builder(model_fn, **kwargs)` with these optimizers, or None:
  the builder's own checks, and `build_process`'s of the core keywords, run before any work
  (`learning.check_arguments` with `learning.ANY_MODEL`)."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  optimizers = dict(client_optimizer_fn=build_optimizer(client),
                    server_optimizer_fn=build_optimizer(server))
  population = ({'num_clients': 1} if 'num_clients' in inspect.signature(builder).parameters
                else {})
  core = {k: v for k, v in kwargs.items() if k in _CORE_KEYWORDS}
  calls = [(builder, {**optimizers, **population, **kwargs})]
  if builder is not learning.build_process:
    calls.append((learning.build_process, {**optimizers, **core}))
  for build, arguments in calls:
    try:
      learning.check_arguments(build, learning.ANY_MODEL, **arguments)
    except (ValueError, TypeError) as e:
      return e
  return None


# A refused builder argument's name in a binary's message.
ARGUMENT_WORDS = {'client_optimizer_fn': 'the client optimizer',
                  'server_optimizer_fn': 'the server optimizer',
                  'normalized_averaging (FedNova)': 'FedNova\'s normalised averaging',
                  'normalized_averaging': 'FedNova\'s normalised averaging',
                  'client_weighting': '--client_weighting'}


def in_flag_words(error: Exception, argument: Optional[str] = None,
                  words: Mapping[str, str] = ARGUMENT_WORDS) -> str:
  """`error`'s message on one line, builder arguments named in `words`, 'argument: ' dropped."""
  text = ' '.join(str(error).split())
  if argument and text.startswith(f'{argument}: '):
    text = text[len(argument) + 2:]
  for name, said in words.items():
    text = re.sub(rf'(?<![\w-]){re.escape(name)}(?!\w)', said, text)
  return text


def check_method(config: config_lib.ExperimentConfig) -> None:
  """`ConfigError` naming the flag whose setting `config.algorithm`'s builder refuses."""
  builder, kwargs = method_of(config)
  error = library_refusal(getattr(builder, '__wrapped__', builder), kwargs,
                          client=config.client, server=config.server)
  if error is None:
    return
  algorithm, weighting = config.algorithm, config.training.weighting
  argument = getattr(error, 'argument', None)
  # What is refused where no setting is named: the composition, else the algorithm.
  composition = (('aggregator', algorithm.aggregator) if algorithm.aggregator is not None
                 else ('algorithm', algorithm.name))
  # An optimizer refused: --<side>_momentum for SGD with momentum, else --<side>_optimizer.
  flags = {f'{side}_optimizer_fn': (f'{side}_momentum', opt.momentum)
           if opt.optimizer == 'sgd' and opt.momentum else (f'{side}_optimizer', opt.optimizer)
           for side, opt in (('client', config.client), ('server', config.server))}
  flags.update(client_weighting=('client_weighting', weighting),
               normalized_averaging=('client_weighting', weighting) if weighting == 'loss'
               else composition)
  for table in (ALGORITHM_HPARAMS.get(algorithm.name, {}),
                AGGREGATOR_HPARAMS.get(algorithm.aggregator, {}),
                LOSS_HPARAMS.get(algorithm.client_loss, {})):
    flags.update((k, (flag, getattr(config.hparams, flag))) for k, flag in table.items())
  flag, value = flags.get(argument, composition)
  method = ' '.join(p for p in algorithm.describe().split() if not p.startswith(f'--{flag}='))
  if flag != 'algorithm' and getattr(error, 'requirement', None) is not None:
    raise config_lib.ConfigError(flag, value, f'{error.requirement} with {method}')
  where = '' if flag == 'algorithm' else f'not with {method}: '
  raise config_lib.ConfigError(flag, value, reason=where + in_flag_words(error, argument))


def method_of(config: config_lib.ExperimentConfig) -> tuple[Callable[..., Any], dict[str, Any]]:
  """(builder, keyword arguments) of `config.algorithm` (`learning.ALGORITHMS[name]`, or
  `learning.build_process` for 'custom'); the builder's ValueError, an unknown name or a proximal
  term for a builder without one become a `ConfigError`."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  algorithm = config.algorithm
  values = dict(vars(config.hparams), seed=config.seed)
  kwargs = {'client_weighting': config.training.weighting} if config.training.weighting else {}
  if algorithm.name == config_lib.CUSTOM_ALGORITHM:
    loss, aggregator = algorithm.client_loss, algorithm.aggregator
    config_lib.one_of(list(LOSS_HPARAMS))('client_loss', loss)
    config_lib.one_of(list(AGGREGATOR_HPARAMS))('aggregator', aggregator)
    builder = learning.build_process
    kwargs.update(loss=loss, loss_kwargs=hparam_kwargs(LOSS_HPARAMS[loss], values),
                  aggregator=aggregator,
                  aggregator_kwargs=hparam_kwargs(AGGREGATOR_HPARAMS[aggregator], values),
                  proximal_strength=(config.hparams.proximal_strength
                                     if algorithm.proximal_term else 0.0),
                  clip_norm=config.hparams.client_clip_norm)
  else:
    config_lib.one_of(list(learning.ALGORITHMS) + [config_lib.CUSTOM_ALGORITHM])(
        'algorithm', algorithm.name)
    builder = learning.ALGORITHMS[algorithm.name]
    kwargs.update(hparam_kwargs(ALGORITHM_HPARAMS.get(algorithm.name, {}), values))
    if algorithm.proximal_term:
      if 'proximal_strength' not in inspect.signature(builder).parameters:
        raise config_lib.ConfigError(
            'proximal_strength', config.hparams.proximal_strength,
            reason=f'does not apply to --algorithm={algorithm.name}, whose builder has no '
            'proximal term')
      kwargs['proximal_strength'] = config.hparams.proximal_strength
    if algorithm.aggregator is not None:
      check_composition(algorithm)
      kwargs.update(aggregator=algorithm.aggregator, aggregator_kwargs=hparam_kwargs(
          AGGREGATOR_HPARAMS[algorithm.aggregator], values))

  @functools.wraps(builder)
  def attributed(*args, **kw):
    try:
      return builder(*args, **kw)
    except config_lib.ConfigError:
      raise
    except ValueError as e:
      raise config_lib.from_library_error(e, 'algorithm', algorithm.label) from e
  return attributed, kwargs


def model_name(config: config_lib.ExperimentConfig) -> str:
  return config.model or datasets.default_model(config.data)


def model_of(config: config_lib.ExperimentConfig, train: Any) -> tuple:
  """(model function seeded by `config.seed`, classes) on `train`."""
  classes = datasets.num_classes(config.data)
  return functools.partial(models_lib.get(model_name(config)),
                           tuple(train.element_type_structure['x'].shape), classes,
                           seed=config.seed), classes


def load_task(config: config_lib.ExperimentConfig,
              algorithms: Optional[Sequence[str]] = None) -> tuple[Any, Any]:
  """(train, test) of `config`; `ConfigError` for data the loader refuses, a model unknown, unfit
  for the inputs or for one of `algorithms` (default `config`'s), or clients_per_round above the
  population."""
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  train, test = datasets.load(config.data)
  name = model_name(config)
  config_lib.one_of(sorted(models_lib.MODELS))('model', name)
  if config.training.clients_per_round > len(train.client_ids):
    raise config_lib.ConfigError(
        'clients_per_round', config.training.clients_per_round,
        f'at most the {len(train.client_ids)} clients of dataset {config.data.dataset!r}')
  model_fn, _ = model_of(config, train)
  with tf.Graph().as_default():  # keep the eager context clean (BUILD_NOTES.md, Keras pitfalls)
    try:
      model = model_fn()
    except ValueError as e:
      raise config_lib.ConfigError(
          'model', name,
          reason=f'cannot take the inputs of --dataset={config.data.dataset} (shape '
          f'{model_fn.args[0]}): {e}') from None
    try:   # FedDecorr cannot train a classifier of the input
      if 'feddecorr' in ((config.algorithm.name,) if algorithms is None else algorithms):
        learning.check_trained_representation(model)
    except ValueError as e:
      raise config_lib.ConfigError('model', name, reason=f'--algorithm=feddecorr cannot train '
                                   f'it: {e}') from None
  return train, test


def hparams_record(config: config_lib.ExperimentConfig, **extra: Any) -> dict[str, Any]:
  """hparams.csv of a run of `config`: each setting under its flag's name, `extra`, provenance."""
  return {**config.flag_values(), **extra, **training_loop.provenance()}


def run_experiment(config: config_lib.ExperimentConfig, *, task: Optional[tuple] = None,
                   runs: Optional[Runs] = None, experiment_dir: Optional[str] = None,
                   label: Optional[str] = None, **loop_kwargs) -> tuple:
  """`Runs.execute` of `config` on `task` (default `load_task(config)`) into `experiment_dir`."""
  train, test = load_task(config) if task is None else task
  builder, kwargs = method_of(config)
  model_fn, classes = model_of(config, train)
  runs = runs or Runs(config.output.runtime)
  return runs.execute(
      builder, kwargs, model_fn, client=config.client, server=config.server, train_data=train,
      eval_data=test, num_classes=classes, loop=config.training,
      experiment_dir=experiment_dir or config.experiment_dir, hparams=hparams_record(config),
      global_train=config.training.eval_train_loss,
      label=config.algorithm.label if label is None else label,
      show_progress=config.output.progress, **loop_kwargs)

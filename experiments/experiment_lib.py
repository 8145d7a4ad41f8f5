"""From an `ExperimentConfig` to the parts of a run: data, model, learning process, evaluation,
runner, and the whole run.

The binaries build the config from their flags (`flags_lib.experiment_config()`); other code
builds one directly (`experiments.config`) and needs no flags:

  config = ExperimentConfig(algorithm=AlgorithmConfig('fedgh'),
                            training=LoopConfig(rounds=5, clients_per_round=10))
  task = load_task(config)                      # ClientData, input spec, Keras model fn
  result = run_experiment(config, task=task)    # process, runner, evaluation, run loop

or step by step:

  process = build_process(config, task)         # tff_conflict.learning.ALGORITHMS / build_process
  evaluate_fn, columns = make_evaluate_fn(task) # tff_conflict.evaluation on the test split
  runner = make_runner(process, config)         # config.runtime
  training_loop.run_training(process, ..., config=config.training, ...)

Errors that a setting causes are raised as `config.ConfigError` naming the setting's flag (a
model that cannot take the dataset's inputs, more clients per round than the population), or
as the library's own `ValueError` / `FileNotFoundError` for the data; the binaries print either
as one line naming the flag (`experiments.cli`).

Every function also accepts the older flag-value mapping (`FLAGS.flag_values_dict()`) in place of
the config; it is converted with `config.from_flag_values`.
"""

import collections
import contextlib
import dataclasses
import functools
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TextIO, Union

import numpy as np
import tensorflow as tf

from experiments import config as config_lib
from experiments import metrics_io
from experiments import models
from experiments import registry
from experiments import training_loop

ConfigLike = Union[config_lib.ExperimentConfig, Mapping[str, Any]]


@dataclasses.dataclass
class Task:
  """The data and model of an experiment.

  Attributes:
    train_data: `ClientData` of unbatched `OrderedDict(x, y)` examples.
    test_data: `ClientData` of the test split.
    input_spec: element spec of a client batch.
    num_classes: classes of the labels.
    model_name: the model's name in `experiments.models.MODELS`.
    keras_model_fn: no-argument callable returning a new uncompiled Keras model (seeded).
  """
  train_data: Any
  test_data: Any
  input_spec: Any
  num_classes: int
  model_name: str
  keras_model_fn: Callable[[], tf.keras.Model]


def as_config(config: ConfigLike) -> config_lib.ExperimentConfig:
  """`config` itself, or the config of a flag-value mapping."""
  if isinstance(config, config_lib.ExperimentConfig):
    return config
  return config_lib.from_flag_values(config)


def data_options(config: ConfigLike) -> config_lib.DataConfig:
  return as_config(config).data


def loop_config(config: ConfigLike) -> config_lib.LoopConfig:
  return as_config(config).training


def load_data(data: config_lib.DataConfig) -> tuple[Any, Any]:
  """(train, test) `ClientData` of the dataset (`registry.DATASETS`).

  Raises:
    config.ConfigError: the loader refused a setting or what it points at (too many clients, a
      missing or malformed data file: the loaders' ValueError and OSError); the message is the
      loader's in the flags' words (`--num_clients must be at most 359 ...`), or after
      `--dataset=<name>: `.
  """
  spec = registry.DATASETS[data.dataset]
  try:
    return spec.load(data)
  except (ValueError, OSError) as e:
    # The loaders raise these for what the settings point at (sizes, folders, files), naming it.
    context = f'--dataset={data.dataset}'
    error = config_lib.from_library_error(e, spec.arguments, field='dataset', value=data.dataset,
                                          context=context)
    if error is None:
      error = config_lib.ConfigError('dataset', data.dataset, flag='dataset',
                                     message=f'{context}: {" ".join(str(e).split())}')
    raise error from e


def load_task(config: ConfigLike, *, data: Optional[tuple[Any, Any]] = None) -> Task:
  """Loads the dataset (unless `data` = (train, test) is given) and picks the model.

  The model is built once here (in a scratch graph) to check that it takes the dataset's inputs.

  Raises:
    config.ConfigError: an unknown model, a model that cannot take the inputs, or
      clients_per_round larger than the population.
    ValueError, FileNotFoundError: from the data loaders (`tff_conflict.data`).
  """
  config = as_config(config)
  spec = registry.DATASETS[config.data.dataset]
  train, test = load_data(config.data) if data is None else data
  model_name = config.model.name or spec.default_model_for(config.data)
  if model_name not in models.MODELS:
    raise config_lib.ConfigError('name', model_name, f'one of {sorted(models.MODELS)}',
                                 flag='model')
  num_clients = len(train.client_ids)
  if config.training.clients_per_round > num_clients:
    raise config_lib.ConfigError(
        'clients_per_round', config.training.clients_per_round,
        f'at most the {num_clients} clients of dataset {config.data.dataset!r}',
        flag='clients_per_round')
  example = training_loop.preprocess(train.create_tf_dataset_for_client(train.client_ids[0]),
                                     config.training)
  input_spec = example.element_spec
  num_classes = spec.num_classes(config.data)
  input_shape = tuple(input_spec['x'].shape[1:])
  keras_model_fn = functools.partial(models.get(model_name), input_shape, num_classes,
                                     seed=config.seed)
  with tf.Graph().as_default():  # keep the eager context clean (BUILD_NOTES.md, Keras pitfalls)
    try:
      keras_model_fn()
    except ValueError as e:
      raise config_lib.ConfigError(
          'name', model_name, flag='model',
          message=f'--model={model_name} cannot take the inputs of --dataset='
          f'{config.data.dataset} (shape {input_shape}): {e}') from None
  return Task(train_data=train, test_data=test, input_spec=input_spec, num_classes=num_classes,
              model_name=model_name, keras_model_fn=keras_model_fn)


def build_process(config: ConfigLike, task: Task):
  """The learning process of `config.algorithm` with the config's optimizers and hyperparameters.

  A named algorithm is `tff_conflict.learning.ALGORITHMS[name]` with its hyperparameters
  (`registry.ALGORITHM_HPARAMS`); 'custom' is `tff_conflict.learning.build_process` with
  `client_loss`, `aggregator` (their hyperparameters from the same `MethodHparams`) and the FedProx
  term when `algorithm.proximal_term` is set.

  Raises:
    config.ConfigError: an algorithm, loss or aggregator that is not registered, or a builder's
      error about one of its arguments, naming the argument's flag (`registry.builder_flags`).
    ValueError: other builder errors.
  """
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  config = as_config(config)
  algorithm = config.algorithm
  hparams = dict(dataclasses.asdict(config.hparams), seed=config.seed)
  common = dict(input_spec=task.input_spec,
                client_optimizer_fn=registry.build_optimizer(config.client),
                server_optimizer_fn=registry.build_optimizer(config.server))
  if config.client.weighting:
    common['client_weighting'] = config.client.weighting
  if algorithm.name == config_lib.CUSTOM_ALGORITHM:
    loss, aggregator = algorithm.client_loss, algorithm.aggregator
    if loss not in registry.LOSS_HPARAMS:
      raise config_lib.ConfigError('client_loss', loss, f'one of {list(registry.LOSS_HPARAMS)}',
                                   flag='client_loss')
    if aggregator not in registry.AGGREGATOR_HPARAMS:
      raise config_lib.ConfigError('aggregator', aggregator,
                                   f'one of {list(registry.AGGREGATOR_HPARAMS)}',
                                   flag='aggregator')
    proximal = config.hparams.proximal_strength if algorithm.proximal_term else 0.0
    with _builder_errors(algorithm):
      return learning.build_process(
          task.keras_model_fn, loss=loss,
          loss_kwargs=registry.hparam_kwargs(registry.LOSS_HPARAMS[loss], hparams),
          aggregator=aggregator,
          aggregator_kwargs=registry.hparam_kwargs(registry.AGGREGATOR_HPARAMS[aggregator],
                                                   hparams),
          proximal_strength=proximal, clip_norm=config.hparams.client_clip_norm, **common)
  if algorithm.name not in learning.ALGORITHMS:
    raise config_lib.ConfigError(
        'name', algorithm.name,
        f'one of {list(learning.ALGORITHMS)} or {config_lib.CUSTOM_ALGORITHM!r}', flag='algorithm')
  kwargs = registry.hparam_kwargs(registry.ALGORITHM_HPARAMS.get(algorithm.name, {}), hparams)
  with _builder_errors(algorithm):
    return learning.ALGORITHMS[algorithm.name](task.keras_model_fn, **common, **kwargs)


@contextlib.contextmanager
def _builder_errors(algorithm: config_lib.AlgorithmConfig) -> Iterator[None]:
  """Re-raises a builder's ValueError about one of its arguments as a ConfigError naming the
  argument's flag."""
  try:
    yield
  except config_lib.ConfigError:
    raise
  except ValueError as e:
    error = config_lib.from_library_error(e, registry.builder_flags(algorithm))
    if error is None:
      raise
    raise error from e


def build_algorithm(values: ConfigLike, task: Task, algorithm: Optional[str] = None):
  """`build_process` of `values` with `algorithm` (a named method) in place of its own, if given."""
  config = as_config(values)
  if algorithm is not None:
    config = config.replace(algorithm=config_lib.AlgorithmConfig(algorithm))
  return build_process(config, task)


def _test_arrays(test_data) -> tuple[np.ndarray, np.ndarray]:
  dataset = test_data.create_tf_dataset_from_all_clients().batch(4096)
  xs, ys = [], []
  for batch in dataset.as_numpy_iterator():
    xs.append(batch['x'])
    ys.append(batch['y'])
  return np.concatenate(xs), np.concatenate(ys)


PAIR_ERROR_COLUMNS = ('test_rare_pair_error', 'test_common_pair_error', 'test_rare_error_share')
GLOBAL_TRAIN_COLUMNS = ('global_train_loss', 'global_train_accuracy')


def make_evaluate_fn(task: Task, *, train_loss: bool = False
                     ) -> tuple[Callable[[Any], Mapping[str, float]], tuple[str, ...]]:
  """An evaluation of model weights on the whole test split, and the columns it fills.

  Call it after the learning process was built (it creates a Keras model eagerly; see
  BUILD_NOTES.md, Keras pitfalls). Columns: `test_accuracy`, `test_loss`, `test_macro_f1`,
  `test_mean_logit` (`tff_conflict.evaluation`: the mean logit, whose drift shows a loss that is
  not invariant to shifting all logits), `test_class_accuracy/<k>` per class and, when the training ClientData stores its label counts
  (the partitioned datasets: digits, synthetic, tfds), the errors split by how much the true and
  predicted classes share clients in the training partition
  (`tff_conflict.evaluation.confusion_by_cooccurrence`): `test_rare_pair_error`,
  `test_common_pair_error`, `test_rare_error_share`.

  With `train_loss=True` it also evaluates the model on the union of the clients' training data
  (one more pass over it per evaluation): `global_train_loss` and `global_train_accuracy`, the
  global objective `sum_k n_k/n F_k(w)` that the FedProx paper plots as "training loss" (Li et
  al., MLSys 2020, Fig. 1-2). The clients' own `train_loss` is not that: it is measured during
  local training, on the local models.
  """
  from tff_conflict import evaluation  # pylint: disable=g-import-not-at-top
  x, y = _test_arrays(task.test_data)
  train_x, train_y = _test_arrays(task.train_data) if train_loss else (None, None)
  model = task.keras_model_fn()
  columns = training_loop.TEST_COLUMNS + ('test_mean_logit',) + tuple(
      f'test_class_accuracy/{k}' for k in range(task.num_classes))
  label_counts = getattr(task.train_data, 'label_counts', None)
  cooccurrence = None
  if label_counts is not None and np.shape(label_counts)[-1] == task.num_classes:
    cooccurrence = evaluation.class_cooccurrence(label_counts)
    columns += PAIR_ERROR_COLUMNS
  if train_loss:
    columns += GLOBAL_TRAIN_COLUMNS

  def evaluate(model_weights) -> Mapping[str, float]:
    model_weights.assign_weights_to(model)
    result = evaluation.evaluate_arrays(model, x, y, num_classes=task.num_classes)
    out = collections.OrderedDict(test_accuracy=float(result['accuracy']),
                                  test_loss=float(result['loss']),
                                  test_macro_f1=float(result['macro_f1']),
                                  test_mean_logit=float(result['mean_logit']))
    for k, value in enumerate(np.asarray(result['per_class_accuracy']).reshape(-1)):
      out[f'test_class_accuracy/{k}'] = float(value)
    if cooccurrence is not None:
      pairs = evaluation.confusion_by_cooccurrence(result['confusion_matrix'], cooccurrence)
      for column in PAIR_ERROR_COLUMNS:
        out[column] = pairs[column[len('test_'):]]
    if train_loss:
      on_train = evaluation.evaluate_arrays(model, train_x, train_y, num_classes=task.num_classes)
      out['global_train_loss'] = float(on_train['loss'])
      out['global_train_accuracy'] = float(on_train['accuracy'])
    return out

  return evaluate, columns


def make_runner(process, config: ConfigLike):
  """The object that runs `process` for `config.runtime` (the process itself for the default
  local C++ runtime or remote workers; an in-process runner for 'inprocess')."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  return runtime.make_runner(process, as_config(config).runtime.runtime)


def install_context(config: ConfigLike) -> None:
  """Installs TFF's execution context: remote workers for `config.runtime.workers`, else the
  local one (`tff_conflict.runtime.set_local_context`, which the binaries call first)."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  workers = list(as_config(config).runtime.workers)
  if workers:
    runtime.set_remote_context(workers)


def hparams_record(config: config_lib.ExperimentConfig, **extra: Any) -> dict[str, Any]:
  """What hparams.csv records for a run of `config`: every setting under its flag's name, then
  `extra`, package versions and the git commit (`metrics_io.provenance`)."""
  values = config.flag_values()
  values.update(extra)
  values.update(metrics_io.provenance())
  return values


def run_experiment(config: config_lib.ExperimentConfig, *, task: Optional[Task] = None,
                   experiment_dir: Optional[str] = None,
                   hparams: Optional[Mapping[str, Any]] = None, label: Optional[str] = None,
                   stream: Optional[TextIO] = None,
                   test_columns: Optional[Sequence[str]] = None) -> training_loop.RunResult:
  """Trains `config`'s method on its task, with evaluation, metrics and checkpoints.

  Args:
    config: the settings.
    task: the loaded task (default: `load_task(config)`); share one between runs on the same
      data and seed.
    experiment_dir: where the outputs go (default `config.experiment_dir`).
    hparams: what hparams.csv records (default `hparams_record(config)`).
    label: shown in the progress output (default the method's label).
    stream: where progress and notices go (default stdout).
    test_columns: the evaluation's columns (default those of `make_evaluate_fn`).

  Returns:
    `training_loop.RunResult`.
  """
  task = load_task(config) if task is None else task
  process = build_process(config, task)
  runner = make_runner(process, config)
  # After the process (Keras pitfalls).
  evaluate_fn, columns = make_evaluate_fn(task, train_loss=config.training.eval_train_loss)
  return training_loop.run_training(
      process, train_data=task.train_data, evaluate_fn=evaluate_fn, config=config.training,
      experiment_dir=experiment_dir or config.experiment_dir,
      hparams=hparams_record(config) if hparams is None else hparams, runner=runner,
      label=config.algorithm.label if label is None else label,
      show_progress=config.output.progress, stream=stream,
      test_columns=columns if test_columns is None else test_columns)

"""From an `ExperimentConfig` to the parts of a run (data, model, learning process, evaluation,
runner) and the whole run (`run_experiment`); a bad setting raises a `config.ConfigError` first."""

import collections
import dataclasses
import functools
import inspect
from typing import Any, Callable, Mapping, Optional, Sequence, TextIO, Union

import numpy as np
import tensorflow as tf

from experiments import architectures
from experiments import config as config_lib
from experiments import datasets
from experiments import metrics_io
from experiments import training_loop
from tff_conflict import hparams as hparams_lib

CUSTOM_ALGORITHM = config_lib.CUSTOM_ALGORITHM

# Builder keyword -> flag, per algorithm of tff_conflict.learning.ALGORITHMS (`seed` is --seed),
# per loss and per aggregator, from tff_conflict.hparams (hyperparameters without a flag, such as
# DGC's weights_are_losses, keep their defaults).
ALGORITHM_HPARAMS: dict[str, dict[str, str]] = {
    name: hparams_lib.flag_table(table) for name, table in hparams_lib.ALGORITHM_HPARAMS.items()}
LOSS_HPARAMS: dict[str, dict[str, str]] = {
    name: hparams_lib.flag_table(table) for name, table in hparams_lib.LOSS_HPARAMS.items()}
AGGREGATOR_HPARAMS: dict[str, dict[str, str]] = {
    name: hparams_lib.flag_table(table) for name, table in hparams_lib.AGGREGATOR_HPARAMS.items()}


def hparam_kwargs(table: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, Any]:
  """Builder keyword arguments from flag values, following `table` (keyword -> flag)."""
  return {keyword: values[flag] for keyword, flag in table.items()}


def population_kwargs(build: Callable[..., Any], train_data: Any) -> dict[str, Any]:
  """`num_clients=<the population's size>` for a builder that takes the federation's size
  (SCAFFOLD's N), else nothing."""
  if 'num_clients' in inspect.signature(build).parameters:
    return {'num_clients': len(train_data.client_ids)}
  return {}


def _tff():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff


def build_optimizer(settings: Union[config_lib.ClientConfig, config_lib.ServerConfig]):
  """The `tff.learning.optimizers.Optimizer` of a client or server config (momentum: sgd only)."""
  optimizers = _tff().learning.optimizers
  if settings.optimizer == 'sgd':
    return optimizers.build_sgdm(learning_rate=settings.learning_rate,
                                 momentum=settings.momentum or None)
  return getattr(optimizers, f'build_{settings.optimizer}')(learning_rate=settings.learning_rate)


@dataclasses.dataclass
class Task:
  """The data and model of an experiment.

  Attributes:
    train_data: `ClientData` of unbatched `OrderedDict(x, y)` examples.
    test_data: `ClientData` of the test split.
    input_spec: element spec of a client batch.
    num_classes: classes of the labels.
    model_name: the model's name in `experiments.architectures.MODELS`.
    keras_model_fn: no-argument callable returning a new uncompiled Keras model (seeded).
  """
  train_data: Any
  test_data: Any
  input_spec: Any
  num_classes: int
  model_name: str
  keras_model_fn: Callable[[], tf.keras.Model]


def load_task(config: config_lib.ExperimentConfig, *,
              data: Optional[tuple[Any, Any]] = None) -> Task:
  """Loads the dataset (unless `data` = (train, test) is given) and picks the model.

  The model is built once here (in a scratch graph) to check that it takes the dataset's inputs.

  Raises:
    config.ConfigError: a dataset the loader refuses (`datasets.load`), an unknown model, a model
      that cannot take the inputs, or clients_per_round larger than the population.
  """
  train, test = datasets.load(config.data) if data is None else data
  model_name = config.model.name or datasets.default_model(config.data)
  config_lib.require('model', model_name, config_lib.one_of(sorted(architectures.MODELS)),
                     field='name')
  num_clients = len(train.client_ids)
  if config.training.clients_per_round > num_clients:
    raise config_lib.ConfigError(
        'clients_per_round', config.training.clients_per_round,
        f'at most the {num_clients} clients of dataset {config.data.dataset!r}')
  example = training_loop.preprocess(train.create_tf_dataset_for_client(train.client_ids[0]),
                                     config.training)
  input_spec = example.element_spec
  num_classes = datasets.num_classes(config.data)
  input_shape = tuple(input_spec['x'].shape[1:])
  keras_model_fn = functools.partial(architectures.get(model_name), input_shape, num_classes,
                                     seed=config.seed)
  with tf.Graph().as_default():  # keep the eager context clean (BUILD_NOTES.md, Keras pitfalls)
    try:
      keras_model_fn()
    except ValueError as e:
      raise config_lib.ConfigError(
          'model', model_name, field='name',
          reason=f'cannot take the inputs of --dataset={config.data.dataset} (shape '
          f'{input_shape}): {e}') from None
  return Task(train_data=train, test_data=test, input_spec=input_spec, num_classes=num_classes,
              model_name=model_name, keras_model_fn=keras_model_fn)


def check_composition(algorithm: config_lib.AlgorithmConfig) -> None:
  """Refuses `--aggregator` on a named algorithm whose builder takes none, or an unknown one.

  Raises:
    config.ConfigError: naming --aggregator, its value and the builders that take one.
  """
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  if algorithm.name == CUSTOM_ALGORITHM or algorithm.aggregator is None:
    return
  builder = learning.ALGORITHMS.get(algorithm.name)
  if builder is None:
    return   # the builder's own check names the algorithm
  if 'aggregator' not in inspect.signature(builder).parameters:
    takers = [n for n, b in learning.ALGORITHMS.items()
              if 'aggregator' in inspect.signature(b).parameters]
    raise config_lib.ConfigError(
        'aggregator', algorithm.aggregator,
        reason=f'does not apply to --algorithm={algorithm.name}, whose builder fixes its '
        f'aggregator (the baselines that take one: {", ".join(takers)})')
  config_lib.require('aggregator', algorithm.aggregator,
                     config_lib.one_of(list(AGGREGATOR_HPARAMS)))


def build_process(config: config_lib.ExperimentConfig, task: Task):
  """The learning process of `config.algorithm` with the config's optimizers and hyperparameters.

  A named algorithm is `tff_conflict.learning.ALGORITHMS[name]` with its hyperparameters
  (`ALGORITHM_HPARAMS`), and `proximal_strength` when `algorithm.proximal_term` adds FedProx's
  term to it (its builder's keyword, passed to `tff_conflict.learning.build_process`); 'custom'
  is `tff_conflict.learning.build_process` with `client_loss`, `aggregator` (their
  hyperparameters from the same `MethodHparams`) and the FedProx term when
  `algorithm.proximal_term` is set.

  Raises:
    config.ConfigError: an algorithm, loss or aggregator that is not registered, a proximal
      term for a builder without a `proximal_strength` argument, or a builder's ValueError,
      attributed to the algorithm (`--algorithm=<name>: <the builder's message>`).
  """
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  algorithm = config.algorithm
  hparams = dict(dataclasses.asdict(config.hparams), seed=config.seed)
  common = dict(input_spec=task.input_spec,
                client_optimizer_fn=build_optimizer(config.client),
                server_optimizer_fn=build_optimizer(config.server))
  if config.client.weighting:
    common['client_weighting'] = config.client.weighting
  if algorithm.name == CUSTOM_ALGORITHM:
    loss, aggregator = algorithm.client_loss, algorithm.aggregator
    config_lib.require('client_loss', loss, config_lib.one_of(list(LOSS_HPARAMS)))
    config_lib.require('aggregator', aggregator, config_lib.one_of(list(AGGREGATOR_HPARAMS)))
    proximal = config.hparams.proximal_strength if algorithm.proximal_term else 0.0
    build = functools.partial(
        learning.build_process, task.keras_model_fn, loss=loss,
        loss_kwargs=hparam_kwargs(LOSS_HPARAMS[loss], hparams), aggregator=aggregator,
        aggregator_kwargs=hparam_kwargs(AGGREGATOR_HPARAMS[aggregator], hparams),
        proximal_strength=proximal, clip_norm=config.hparams.client_clip_norm, **common)
  else:
    config_lib.require('algorithm', algorithm.name,
                       config_lib.one_of(list(learning.ALGORITHMS) + [CUSTOM_ALGORITHM]),
                       field='name')
    builder = learning.ALGORITHMS[algorithm.name]
    kwargs = hparam_kwargs(ALGORITHM_HPARAMS.get(algorithm.name, {}), hparams)
    if algorithm.adds_proximal_term:
      if 'proximal_strength' not in inspect.signature(builder).parameters:
        raise config_lib.ConfigError(
            'proximal_strength', config.hparams.proximal_strength,
            reason=f'does not apply to --algorithm={algorithm.name}, whose builder has no '
            'proximal term')
      kwargs['proximal_strength'] = config.hparams.proximal_strength
    if algorithm.aggregator is not None:
      check_composition(algorithm)
      kwargs.update(aggregator=algorithm.aggregator, aggregator_kwargs=hparam_kwargs(
          AGGREGATOR_HPARAMS[algorithm.aggregator], hparams))
    build = functools.partial(builder, task.keras_model_fn, **common, **kwargs,
                              **population_kwargs(builder, task.train_data))
  try:
    return build()
  except config_lib.ConfigError:
    raise
  except ValueError as e:
    raise config_lib.from_library_error(e, 'algorithm', algorithm.label) from e


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


def make_runner(process, config: config_lib.ExperimentConfig):
  """The object that runs `process` for `config.runtime`: an in-process runner for the default
  'inprocess', the process itself for 'cpp' (TFF's local C++ runtime or remote workers)."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  return runtime.make_runner(process, config.runtime.runtime)


def install_context(config: config_lib.ExperimentConfig) -> None:
  """Installs TFF's execution context: remote workers for `config.runtime.workers`, else the
  local one (`tff_conflict.runtime.set_local_context`, which the binaries call first)."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  workers = list(config.runtime.workers)
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
                   test_columns: Optional[Sequence[str]] = None,
                   release_managers: Sequence[Any] = ()) -> training_loop.RunResult:
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
    release_managers: more `tff.program.ReleaseManager`s for each round's measurements
      (`training_loop.run_training`).

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
      test_columns=columns if test_columns is None else test_columns,
      release_managers=release_managers)

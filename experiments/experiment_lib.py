"""From flag values to the parts of a run: data, model, learning process, evaluation, runner.

Both binaries go through these functions with a dict of flag values (`FLAGS.flag_values_dict()`,
which `experiments.compare` copies and changes per algorithm and seed):

  task = load_task(values)                      # ClientData, input spec, Keras model fn
  process = build_algorithm(values, task)       # tff_conflict.learning.ALGORITHMS / build_process
  evaluate_fn, columns = make_evaluate_fn(task) # tff_conflict.evaluation on the test split
  runner = make_runner(process, values)         # --runtime / --workers
"""

import collections
import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional

from absl import app
import numpy as np
import tensorflow as tf

from experiments import models
from experiments import registry
from experiments import training_loop


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


def data_options(values: Mapping[str, Any]) -> registry.DataOptions:
  fields = [f.name for f in dataclasses.fields(registry.DataOptions)]
  return registry.DataOptions(**{name: values[name] for name in fields})


def loop_config(values: Mapping[str, Any]) -> training_loop.LoopConfig:
  return training_loop.LoopConfig(
      rounds=values['rounds'], clients_per_round=values['clients_per_round'],
      client_epochs=values['client_epochs'], batch_size=values['client_batch_size'],
      shuffle_buffer=values['client_shuffle_buffer'], seed=values['seed'],
      eval_every=values['eval_every'], checkpoint_every=values['checkpoint_every'],
      keep_checkpoints=values['keep_checkpoints'], resume=values['resume'])


def load_task(values: Mapping[str, Any], *, data: Optional[tuple[Any, Any]] = None) -> Task:
  """Loads the dataset (unless `data` = (train, test) is given) and picks the model.

  Raises:
    app.UsageError: on an unknown model, or clients_per_round larger than the population.
  """
  options = data_options(values)
  spec = registry.DATASETS[options.dataset]
  train, test = spec.load(options) if data is None else data
  model_name = values['model'] or spec.default_model_for(options)
  if model_name not in models.MODELS:
    raise app.UsageError(f'--model must be one of {sorted(models.MODELS)}, got {model_name!r}')
  num_clients = len(train.client_ids)
  if values['clients_per_round'] > num_clients:
    raise app.UsageError(f'--clients_per_round={values["clients_per_round"]} is larger than the '
                         f'{num_clients} clients of --dataset={options.dataset}')
  config = loop_config(values)
  example = training_loop.preprocess(train.create_tf_dataset_for_client(train.client_ids[0]),
                                     config)
  input_spec = example.element_spec
  num_classes = spec.num_classes(options)
  keras_model_fn = functools.partial(models.get(model_name), tuple(input_spec['x'].shape[1:]),
                                     num_classes, seed=values['seed'])
  return Task(train_data=train, test_data=test, input_spec=input_spec, num_classes=num_classes,
              model_name=model_name, keras_model_fn=keras_model_fn)


def _optimizer(values, prefix):
  return registry.OPTIMIZERS[values[f'{prefix}_optimizer']](
      values[f'{prefix}_learning_rate'], values[f'{prefix}_momentum'])


def build_algorithm(values: Mapping[str, Any], task: Task, algorithm: Optional[str] = None):
  """The learning process of `algorithm` (default `values['algorithm']`) with the flag values.

  A named algorithm is `tff_conflict.learning.ALGORITHMS[name]` with its hyperparameters
  (`registry.ALGORITHM_HPARAMS`); 'custom' is `tff_conflict.learning.build_process` with
  `--client_loss`, `--aggregator` (their hyperparameters from the same flags) and the FedProx
  term when `--proximal_strength` was given (`values['proximal_strength_present']`).
  """
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  name = values['algorithm'] if algorithm is None else algorithm
  common = dict(input_spec=task.input_spec, client_optimizer_fn=_optimizer(values, 'client'),
                server_optimizer_fn=_optimizer(values, 'server'))
  if values.get('client_weighting'):
    common['client_weighting'] = values['client_weighting']
  if name == registry.CUSTOM_ALGORITHM:
    loss, aggregator = values['client_loss'], values['aggregator']
    proximal = values['proximal_strength'] if values.get('proximal_strength_present') else 0.0
    return learning.build_process(
        task.keras_model_fn, loss=loss,
        loss_kwargs=registry.hparam_kwargs(registry.LOSS_HPARAMS[loss], values),
        aggregator=aggregator,
        aggregator_kwargs=registry.hparam_kwargs(registry.AGGREGATOR_HPARAMS[aggregator], values),
        proximal_strength=proximal, **common)
  if name not in learning.ALGORITHMS:
    raise app.UsageError(f'--algorithm must be one of {list(learning.ALGORITHMS)} or '
                         f'{registry.CUSTOM_ALGORITHM!r}, got {name!r}')
  kwargs = registry.hparam_kwargs(registry.ALGORITHM_HPARAMS.get(name, {}), values)
  return learning.ALGORITHMS[name](task.keras_model_fn, **common, **kwargs)


def _test_arrays(test_data) -> tuple[np.ndarray, np.ndarray]:
  dataset = test_data.create_tf_dataset_from_all_clients().batch(4096)
  xs, ys = [], []
  for batch in dataset.as_numpy_iterator():
    xs.append(batch['x'])
    ys.append(batch['y'])
  return np.concatenate(xs), np.concatenate(ys)


def make_evaluate_fn(task: Task) -> tuple[Callable[[Any], Mapping[str, float]], tuple[str, ...]]:
  """An evaluation of model weights on the whole test split, and the columns it fills.

  Call it after the learning process was built (it creates a Keras model eagerly; see
  BUILD_NOTES.md, Keras pitfalls). Columns: `test_accuracy`, `test_loss`, `test_macro_f1` and
  `test_class_accuracy/<k>` per class.
  """
  from tff_conflict import evaluation  # pylint: disable=g-import-not-at-top
  x, y = _test_arrays(task.test_data)
  model = task.keras_model_fn()
  columns = training_loop.TEST_COLUMNS + tuple(
      f'test_class_accuracy/{k}' for k in range(task.num_classes))

  def evaluate(model_weights) -> Mapping[str, float]:
    model_weights.assign_weights_to(model)
    result = evaluation.evaluate_arrays(model, x, y, num_classes=task.num_classes)
    out = collections.OrderedDict(test_accuracy=float(result['accuracy']),
                                  test_loss=float(result['loss']),
                                  test_macro_f1=float(result['macro_f1']))
    for k, value in enumerate(np.asarray(result['per_class_accuracy']).reshape(-1)):
      out[f'test_class_accuracy/{k}'] = float(value)
    return out

  return evaluate, columns


def make_runner(process, values: Mapping[str, Any]):
  """The object that runs `process` for `--runtime` (the process itself for the default local
  C++ runtime or `--workers`; an in-process runner for `--runtime=inprocess`)."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  return runtime.make_runner(process, values.get('runtime', 'cpp'))


def install_context(values: Mapping[str, Any]) -> None:
  """Installs TFF's execution context: remote workers for `--workers`, else the local one."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  workers = list(values.get('workers') or [])
  if workers:
    runtime.set_remote_context(workers)

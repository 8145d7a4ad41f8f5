"""Runs one `RunSpec` at a time on TFF (`Engine.run`), skipping runs finished on disk with the same
settings (docs/design.md, "The method comparison")."""

import collections
import contextlib
import dataclasses
import datetime
import functools
import json
import os
import random
import time
import traceback
import weakref
from typing import Any, Callable, Optional, TextIO

import numpy as np
import tensorflow as tf

from experiments.benchmarking import results as results_lib
from experiments import files
from experiments import architectures
from experiments import config as experiment_config
from experiments import experiment_lib
from experiments import training_loop
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import runs as runs_lib

# Reporting runs' test errors split by class co-occurrence in the training partition
# (`tff_conflict.evaluation.confusion_by_cooccurrence`), columns `test_<name>`.
PAIR_ERROR_COLUMNS = ('rare_pair_error', 'common_pair_error', 'rare_error_share')

Loader = Callable[[Any, int], tuple[Any, Any]]


class SettingsChangedError(files.Failure, ValueError):
  """A finished run on disk was made with other settings than the run asked for now."""


def check_same_spec(run_dir: str, recorded: dict[str, Any], spec: runs_lib.RunSpec) -> None:
  """Raises `SettingsChangedError` when the finished run in `run_dir` (its `result.json`'s
  `recorded` settings) is not `spec`."""
  if not runs_lib.same_spec(recorded, spec):
    differences = '; '.join(runs_lib.spec_differences(recorded, spec))
    raise SettingsChangedError(
        f'{run_dir} holds a finished run with other settings ({differences}); use another '
        '--experiment_name or --output_dir, or --noresume to run everything again')


def default_loader(config) -> Loader:
  """`(regime, seed) -> (train, test)` through `tff_conflict.data.load_regime`."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top

  def load(regime, seed):
    return data.load_regime(regime, seed=seed, cache_dir=config.data.cache_dir,
                            data_dir=config.data.data_dir, leaf_dir=config.data.leaf_dir)
  return load


@contextlib.contextmanager
def seeded(seed: int):
  """Python's, NumPy's and TensorFlow's global seeds set to `seed` inside, and restored on exit,
  so that a user's model function is seeded without changing what the process draws after
  it (a later run in the same process draws as in a fresh one)."""
  python_state, numpy_state = random.getstate(), np.random.get_state()
  tf_seed = tf.compat.v1.get_seed(None)[0]
  random.seed(seed)
  np.random.seed(seed)
  tf.random.set_seed(seed)
  try:
    yield
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    tf.random.set_seed(tf_seed)


@dataclasses.dataclass
class _Built:
  process: Any
  runner: Any
  initial_state: Any
  seconds: float


class _RunRunner:
  """The process's runner, starting from a run's own initial state and reporting each round."""

  def __init__(self, runner, initial_state, on_round: Callable[[], None]):
    self._runner = runner
    self._initial_state = initial_state
    self._on_round = on_round

  def initialize(self):
    return self._initial_state

  def next(self, state, client_datasets):
    output = self._runner.next(state, client_datasets)
    self._on_round()
    return output

  def get_model_weights(self, state):
    # The benchmark's processes are composed learning processes (`learning.build_process`),
    # whose `get_model_weights` returns the state's `global_model_weights`: read it directly.
    # Otherwise the runner's own (`runtime.make_runner` gives every runner one), so that an
    # in-process run never goes through TFF's runtime.
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    weights = getattr(state, 'global_model_weights', None)
    if isinstance(weights, tff.learning.models.ModelWeights):
      return weights
    return self._runner.get_model_weights(state)


def _pooled_arrays(client_data) -> tuple[np.ndarray, np.ndarray]:
  xs, ys = [], []
  for batch in client_data.create_tf_dataset_from_all_clients().batch(4096).as_numpy_iterator():
    xs.append(batch['x'])
    ys.append(batch['y'])
  if not xs:
    raise ValueError('the evaluation split holds no examples')
  return np.concatenate(xs), np.concatenate(ys)


def _labels(client_data) -> np.ndarray:
  return np.concatenate([np.reshape(y, -1) for y in client_data.create_tf_dataset_from_all_clients(
  ).map(lambda e: e['y']).batch(4096).as_numpy_iterator()] + [np.zeros(0, np.int64)])


_assign_functions: 'weakref.WeakKeyDictionary[tf.keras.Model, Any]' = weakref.WeakKeyDictionary()


def _assign_function(model: tf.keras.Model) -> Callable[[list], None]:
  """`ModelWeights.assign_weights_to(model)` as one traced call (trainable weights, then
  non-trainable), traced once per model; eager, each assignment is a Python-dispatched op."""
  assign = _assign_functions.get(model)
  if assign is None:
    variables = list(model.trainable_weights) + list(model.non_trainable_weights)
    refs = [weakref.ref(v) for v in variables]  # the cache must not keep the model alive

    def assign_all(values):
      for ref, value in zip(refs, values):
        ref().assign(value)

    assign = tf.function(assign_all, autograph=False,
                         input_signature=[[tf.TensorSpec(v.shape, v.dtype) for v in variables]])
    _assign_functions[model] = assign
  return assign


class Engine:
  """Builds, caches and runs (docs/design.md, "The method comparison", what runs share).

  Args:
    config: the benchmark (`config.BenchmarkConfig`).
    loader: `(regime, seed) -> (train, test)` client data; default `default_loader(config)`.
    on_round: called after every round of every run (progress).
    stream: where failures are reported.
  """

  def __init__(self, config, *, loader: Optional[Loader] = None,
               on_round: Callable[[], None] = lambda: None, stream: Optional[TextIO] = None):
    self._config = config
    self._loader = loader or default_loader(config)
    self._on_round = on_round
    self._stream = stream
    self._built: dict[tuple, _Built] = {}
    self._data: dict[tuple, tuple[Any, Any]] = {}
    self._splits: dict[tuple, tuple[Any, Any]] = {}
    self._arrays: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    self._weights: dict[tuple, Any] = {}
    self._eval_models: dict[tuple, tf.keras.Model] = {}
    self._shapes: dict[tuple, tuple[tuple, int]] = {}
    self.build_seconds = 0.0
    self.builds: list[tuple[str, float]] = []
    self.runs_done = 0
    self.runs_skipped = 0
    self.rounds_done = 0
    self.failures: list[tuple[runs_lib.RunSpec, str]] = []

  # --- data -------------------------------------------------------------------------------

  def data(self, regime: str, seed: int) -> tuple[Any, Any]:
    """`(train, test)` of a regime and data seed (loaded once; your own data as given)."""
    if regime in self._config.datasets:
      return tuple(self._config.datasets[regime])
    key = (regime, seed)
    if key not in self._data:
      from tff_conflict import data  # pylint: disable=g-import-not-at-top
      self._data[key] = self._loader(data.parse_regime(regime), seed)
    return self._data[key]

  def _train_and_eval(self, spec: runs_lib.RunSpec):
    train, test = self.data(spec.regime, spec.data_seed)
    if spec.phase == runs_lib.REPORT_PHASE:
      return train, test
    key = (spec.regime, spec.data_seed)
    if key not in self._splits:
      from tff_conflict import data  # pylint: disable=g-import-not-at-top
      self._splits[key] = data.split_validation(
          train, self._config.tuning.validation_fraction, seed=spec.data_seed)
    return self._splits[key]

  def shape_and_classes(self, regime: str, seed: int, model: str) -> tuple[tuple, int]:
    """The example shape and number of classes of `regime`'s data under `model`: the dataset's
    (`tff_conflict.data.dataset_info`), else the loaded data's `info` (LEAF Synthetic), else
    (your own data) x's shape and the largest label + 1; with your own model, its number of
    logits, which must hold every label (and equal the dataset's classes where it has them).

    Raises:
      experiments.config.ConfigError: your model is not an uncompiled Keras model from x to
        logits (`tff_conflict.learning.models.resolve_model`), or does not fit the labels; your
        data holds a label < 0 or fewer than 2 classes.
    """
    key = (plan_lib.dataset_of(self._config, regime), model)
    if key not in self._shapes:
      self._shapes[key] = self._find_shape_and_classes(regime, seed, *key)
    return self._shapes[key]

  def _find_shape_and_classes(self, regime, seed, dataset, model):
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    from tff_conflict.learning import models  # pylint: disable=g-import-not-at-top
    try:
      info = data.dataset_info(dataset)
    except ValueError:
      info = None
    own = self._config.model_fns.get(model)
    if info is not None and own is None:
      return tuple(info.element_shape), info.num_classes
    train, test = self.data(regime, seed)
    info = info or getattr(train, 'info', None) or getattr(test, 'info', None)
    shape = tuple(train.element_type_structure['x'].shape) if info is None else tuple(
        info.element_shape)
    classes = None if info is None else info.num_classes
    top = None
    if dataset in self._config.datasets:
      labels = np.concatenate([_labels(train), _labels(test)])
      top = int(labels.max()) if labels.size else -1
      if labels.size and labels.min() < 0:
        raise experiment_config.ConfigError(f'datasets[{dataset!r}]', int(labels.min()),
                                            'class labels 0, 1, ... (a label < 0 was found)')
    if own is not None:
      element = train.element_type_structure
      batched = collections.OrderedDict(
          (k, tf.TensorSpec([None] + element[k].shape.as_list(), element[k].dtype))
          for k in ('x', 'y'))
      try:
        logits = models.resolve_model(own, batched).num_classes
      except ValueError as e:
        raise experiment_config.ConfigError(f'model_fns[{model!r}]', own, reason=str(e)) from None
      if (classes is not None and logits != classes) or (top is not None and top >= logits):
        need = f'{classes} classes' if classes is not None else f'labels up to {top}'
        raise experiment_config.ConfigError(
            f'model_fns[{model!r}]', own, reason=f'the dataset {dataset!r} has {need}, the model '
            f'gives {logits} logits: one per class is needed')
      classes = logits
    if classes is None:   # your data, a built-in model
      if top < 1:
        raise experiment_config.ConfigError(f'datasets[{dataset!r}]', top + 1,
                                            'data of at least 2 classes (labels 0 and 1 at least)')
      classes = top + 1
    return shape, classes

  def check_models(self) -> None:
    """Checks, before any run, each dataset's model on the data where either is your own
    (`shape_and_classes`)."""
    seed = plan_lib.data_seed(self._config, self._config.report_seeds[0])
    for dataset in plan_lib.datasets(self._config):
      model = plan_lib.model_of(self._config, dataset)
      if dataset in self._config.datasets or model in self._config.model_fns:
        self.shape_and_classes(plan_lib.regimes_of(self._config, dataset)[0], seed, model)

  def _shape_and_classes(self, spec):
    return self.shape_and_classes(spec.regime, spec.data_seed, spec.model)

  def _model_fn(self, spec, seed: int) -> Callable[[], tf.keras.Model]:
    """A no-argument function returning a new `spec.model` initialised by `seed`: a built-in
    model's initializers are seeded; your model is built under `seeded(seed)` (its
    initializers left unseeded)."""
    own = self._config.model_fns.get(spec.model)
    if own is None:
      shape, classes = self._shape_and_classes(spec)
      return functools.partial(architectures.get(spec.model), shape, classes, seed=seed)

    def build():
      with seeded(seed):
        return own()
    return build

  # --- processes ----------------------------------------------------------------------------

  def _process_key(self, spec: runs_lib.RunSpec) -> tuple:
    kwargs = json.dumps(dict(spec.kwargs), sort_keys=True, default=str)
    return (spec.algorithm, kwargs, spec.model, spec.dataset, spec.batch_size,
            spec.client_momentum)

  def _build(self, spec: runs_lib.RunSpec, train) -> _Built:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    from tff_conflict import learning  # pylint: disable=g-import-not-at-top
    from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
    start = time.monotonic()
    loop = experiment_config.LoopConfig(rounds=1, clients_per_round=1, batch_size=spec.batch_size)
    example = training_loop.preprocess(train.create_tf_dataset_for_client(train.client_ids[0]),
                                       loop)
    keras_model_fn = self._model_fn(spec, 0)
    build = (learning.build_process if spec.algorithm == methods_lib.CUSTOM
             else learning.ALGORITHMS[spec.algorithm])
    process = build(
        keras_model_fn, input_spec=example.element_spec,
        **experiment_lib.population_kwargs(build, train),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(
            learning_rate=spec.client_lr, momentum=spec.client_momentum or None),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=spec.server_lr),
        **dict(spec.kwargs))
    runner = runtime.make_runner(process, self._config.runtime.runtime)
    initial_state = runner.initialize()
    seconds = time.monotonic() - start
    # A Keras model created eagerly before TFF traces a model function is invalidated: drop the
    # evaluation models, they are rebuilt on next use.
    self._eval_models.clear()
    self.build_seconds += seconds
    self.builds.append((f'{spec.algorithm} {dict(spec.kwargs)} {spec.model}', seconds))
    return _Built(process, runner, initial_state, seconds)

  def _process(self, spec, train) -> _Built:
    key = self._process_key(spec) + (len(train.client_ids),)
    if key not in self._built:
      self._built[key] = self._build(spec, train)
    return self._built[key]

  @property
  def num_processes(self) -> int:
    return len(self._built)

  def _initial_weights(self, spec):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    key = (spec.model, spec.dataset, spec.seed)
    if key not in self._weights:
      model = self._model_fn(spec, spec.seed)()
      self._weights[key] = tff.learning.models.ModelWeights(
          trainable=[v.numpy() for v in model.trainable_variables],
          non_trainable=[v.numpy() for v in model.non_trainable_variables])
    return self._weights[key]

  def initial_state(self, built: _Built, spec: runs_lib.RunSpec):
    """The process's initial state with the run's model, learning rates and order seed."""
    # Through the runner (the process itself, or the in-process runner's copies of these
    # computations, so that an in-process run never goes through TFF's runtime).
    runner = built.runner
    state = runner.set_model_weights(built.initial_state, self._initial_weights(spec))
    hparams = runner.get_hparams(state)
    for part, value in (('client_work', spec.client_lr), ('finalizer', spec.server_lr)):
      if 'learning_rate' not in hparams.get(part, {}):
        raise ValueError(f'{spec.algorithm}: the process does not expose {part} learning_rate '
                         'in its hparams, so the benchmark cannot set it per run')
      hparams[part]['learning_rate'] = np.float32(value)
    state = runner.set_hparams(state, hparams)
    aggregator = getattr(state, 'aggregator', None)
    if isinstance(aggregator, collections.abc.Mapping) and 'seed' in aggregator:
      aggregator = collections.OrderedDict(aggregator)
      aggregator['seed'] = np.int64(spec.seed)
      state = state._replace(aggregator=aggregator)
    return state

  # --- evaluation ---------------------------------------------------------------------------

  def _evaluator(self, spec, eval_data):
    from tff_conflict import evaluation  # pylint: disable=g-import-not-at-top
    prefix = spec.eval_prefix
    _, classes = self._shape_and_classes(spec)
    arrays_key = (spec.phase, spec.regime, spec.data_seed)
    per_class = spec.phase == runs_lib.REPORT_PHASE
    train_loss = per_class and self._config.loop.eval_train_loss
    columns = [f'{prefix}_accuracy', f'{prefix}_loss', f'{prefix}_macro_f1']
    cooccurrence = None
    if per_class:
      columns += [f'{prefix}_mean_logit']
      columns += [f'{prefix}_class_accuracy/{k}' for k in range(classes)]
      # Errors between classes that rarely share a client (the diagnosis of FedGA).
      counts = getattr(self.data(spec.regime, spec.data_seed)[0], 'label_counts', None)
      if counts is not None and np.shape(counts)[-1] == classes:
        cooccurrence = evaluation.class_cooccurrence(counts)
        columns += [f'{prefix}_{c}' for c in PAIR_ERROR_COLUMNS]
    if train_loss:
      columns += [runs_lib.GLOBAL_TRAIN_LOSS, 'global_train_accuracy']
    last = {}

    def arrays(key, client_data):
      if key not in self._arrays:
        self._arrays[key] = _pooled_arrays(client_data)
      return self._arrays[key]

    def evaluate(model_weights):
      x, y = arrays(arrays_key, eval_data)
      model_key = (spec.model, spec.dataset)
      if model_key not in self._eval_models:
        self._eval_models[model_key] = self._model_fn(spec, 0)()
      model = self._eval_models[model_key]
      _assign_function(model)(list(model_weights.trainable) + list(model_weights.non_trainable))
      result = evaluation.evaluate_arrays(model, x, y, num_classes=classes)
      last['confusion_matrix'] = np.asarray(result['confusion_matrix']).tolist()
      out = collections.OrderedDict()
      out[f'{prefix}_accuracy'] = float(result['accuracy'])
      out[f'{prefix}_loss'] = float(result['loss'])
      out[f'{prefix}_macro_f1'] = float(result['macro_f1'])
      if per_class:
        out[f'{prefix}_mean_logit'] = float(result['mean_logit'])
        for k, value in enumerate(np.asarray(result['per_class_accuracy']).reshape(-1)):
          out[f'{prefix}_class_accuracy/{k}'] = float(value)
      if cooccurrence is not None:
        pairs = evaluation.confusion_by_cooccurrence(result['confusion_matrix'], cooccurrence)
        for column in PAIR_ERROR_COLUMNS:
          out[f'{prefix}_{column}'] = float(pairs[column])
      if train_loss:
        train, _ = self.data(spec.regime, spec.data_seed)
        x, y = arrays(('train', spec.regime, spec.data_seed), train)
        on_train = evaluation.evaluate_arrays(model, x, y, num_classes=classes)
        out[runs_lib.GLOBAL_TRAIN_LOSS] = float(on_train['loss'])
        out['global_train_accuracy'] = float(on_train['accuracy'])
      return out

    return evaluate, tuple(columns), last

  # --- runs ---------------------------------------------------------------------------------

  def finished(self, spec: runs_lib.RunSpec) -> Optional[dict[str, Any]]:
    """The summary of `spec` if it is finished on disk with the same settings, else None.

    Raises:
      SettingsChangedError: its `result.json` records other settings.
    """
    if not self._config.loop.resume:
      return None
    run_dir = spec.directory(self._config.root)
    result = runs_lib.read_result(run_dir)
    if result is None:
      return None
    check_same_spec(run_dir, result['spec'], spec)
    return result['summary']

  def run(self, spec: runs_lib.RunSpec) -> Optional[dict[str, Any]]:
    """Runs `spec` unless it is finished; returns its summary (None if the run failed: the
    failure is recorded in `failures`, written to `error.txt` in the run directory, and the run
    is tried again by the next invocation)."""
    done = self.finished(spec)
    if done is not None:
      self.runs_skipped += 1
      return done
    run_dir = spec.directory(self._config.root)
    os.makedirs(run_dir, exist_ok=True)
    error_path = os.path.join(run_dir, 'error.txt')
    try:
      summary, confusion = self._train(spec, run_dir)
    except Exception as e:  # pylint: disable=broad-except
      if isinstance(e, OSError) and e.errno in files.DISK_ERRNOS:
        raise   # a full or read-only disk fails every run: the command ends here
      message = f'{type(e).__name__}: {e}'
      self.failures.append((spec, message))
      with open(error_path, 'w') as f:
        f.write(traceback.format_exc())
      if self._stream is not None:
        print(f'\nrun failed: {spec.label()}: {message} (details: {error_path})',
              file=self._stream, flush=True)
      return None
    if os.path.exists(error_path):
      os.remove(error_path)
    runs_lib.write_result(run_dir, {
        'spec': spec.to_dict(), 'summary': summary, 'confusion_matrix': confusion,
        'finished': datetime.datetime.now().isoformat(timespec='seconds')})
    self.runs_done += 1
    return summary

  def _train(self, spec, run_dir):
    train, eval_data = self._train_and_eval(spec)
    built = self._process(spec, train)
    initial = self.initial_state(built, spec)
    evaluate, columns, last = self._evaluator(spec, eval_data)
    loop = experiment_config.LoopConfig(
        rounds=spec.rounds, clients_per_round=spec.clients_per_round, client_epochs=spec.epochs,
        batch_size=spec.batch_size, shuffle_buffer=spec.shuffle_buffer, seed=spec.seed,
        eval_every=1, checkpoint_every=0, keep_checkpoints=0, resume=False)
    hparams = {k: v for k, v in spec.to_dict().items() if k != 'kwargs'}
    hparams.update({f'kwargs/{k}': v for k, v in spec.kwargs})

    def on_round():
      self.rounds_done += 1
      self._on_round()

    start = time.monotonic()
    result = training_loop.run_training(
        built.process, train_data=train, evaluate_fn=evaluate, config=loop,
        experiment_dir=run_dir, hparams=hparams,
        runner=_RunRunner(built.runner, initial, on_round), label=spec.label(),
        show_progress=False, test_columns=columns)
    seconds = time.monotonic() - start
    summary = runs_lib.summarize(result.rows, prefix=spec.eval_prefix,
                                 last_k=self._config.tuning.last_k,
                                 num_classes=self._shape_and_classes(spec)[1])
    # A diverged model's confusion matrix is NaN: it counts as collapsed (at chance).
    summary['collapsed'] = bool(summary['collapsed'] or summary['diverged']
                                or runs_lib.predicts_one_class(last.get('confusion_matrix')))
    if spec.phase == runs_lib.REPORT_PHASE:
      for key, value in results_lib.summarize_run(result.rows).items():
        summary.setdefault(key, value)
    summary['run_seconds'] = seconds
    return summary, last.get('confusion_matrix')


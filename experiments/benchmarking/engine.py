"""Runs one `RunSpec` at a time (`Engine.run`), skipping runs finished on disk with the same
settings (docs/design.md, "The method comparison")."""

import collections
import contextlib
import datetime
import functools
import json
import os
import random
import time
import traceback
import types
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from experiments.benchmarking import results as results_lib
from tff_conflict import _files as files
from tff_conflict import _interrupts as interrupts
from experiments import config as experiment_config
from experiments import experiment_lib
from experiments.benchmarking import fingerprints
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import runs as runs_lib
from tff_conflict import models

Loader = Callable[[Any, int], tuple[Any, Any]]


class SettingsChangedError(files.Failure, ValueError):
  """A finished run on disk was made with other settings than the run asked for now."""


def refuse_changed(run_dir: str, differences: list[str], what: str = 'with other settings'
                   ) -> None:
  """Raises `SettingsChangedError` naming the `differences` of the finished run in `run_dir`."""
  if differences:
    raise SettingsChangedError(
        f'{run_dir} holds a finished run {what} ({"; ".join(differences)}); use another '
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
  """Python's, NumPy's and TensorFlow's global seeds set to `seed` inside, restored after."""
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


def process_of(spec: runs_lib.RunSpec) -> tuple:
  """What `spec`'s learning process is built from: runs of one value share a process."""
  return (spec.algorithm, json.dumps(dict(spec.kwargs), sort_keys=True, default=str), spec.model,
          spec.dataset, spec.batch_size, spec.client_momentum)


def _builder(spec: runs_lib.RunSpec) -> Callable[..., Any]:
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  return (learning.build_process if spec.algorithm == methods_lib.CUSTOM
          else learning.ALGORITHMS[spec.algorithm])


def _optimizers(spec: runs_lib.RunSpec) -> dict[str, experiment_config.OptimizerConfig]:
  return dict(client=experiment_config.OptimizerConfig(spec.client_lr,
                                                       momentum=spec.client_momentum),
              server=experiment_config.OptimizerConfig(spec.server_lr))


class Engine(experiment_lib.Runs):
  """Runs `RunSpec`s under `root` with the data of `loader` (default: each run's sources') and
  your own `datasets` and `model_fns`; a run's settings come from its spec alone."""

  def __init__(self, root: str, *, loader: Optional[Loader] = None,
               datasets: Optional[dict[str, tuple]] = None,
               model_fns: Optional[dict[str, Callable[[], Any]]] = None,
               runtime: str = 'inprocess', resume: bool = True):
    super().__init__(runtime)
    self._root, self._loader, self._resume = root, loader, resume
    self._datasets, self._model_fns = dict(datasets or {}), dict(model_fns or {})
    self._data, self._weights, self._shapes, self._fingerprints = {}, {}, {}, {}   # made once
    self.runs_done = self.runs_skipped = self.rounds_done = 0
    self.failures: list[tuple[runs_lib.RunSpec, str]] = []

  def data(self, regime: str, seed: int, sources: Any = None) -> tuple[Any, Any]:
    """(train, test) of a regime and data seed, made once: your own data, else the loader's (or
    `default_loader` of `sources`: a `RunSpec`, or None for the defaults)."""
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    if (regime, seed) not in self._data:
      if regime in self._datasets:
        self._data[regime, seed] = tuple(self._datasets[regime])
      else:
        loader = self._loader or default_loader(types.SimpleNamespace(
            data=sources or experiment_config.DataConfig()))
        self._data[regime, seed] = loader(data.parse_regime(regime), seed)
    return self._data[regime, seed]

  def run_data(self, spec: runs_lib.RunSpec) -> tuple[Any, Any]:
    """A run's (training, evaluation) data: (train, test), or for tuning train's two parts."""
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    train_test = self.data(spec.regime, spec.data_seed, spec)
    if spec.phase != runs_lib.TUNE_PHASE:
      return train_test
    key = (spec.regime, spec.data_seed, spec.validation_fraction)
    if key not in self._data:
      self._data[key] = data.split_validation(train_test[0], spec.validation_fraction,
                                              seed=spec.data_seed)
    return self._data[key]

  def shape_and_classes(self, spec: runs_lib.RunSpec) -> tuple[tuple, int]:
    """(x's shape, classes) of `spec`'s data under its model: the dataset's classes, else the
    data's `info`, else (your own data) the largest label + 1; your own model's logits, which must
    hold every label. `ConfigError` naming `datasets[...]` for a label < 0, no examples or one
    class, `model_fns[...]` for a model that does not fit the data."""
    from tff_conflict import data  # pylint: disable=g-import-not-at-top
    from tff_conflict.learning import models as builders  # pylint: disable=g-import-not-at-top
    dataset, name = spec.dataset, spec.model
    if (dataset, name) in self._shapes:
      return self._shapes[dataset, name]
    train, test = self.data(spec.regime, spec.data_seed, spec)
    try:
      classes = data.dataset_info(dataset).num_classes
    except ValueError:   # your own data, LEAF Synthetic: from the data
      info = getattr(train, 'info', None) or getattr(test, 'info', None)
      classes = None if info is None else info.num_classes
    top = None
    if dataset in self._datasets:
      argument = f'datasets[{dataset!r}]'
      try:
        labels = np.concatenate([np.reshape(experiment_lib.pooled_arrays(split)[1], -1)
                                 for split in (train, test)])
      except ValueError as e:
        raise experiment_config.from_library_error(e, argument, dataset) from None
      top = int(labels.max())
      if labels.min() < 0:
        raise experiment_config.ConfigError(argument, int(labels.min()),
                                            'class labels 0, 1, ... (a label < 0 was found)')
    own = self._model_fns.get(name)
    if own is not None:
      try:
        logits = builders.resolve_model(
            own, experiment_lib.input_spec(train, self._loop(spec))).num_classes
      except ValueError as e:
        raise experiment_config.ConfigError(f'model_fns[{name!r}]', own, reason=str(e)) from None
      if (classes is not None and logits != classes) or (top is not None and top >= logits):
        need = f'{classes} classes' if classes is not None else f'labels up to {top}'
        raise experiment_config.ConfigError(
            f'model_fns[{name!r}]', own, reason=f'the dataset {dataset!r} has '
            f'{need}, the model gives {logits} logits: one per class is needed')
      classes = logits
    if classes is None:   # your data, a built-in model
      if top < 1:
        raise experiment_config.ConfigError(f'datasets[{dataset!r}]', top + 1,
                                            'data of at least 2 classes (labels 0 and 1 at least)')
      classes = top + 1
    self._shapes[dataset, name] = (tuple(train.element_type_structure['x'].shape), classes)
    return self._shapes[dataset, name]

  def _model_fn(self, spec, seed: int) -> Callable[[], tf.keras.Model]:
    """A function building `spec.model` initialised by `seed` (yours under `seeded(seed)`)."""
    own = self._model_fns.get(spec.model)
    if own is None:
      shape, classes = self.shape_and_classes(spec)
      return functools.partial(models.get(spec.model), shape, classes, seed=seed)

    def build():
      with seeded(seed):
        return own()
    return build

  def _initial_weights(self, spec):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    key = (spec.model, spec.dataset, spec.seed)
    if key not in self._weights:
      model = self._model_fn(spec, spec.seed)()
      self._weights[key] = tff.learning.models.ModelWeights(
          trainable=[v.numpy() for v in model.trainable_variables],
          non_trainable=[v.numpy() for v in model.non_trainable_variables])
    return self._weights[key]

  def _start(self, spec: runs_lib.RunSpec, runner, state):
    """The process's initial state with the run's model weights, learning rates and seed."""
    state = runner.set_model_weights(state, self._initial_weights(spec))
    hparams = runner.get_hparams(state)
    for part, value in (('client_work', spec.client_lr), ('finalizer', spec.server_lr)):
      if 'learning_rate' not in hparams.get(part, {}):
        raise ValueError(f'{spec.algorithm}: the process does not expose {part} learning_rate '
                         'in its hparams, so the benchmark cannot set it per run')
      hparams[part]['learning_rate'] = np.float32(value)
    state = runner.set_hparams(state, hparams)
    aggregator = getattr(state, 'aggregator', None)
    if isinstance(aggregator, collections.abc.Mapping) and 'seed' in aggregator:
      state = state._replace(aggregator=collections.OrderedDict(aggregator,
                                                                seed=np.int64(spec.seed)))
    return state

  def run(self, spec: runs_lib.RunSpec) -> Optional[dict[str, Any]]:
    """Runs `spec` unless finished on disk; its summary, None when it failed (error.txt)."""
    run_dir = spec.directory(self._root)
    done = runs_lib.read_result(run_dir) if self._resume else None
    if done is not None:
      refuse_changed(run_dir, runs_lib.spec_differences(done['spec'], spec))
      refuse_changed(run_dir, fingerprints.differences(done.get(fingerprints.KEY),
                                                       self._fingerprint(spec)),
                     'of other data or another model under the same name')
      self.runs_skipped += 1
      return done['summary']
    error_path = os.path.join(run_dir, 'error.txt')
    try:
      if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
        raise FileExistsError(f'{run_dir} is a file where the run\'s directory should be: move '
                              'or delete it')
      os.makedirs(run_dir, exist_ok=True)
      summary, confusion = self._train(spec, run_dir)
    except Exception as e:  # pylint: disable=broad-except
      if isinstance(e, interrupts.OutputClosed) or (isinstance(e, OSError)
                                                    and e.errno in files.DISK_ERRNOS):
        raise   # a full or read-only disk fails every run, a closed output ends the command
      message = f'{type(e).__name__}: {e}'
      self.failures.append((spec, message))
      with contextlib.suppress(OSError), open(error_path, 'w') as f:   # unless no directory
        f.write(traceback.format_exc())
      return None
    if os.path.exists(error_path):
      os.remove(error_path)
    runs_lib.write_result(run_dir, {
        'spec': spec.to_dict(), 'summary': summary, 'confusion_matrix': confusion,
        'finished': datetime.datetime.now().isoformat(timespec='seconds'),
        fingerprints.KEY: self._fingerprint(spec)})
    self.runs_done += 1
    return summary

  def _fingerprint(self, spec: runs_lib.RunSpec) -> dict[str, Any]:
    """The fingerprints of `spec`'s own data and model by the setting that names them (none for
    built-in ones); the model is built on the run's batches."""
    from tff_conflict.learning import models as builders  # pylint: disable=g-import-not-at-top
    key, out = (spec.dataset, spec.model), {}
    if key not in self._fingerprints:
      if spec.dataset in self._datasets:
        out[f'datasets[{spec.dataset!r}]'] = fingerprints.of_data(*self._datasets[spec.dataset])
      own = self._model_fns.get(spec.model)
      if own is not None:
        input_spec = experiment_lib.input_spec(self.data(spec.regime, spec.data_seed, spec)[0],
                                               self._loop(spec))
        out[f'model_fns[{spec.model!r}]'] = fingerprints.of_model(
            lambda: builders.build_on_input_spec(own(), input_spec))
      self._fingerprints[key] = out
    return self._fingerprints[key]

  def _loop(self, spec) -> experiment_config.LoopConfig:
    return experiment_config.LoopConfig(
        rounds=spec.rounds, clients_per_round=spec.clients_per_round, client_epochs=spec.epochs,
        batch_size=spec.batch_size, shuffle_buffer=spec.shuffle_buffer, seed=spec.seed,
        eval_every=1, checkpoint_every=0, keep_checkpoints=0, resume=False)

  def check_build(self, spec: runs_lib.RunSpec) -> None:
    """The builder's checks of `spec`, unbuilt; raises the builder's `ValueError`."""
    from tff_conflict import learning  # pylint: disable=g-import-not-at-top
    arguments = experiment_lib.process_arguments(
        _builder(spec), dict(spec.kwargs), **_optimizers(spec), train_data=self.run_data(spec)[0],
        loop=self._loop(spec))
    learning.check_arguments(_builder(spec), self._model_fn(spec, 0), **arguments)

  def _train(self, spec, run_dir):
    train, eval_data = self.run_data(spec)
    classes = self.shape_and_classes(spec)[1]
    report = spec.phase == runs_lib.REPORT_PHASE
    loop = self._loop(spec)
    hparams = {k: v for k, v in spec.to_dict().items()   # as before the spec held LATER
               if k not in ('kwargs', *runs_lib.SOURCES, *runs_lib.LATER)}
    hparams.update({f'kwargs/{k}': v for k, v in spec.kwargs})

    def on_round():
      self.rounds_done += 1
    start = time.monotonic()
    rows, _, _ = self.execute(
        _builder(spec), dict(spec.kwargs), self._model_fn(spec, 0), **_optimizers(spec),
        key=(*process_of(spec), len(train.client_ids)),
        start=functools.partial(self._start, spec), model_key=(spec.model, spec.dataset),
        train_data=train, eval_data=eval_data, num_classes=classes, loop=loop,
        experiment_dir=run_dir, hparams=hparams, prefix=spec.eval_prefix, per_class=report,
        global_train=report and spec.eval_train_loss, label=spec.label(),
        show_progress=False, on_round=on_round)
    seconds = time.monotonic() - start
    summary = runs_lib.summarize(rows, prefix=spec.eval_prefix, last_k=spec.last_k,
                                 num_classes=classes)
    summary.update(runs_lib.collapse_columns(summary, self.confusion))
    if report:
      summary.update((k, v) for k, v in results_lib.summarize_run(rows).items() if k not in summary)
    summary['run_seconds'] = seconds
    return summary, self.confusion


class Ran(NamedTuple):
  """What running one spec gave (`run_job`): its summary (None: failed) and the work done."""
  summary: Optional[dict[str, Any]]
  failure: Optional[str]
  skipped: bool
  build_seconds: float
  processes_built: int
  rounds: int


def run_job(engine: Engine, spec: runs_lib.RunSpec) -> Ran:
  """`engine.run(spec)` as a job of an executor (`experiments.executors`)."""
  before = (len(engine.failures), engine.runs_skipped, engine.build_seconds,
            engine.num_processes, engine.rounds_done)
  summary = engine.run(spec)
  return Ran(summary, engine.failures[-1][1] if len(engine.failures) > before[0] else None,
             engine.runs_skipped > before[1], engine.build_seconds - before[2],
             engine.num_processes - before[3], engine.rounds_done - before[4])


def worker_engine(root: str, **options) -> Engine:
  """A worker process's `Engine(root, **options)`, with TFF's local runtime installed."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  return Engine(root, **options)

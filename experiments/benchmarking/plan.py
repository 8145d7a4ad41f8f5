"""A benchmark resolved once: `make_plan(config)` turns a `config.BenchmarkConfig` into a `Plan`
(regimes, methods with grids, tuning searches, reporting runs); nothing after it reads the config.
"""

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from experiments import config as experiment_config
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import tuning as tuning_lib
from tff_conflict import hparams as hparams_lib


@dataclasses.dataclass(frozen=True)
class MethodPlan:
  """One method as the benchmark runs it.

  Attributes:
    method: the method, with `--grids` replacing its default grid.
    given: builder arguments used where nothing is tuned, sorted (name, value) pairs.
    client_lr, server_lr: the learning rates used without tuning.
    search: what tuning tries (`tuning.Search`).
    inherits: the method whose tuned values it runs at (its parent, or the parent's own
      parent when that one inherits too); None: tuned itself (or untuned).
  """
  method: methods_lib.Method
  given: tuple
  client_lr: float
  server_lr: float
  search: tuning_lib.Search
  inherits: Optional[str] = None

  @property
  def name(self) -> str:
    return self.method.name


@dataclasses.dataclass(frozen=True)
class TuningTask:
  """Tuning one method at one local-epoch count on its dataset's tuning regime."""
  dataset: str
  regime: str
  epochs: int
  method: MethodPlan
  seeds: tuple


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything the engine runs and the report describes (`make_plan`).

  Attributes:
    root: the benchmark's directory.
    regimes: canonical regime names, in grid order; `datasets` their datasets in order of
      first appearance.
    methods: the `MethodPlan`s, in grid order; `baseline` the name compared with.
    epochs, report_seeds: the grid's local epochs and reporting seeds.
    tuning: the tuning tasks, in order (empty without tuning).
    tuning_regimes: dataset -> the regime tuned on (whether or not tuning runs).
    tuned_epochs: grid E -> the tuned E whose choice it uses.
    models: dataset -> model name.
    loop: the runs' loop (`experiments.config.LoopConfig`): rounds, clients per round, batch
      size, shuffle buffer, eval_train_loss, resume.
    client_momentum: the client SGD's momentum.
    data_seed: the partition's seed of every run; None: each run's own seed.
    last_k, validation_fraction: tuning's score and validation split.
    runtime: 'inprocess' or 'cpp'; cache_dir, data_dir, leaf_dir: where datasets are.
    progress: show the grid's progress.
    dataset_of: regime -> its dataset, for every regime run (tuning regimes included).
    own_data, model_fns: your own datasets (name -> (train, test)) and models (name -> model
      function), `BenchmarkConfig.datasets` and `model_fns`.
  """
  root: str
  regimes: tuple
  datasets: tuple
  methods: tuple
  baseline: str
  epochs: tuple
  report_seeds: tuple
  tuning: tuple
  tuning_regimes: Mapping[str, str]
  tuned_epochs: Mapping[int, int]
  models: Mapping[str, str]
  loop: experiment_config.LoopConfig
  client_momentum: float
  data_seed: Optional[int]
  last_k: int
  validation_fraction: float
  runtime: str
  cache_dir: Optional[str]
  data_dir: Optional[str]
  leaf_dir: Optional[str]
  progress: bool
  dataset_of: Mapping[str, str]
  own_data: Mapping[str, tuple]
  model_fns: Mapping[str, Any]

  @property
  def rounds(self) -> int:
    return self.loop.rounds

  def regimes_of(self, dataset: str) -> list[str]:
    return [r for r in self.regimes if self.dataset_of[r] == dataset]

  def spec(self, *, phase: str, regime: str, method: MethodPlan, kwargs: Mapping[str, Any],
           client_lr: float, server_lr: float, epochs: int, seed: int,
           candidate: str = '') -> runs_lib.RunSpec:
    """One run's settings."""
    dataset = self.dataset_of[regime]
    return runs_lib.RunSpec(
        phase=phase, regime=regime, dataset=dataset, method=method.name,
        algorithm=method.method.algorithm,
        kwargs=tuple(sorted(methods_lib.builder_kwargs(method.method, kwargs).items())),
        client_lr=float(client_lr), server_lr=float(server_lr), epochs=int(epochs),
        seed=int(seed), data_seed=seed if self.data_seed is None else self.data_seed,
        model=self.models[dataset], rounds=self.loop.rounds,
        clients_per_round=self.loop.clients_per_round, batch_size=self.loop.batch_size,
        shuffle_buffer=self.loop.shuffle_buffer, client_momentum=float(self.client_momentum),
        candidate=candidate)

  def tuning_spec(self, task: TuningTask, candidate: tuning_lib.Candidate,
                  seed: int) -> runs_lib.RunSpec:
    return self.spec(phase=runs_lib.TUNE_PHASE, regime=task.regime, method=task.method,
                     kwargs=dict(dict(task.method.given), **dict(candidate.tuned)),
                     client_lr=candidate.client_lr, server_lr=candidate.server_lr,
                     epochs=task.epochs, seed=seed, candidate=candidate.name)

  def report_specs(self, choices: Sequence[tuning_lib.Choice]) -> list[runs_lib.RunSpec]:
    """Every reporting run, with the tuned values of `choices` (the given ones without
    tuning)."""
    by_key = {(c.dataset, c.epochs, c.method): c for c in choices}
    by_name = {m.name: m for m in self.methods}
    specs = []
    for dataset in self.datasets:
      for method in self.methods:
        for regime in self.regimes_of(dataset):
          for epochs in self.epochs:
            kwargs = dict(method.given)
            client_lr, server_lr = method.client_lr, method.server_lr
            if self.tuning and method.inherits:
              # The parent's tuned values; the variant changes only what it fixes.
              source = by_name[method.inherits]
              choice = by_key[(dataset, self.tuned_epochs[epochs], source.name)]
              if source.method.algorithm == method.method.algorithm:
                kwargs = dict(source.given)
                kwargs.update(choice.values)
                kwargs.update(method.method.fixed)
              elif method.method.algorithm == methods_lib.CUSTOM:
                kwargs = _custom_with_parent_values(kwargs, source.method.algorithm,
                                                    choice.values)
              client_lr = (choice.client_lr if method.method.client_lr is None
                           else method.method.client_lr)
              server_lr = (choice.server_lr if method.method.server_lr is None
                           else method.method.server_lr)
            elif self.tuning:
              choice = by_key[(dataset, self.tuned_epochs[epochs], method.name)]
              kwargs.update(choice.values)
              client_lr, server_lr = choice.client_lr, choice.server_lr
            for seed in self.report_seeds:
              specs.append(self.spec(phase=runs_lib.REPORT_PHASE, regime=regime, method=method,
                                     kwargs=kwargs, client_lr=client_lr, server_lr=server_lr,
                                     epochs=epochs, seed=seed))
    return specs

  def describe(self) -> dict[str, Any]:
    """What the report shows of the plan, as JSON values (config.json's `plan`)."""
    return {
        'datasets': list(self.datasets), 'models': dict(self.models),
        'tuning_regimes': dict(self.tuning_regimes) if self.tuning else {},
        'tuned_epochs': {str(e): t for e, t in self.tuned_epochs.items()} if self.tuning else {},
        'methods': [{'name': m.name, 'algorithm': m.method.algorithm,
                     'grid': {k: list(v) for k, v in m.method.grid}, 'given': dict(m.given),
                     'parent': m.method.parent, 'inherits': m.inherits,
                     'fixed': dict(m.method.fixed),
                     'client_lrs': list(m.search.client_lrs),
                     'server_lrs': list(m.search.server_lrs)} for m in self.methods],
        'runs': {runs_lib.TUNE_PHASE: self.num_runs(runs_lib.TUNE_PHASE),
                 runs_lib.REPORT_PHASE: self.num_runs(runs_lib.REPORT_PHASE)}}

  # --- counts (the progress total, `perf.benchmark_grid`) -----------------------------

  def planned_runs(self) -> dict[tuple[str, str, str, int], int]:
    """Runs per (phase, method, dataset, E): exact for reporting, an upper bound for tuning
    (stage 2's repeats of stage 1 and every possible edge extension included)."""
    counts: dict[tuple[str, str, str, int], int] = {}
    for task in self.tuning:
      counts[(runs_lib.TUNE_PHASE, task.method.name, task.dataset, task.epochs)] = (
          (len(tuning_lib.candidates(task.method.search))
           + tuning_lib.max_extensions(task.method.search)) * len(task.seeds))
    for dataset in self.datasets:
      for method in self.methods:
        for epochs in self.epochs:
          counts[(runs_lib.REPORT_PHASE, method.name, dataset, epochs)] = (
              len(self.regimes_of(dataset)) * len(self.report_seeds))
    return counts

  def num_runs(self, phase: str) -> int:
    return sum(n for key, n in self.planned_runs().items() if key[0] == phase)

  def planned_processes(self) -> dict[tuple[str, str], int]:
    """Learning processes built at most per (method, dataset): one per distinct set of builder
    arguments among the method's candidates (1 without tuning)."""
    out = {}
    for dataset in self.datasets:
      for method in self.methods:
        out[(method.name, dataset)] = 1
    for task in self.tuning:
      out[(task.method.name, task.dataset)] = len(
          {c.tuned for c in tuning_lib.candidates(task.method.search)})
    return out


def _custom_with_parent_values(kwargs: Mapping[str, Any], algorithm: str,
                               values: Mapping[str, Any]) -> dict[str, Any]:
  """A 'custom' variant's builder arguments with its parent's tuned values where its loss or
  aggregator takes the same hyperparameter (`tff_conflict.hparams`; e.g. FedLD's tuned
  margin_weight for `loss='margin'`); values it fixes itself win."""
  tuned = [h for h in hparams_lib.ALGORITHM_HPARAMS.get(algorithm, ()) if h.keyword in values]
  out = dict(kwargs)
  for part, tables in (('loss', hparams_lib.LOSS_HPARAMS),
                       ('aggregator', hparams_lib.AGGREGATOR_HPARAMS)):
    own = dict(out.get(f'{part}_kwargs') or {})
    own.update({h.keyword: values[h.keyword] for h in tables.get(out.get(part), ())
                if h in tuned and h.keyword not in own})
    if own:
      out[f'{part}_kwargs'] = own
  return out


def _model_for(config: config_lib.BenchmarkConfig, dataset: str) -> str:
  from experiments import architectures  # pylint: disable=g-import-not-at-top
  if dataset in config.models:
    return config.models[dataset]
  if dataset in config.datasets:   # your only model (`BenchmarkConfig` checks there is one)
    return next(iter(config.model_fns))
  return architectures.DEFAULT_MODELS[dataset]


def _tuning_regime(config: config_lib.BenchmarkConfig, parsed, dataset: str) -> str:
  """The regime whose tuning is used for `dataset`'s regimes."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  if dataset in config.tuning.tuning_regimes:
    return config.tuning.tuning_regimes[dataset]
  ours = [r for r in parsed if r.dataset == dataset]
  default = config_lib.DEFAULT_TUNING_REGIMES.get(dataset)
  if default is None:
    return ours[0].name
  wanted = data.parse_regime(default)
  # The grid's own version of the default split (e.g. with its population), if it has one.
  same = [r for r in ours if (r.split, r.param) == (wanted.split, wanted.param)]
  return same[0].name if same else default


def _method_plan(config: config_lib.BenchmarkConfig, name: str) -> MethodPlan:
  method = methods_lib.parse_method(name)
  if name in config.tuning.grids:
    method = method.with_grid(config.tuning.grids[name])
  given = methods_lib.given_kwargs(config.given, method)
  client_lr = config.client.learning_rate if method.client_lr is None else method.client_lr
  server_lr = config.server.learning_rate if method.server_lr is None else method.server_lr
  # The same learning-rate search for every method of the table, the baseline included.
  server_lrs = ((server_lr,) if method.server_lr is not None or not config.tuning.tune_server_lr
                else tuple(config.tuning.server_lr_grid))
  client_lrs = ((method.client_lr,) if method.client_lr is not None
                else tuple(config.tuning.client_lr_grid))
  search = tuning_lib.Search(method=method, given=tuple(sorted(given.items())),
                             client_lrs=client_lrs, server_lr=server_lr, server_lrs=server_lrs,
                             strategy=config.tuning.strategy,
                             edge_steps=config.tuning.edge_steps,
                             edge_factor=config.tuning.edge_factor,
                             schedule=config.tuning.schedule, rounds=config.loop.rounds,
                             min_rounds=config.tuning.last_k)
  return MethodPlan(method=method, given=tuple(sorted(given.items())), client_lr=client_lr,
                    server_lr=server_lr, search=search)


def _with_inheritance(config: config_lib.BenchmarkConfig, methods: tuple) -> tuple:
  """Sets `inherits` of the variants whose parent is in the table (`variants_inherit`): the
  first ancestor that is tuned itself."""
  if not (config.tuning.tune and config.variants_inherit):
    return methods
  parents = {m.name: m.method.parent for m in methods}
  out = []
  for m in methods:
    source, seen = m.method.parent, {m.name}
    if source not in parents:
      out.append(m)
      continue
    while parents.get(source) in parents and source not in seen:
      seen.add(source)
      source = parents[source]
    out.append(dataclasses.replace(m, inherits=source))
  return tuple(out)


def make_plan(config: config_lib.BenchmarkConfig) -> Plan:
  """Resolves `config` (see `Plan`)."""
  parsed = [config_lib.parse_regime(r, config.datasets) for r in config.regimes]
  datasets = tuple(dict.fromkeys(r.dataset for r in parsed))
  methods = _with_inheritance(config, tuple(_method_plan(config, name)
                                            for name in config.methods))
  tuned = tuple(config.tuning.tune_epochs or config.epochs)
  tuning_regimes = {d: _tuning_regime(config, parsed, d) for d in datasets}
  tasks = []
  if config.tuning.tune:
    for dataset in datasets:
      for epochs in tuned:
        tasks += [TuningTask(dataset, tuning_regimes[dataset], epochs, method,
                             tuple(config.tuning.tuning_seeds)) for method in methods
                  if method.inherits is None]
  return Plan(
      root=config.root, regimes=tuple(config.regimes), datasets=datasets, methods=methods,
      baseline=config.baseline, epochs=tuple(config.epochs),
      report_seeds=tuple(config.report_seeds), tuning=tuple(tasks),
      tuning_regimes=tuning_regimes,
      tuned_epochs={e: min(tuned, key=lambda t, e=e: (abs(t - e), t)) for e in config.epochs},
      models={d: _model_for(config, d) for d in datasets}, loop=config.loop,
      client_momentum=config.client.momentum,
      data_seed=None if config.vary_partition else config.data.data_seed,
      last_k=config.tuning.last_k, validation_fraction=config.tuning.validation_fraction,
      runtime=config.runtime.runtime, cache_dir=config.data.cache_dir,
      data_dir=config.data.data_dir, leaf_dir=config.data.leaf_dir,
      progress=config.output.progress,
      dataset_of={r: config_lib.parse_regime(r, config.datasets).dataset
                  for r in list(config.regimes) + list(tuning_regimes.values())},
      own_data=dict(config.datasets), model_fns=dict(config.model_fns))

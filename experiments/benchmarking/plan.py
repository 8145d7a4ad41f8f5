"""A benchmark's plan as one value, `make(config) -> Plan`: the methods, each dataset's settings,
the tasks (tuning, the baseline's widening, the reporting runs at the choices), the builds to
check and the counts; the rules: docs/design.md, "Tuning"."""

import itertools
from typing import Any, Callable, Generator, Mapping, NamedTuple, Optional, Sequence

from experiments.benchmarking import lookups
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import search as search_lib
from tff_conflict import hparams as hparams_lib

Method = methods_lib.Method


class Dataset(NamedTuple):
  """One dataset's settings: `tuned_on` maps each reporting regime to the regime whose tuning it
  uses (empty without tuning); `data_location`, `data_digest`: `fingerprints.of_source`."""
  regimes: tuple
  model: str
  rounds: int
  client_lr_grid: tuple
  server_lr_grid: tuple
  tuned_on: Mapping[str, str]
  data_location: Optional[str] = None
  data_digest: Optional[str] = None

  @property
  def tuning_regimes(self) -> tuple:
    """The regimes tuned on, once each, in the reporting regimes' order."""
    return tuple(dict.fromkeys(self.tuned_on.values()))


class Plan(NamedTuple):
  """Everything a benchmark runs, from `make`: `inherits` names the method whose tuned values
  each runs at (None: its own), `tuning` the (tuning regime, E, method) tuned, `run` the settings
  every `RunSpec` shares; `data_seed` None: each run's seed; `runs` per (phase, method, dataset,
  E)."""
  methods: tuple
  inherits: Mapping[str, Optional[str]]
  datasets: Mapping[str, Dataset]
  regimes: tuple
  epochs: tuple
  tuned_epochs: Mapping[int, int]
  report_seeds: tuple
  tuning_seeds: tuple
  baseline: str
  tuning: tuple
  search: Mapping[tuple[str, str], search_lib.SearchSettings]
  given: Mapping[str, Mapping[str, Any]]
  rates: Mapping[str, tuple[float, float]]
  run: Mapping[str, Any]
  data_seed: Optional[int]
  tasks: tuple = ()
  builds: tuple = ()
  runs: Mapping[tuple, int] = {}
  processes: Mapping[tuple, int] = {}
  description: Mapping[str, Any] = {}

  def dataset_of(self, regime: str) -> str:
    return next(d for d, s in self.datasets.items()
                if regime in s.regimes or regime in s.tuning_regimes)


def _inherits(config, table: Sequence[Method]) -> dict[str, Optional[str]]:
  """name -> the method whose tuned values it runs at (its parent's source), None: its own."""
  parents = {m.name: m.parent for m in table}
  out = {}
  for m in table:
    source = m.parent if config.tune and config.variants_inherit and m.parent in parents else None
    while parents.get(source) in parents:
      source = parents[source]
    out[m.name] = source
  return out


def _dataset(config, name: str) -> Dataset:
  from experiments.benchmarking import fingerprints  # pylint: disable=g-import-not-at-top
  own = config.dataset_settings.get(name, {})
  source = (None, None) if name in config.datasets else fingerprints.of_source(name, config.data)
  regimes = tuple(lookups.regimes_of(config, name))
  tuned_on = ({} if not config.tune else {r: r for r in regimes} if config.tune_each_regime
              else dict.fromkeys(regimes, lookups.tuning_regime(config, name)))
  return Dataset(
      regimes, lookups.model_of(config, name), own.get('rounds', config.loop.rounds),
      tuple(own.get('client_lr_grid', config.client_lr_grid)),
      tuple(own.get('server_lr_grid', config.server_lr_grid)), tuned_on, *source)


def _search(config, plan: Plan, dataset: Dataset, method: Method) -> search_lib.SearchSettings:
  """A method's search on a dataset: its lr grids (server lrs with `tune_server_lr`)."""
  client_lr, server_lr = plan.rates[method.name]
  return search_lib.SearchSettings(
      config.strategy, config.schedule, dataset.rounds, config.last_k, config.edge_steps,
      config.edge_factor,
      (client_lr,) if method.client_lr is not None else dataset.client_lr_grid,
      (server_lr,) if method.server_lr is not None or not config.tune_server_lr
      else dataset.server_lr_grid, server_lr, plan.given[method.name])


def make(config) -> Plan:
  """The plan of `config` (a `config.BenchmarkConfig`); nothing after reads `config`."""
  table = [methods_lib.parse_method(n) for n in config.methods]   # `--grids` applied
  table = [m.with_grid(config.grids.get(m.name, dict(m.grid)) if config.tune_method_grids else {})
           for m in table]
  inherits = _inherits(config, table)
  datasets = {d: _dataset(config, d) for d in lookups.datasets(config)}
  tuned = config.tune_epochs or config.epochs
  plan = Plan(
      methods=tuple(table), inherits=inherits, datasets=datasets, regimes=tuple(config.regimes),
      epochs=tuple(config.epochs),
      tuned_epochs={e: min(tuned, key=lambda t, e=e: (abs(t - e), t)) for e in config.epochs}
      if config.tune else {}, report_seeds=tuple(config.report_seeds),
      tuning_seeds=tuple(config.tuning_seeds), baseline=config.baseline,
      tuning=tuple((r, e, m) for d in datasets.values() for r in d.tuning_regimes
                   for e in tuned for m in table if inherits[m.name] is None),
      search={}, given={m.name: methods_lib.given_kwargs(config.given, m) for m in table},
      rates={m.name: (config.client.learning_rate if m.client_lr is None else m.client_lr,
                      config.server.learning_rate if m.server_lr is None else m.server_lr)
             for m in table},
      run=dict(clients_per_round=config.loop.clients_per_round,
               batch_size=config.loop.batch_size, shuffle_buffer=config.loop.shuffle_buffer,
               client_momentum=float(config.client.momentum), last_k=config.last_k,
               validation_fraction=config.validation_fraction,
               eval_train_loss=config.loop.eval_train_loss, data_dir=config.data.data_dir,
               leaf_dir=config.data.leaf_dir, cache_dir=config.data.cache_dir),
      data_seed=None if config.vary_partition else config.data.data_seed)
  plan = plan._replace(search={(d, m.name): _search(config, plan, s, m)
                               for d, s in datasets.items() for m in table})
  builds, runs, processes = _builds_and_counts(plan)
  plan = plan._replace(builds=builds, runs=runs, processes=processes)
  plan = plan._replace(tasks=tuple(_tasks(plan)))
  return plan._replace(description=_describe(plan))


def run_spec(plan: Plan, *, phase: str, regime: str, method: Method, kwargs: Mapping[str, Any],
             client_lr: float, server_lr: float, epochs: int, seed: int, candidate: str = '',
             rounds: Optional[int] = None) -> runs_lib.RunSpec:
  dataset = plan.dataset_of(regime)
  data = plan.datasets[dataset]
  # Only a tuning run holds out a validation part, only a reporting run evaluates the train loss.
  only = {'validation_fraction': 0.0} if phase == runs_lib.REPORT_PHASE else {
      'eval_train_loss': False}
  return runs_lib.RunSpec(
      phase=phase, regime=regime, dataset=dataset, method=method.name, algorithm=method.algorithm,
      kwargs=tuple(sorted(methods_lib.builder_kwargs(method, kwargs).items())),
      client_lr=float(client_lr), server_lr=float(server_lr), epochs=int(epochs), seed=int(seed),
      data_seed=seed if plan.data_seed is None else plan.data_seed, model=data.model,
      rounds=rounds or data.rounds, candidate=candidate, data_location=data.data_location,
      data_digest=data.data_digest, **dict(plan.run, **only))


def tuning_spec(plan: Plan, tuned: str, epochs: int, method: Method, candidate: dict,
                seed: int, rounds: Optional[int] = None) -> runs_lib.RunSpec:
  """A tuning run of `candidate` on the regime `tuned` (`rounds`: a shorter rung of halving)."""
  name = search_lib.candidate_name(candidate)
  if rounds is not None and rounds != plan.datasets[plan.dataset_of(tuned)].rounds:
    name = f'{name} @{rounds} rounds'
  return run_spec(plan, phase=runs_lib.TUNE_PHASE, regime=tuned,
                  method=method, kwargs={**plan.given[method.name], **search_lib.tuned_values(
                      candidate)}, client_lr=candidate['client_lr'],
                  server_lr=candidate['server_lr'], epochs=epochs, seed=seed, candidate=name,
                  rounds=rounds)


def report_specs(plan: Plan, choices: Sequence[Mapping[str, Any]], *,
                 dataset: Optional[str] = None, method: Optional[str] = None
                 ) -> list[runs_lib.RunSpec]:
  """Every reporting run (of `dataset` and `method` when given) at the values of `choices`; a
  variant runs at its source's and changes only what it fixes."""
  by_key = {(c['regime'], c['epochs'], c['method']): c for c in choices}
  by_name = {m.name: m for m in plan.methods}
  specs = []
  for name, m in itertools.product(plan.datasets if dataset is None else [dataset],
                                   plan.methods if method is None else [by_name[method]]):
    source = by_name.get(plan.inherits[m.name], m)
    for regime, epochs in itertools.product(plan.datasets[name].regimes, plan.epochs):
      kwargs = plan.given[m.name]
      client_lr, server_lr = plan.rates[m.name]
      if plan.tuned_epochs:
        choice = by_key[(plan.datasets[name].tuned_on[regime], plan.tuned_epochs[epochs],
                         source.name)]
        if source.algorithm == m.algorithm:   # itself, or a variant of its algorithm
          kwargs = {**plan.given[source.name], **choice['tuned'], **dict(m.fixed)}
        elif m.algorithm == methods_lib.CUSTOM:
          kwargs = _custom_with_parent_values(kwargs, source.algorithm, choice['tuned'])
        client_lr = choice['client_lr'] if m.client_lr is None else m.client_lr
        server_lr = choice['server_lr'] if m.server_lr is None else m.server_lr
      specs += [run_spec(plan, phase=runs_lib.REPORT_PHASE, regime=regime, method=m,
                         kwargs=kwargs, client_lr=client_lr, server_lr=server_lr,
                         epochs=epochs, seed=seed) for seed in plan.report_seeds]
  return specs


def _custom_with_parent_values(kwargs: Mapping[str, Any], algorithm: str,
                               values: Mapping[str, Any]) -> dict[str, Any]:
  """A 'custom' variant's arguments with its parent's tuned values where its loss or aggregator
  takes the same hyperparameter (e.g. FedLD's margin_weight); its own values win."""
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


class Task(NamedTuple):
  """A node of `Plan.tasks`: `body(results)`, given the results of the tasks `after` names, is a
  generator yielding waves of independent `RunSpec`s, sent their summaries (None: failed),
  returning the task's result; `runs`: its most runs."""
  key: tuple
  after: tuple
  body: Callable[[Mapping[tuple, Any]], Generator[list, list, Any]]
  runs: int

  @property
  def phase(self) -> str:
    return runs_lib.REPORT_PHASE if self.key[0] == 'report' else runs_lib.TUNE_PHASE


def choice_key(plan: Plan, tuned: str, epochs: int, name: str) -> tuple:
  """The task whose result the reporting runs use: the tuning's on the regime `tuned`, the
  baseline's widening."""
  return ('widen' if name == plan.baseline else 'tune', tuned, epochs, name)


def incomplete(plan: Plan, tuned: str, epochs: int, name: str) -> dict[str, Any]:
  """The result of a search a run of which failed: no choice; a rerun completes it."""
  return dict(dataset=plan.dataset_of(tuned), regime=tuned, epochs=epochs, method=name,
              incomplete=True)


def is_incomplete(choice: Any) -> bool:
  return bool(choice.get('incomplete'))


def _evaluated(plan: Plan, tuned: str, epochs: int, method: Method, requests: Generator):
  """A search as a task's body: a run per request and tuning seed; a failure ends it incomplete."""
  try:
    wave = next(requests)
    while True:
      groups = [[tuning_spec(plan, tuned, epochs, method, c, seed, rounds)
                 for seed in plan.tuning_seeds] for c, rounds in wave]
      summaries = yield [spec for group in groups for spec in group]
      if any(s is None for s in summaries):
        requests.close()
        return incomplete(plan, tuned, epochs, method.name)
      summaries = iter(summaries)
      wave = requests.send([search_lib.score([next(summaries) for _ in group])
                            for group in groups])
  except StopIteration as e:
    return e.value


def _tasks(plan: Plan) -> list[Task]:
  """A task per tuning, the baseline's widening after every tuning of its regime and E, and a
  task per method's reporting runs on a dataset (result: [(spec, summary)]) after every choice."""
  out = []
  for tuned, epochs, method in plan.tuning:
    own = ('tune', tuned, epochs, method.name)
    settings = plan.search[plan.dataset_of(tuned), method.name]

    def tune(results, tuned=tuned, epochs=epochs, method=method, settings=settings):
      del results
      where = dict(dataset=plan.dataset_of(tuned), regime=tuned, epochs=epochs)
      return (yield from _evaluated(plan, tuned, epochs, method,
                                    search_lib.search(settings, method, **where)))
    out.append(Task(own, (), tune, search_lib.max_candidates(settings, method)
                    * len(plan.tuning_seeds)))
    if method.name != plan.baseline:
      continue
    group = tuple(('tune', r, e, m.name) for r, e, m in plan.tuning if (r, e) == (tuned, epochs))

    def widen(results, tuned=tuned, epochs=epochs, method=method, group=group, own=own):
      choice = results[own]   # widened to the server lrs every search reached: all complete
      if is_incomplete(choice) or len(choice['server_lrs_tried']) < 2:
        return choice
      if any(is_incomplete(results[key]) for key in group):
        return incomplete(plan, tuned, epochs, method.name)
      reached = sorted({lr for key in group for lr in results[key]['server_lrs_tried']})
      return (yield from _evaluated(plan, tuned, epochs, method,
                                    search_lib.widen_search(choice, reached)))
    out.append(Task(choice_key(plan, tuned, epochs, method.name), group, widen,
                    0))   # its runs are counted in the tuning's upper bound
  # Reporting starts once tuning is over (the test split is read by no run before), and not
  # for a method whose choice, or the baseline's (every comparison's), is incomplete.
  tuned = tuple(dict.fromkeys(choice_key(plan, d, e, m.name) for d, e, m in plan.tuning))
  sources = {m.name: plan.inherits[m.name] or m.name for m in plan.methods}
  for dataset, settings in plan.datasets.items():
    for method in plan.methods:
      needs = tuple(choice_key(plan, r, e, name) for r in settings.tuning_regimes
                    for e in set(plan.tuned_epochs.values())
                    for name in (sources[method.name], plan.baseline))

      def report(results, dataset=dataset, name=method.name, needs=needs):
        if any(is_incomplete(results[key]) for key in needs):
          return None
        specs = report_specs(plan, [results[k] for k in tuned], dataset=dataset, method=name)
        return list(zip(specs, (yield specs)))
      out.append(Task(('report', dataset, method.name), tuned, report,
                      len(settings.regimes) * len(plan.epochs) * len(plan.report_seeds)))
  return out


def _describe(plan: Plan) -> dict[str, Any]:
  """config.json's `plan`: per method, what its tuning searched on each dataset, and the union."""
  def searched(m, dataset):
    s = plan.search[dataset, m.name]
    return {'client_lrs': list(s.client_lrs), 'server_lrs': list(s.server_lrs),
            'grid': {k: list(v) for k, v in m.grid}}
  union = lambda m, key: list(dict.fromkeys(lr for d in plan.datasets
                                            for lr in searched(m, d)[key]))
  return {
      'datasets': list(plan.datasets),
      'models': {d: s.model for d, s in plan.datasets.items()},
      'rounds': {d: s.rounds for d, s in plan.datasets.items()},
      'data': {d: {'location': s.data_location, 'digest': s.data_digest}
               for d, s in plan.datasets.items()},
      'tuned_on': {r: t for s in plan.datasets.values() for r, t in s.tuned_on.items()},
      'tuned_epochs': {str(e): t for e, t in plan.tuned_epochs.items()},
      'methods': [{'name': m.name, 'algorithm': m.algorithm,
                   'grid': {k: list(v) for k, v in m.grid}, 'given': plan.given[m.name],
                   'parent': m.parent, 'inherits': plan.inherits[m.name], 'fixed': dict(m.fixed),
                   'client_lrs': union(m, 'client_lrs'), 'server_lrs': union(m, 'server_lrs'),
                   'searched': {d: searched(m, d) for d in plan.datasets}}
                  for m in plan.methods],
      'runs': {phase: sum(n for key, n in plan.runs.items() if key[0] == phase)
               for phase in (runs_lib.TUNE_PHASE, runs_lib.REPORT_PHASE)}}


def _builds_and_counts(plan: Plan) -> tuple[tuple, dict, dict]:
  """(a run per distinct process of the unextended candidates and the reporting runs, runs per
  (phase, method, dataset, E), tuning's an upper bound, processes at most per (method, dataset))."""
  builds, first = {}, []
  runs = {(runs_lib.REPORT_PHASE, m.name, dataset, epochs):
          len(settings.regimes) * len(plan.report_seeds)
          for dataset, settings in plan.datasets.items() for m in plan.methods
          for epochs in plan.epochs}
  processes = {(m.name, dataset): 1 for dataset in plan.datasets for m in plan.methods}
  for tuned, epochs, method in plan.tuning:
    dataset = plan.dataset_of(tuned)
    settings = plan.search[dataset, method.name]
    found = [c for batch in search_lib.batches(settings, method) for c in batch]
    key = (runs_lib.TUNE_PHASE, method.name, dataset, epochs)
    runs[key] = runs.get(key, 0) + search_lib.max_candidates(settings, method) * len(
        plan.tuning_seeds)
    processes[method.name, dataset] = len({repr(sorted(search_lib.tuned_values(c).items()))
                                           for c in found})
    for c in found:
      spec = tuning_spec(plan, tuned, epochs, method, c, plan.tuning_seeds[0])
      builds.setdefault((spec.algorithm, repr(spec.kwargs), spec.model, spec.dataset), spec)
    first.append(dict(dataset=dataset, regime=tuned, epochs=epochs, method=method.name,
                      tuned=search_lib.tuned_values(found[0]), client_lr=found[0]['client_lr'],
                      server_lr=found[0]['server_lr']))
  for spec in report_specs(plan, first):
    builds.setdefault((spec.algorithm, repr(spec.kwargs), spec.model, spec.dataset), spec)
  return tuple(builds.values()), runs, processes

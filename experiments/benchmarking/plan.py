"""What a benchmark runs, as functions of its `config.BenchmarkConfig`: each method's tuning on the
validation split (candidates, successive halving, edge extension, the choice) and the reporting
runs at the choices; the rules: docs/design.md, "Tuning"."""

import dataclasses
import itertools
import math
from typing import Any, Callable, Generator, Mapping, Optional, Sequence

import numpy as np

from experiments.benchmarking import config as config_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import results as results_lib
from experiments.benchmarking import runs as runs_lib
from tff_conflict import hparams as hparams_lib

Method = methods_lib.Method
HALVING_RATE = 3  # successive halving keeps the best 1 / HALVING_RATE at each rung


def dataset_of(config, regime: str) -> str:
  return config_lib.parse_regime(regime, config.datasets).dataset


def datasets(config) -> list[str]:
  """The regimes' datasets, in order of first appearance."""
  return list(dict.fromkeys(dataset_of(config, r) for r in config.regimes))


def regimes_of(config, dataset: str) -> list[str]:
  return [r for r in config.regimes if dataset_of(config, r) == dataset]


def model_of(config, dataset: str) -> str:
  from experiments import architectures  # pylint: disable=g-import-not-at-top
  if dataset in config.models:
    return config.models[dataset]
  if dataset in config.datasets:   # your only model (`BenchmarkConfig` checks there is one)
    return next(iter(config.model_fns))
  return architectures.DEFAULT_MODELS[dataset]


def tuning_regime(config, dataset: str) -> str:
  """The regime whose tuning `dataset`'s regimes use: `tuning_regimes`, else the grid's version
  of the default split (e.g. with its population), else the default, else its first regime."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  if dataset in config.tuning_regimes:
    return config.tuning_regimes[dataset]
  ours = [config_lib.parse_regime(r, config.datasets) for r in regimes_of(config, dataset)]
  default = config_lib.DEFAULT_TUNING_REGIMES.get(dataset)
  if default is None:
    return ours[0].name
  wanted = data.parse_regime(default)
  same = [r for r in ours if (r.split, r.param) == (wanted.split, wanted.param)]
  return same[0].name if same else default


def tuned_epochs(config, epochs: int) -> int:
  """The tuned E whose choice the grid's E uses: the nearest (ties: the smaller)."""
  return min(config.tune_epochs or config.epochs, key=lambda t: (abs(t - epochs), t))


def data_seed(config, seed: int) -> int:
  """The partition's seed of a run with `seed`."""
  return seed if config.vary_partition or config.data.data_seed is None else config.data.data_seed


def methods(config) -> list[Method]:
  """The methods, in grid order, `--grids` replacing their default grids (none with
  `--notune_method_grids`: each runs at its given values)."""
  grids = config.grids
  table = [methods_lib.parse_method(n).with_grid(grids[n]) if n in grids
           else methods_lib.parse_method(n) for n in config.methods]
  return table if config.tune_method_grids else [m.with_grid({}) for m in table]


def inherits(config, table: Sequence[Method]) -> dict[str, Optional[str]]:
  """name -> the method whose tuned values it runs at (`variants_inherit`, its parent in the
  table, or that one's own when it inherits too); None: tuned itself (or untuned)."""
  parents = {m.name: m.parent for m in table}
  out = {}
  for m in table:
    inherit = config.tune and config.variants_inherit and m.parent in parents
    source = m.parent if inherit else None
    while parents.get(source) in parents:
      source = parents[source]
    out[m.name] = source
  return out


def rates(config, method: Method) -> tuple[float, float]:
  """(client lr, server lr) without tuning: the method's fixed ones, else the table's."""
  return (config.client.learning_rate if method.client_lr is None else method.client_lr,
          config.server.learning_rate if method.server_lr is None else method.server_lr)


def searched_rates(config, method: Method) -> tuple[tuple, tuple]:
  """(client lrs, server lrs) tuning tries: the table's grids, the same for every method (the
  baseline included); a fixed rate alone; server lrs only with `tune_server_lr`."""
  client_lr, server_lr = rates(config, method)
  return ((client_lr,) if method.client_lr is not None else tuple(config.client_lr_grid),
          (server_lr,) if method.server_lr is not None or not config.tune_server_lr
          else tuple(config.server_lr_grid))


def tuning_tasks(config) -> list[tuple[str, int, Method]]:
  """(dataset, E, method) of each tuning, in order (none without tuning; variants that inherit
  are not tuned)."""
  if not config.tune:
    return []
  table = methods(config)
  inherited = inherits(config, table)
  return [(dataset, epochs, m) for dataset in datasets(config)
          for epochs in config.tune_epochs or config.epochs
          for m in table if inherited[m.name] is None]


def run_spec(config, *, phase: str, regime: str, method: Method, kwargs: Mapping[str, Any],
             client_lr: float, server_lr: float, epochs: int, seed: int, candidate: str = '',
             rounds: Optional[int] = None) -> runs_lib.RunSpec:
  dataset = dataset_of(config, regime)
  config = config_lib.for_dataset(config, dataset)
  return runs_lib.RunSpec(
      phase=phase, regime=regime, dataset=dataset, method=method.name, algorithm=method.algorithm,
      kwargs=tuple(sorted(methods_lib.builder_kwargs(method, kwargs).items())),
      client_lr=float(client_lr), server_lr=float(server_lr), epochs=int(epochs), seed=int(seed),
      data_seed=data_seed(config, seed), model=model_of(config, dataset),
      rounds=rounds or config.loop.rounds, clients_per_round=config.loop.clients_per_round,
      batch_size=config.loop.batch_size, shuffle_buffer=config.loop.shuffle_buffer,
      client_momentum=float(config.client.momentum), candidate=candidate)


def tuning_spec(config, dataset: str, epochs: int, method: Method, candidate: dict, seed: int,
                rounds: Optional[int] = None) -> runs_lib.RunSpec:
  """A tuning run of `candidate` (`rounds`: a shorter rung of halving, a run of its own)."""
  name = candidate_name(candidate)
  if rounds is not None and rounds != config_lib.for_dataset(config, dataset).loop.rounds:
    name = f'{name} @{rounds} rounds'
  kwargs = dict(methods_lib.given_kwargs(config.given, method), **_tuned(candidate))
  return run_spec(config, phase=runs_lib.TUNE_PHASE, regime=tuning_regime(config, dataset),
                  method=method, kwargs=kwargs,
                  client_lr=candidate['client_lr'], server_lr=candidate['server_lr'],
                  epochs=epochs, seed=seed, candidate=name, rounds=rounds)


def report_specs(config, choices: Sequence[Mapping[str, Any]], *, dataset: Optional[str] = None,
                 method: Optional[str] = None) -> list[runs_lib.RunSpec]:
  """Every reporting run (of `dataset` and `method` when given), at the tuned values of `choices`
  (the given ones without tuning); a variant that inherits runs at its source's and changes only
  what it fixes."""
  by_key = {(c['dataset'], c['epochs'], c['method']): c for c in choices}
  table = methods(config)
  by_name, inherited = {m.name: m for m in table}, inherits(config, table)
  specs = []
  only_dataset, only_method = dataset, method
  for dataset in datasets(config) if only_dataset is None else [only_dataset]:
    for method in table if only_method is None else [by_name[only_method]]:
      for regime in regimes_of(config, dataset):
        for epochs in config.epochs:
          kwargs = methods_lib.given_kwargs(config.given, method)
          client_lr, server_lr = rates(config, method)
          source = by_name.get(inherited[method.name], method)
          if config.tune:
            choice = by_key[(dataset, tuned_epochs(config, epochs), source.name)]
            if source.algorithm == method.algorithm:   # itself, or a variant of its algorithm
              kwargs = {**methods_lib.given_kwargs(config.given, source), **choice['tuned'],
                        **dict(method.fixed)}
            elif method.algorithm == methods_lib.CUSTOM:
              kwargs = _custom_with_parent_values(kwargs, source.algorithm, choice['tuned'])
            client_lr = choice['client_lr'] if method.client_lr is None else method.client_lr
            server_lr = choice['server_lr'] if method.server_lr is None else method.server_lr
          specs += [run_spec(config, phase=runs_lib.REPORT_PHASE, regime=regime, method=method,
                             kwargs=kwargs, client_lr=client_lr, server_lr=server_lr,
                             epochs=epochs, seed=seed) for seed in config.report_seeds]
  return specs


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


@dataclasses.dataclass(frozen=True)
class Task:
  """A node of the plan (`tasks`): `body(results)`, given the results of the tasks `after`
  names (key -> result), is a generator that yields waves of runs that depend on none of each
  other (lists of `RunSpec`), is sent their summaries in order (None: the run failed) and
  returns the task's result; `runs` is how many runs it makes at most."""
  key: tuple
  after: tuple
  body: Callable[[Mapping[tuple, Any]], Generator[list, list, Any]]
  runs: int

  @property
  def phase(self) -> str:
    return runs_lib.REPORT_PHASE if self.key[0] == 'report' else runs_lib.TUNE_PHASE


def tuning_key(dataset: str, epochs: int, name: str) -> tuple:
  """The task that tunes method `name` at E = `epochs` on `dataset`'s tuning regime."""
  return ('tune', dataset, epochs, name)


def choice_key(config, dataset: str, epochs: int, name: str) -> tuple:
  """The task whose result is the choice the reporting runs use: the tuning's, or for the
  baseline its widening (`widen_search`)."""
  return ('widen' if name == config.baseline else 'tune', dataset, epochs, name)


def report_key(dataset: str, name: str) -> tuple:
  """The task of method `name`'s reporting runs on `dataset`'s regimes; its result is the list
  of (spec, summary) in `report_specs` order."""
  return ('report', dataset, name)


def _evaluated(config, dataset: str, epochs: int, method: Method, requests: Generator):
  """A search generator (`search`, `widen_search`) as a task's body: each (candidate, rounds)
  request becomes a run per tuning seed, scored by `score`."""
  try:
    wave = next(requests)
    while True:
      groups = [[tuning_spec(config, dataset, epochs, method, c, seed, rounds)
                 for seed in config.tuning_seeds] for c, rounds in wave]
      summaries = iter((yield [spec for group in groups for spec in group]))
      wave = requests.send([score([next(summaries) for _ in group]) for group in groups])
  except StopIteration as e:
    return e.value


def tasks(config) -> list[Task]:
  """The benchmark as a value: every tuning (one task per dataset, E and tuned method; the
  baseline's choice a further task after every tuning of its dataset and E, `widen_search`)
  and every method's reporting runs per dataset, after every choice. Only this and
  the functions it calls read `config`."""
  out = []
  table = {m.name: m for m in methods(config)}
  for dataset, epochs, method in tuning_tasks(config):
    def tune(results, dataset=dataset, epochs=epochs, method=method):
      del results
      where = dict(dataset=dataset, regime=tuning_regime(config, dataset), epochs=epochs)
      return (yield from _evaluated(config, dataset, epochs, method,
                                    search(config, method, **where)))
    out.append(Task(tuning_key(dataset, epochs, method.name), (), tune,
                    max_candidates(config_lib.for_dataset(config, dataset), method)
                    * len(config.tuning_seeds)))
  for dataset, epochs, method in tuning_tasks(config):
    if method.name != config.baseline:
      continue
    group = tuple(tuning_key(d, e, m.name) for d, e, m in tuning_tasks(config)
                  if (d, e) == (dataset, epochs))
    own = tuning_key(dataset, epochs, method.name)

    def widen(results, dataset=dataset, epochs=epochs, method=method, group=group, own=own):
      choice = results[own]
      if len(choice['server_lrs_tried']) < 2:
        return choice
      reached = sorted({lr for key in group for lr in results[key]['server_lrs_tried']})
      return (yield from _evaluated(config, dataset, epochs, method,
                                    widen_search(choice, reached)))
    out.append(Task(choice_key(config, dataset, epochs, method.name), group, widen,
                    0))   # its runs are counted in the tuning's upper bound
  # Reporting starts once tuning is over (the test split is read by no run before).
  tuned = tuple(dict.fromkeys(choice_key(config, d, e, m.name) for d, e, m in tuning_tasks(config)))
  for dataset in datasets(config):
    for name in table:

      def report(results, dataset=dataset, name=name):
        specs = report_specs(config, [results[k] for k in tuned], dataset=dataset, method=name)
        return list(zip(specs, (yield specs)))
      out.append(Task(report_key(dataset, name), tuned, report,
                      len(regimes_of(config, dataset)) * len(config.epochs)
                      * len(config.report_seeds)))
  return out


def describe(config) -> dict[str, Any]:
  """What the report shows of the plan, as JSON values (config.json's `plan`)."""
  table, tune = methods(config), config.tune
  inherited = inherits(config, table)
  return {
      'datasets': datasets(config), 'models': {d: model_of(config, d) for d in datasets(config)},
      'tuning_regimes': {d: tuning_regime(config, d) for d in datasets(config)} if tune else {},
      'tuned_epochs': {str(e): tuned_epochs(config, e) for e in config.epochs} if tune else {},
      'methods': [{'name': m.name, 'algorithm': m.algorithm,
                   'grid': {k: list(v) for k, v in m.grid},
                   'given': methods_lib.given_kwargs(config.given, m),
                   'parent': m.parent, 'inherits': inherited[m.name], 'fixed': dict(m.fixed),
                   **dict(zip(('client_lrs', 'server_lrs'), map(list, searched_rates(config, m))))}
                  for m in table],
      'runs': {phase: num_runs(config, phase)
               for phase in (runs_lib.TUNE_PHASE, runs_lib.REPORT_PHASE)}}


def planned_builds(config) -> list[runs_lib.RunSpec]:
  """A run of each distinct learning process the plan may build (method, builder arguments,
  model, dataset): every candidate tuning may try before edge extensions (those stay in the
  hyperparameter's valid range), and every reporting run at its first candidate's values (with
  what a variant fixes); for the builders' checks before any run (`grid.check_builds`)."""
  out: dict[tuple, runs_lib.RunSpec] = {}
  first = []
  for dataset, epochs, method in tuning_tasks(config):
    found = _unextended(config_lib.for_dataset(config, dataset), method)
    for c in found:
      spec = tuning_spec(config, dataset, epochs, method, c, config.tuning_seeds[0])
      out.setdefault(_build_key(spec), spec)
    c = found[0]
    first.append(dict(dataset=dataset, epochs=epochs, method=method.name, tuned=_tuned(c),
                      client_lr=c['client_lr'], server_lr=c['server_lr']))
  for spec in report_specs(config, first):
    out.setdefault(_build_key(spec), spec)
  return list(out.values())


def _build_key(spec: runs_lib.RunSpec) -> tuple:
  return (spec.algorithm, repr(spec.kwargs), spec.model, spec.dataset)


def planned_runs(config) -> dict[tuple[str, str, str, int], int]:
  """Runs per (phase, method, dataset, E): exact for reporting, an upper bound for tuning
  (stage 2's repeats of stage 1 and every possible edge extension included)."""
  counts = {(runs_lib.TUNE_PHASE, m.name, dataset, epochs):
            max_candidates(config_lib.for_dataset(config, dataset), m) * len(config.tuning_seeds)
            for dataset, epochs, m in tuning_tasks(config)}
  counts.update({(runs_lib.REPORT_PHASE, name, dataset, epochs):
                 len(regimes_of(config, dataset)) * len(config.report_seeds)
                 for dataset in datasets(config) for name in config.methods
                 for epochs in config.epochs})
  return counts


def num_runs(config, phase: str) -> int:
  return sum(n for key, n in planned_runs(config).items() if key[0] == phase)


def planned_processes(config) -> dict[tuple[str, str], int]:
  """Learning processes built at most per (method, dataset): one per distinct set of builder
  arguments among its candidates."""
  out = {(name, dataset): 1 for dataset in datasets(config) for name in config.methods}
  for dataset, _, m in tuning_tasks(config):
    out[(m.name, dataset)] = len({tuple(sorted(_tuned(c).items()))
                                  for c in _unextended(config_lib.for_dataset(config, dataset), m)})
  return out


def _tuned(c: Mapping[str, Any]) -> dict[str, Any]:
  return {k: v for k, v in c.items() if k not in methods_lib.RATES}


def _fmt(value: Any) -> str:
  return f'{value:g}' if isinstance(value, float) else str(value)


def candidate_name(c: Mapping[str, Any]) -> str:
  """A tuning candidate's name, e.g. 'clr=0.1,slr=1,proximal_strength=0.01'."""
  return ','.join([f'clr={_fmt(c["client_lr"])}', f'slr={_fmt(c["server_lr"])}']
                  + [f'{k}={_fmt(v)}' for k, v in sorted(_tuned(c).items())])


def _candidate_values(name: str) -> dict[str, str]:
  """The values of a `candidate_name` as text: 'clr=0.1,slr=1' -> {'clr': '0.1', 'slr': '1'}."""
  return dict(part.partition('=')[::2] for part in name.split(',') if part)


def candidates(config, method: Method, client_lr: Optional[float] = None) -> list[dict]:
  """Tuning candidates ({'client_lr':, 'server_lr':, **the method's tuned arguments}) before
  edge extensions. Staged: stage 1 (`client_lr` None) tries the client lrs at the method's
  given values of its grid (named, so that stage 2 recognises the point) and the untuned server
  lr; stage 2, at the chosen `client_lr`, the method's grid and the server lrs (none if it has
  nothing more). Product: every combination of client lr, grid and server lr."""
  client_lrs, server_lrs = searched_rates(config, method)
  names = [k for k, _ in method.grid]
  if config.strategy != 'product':
    if client_lr is None:
      given = methods_lib.given_kwargs(config.given, method)
      at_given = {k: given[k] for k in names if k in given}
      return [dict(at_given, client_lr=lr, server_lr=rates(config, method)[1])
              for lr in client_lrs]
    if not method.grid and len(server_lrs) < 2:
      return []
    client_lrs = [client_lr]
  return [dict(zip(names, values), client_lr=lr, server_lr=slr) for lr in client_lrs
          for values in itertools.product(*[v for _, v in method.grid]) for slr in server_lrs]


def _numeric_dimensions(config, method: Method) -> list[str]:
  """The searched dimensions with two or more numeric values: 'client_lr', 'server_lr', and the
  method's numeric grid arguments."""
  def numeric(values):
    return len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in values)
  dims = zip(methods_lib.RATES, searched_rates(config, method))
  return [d for d, values in (*dims, *method.grid) if numeric(values)]


def _unextended(config, method: Method) -> list[dict]:
  """Every candidate tuning may try before edge extensions (stage 2 at the first client lr)."""
  staged = config.strategy != 'product'
  first_lr = searched_rates(config, method)[0][0]
  return candidates(config, method) + (candidates(config, method, first_lr) if staged else [])


def max_candidates(config, method: Method) -> int:
  """The candidates `tune_method` may try at most: `_unextended` (repeats included) and
  `edge_steps` extensions per side of every numeric dimension."""
  return (len(_unextended(config, method))
          + 2 * config.edge_steps * len(_numeric_dimensions(config, method)))


def rungs(rounds: int, num_candidates: int, min_rounds: int) -> list[int]:
  """Successive halving's run lengths, shortest first, the last `rounds`: `rounds // 3^j` for
  j = s..0, s the most rungs below `rounds` that `num_candidates` fill (3^s <= num_candidates)
  with at least `min_rounds` rounds each.

  Successive halving: Jamieson and Talwalkar, "Non-stochastic Best Arm Identification and
  Hyperparameter Optimization", AISTATS 2016, arXiv:1502.07943.
  """
  s = 0
  while (HALVING_RATE ** (s + 1) <= num_candidates
         and rounds // HALVING_RATE ** (s + 1) >= max(min_rounds, 1)):
    s += 1
  return [rounds // HALVING_RATE ** j for j in range(s, -1, -1)]


def score(summaries: Sequence[Optional[dict[str, Any]]]) -> tuple[float, int]:
  """(mean of the runs' `last_k_accuracy`, number of finished runs); NaN when any run is missing,
  diverged or not finite."""
  values = [s.get('last_k_accuracy') if s else None for s in summaries]
  finished = sum(v is not None for v in values)
  if (any(s and results_lib.is_true(s.get('diverged')) for s in summaries)
      or finished < len(values) or not values or not all(map(math.isfinite, values))):
    return float('nan'), finished
  return float(np.mean(values)), finished


def best(scored: Sequence[tuple[Any, float, int]]) -> tuple[Any, float]:
  """The highest finite score (ties: the first); the first candidate if none is finite."""
  finite = [(c, s) for c, s, _ in scored if math.isfinite(s)]
  if not finite:
    return scored[0][0], float('nan')
  top = max(s for _, s in finite)
  return next(c for c, s in finite if s == top), top


def _edge(values, value) -> Optional[int]:
  """+1 / -1 when `value` is the largest / smallest of two or more `values`, else None."""
  if len(set(values)) < 2:
    return None
  return 1 if value == max(values) else -1 if value == min(values) else None


def _valid(method: Method, dim: str, value) -> bool:
  """Whether `value` is positive and in the valid range of `dim` (`tff_conflict.hparams`)."""
  if not math.isfinite(value) or value <= 0:
    return False
  h = methods_lib.hparam_ranges(method).get(dim)   # None for the learning rates
  try:
    if h is not None:
      h.check(value)
  except ValueError:
    return False
  return True


def _record(choice: dict, scored: Sequence[tuple[dict, float, int]]) -> dict:
  """`choice` with what tuning tried: every candidate's score (in the order tried), their number
  and the client and server learning rates among them (edge extensions included)."""
  scores = choice['scores'] + [{'candidate': candidate_name(c), 'score': s, 'seeds': n}
                               for c, s, n in scored]
  values = [_candidate_values(s['candidate']) for s in scores]
  return dict(choice, scores=scores, candidates=len(values),
              client_lrs_tried=sorted({float(v['clr']) for v in values if 'clr' in v}),
              server_lrs_tried=sorted({float(v['slr']) for v in values if 'slr' in v}))


def drive(search: Generator, answer: Callable[[list], list]) -> Any:
  """Runs a search generator (`search`, `widen_search`) to its end with `answer(requests)`: the
  (score, finished seeds) of each (candidate, rounds) request; returns its value."""
  try:
    requests = next(search)
    while True:
      requests = search.send(answer(requests))
  except StopIteration as e:
    return e.value


def _answer_with(evaluate: Callable[..., tuple[float, int]]) -> Callable[[list], list]:
  return lambda requests: [evaluate(c) if rounds is None else evaluate(c, rounds=rounds)
                           for c, rounds in requests]


def tune_method(config, method: Method, evaluate: Callable[..., tuple[float, int]],
                **where) -> dict[str, Any]:
  """`search` answered one candidate at a time by `evaluate(candidate)` (with halving,
  `evaluate(candidate, rounds=n)` for n rounds), which runs it on every tuning seed and returns
  (score, finished seeds)."""
  return drive(search(config, method, **where), _answer_with(evaluate))


def search(config, method: Method, **where) -> Generator[list, list, dict[str, Any]]:
  """Tunes one method (`config`'s tuning strategy, schedule and edge extension) as a generator:
  it yields a wave of evaluation requests, (candidate, rounds) with rounds None for a full run,
  that depend on none of each other, and is sent their (score, finished seeds) in order.
  Returns the choice as tuning_choices.json records it: `where` (dataset, regime, E), the
  method, the chosen learning rates and `tuned` values, the winner's `score`, every candidate's,
  and `at_edge`: the dimensions whose chosen value is still at the edge of those tried.

  Edge extension: while the best candidate's value of a numeric dimension is the largest
  (smallest) of that dimension's values tried (by any candidate: a staged search tries the client
  lrs at the given values, the winner may have others), it is tried (with the winner's other
  values) times (divided by) `edge_factor`, at most `edge_steps` times per dimension and side
  and within the dimension's valid range."""
  if 'dataset' in where:   # its rounds and learning-rate grids (`dataset_settings`)
    config = config_lib.for_dataset(config, where['dataset'])
  scored: list[tuple[dict, float, int]] = []
  seen: dict[str, tuple[float, int]] = {}

  def try_all(new):
    new = list({candidate_name(c): c for c in new if candidate_name(c) not in seen}.values())
    alive = new   # halving: each rung but the last runs those left and keeps the best third
    if config.schedule == 'halving' and len(new) >= HALVING_RATE:
      for length in rungs(config.loop.rounds, len(new), config.last_k)[:-1]:
        scores = [s for s, _ in (yield [(c, length) for c in alive])]
        order = sorted(range(len(alive)),   # NaN last; stable: ties keep the listed order
                       key=lambda i: -scores[i] if math.isfinite(scores[i]) else math.inf)
        alive = [alive[i] for i in sorted(order[:math.ceil(len(alive) / HALVING_RATE)])]
    results = (yield [(c, None) for c in alive]) if alive else []
    full = {candidate_name(c): r for c, r in zip(alive, results)}
    for c in new:   # those halving stopped early: NaN, 0 seeds
      seen[candidate_name(c)] = full.get(candidate_name(c), (float('nan'), 0))
      scored.append((c, *seen[candidate_name(c)]))

  yield from try_all(candidates(config, method))
  if config.strategy != 'product':
    yield from try_all(candidates(config, method, best(scored)[0]['client_lr']))
  steps: dict[tuple[str, int], int] = {}
  dims = _numeric_dimensions(config, method)
  tried = lambda dim: [c[dim] for c, _, _ in scored if c.get(dim) is not None]
  moved = True
  while moved and math.isfinite(best(scored)[1]):
    moved = False
    for dim in dims:
      winner = best(scored)[0]
      side = _edge(tried(dim), winner.get(dim))
      if side is None or steps.get((dim, side), 0) >= config.edge_steps:
        continue
      factor = config.edge_factor
      new = winner[dim] * factor if side > 0 else winner[dim] / factor
      if not _valid(method, dim, new):
        continue
      steps[(dim, side)] = steps.get((dim, side), 0) + 1
      before = len(scored)
      yield from try_all([dict(winner, **{dim: new})])
      moved = moved or len(scored) > before
  winner, top = best(scored)
  at_edge = [d for d in dims if math.isfinite(top) and _edge(tried(d), winner.get(d)) is not None]
  return _record(dict(where, method=method.name, client_lr=winner['client_lr'],
                      server_lr=winner['server_lr'], tuned=_tuned(winner), score=top,
                      scores=[], at_edge=at_edge), scored)


def widen_server_lrs(choice: dict, server_lrs: Sequence[float], evaluate) -> dict:
  """`widen_search` answered by `evaluate(candidate)`."""
  return drive(widen_search(choice, server_lrs), _answer_with(evaluate))


def widen_search(choice: dict, server_lrs: Sequence[float]) -> Generator[list, list, dict]:
  """`choice` after also trying, at its chosen client lr and values, each of `server_lrs` it
  has not tried (those other methods' edge extensions reached), so that the baseline searched
  every server lr any method searched; a new candidate wins if it scores higher (ties: the
  earlier choice). A generator of one wave of requests, as `search`."""
  tried = [float(_candidate_values(s['candidate']).get('slr', 'nan')) for s in choice['scores']]
  new = [dict(choice['tuned'], client_lr=choice['client_lr'], server_lr=lr)
         for lr in sorted(server_lrs) if not any(math.isclose(lr, t, rel_tol=1e-5) for t in tried)]
  if not new:
    return choice
  results = yield [(c, None) for c in new]
  scored = [(c, *r) for c, r in zip(new, results)]
  winner, top = best([(None, choice['score'], 0)] + scored)
  server_lr = choice['server_lr'] if winner is None else winner['server_lr']
  at_edge = [d for d in choice['at_edge'] if d != 'server_lr']
  if _edge(tried + [c['server_lr'] for c in new], server_lr) is not None:
    at_edge.append('server_lr')
  return _record(dict(choice, server_lr=server_lr, at_edge=at_edge,
                      score=choice['score'] if winner is None else top), scored)

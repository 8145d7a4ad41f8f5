"""A whole benchmark: tuning, then every reporting run, then the report.

    outcome = run_benchmark(config)

Order of work: for each dataset of the grid, tuning on its tuning regime (every method, every
tuned local-epoch count, every tuning seed; see `tuning`), then every reporting run
(regimes x methods x E x reporting seeds) with the chosen values, then `runs.csv` and the report
(`report.write_report`). Every run is skipped when it is already finished on disk with the same
settings, so an interrupted benchmark continues where it stopped when run again.

Files under `config.root` besides the runs' directories (`runs/`, `tuning/`):
  config.json            the benchmark's settings
  runs.csv               one row per finished reporting run (`runs.RUN_COLUMNS`)
  tuning.csv             one row per tuning candidate: its validation score and whether it won
  tuning_choices.json    the chosen values per (dataset, E, method)
  timing.json            one entry per invocation: wall time, building time, runs run/skipped
  regimes.json           each regime's client sizes and label skew (`describe_regimes`)
  report.md, plots/      the report (`report`)
"""

import dataclasses
import datetime
import json
import os
import sys
import time
from typing import Any, Callable, Optional, TextIO

from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import progress as progress_lib
from experiments.benchmarking import report as report_lib
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import tuning as tuning_lib

CONFIG_FILE = 'config.json'
RUNS_FILE = 'runs.csv'
TUNING_FILE = 'tuning.csv'
CHOICES_FILE = 'tuning_choices.json'
TIMING_FILE = 'timing.json'
REGIMES_FILE = 'regimes.json'


@dataclasses.dataclass
class Outcome:
  """What `run_benchmark` did.

  Attributes:
    root: the benchmark's directory.
    report: the path of report.md.
    rows: runs.csv's rows.
    choices: the tuning choices (empty without tuning).
    failures: (run label, error) of the runs that failed (they are retried on the next run).
    wall_seconds: this invocation's time.
    build_seconds: this invocation's time spent building learning processes.
    runs_done, runs_skipped: runs run now, and runs found finished on disk.
    num_processes: learning processes built.
  """
  root: str
  report: str
  rows: list
  choices: list
  failures: list
  wall_seconds: float
  build_seconds: float
  runs_done: int
  runs_skipped: int
  num_processes: int


def _data_seed(config: config_lib.BenchmarkConfig, seed: int) -> int:
  return seed if config.vary_partition else config.data_seed


def _spec(config, *, phase, regime, method: methods_lib.Method, kwargs, client_lr, server_lr,
          epochs, seed, candidate=''):
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  dataset = data.parse_regime(regime).dataset
  return runs_lib.RunSpec(
      phase=phase, regime=regime, dataset=dataset, method=method.name,
      algorithm=method.algorithm,
      kwargs=tuple(sorted(methods_lib.builder_kwargs(method, kwargs).items())),
      client_lr=float(client_lr), server_lr=float(server_lr), epochs=int(epochs),
      seed=int(seed), data_seed=_data_seed(config, seed), model=config.model_for(dataset),
      rounds=config.rounds, clients_per_round=config.clients_per_round,
      batch_size=config.batch_size, shuffle_buffer=config.shuffle_buffer,
      client_momentum=float(config.client_momentum), candidate=candidate)


def datasets_of(config: config_lib.BenchmarkConfig) -> list[str]:
  """The grid's datasets, in the order their first regime appears."""
  out = []
  for regime in config.parsed_regimes():
    if regime.dataset not in out:
      out.append(regime.dataset)
  return out


def tune_epochs(config: config_lib.BenchmarkConfig) -> tuple:
  return tuple(config.tuning.tune_epochs or config.epochs)


def planned_tuning_runs(config: config_lib.BenchmarkConfig) -> int:
  """Tuning runs planned at most (stage 2's repeats of stage 1 included)."""
  if not config.tuning.tune:
    return 0
  per_key = sum(tuning_lib.num_candidates(m, config) for m in config.parsed_methods())
  return per_key * len(config.tuning.tuning_seeds) * len(tune_epochs(config)) * len(
      datasets_of(config))


def planned_report_runs(config: config_lib.BenchmarkConfig) -> int:
  return (len(config.regimes) * len(config.methods) * len(config.epochs)
          * len(config.report_seeds))


def planned_runs(config: config_lib.BenchmarkConfig) -> dict[tuple[str, str, str, int], int]:
  """Runs planned per (phase, method, dataset, E): exact for reporting, an upper bound for
  tuning (stage 2's repeats of stage 1 included)."""
  counts: dict[tuple[str, str, str, int], int] = {}
  methods = config.parsed_methods()
  for dataset in datasets_of(config):
    if config.tuning.tune:
      for epochs in tune_epochs(config):
        for method in methods:
          key = (runs_lib.TUNE_PHASE, method.name, dataset, epochs)
          counts[key] = (tuning_lib.num_candidates(method, config)
                         * len(config.tuning.tuning_seeds))
    regimes = [r for r in config.parsed_regimes() if r.dataset == dataset]
    for method in methods:
      for epochs in config.epochs:
        key = (runs_lib.REPORT_PHASE, method.name, dataset, epochs)
        counts[key] = len(regimes) * len(config.report_seeds)
  return counts


def planned_processes(config: config_lib.BenchmarkConfig) -> dict[tuple[str, str], int]:
  """Learning processes built at most per (method, dataset): one per distinct set of builder
  arguments among the method's candidates (1 without tuning)."""
  out = {}
  for dataset in datasets_of(config):
    for method in config.parsed_methods():
      if not config.tuning.tune:
        out[(method.name, dataset)] = 1
        continue
      candidates = (tuning_lib.product(method, config) if config.tuning.strategy == 'product'
                    else tuning_lib.stage_one(method, config) + tuning_lib.stage_two(
                        method, config, config.tuning.client_lr_grid[0]))
      out[(method.name, dataset)] = len({c.tuned for c in candidates})
  return out


def _tune(config, engine, progress) -> list[tuning_lib.Choice]:
  choices = []
  seeds = config.tuning.tuning_seeds
  for dataset in datasets_of(config):
    regime = config.tuning_regime_for(dataset)
    for epochs in tune_epochs(config):
      for method in config.parsed_methods():
        given = config.given_kwargs(method)

        def evaluate(candidate, method=method, given=given, epochs=epochs, regime=regime):
          summaries = []
          for seed in seeds:
            spec = _spec(config, phase=runs_lib.TUNE_PHASE, regime=regime, method=method,
                         kwargs=dict(given, **dict(candidate.tuned)),
                         client_lr=candidate.client_lr, server_lr=candidate.server_lr,
                         epochs=epochs, seed=seed, candidate=candidate.name)
            progress.start_run(spec.rounds, spec.label())
            summaries.append(engine.run(spec))
            progress.end_run()
          return tuning_lib.score(summaries)

        choice = tuning_lib.tune_method(method, config, dataset=dataset, regime=regime,
                                        epochs=epochs, evaluate=evaluate)
        untried = tuning_lib.num_candidates(method, config) - len(choice.scores)
        progress.skip(untried * len(seeds) * config.rounds)
        choices.append(choice)
  return choices


def report_specs(config: config_lib.BenchmarkConfig, choices) -> list[runs_lib.RunSpec]:
  """Every reporting run, with the tuned values (or the given ones without tuning)."""
  by_key = {(c.dataset, c.epochs, c.method): c for c in choices}
  specs = []
  regimes = config.parsed_regimes()
  for dataset in datasets_of(config):
    for method in config.parsed_methods():
      for regime in [r for r in regimes if r.dataset == dataset]:
        for epochs in config.epochs:
          kwargs = config.given_kwargs(method)
          client_lr = (config.client_learning_rate if method.client_lr is None
                       else method.client_lr)
          server_lr = (config.server_learning_rate if method.server_lr is None
                       else method.server_lr)
          if config.tuning.tune:
            choice = by_key[(dataset, config.tuned_epochs_for(epochs), method.name)]
            kwargs.update(choice.values)
            client_lr, server_lr = choice.client_lr, choice.server_lr
          for seed in config.report_seeds:
            specs.append(_spec(config, phase=runs_lib.REPORT_PHASE, regime=regime.name,
                               method=method, kwargs=kwargs, client_lr=client_lr,
                               server_lr=server_lr, epochs=epochs, seed=seed))
  return specs


def choice_to_dict(choice: tuning_lib.Choice) -> dict[str, Any]:
  out = dataclasses.asdict(choice)
  out['tuned'] = dict(choice.tuned)
  out['scores'] = [{'candidate': n, 'score': s, 'seeds': k} for n, s, k in choice.scores]
  return out


def _tuning_rows(choices):
  rows = []
  for c in choices:
    winner = runs_lib.candidate_name(c.client_lr, c.server_lr, dict(c.tuned))
    for name, score, seeds in c.scores:
      rows.append({'dataset': c.dataset, 'regime': c.regime, 'epochs': c.epochs,
                   'method': c.method, 'candidate': name, 'validation_score': score,
                   'seeds': seeds, 'chosen': name == winner})
  return rows


def _write_json(path, value):
  tmp = f'{path}.tmp'
  with open(tmp, 'w') as f:
    json.dump(value, f, indent=1, sort_keys=True)
  os.replace(tmp, path)


def _append_timing(root, entry):
  path = os.path.join(root, TIMING_FILE)
  entries = []
  if os.path.exists(path):
    try:
      with open(path) as f:
        entries = json.load(f)
    except ValueError:
      entries = []
  entries.append(entry)
  _write_json(path, entries)


def describe_regimes(config: config_lib.BenchmarkConfig, engine) -> list[dict[str, Any]]:
  """Size and label skew of each regime's training data (`tff_conflict.data.describe`) for the
  first reporting seed's partition; regimes whose client data cannot count labels cheaply
  (no `label_counts`, e.g. EMNIST's writers) are left out."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  out = []
  seed = _data_seed(config, config.report_seeds[0])
  for regime in config.regimes:
    train, _ = engine.data(regime, seed)
    if getattr(train, 'label_counts', None) is None:
      continue
    summary = data.describe(train)
    out.append({'regime': regime, 'data_seed': seed, 'num_clients': summary['num_clients'],
                'num_examples': summary['num_examples'],
                'examples_per_client': summary['examples_per_client'],
                'classes_per_client': summary['classes_per_client'],
                'label_tv_distance': summary['label_tv_distance']})
  return out


def run_benchmark(config: config_lib.BenchmarkConfig, *,
                  loader: Optional[engine_lib.Loader] = None, stream: Optional[TextIO] = None,
                  after_tuning: Callable[[], None] = lambda: None,
                  command: str = '') -> Outcome:
  """Runs the benchmark (see the module docstring) and writes its report.

  Args:
    config: the benchmark.
    loader: `(regime, seed) -> (train, test)`; default `tff_conflict.data.load_regime`.
    stream: progress and messages (default stdout; the bar goes to stderr on a terminal).
    after_tuning: called once tuning is over, before the first reporting run.
    command: the command line, recorded in timing.json and the report.

  Raises:
    engine.SettingsChangedError: a finished run on disk has other settings.
  """
  stream = stream or sys.stdout
  root = config.root
  os.makedirs(root, exist_ok=True)
  _write_json(os.path.join(root, CONFIG_FILE), config_lib.as_dict(config))
  start = time.monotonic()
  total = (planned_tuning_runs(config) + planned_report_runs(config)) * config.rounds
  progress = progress_lib.GridProgress(
      total, enabled=config.progress,
      stream=sys.stderr if getattr(sys.stderr, 'isatty', lambda: False)() else stream)
  engine = engine_lib.Engine(config, loader=loader, on_round=progress.tick, stream=stream)
  print(f'benchmark: {len(config.regimes)} regimes x {len(config.methods)} methods x E in '
        f'{list(config.epochs)} x {len(config.report_seeds)} seeds = '
        f'{planned_report_runs(config)} reporting runs, up to {planned_tuning_runs(config)} '
        f'tuning runs, {config.rounds} rounds each -> {root}', file=stream, flush=True)
  rows = []
  try:
    _write_json(os.path.join(root, REGIMES_FILE), describe_regimes(config, engine))
    choices = _tune(config, engine, progress) if config.tuning.tune else []
    _write_json(os.path.join(root, CHOICES_FILE), [choice_to_dict(c) for c in choices])
    report_lib.write_csv(os.path.join(root, TUNING_FILE), _tuning_rows(choices))
    after_tuning()
    for spec in report_specs(config, choices):
      progress.start_run(spec.rounds, spec.label())
      summary = engine.run(spec)
      progress.end_run()
      if summary is not None:
        rows.append(runs_lib.run_row(spec, summary))
        report_lib.write_csv(os.path.join(root, RUNS_FILE), rows, runs_lib.RUN_COLUMNS)
  finally:
    progress.close()
    wall = time.monotonic() - start
    _append_timing(root, {
        'finished': datetime.datetime.now().isoformat(timespec='seconds'),
        'wall_seconds': wall, 'build_seconds': engine.build_seconds,
        'processes_built': engine.num_processes, 'runs_done': engine.runs_done,
        'runs_skipped': engine.runs_skipped, 'runs_failed': len(engine.failures),
        'rounds_done': engine.rounds_done, 'command': command})
  report_lib.write_csv(os.path.join(root, RUNS_FILE), rows, runs_lib.RUN_COLUMNS)
  report_path = report_lib.write_report(root)
  return Outcome(root=root, report=report_path, rows=rows, choices=choices,
                 failures=[(s.label(), m) for s, m in engine.failures], wall_seconds=wall,
                 build_seconds=engine.build_seconds, runs_done=engine.runs_done,
                 runs_skipped=engine.runs_skipped, num_processes=engine.num_processes)

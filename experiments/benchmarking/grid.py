"""A whole benchmark, one way: `run_benchmark(config)` runs the plan's tuning tasks and reporting
runs (`plan`, `engine`; finished runs on disk are skipped), writes the record files and the report."""

import dataclasses
import datetime
import json
import os
import sys
import time
from typing import Any, Callable, Optional, TextIO

from experiments import config as experiment_config
from experiments import files
from experiments import progress as progress_lib
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import report as report_lib
from experiments.benchmarking import results as results_lib
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import tuning as tuning_lib

CONFIG_FILE = 'config.json'
RUNS_FILE = 'runs.csv'
TUNING_FILE = 'tuning.csv'
CHOICES_FILE = 'tuning_choices.json'
CURVES_FILE = results_lib.CURVES_FILE
CURVE_COLUMNS = ('dataset', 'regime', 'epochs', 'method', 'candidate', 'seed', 'accuracy_curve')
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


def _tune(plan: plan_lib.Plan, engine, progress) -> list[tuning_lib.Choice]:
  choices, evaluators = [], {}
  for task in plan.tuning:

    def evaluate(candidate, task=task, rounds=None):
      summaries = []
      for seed in task.seeds:
        spec = plan.tuning_spec(task, candidate, seed)
        if rounds is not None and rounds != spec.rounds:  # a shorter rung of halving
          spec = dataclasses.replace(spec, rounds=rounds,
                                     candidate=f'{spec.candidate} @{rounds} rounds')
        progress.start_run(spec.rounds, spec.label())
        summaries.append(engine.run(spec))
        progress.end_run()
      return tuning_lib.score(summaries)

    choice = tuning_lib.tune_method(task.method.search, dataset=task.dataset,
                                    regime=task.regime, epochs=task.epochs, evaluate=evaluate)
    untried = (len(tuning_lib.candidates(task.method.search))
               + tuning_lib.max_extensions(task.method.search) - len(choice.scores))
    progress.skip(untried * len(task.seeds) * plan.rounds)
    choices.append(choice)
    evaluators[(task.dataset, task.epochs, task.method.name)] = evaluate
  return _baseline_searched_every_server_lr(plan, choices, evaluators)


def _baseline_searched_every_server_lr(plan, choices, evaluators):
  """The baseline's choice, in each (dataset, E), after it also tried the server lrs other
  methods reached by edge extension (`tuning.widen_server_lrs`), when server lrs are tuned."""
  out = []
  for choice in choices:
    key = (choice.dataset, choice.epochs, choice.method)
    if choice.method == plan.baseline and key in evaluators:
      reached = {lr for c in choices if (c.dataset, c.epochs) == key[:2]
                 for lr in searched(c)['server_lrs_tried']}
      if len(searched(choice)['server_lrs_tried']) > 1:   # its server lr was tuned
        choice = tuning_lib.widen_server_lrs(choice, sorted(reached), evaluators[key])
    out.append(choice)
  return out


def choice_to_dict(choice: tuning_lib.Choice) -> dict[str, Any]:
  out = dataclasses.asdict(choice)
  out['tuned'] = dict(choice.tuned)
  out['scores'] = [{'candidate': n, 'score': s, 'seeds': k} for n, s, k in choice.scores]
  out.update(searched(choice))
  return out


def searched(choice: tuning_lib.Choice) -> dict[str, Any]:
  """What a method's tuning tried: its number of candidates and the client and server learning
  rates among them (edge extensions included), for tuning_choices.json."""
  values = [runs_lib.candidate_values(n) for n, _, _ in choice.scores]
  return {'candidates': len(values),
          'client_lrs_tried': sorted({float(v['clr']) for v in values if 'clr' in v}),
          'server_lrs_tried': sorted({float(v['slr']) for v in values if 'slr' in v})}


def _tuning_rows(choices):
  rows = []
  for c in choices:
    winner = runs_lib.candidate_name(c.client_lr, c.server_lr, dict(c.tuned))
    for name, score, seeds in c.scores:
      rows.append({'dataset': c.dataset, 'regime': c.regime, 'epochs': c.epochs,
                   'method': c.method, 'candidate': name, 'validation_score': score,
                   'seeds': seeds, 'chosen': name == winner})
  return rows


def validation_curve_rows(plan: plan_lib.Plan, choices) -> list[dict[str, Any]]:
  """validation_curves.csv's rows: for each tuning task's choice (`_tune`'s order), the chosen
  candidate's validation accuracy curve on each tuning seed whose full-length run finished."""
  rows = []
  for task, c in zip(plan.tuning, choices):
    candidate = tuning_lib.Candidate(c.client_lr, c.server_lr, c.tuned)
    for seed in task.seeds:
      spec = plan.tuning_spec(task, candidate, seed)
      result = runs_lib.read_result(spec.directory(plan.root))
      if result is None:
        continue
      rows.append({'dataset': c.dataset, 'regime': c.regime, 'epochs': c.epochs,
                   'method': c.method, 'candidate': candidate.name, 'seed': seed,
                   'accuracy_curve': result['summary'].get('accuracy_curve', '')})
  return rows


def _write_json(path, value):
  files.write_json_atomically(path, value)


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


def describe_regimes(plan: plan_lib.Plan, engine) -> list[dict[str, Any]]:
  """Size and label skew of each regime's training data (`tff_conflict.data.describe`) for the
  first reporting seed's partition; regimes whose client data cannot count labels cheaply
  (no `label_counts`, e.g. EMNIST's writers) are left out."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  out = []
  seed = plan.report_seeds[0] if plan.data_seed is None else plan.data_seed
  for regime in plan.regimes:
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
  """Runs the benchmark and writes its report.

  Files under the benchmark's root besides the runs' directories (`runs/`, `tuning/`):
    config.json            the benchmark's settings, and its plan under `plan` (`Plan.describe`)
    runs.csv               one row per finished reporting run (`runs.RUN_COLUMNS`)
    tuning.csv             one row per tuning candidate: its validation score and whether it won
    tuning_choices.json    the chosen values per (dataset, E, method); `at_edge`: the dimensions
                           whose chosen value is still at its grid's edge
    validation_curves.csv  one row per tuning seed of each method's chosen candidate: its
                           validation accuracy per round (`runs.encode_curve`)
    timing.json            one entry per invocation: wall time, building time, runs run/skipped
    regimes.json           each regime's client sizes and label skew (`describe_regimes`)
    report.md, plots/      the report (`report`)

  Args:
    config: the benchmark, resolved once into its plan (`plan.make_plan`).
    loader: `(regime, seed) -> (train, test)`; default `tff_conflict.data.load_regime`.
    stream: progress and messages (default stdout; the bar goes to stderr on a terminal).
    after_tuning: called once tuning is over, before the first reporting run.
    command: the command line, recorded in timing.json and the report.

  Raises:
    experiments.config.ConfigError: a regime that cannot be loaded or is smaller than a round's
      cohort (`check_regimes`), or your own data or model that do not fit
      (`Engine.check_models`), before anything is written.
    engine.SettingsChangedError: a finished run on disk has other settings; found before
      anything is written (`engine.check_finished_runs`) or, for the values tuning chooses,
      when the run comes; either way the files the report reads are left as they were.
  """
  stream = stream or sys.stdout
  plan = plan_lib.make_plan(config)
  root = plan.root
  engine_lib.check_finished_runs(plan)   # before anything is written
  os.makedirs(root, exist_ok=True)
  record = _read_record(root)
  try:
    return _run(config, plan, loader=loader, stream=stream, after_tuning=after_tuning,
                command=command)
  except engine_lib.SettingsChangedError:
    _restore_record(root, record)   # a refused command leaves the record as it found it
    raise


# The files the report reads besides the runs' own (`run_benchmark`'s docstring).
RECORD_FILES = (CONFIG_FILE, RUNS_FILE, TUNING_FILE, CHOICES_FILE, TIMING_FILE, REGIMES_FILE)


def _read_record(root: str) -> dict[str, Optional[bytes]]:
  record = {}
  for name in RECORD_FILES:
    try:
      with open(os.path.join(root, name), 'rb') as f:
        record[name] = f.read()
    except FileNotFoundError:
      record[name] = None
  return record


def _restore_record(root: str, record: dict[str, Optional[bytes]]) -> None:
  for name, content in record.items():
    path = os.path.join(root, name)
    if content is None:
      if os.path.exists(path):
        os.remove(path)
    else:
      with files.atomic_open(path, 'wb') as f:
        f.write(content)


def check_regimes(plan: plan_lib.Plan, data: Callable[[str, int], Any]) -> None:
  """Loads every regime of `plan` (reporting and tuning) once and checks that its population
  holds `clients_per_round`, so that a regime that cannot run fails before any run, in one line.

  Args:
    plan: the benchmark.
    data: `(regime, seed) -> (train, test)` (`Engine.data`, which keeps what it loads).

  Raises:
    experiments.config.ConfigError: naming --regimes or --tuning_regimes and the regime (the
      loader's error: a population the dataset cannot hold, a missing file), or
      --clients_per_round and the population.
  """
  seed = plan.report_seeds[0] if plan.data_seed is None else plan.data_seed
  tuned = [r for r in plan.tuning_regimes.values() if plan.tuning and r not in plan.regimes]
  for regime in list(plan.regimes) + list(dict.fromkeys(tuned)):
    flag = 'regimes' if regime in plan.regimes else 'tuning_regimes'
    try:
      train, _ = data(regime, seed)
    except (ValueError, FileNotFoundError) as e:
      raise experiment_config.ConfigError(flag, regime, reason=str(e)) from None
    population = len(train.client_ids)
    if plan.loop.clients_per_round > population:
      raise experiment_config.ConfigError(
          'clients_per_round', plan.loop.clients_per_round,
          reason=f'regime {regime!r} has {population} clients: use at most {population}, or a '
          'larger population (@K in the regime)')


def _run(config, plan, *, loader, stream, after_tuning, command) -> Outcome:
  root = plan.root
  start = time.monotonic()
  tuning_runs = plan.num_runs(runs_lib.TUNE_PHASE)
  report_runs = plan.num_runs(runs_lib.REPORT_PHASE)
  progress = progress_lib.Progress(
      (tuning_runs + report_runs) * plan.rounds, label='[benchmark]', enabled=plan.progress,
      min_interval=30.0,
      stream=sys.stderr if getattr(sys.stderr, 'isatty', lambda: False)() else stream)
  engine = engine_lib.Engine(plan, loader=loader, on_round=progress.tick, stream=stream)
  check_regimes(plan, engine.data)
  engine.check_models()
  _write_json(os.path.join(root, CONFIG_FILE),
              dict(config_lib.as_dict(config), plan=plan.describe()))
  print(f'benchmark: {len(plan.regimes)} regimes x {len(plan.methods)} methods x E in '
        f'{list(plan.epochs)} x {len(plan.report_seeds)} seeds = {report_runs} reporting runs, '
        f'up to {tuning_runs} tuning runs, {plan.rounds} rounds each -> {root}', file=stream,
        flush=True)
  rows = []
  try:
    _write_json(os.path.join(root, REGIMES_FILE), describe_regimes(plan, engine))
    choices = _tune(plan, engine, progress)
    _write_json(os.path.join(root, CHOICES_FILE), [choice_to_dict(c) for c in choices])
    results_lib.write_csv(os.path.join(root, TUNING_FILE), _tuning_rows(choices))
    results_lib.write_csv(os.path.join(root, CURVES_FILE), validation_curve_rows(plan, choices),
                         CURVE_COLUMNS)
    after_tuning()
    for spec in plan.report_specs(choices):
      progress.start_run(spec.rounds, spec.label())
      summary = engine.run(spec)
      progress.end_run()
      if summary is not None:
        rows.append(runs_lib.run_row(spec, summary))
        results_lib.write_csv(os.path.join(root, RUNS_FILE), rows, runs_lib.RUN_COLUMNS)
  finally:
    progress.close()
    wall = time.monotonic() - start
    _append_timing(root, {
        'finished': datetime.datetime.now().isoformat(timespec='seconds'),
        'wall_seconds': wall, 'build_seconds': engine.build_seconds,
        'processes_built': engine.num_processes, 'runs_done': engine.runs_done,
        'runs_skipped': engine.runs_skipped, 'runs_failed': len(engine.failures),
        'rounds_done': engine.rounds_done, 'command': command})
  results_lib.write_csv(os.path.join(root, RUNS_FILE), rows, runs_lib.RUN_COLUMNS)
  report_path = report_lib.write_report(root)
  return Outcome(root=root, report=report_path, rows=rows, choices=choices,
                 failures=[(s.label(), m) for s, m in engine.failures], wall_seconds=wall,
                 build_seconds=engine.build_seconds, runs_done=engine.runs_done,
                 runs_skipped=engine.runs_skipped, num_processes=engine.num_processes)

"""A whole benchmark, one way: `run_benchmark(config)` checks the plan (`plan.tasks`), runs it on
the config's executor (`schedule`, `experiments.executors`; finished runs on disk are skipped) and
writes the record and the report."""

import datetime
import functools
import os
import pathlib
import sys
import time
from typing import Any, Callable, Optional, TextIO

from experiments import config as experiment_config
from experiments import files
from experiments import progress as progress_lib
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import report as report_lib
from experiments.benchmarking import results as results_lib
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import schedule

CURVE_COLUMNS = ('dataset', 'regime', 'epochs', 'method', 'candidate', 'seed', 'accuracy_curve')


def _write_tuning(config, choices) -> None:
  """tuning_choices.json; tuning.csv: every candidate's validation score and whether it won;
  validation_curves.csv: the chosen candidate's validation accuracy curve on each tuning seed
  whose full-length run finished."""
  root = config.root
  files.write_json_atomically(os.path.join(root, 'tuning_choices.json'), choices)
  scores, curves = [], []
  for (dataset, epochs, method), c in zip(plan_lib.tuning_tasks(config), choices):
    where = {k: c[k] for k in ('dataset', 'regime', 'epochs', 'method')}
    chosen = dict(c['tuned'], client_lr=c['client_lr'], server_lr=c['server_lr'])
    scores += [dict(where, candidate=s['candidate'], validation_score=s['score'],
                    seeds=s['seeds'], chosen=s['candidate'] == plan_lib.candidate_name(chosen))
               for s in c['scores']]
    for seed in config.tuning_seeds:
      spec = plan_lib.tuning_spec(config, dataset, epochs, method, chosen, seed)
      result = runs_lib.read_result(spec.directory(root))
      if result is not None:
        curves.append(dict(where, candidate=spec.candidate, seed=seed,
                           accuracy_curve=result['summary'].get('accuracy_curve', '')))
  results_lib.write_csv(os.path.join(root, 'tuning.csv'), scores)
  results_lib.write_csv(os.path.join(root, results_lib.CURVES_FILE), curves, CURVE_COLUMNS)


def _first_seed(config) -> int:
  return plan_lib.data_seed(config, config.report_seeds[0])


def check_finished_runs(config) -> None:
  """Raises `engine.SettingsChangedError` for the first finished run on disk that `config` would
  run again (same phase, regime, E, method, seed and tuning candidate) with other settings,
  before anything runs or is written; the values tuning chooses (builder arguments, learning
  rates) are taken as recorded: `Engine.run` checks them when they are known."""
  if not config.loop.resume:
    return
  methods = {m.name: m for m in plan_lib.methods(config)}
  tasks = {(plan_lib.tuning_regime(config, d), e, m.name)
           for d, e, m in plan_lib.tuning_tasks(config)}
  for directory, _, names in sorted(os.walk(config.root)):
    result = runs_lib.read_result(directory) if runs_lib.RESULT_FILE in names else None
    recorded = result['spec'] if result is not None else None
    if not isinstance(recorded, dict) or recorded.get('method') not in methods:
      continue
    try:
      phase, regime, epochs, seed = (recorded['phase'], recorded['regime'],
                                     int(recorded['epochs']), int(recorded['seed']))
      method = methods[recorded['method']]
      if not ((regime in config.regimes and epochs in config.epochs
               and seed in config.report_seeds) if phase == runs_lib.REPORT_PHASE
              else (regime, epochs, method.name) in tasks and seed in config.tuning_seeds):
        continue   # not planned
      kwargs, client_lr, server_lr = (
          (methods_lib.given_kwargs(config.given, method), *plan_lib.rates(config, method))
          if phase == runs_lib.REPORT_PHASE and not config.tune
          else (dict(recorded['kwargs']), recorded['client_lr'], recorded['server_lr']))
      candidate = recorded.get('candidate', '')
      rung = int(recorded['rounds']) if candidate.endswith(' rounds') else None   # of halving
      spec = plan_lib.run_spec(config, phase=phase, regime=regime, method=method, epochs=epochs,
                               seed=seed, candidate=candidate, kwargs=kwargs, rounds=rung,
                               client_lr=client_lr, server_lr=server_lr)
    except (KeyError, TypeError, ValueError):
      continue   # not a run of this kind: its own check, when it runs, says what is wrong
    if os.path.normpath(spec.directory(config.root)) == os.path.normpath(directory):
      engine_lib.check_same_spec(directory, recorded, spec)


@files.sole_writer(lambda config, **_: config.root)   # before anything is read or written
def run_benchmark(config: config_lib.BenchmarkConfig, *,
                  loader: Optional[engine_lib.Loader] = None, stream: Optional[TextIO] = None,
                  after_tuning: Callable[[], None] = lambda: None,
                  command: str = '') -> dict[str, Any]:
  """Runs the benchmark and writes, besides the runs' directories (`runs/`, `tuning/`):
    config.json            the settings, and under `plan` the plan (`plan.describe`)
    runs.csv               one row per finished reporting run (`runs.RUN_COLUMNS`)
    tuning.csv             one row per tuning candidate: its validation score and whether it won
    tuning_choices.json    each (dataset, E, method)'s choice (`plan.tune_method`)
    validation_curves.csv  the chosen candidates' validation accuracy per round, per tuning seed
    timing.json            one entry per invocation: wall time, building time, runs run/skipped
    regimes.json           each regime's client sizes and label skew (for data with label counts)
    report.md, plots/      the report (`report`)

  Args:
    config: the benchmark.
    loader: `(regime, seed) -> (train, test)`; default `tff_conflict.data.load_regime`.
    stream: progress and messages (default stdout; the bar goes to stderr on a terminal).
    after_tuning: called once tuning is over, before the first reporting run.
    command: the command line, recorded in timing.json and the report.

  Returns:
    This invocation's timing.json entry (`wall_seconds`, `build_seconds`, `processes_built`,
    `runs_done`, `runs_skipped`, ...) with `root`, `report` (report.md's path), `rows`
    (runs.csv's), `choices` (tuning_choices.json's) and `failures` ((run label, error) of the
    runs that failed; they are retried on the next run).

  Raises:
    experiments.config.ConfigError: a regime that cannot run (`check_regimes`), or your own data
      or model that do not fit (`Engine.shape_and_classes`), before anything is written.
    engine.SettingsChangedError: a finished run on disk has other settings, found before
      anything is written (`check_finished_runs`) or, for the values tuning chooses, when the
      run comes; either way the files the report reads are left as they were.
  """
  check_finished_runs(config)
  os.makedirs(config.root, exist_ok=True)
  record = {n: pathlib.Path(config.root, n) for n in results_lib.RECORD_FILES}
  record = {path: path.read_bytes() if path.exists() else None for path in record.values()}
  try:
    return _run(config, loader=loader, stream=stream or sys.stdout, after_tuning=after_tuning,
                command=command)
  except engine_lib.SettingsChangedError:
    for path, content in record.items():   # a refused command leaves the record as it was
      if content is None:
        path.unlink(missing_ok=True)
      else:
        with files.atomic_open(str(path), 'wb') as f:
          f.write(content)
    raise


def check_regimes(config, data: Callable[[str, int], Any]) -> None:
  """Loads every regime (reporting and tuning) once with `data` (`(regime, seed) -> (train,
  test)`) and checks that it holds `clients_per_round` clients: else `ConfigError` naming
  --regimes or --tuning_regimes and the loader's error, or --clients_per_round and the population,
  before any run."""
  tuned = [plan_lib.tuning_regime(config, d) for d in plan_lib.datasets(config)]
  tuned = [r for r in tuned if config.tune and r not in config.regimes]
  for regime in list(config.regimes) + list(dict.fromkeys(tuned)):
    flag = 'regimes' if regime in config.regimes else 'tuning_regimes'
    try:
      train, _ = data(regime, _first_seed(config))
    except (ValueError, FileNotFoundError) as e:
      raise experiment_config.ConfigError(flag, regime, reason=str(e)) from None
    population = len(train.client_ids)
    if config.loop.clients_per_round > population:
      raise experiment_config.ConfigError(
          'clients_per_round', config.loop.clients_per_round,
          reason=f'regime {regime!r} has {population} clients: use at most {population}, or a '
          'larger population (@K in the regime)')


def check_builds(config, engine) -> None:
  """Runs the builder's checks of every distinct process the plan builds (`plan.planned_builds`:
  the methods' given and fixed arguments, every grid value) on its model and data, without
  building it: a composition that cannot be built is a `ConfigError` naming --methods, before
  any run."""
  for spec in plan_lib.planned_builds(config):
    try:
      engine.check_build(spec)
    except ValueError as e:
      raise experiment_config.ConfigError('methods', spec.method, reason=(
          f'cannot be built on {spec.dataset} with model {spec.model}: {e}')) from None


def _make_executor(config, engine, loader):
  from experiments import executors  # pylint: disable=g-import-not-at-top
  output = config.output
  return executors.make(executors.Options.of(output),
                        functools.partial(engine_lib.worker_engine, config, loader),
                        engine_lib.run_job, state=engine, affinity=engine_lib.process_of)


def _run(config, *, loader, stream, after_tuning, command) -> dict[str, Any]:
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  root = config.root
  start = time.monotonic()
  engine = engine_lib.Engine(config, loader=loader)
  check_regimes(config, engine.data)
  for dataset in plan_lib.datasets(config):   # your own data or model checked before any run
    model = plan_lib.model_of(config, dataset)
    if dataset in config.datasets or model in config.model_fns:
      engine.shape_and_classes(plan_lib.regimes_of(config, dataset)[0], _first_seed(config), model)
  check_builds(config, engine)
  tasks = plan_lib.tasks(config)
  files.write_json_atomically(os.path.join(root, 'config.json'),
                              dict(config_lib.as_dict(config), plan=plan_lib.describe(config)))
  tuning_runs = plan_lib.num_runs(config, runs_lib.TUNE_PHASE)
  report_runs = plan_lib.num_runs(config, runs_lib.REPORT_PHASE)
  rounds = config_lib.per_dataset(
      dict(rounds=config.loop.rounds, dataset_settings=config.dataset_settings), 'rounds')
  print(f'benchmark: {len(config.regimes)} regimes x {len(config.methods)} methods x E in '
        f'{list(config.epochs)} x {len(config.report_seeds)} seeds = {report_runs} reporting '
        f'runs, up to {tuning_runs} tuning runs, {rounds} rounds each -> {root}',
        file=stream, flush=True)
  regimes = []   # size and label skew (`tff_conflict.data.describe`) of the first seed's data
  for regime in config.regimes:
    train, _ = engine.data(regime, _first_seed(config))
    if getattr(train, 'label_counts', None) is not None:   # else too costly (EMNIST's writers)
      described = data.describe(train)
      regimes.append({'regime': regime, 'data_seed': _first_seed(config), **{
          k: described[k] for k in ('num_clients', 'num_examples', 'examples_per_client',
                                    'classes_per_client', 'label_tv_distance')}})
  files.write_json_atomically(os.path.join(root, 'regimes.json'), regimes)
  progress = progress_lib.Progress(
      tuning_runs + report_runs, label='[benchmark]', unit='run',
      enabled=config.output.progress, min_interval=30.0,
      stream=sys.stderr if getattr(sys.stderr, 'isatty', lambda: False)() else stream)
  report_order = [t.key for t in tasks if t.phase == runs_lib.REPORT_PHASE]
  tuning_order = [plan_lib.choice_key(config, d, e, m.name)
                  for d, e, m in plan_lib.tuning_tasks(config)]
  rows, choices = [], []
  phases = {}   # when the runs started and when tuning ended (time.monotonic())

  def write_rows(results):
    rows[:] = [runs_lib.run_row(spec, summary) for key in report_order
               for spec, summary in results.get(key) or () if summary is not None]
    results_lib.write_csv(os.path.join(root, 'runs.csv'), rows, runs_lib.RUN_COLUMNS)

  def on_task(task, result, results):
    del result
    if task.phase == runs_lib.REPORT_PHASE:
      write_rows(results)
    elif all(k in results for k in tuning_order) and not choices:
      choices.extend(results[k] for k in tuning_order)
      _write_tuning(config, choices)
      phases['tuned'] = time.monotonic()
      after_tuning()

  def on_failure(spec, message):
    print(f'\nrun failed: {spec.label()}: {message} (details: '
          f'{os.path.join(spec.directory(root), "error.txt")})', file=stream, flush=True)

  def on_progress(counts):
    progress.total = counts.total
    progress.tick(postfix=counts.line())

  counts, executor = schedule.Counts.of(tasks), None
  try:
    executor = _make_executor(config, engine, loader)
    phases['start'] = time.monotonic()
    if not tuning_order:
      _write_tuning(config, choices)
      phases['tuned'] = phases['start']
      after_tuning()
    with executor:
      results = schedule.run(tasks, executor, root=root, counts=counts, on_progress=on_progress,
                             on_failure=on_failure, on_task=on_task)
    write_rows(results)
  finally:   # timing.json first: closing the progress display may fail (a closed pipe)
    timing = {
        'finished': datetime.datetime.now().isoformat(timespec='seconds'),
        'wall_seconds': time.monotonic() - start, 'build_seconds': counts.build_seconds,
        'processes_built': counts.processes_built, 'runs_done': counts.runs_done,
        'runs_skipped': counts.runs_skipped, 'runs_failed': len(counts.failures),
        'rounds_done': counts.rounds_done, 'executor': config.output.executor,
        'starting_seconds': phases.get('start', time.monotonic()) - start,
        'tuning_seconds': phases.get('tuned', time.monotonic()) - phases.get('start', start),
        'reporting_seconds': time.monotonic() - phases.get('tuned', time.monotonic()),
        'workers': getattr(executor, 'workers', None),
        'failed': [{'run': spec.label(), 'error': message,
                    'details': os.path.relpath(os.path.join(spec.directory(root), 'error.txt'),
                                               root)} for spec, message in counts.failures],
        'command': command}
    path = os.path.join(root, 'timing.json')
    files.write_json_atomically(path, results_lib.read_json(path, []) + [timing])
    progress.close()
  return dict(timing, root=root, report=report_lib.write_report(root), rows=rows,
              choices=choices, failures=[(s.label(), m) for s, m in counts.failures])

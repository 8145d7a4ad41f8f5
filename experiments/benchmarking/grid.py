"""A whole benchmark: `run_benchmark(config)` makes its plan (`plan.make`), checks it, runs it on
the config's executor (`schedule`; finished runs on disk skipped) and writes record and report."""

import datetime
import functools
import math
import os
import pathlib
import shutil
import sys
import time
from typing import Any, Callable, Optional, TextIO

from experiments import config as experiment_config
from tff_conflict import _files as files
from tff_conflict.simulation import progress as progress_lib
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import report as report_lib
from experiments.benchmarking import results as results_lib
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import schedule
from experiments.benchmarking import search as search_lib

CURVE_COLUMNS = ('dataset', 'regime', 'epochs', 'method', 'candidate', 'seed', 'accuracy_curve')
# A running invocation rewrites its timing.json entry (`ended`: false) at its first finished run
# and then at most this often, so one killed outright keeps its time up to then.
TIMING_EVERY_SECONDS = 60.0


def _write_tuning(plan, root, choices) -> None:
  """tuning_choices.json, tuning.csv (every score; `chosen`: the winner's full-length row) and
  validation_curves.csv (the winner's curve per finished seed)."""
  files.write_json_atomically(os.path.join(root, 'tuning_choices.json'), choices)
  scores, curves = [], []
  for (tuned, epochs, method), c in zip(plan.tuning, choices):
    where = {k: c[k] for k in ('dataset', 'regime', 'epochs', 'method')}
    chosen = dict(c['tuned'], client_lr=c['client_lr'], server_lr=c['server_lr'])
    won = (search_lib.candidate_name(chosen), c.get('rounds'))
    scores += [dict(where, candidate=s['candidate'], rounds=s.get('rounds'),
                    validation_score=s['score'], seeds=s['seeds'],
                    chosen=(s['candidate'], s.get('rounds')) == won) for s in c['scores']]
    for seed in plan.tuning_seeds:
      spec = plan_lib.tuning_spec(plan, tuned, epochs, method, chosen, seed)
      result = runs_lib.read_result(spec.directory(root))
      if result is not None:
        curves.append(dict(where, candidate=spec.candidate, seed=seed,
                           accuracy_curve=result['summary'].get('accuracy_curve', '')))
  results_lib.write_csv(os.path.join(root, 'tuning.csv'), scores)
  results_lib.write_csv(os.path.join(root, results_lib.CURVES_FILE), curves, CURVE_COLUMNS)


def _first_seed(plan) -> int:
  return plan.report_seeds[0] if plan.data_seed is None else plan.data_seed


def check_finished_runs(config, plan=None) -> None:
  """Raises `engine.SettingsChangedError` for the first finished run on disk that `config` would
  run again with other settings, before anything is written; the values tuning chooses are
  taken as recorded (`Engine.run` checks them once known)."""
  if not config.loop.resume:
    return
  plan = plan or plan_lib.make(config)
  methods = {m.name: m for m in plan.methods}
  tasks = {(r, e, m.name) for r, e, m in plan.tuning}
  for directory, _, names in sorted(os.walk(config.root)):
    result = runs_lib.read_result(directory) if runs_lib.RESULT_FILE in names else None
    recorded = result['spec'] if result is not None else None
    if not isinstance(recorded, dict) or recorded.get('method') not in methods:
      continue
    try:
      phase, regime, epochs, seed = (recorded['phase'], recorded['regime'],
                                     int(recorded['epochs']), int(recorded['seed']))
      method = methods[recorded['method']]
      if not ((regime in plan.regimes and epochs in plan.epochs and seed in plan.report_seeds)
              if phase == runs_lib.REPORT_PHASE
              else (regime, epochs, method.name) in tasks and seed in plan.tuning_seeds):
        continue   # not planned
      kwargs, client_lr, server_lr = (
          (plan.given[method.name], *plan.rates[method.name])
          if phase == runs_lib.REPORT_PHASE and not plan.tuned_epochs
          else (dict(recorded['kwargs']), recorded['client_lr'], recorded['server_lr']))
      candidate = recorded.get('candidate', '')
      rung = int(recorded['rounds']) if candidate.endswith(' rounds') else None   # of halving
      spec = plan_lib.run_spec(plan, phase=phase, regime=regime, method=method, epochs=epochs,
                               seed=seed, candidate=candidate, kwargs=kwargs, rounds=rung,
                               client_lr=client_lr, server_lr=server_lr)
    except (KeyError, TypeError, ValueError):
      continue   # not a run of this kind: its own check, when it runs, says what is wrong
    if os.path.normpath(spec.directory(config.root)) == os.path.normpath(directory):
      engine_lib.refuse_changed(directory, runs_lib.spec_differences(recorded, spec))


def _replace_stale(plan, root: str, stream: TextIO, said: set, spec) -> None:
  """Deletes a finished reporting run that differs from `spec` only in values tuning chooses (an
  older choice's), saying so once per method and change (`said`)."""
  run_dir = spec.directory(root)
  done = runs_lib.read_result(run_dir) if spec.phase == runs_lib.REPORT_PHASE else None
  differences = runs_lib.spec_differences(done['spec'], spec) if done else []
  if not differences:
    return
  methods = {m.name: m for m in plan.methods}
  method = methods[spec.method]
  source = methods[plan.inherits[method.name] or method.name]
  server_lrs = any(len(s.server_lrs) > 1 for (_, m), s in plan.search.items() if m == source.name)
  tuned = {f'kwargs.{k}' for k in dict(source.grid) if k not in dict(method.fixed)}
  tuned |= {'kwargs.loss_kwargs', 'kwargs.aggregator_kwargs'} if source is not method else set()
  tuned |= {'client_lr'} if method.client_lr is None else set()
  tuned |= {'server_lr'} if method.server_lr is None and server_lrs else set()
  if all(d.split(':')[0] in tuned for d in differences):
    shutil.rmtree(run_dir)
    differences = '; '.join(differences)
    if (spec.method, differences) not in said:
      said.add((spec.method, differences))
      print(f'replacing the reporting runs of {spec.method} made at another tuned choice '
            f'({differences}), e.g. {run_dir}', file=stream, flush=True)


def run_benchmark(config: config_lib.BenchmarkConfig, *,
                  loader: Optional[engine_lib.Loader] = None, stream: Optional[TextIO] = None,
                  after_tuning: Callable[[], None] = lambda: None,
                  command: str = '') -> dict[str, Any]:
  """Runs the benchmark into `config.root` (its files: docs/design.md, "The method comparison"),
  `loader(regime, seed) -> (train, test)` (default `load_regime`), messages on `stream`;
  `after_tuning` is called before the first reporting run, `command` recorded. Returns this
  invocation's timing.json entry with `root`, `report`, `rows`, `choices` and `failures`.
  Raises `ConfigError`, or `engine.SettingsChangedError` leaving the record as it was."""
  with files.one_writer(config.root):   # before anything is read or written
    plan = plan_lib.make(config)
    check_finished_runs(config, plan)
    os.makedirs(config.root, exist_ok=True)
    record = [pathlib.Path(config.root, n) for n in results_lib.RECORD_FILES]
    record = {path: path.read_bytes() if path.exists() else None for path in record}
    try:
      return _run(config, plan, loader=loader, stream=stream or sys.stdout,
                  after_tuning=after_tuning, command=command)
    except engine_lib.SettingsChangedError:
      for path, content in record.items():   # a refused command leaves the record as it was
        if content is None:
          path.unlink(missing_ok=True)
        else:
          with files.atomic_open(str(path), 'wb') as f:
            f.write(content)
      raise


def check_regimes(config, data: Callable[[str, int], Any], plan=None) -> None:
  """Loads every regime once with `data` (`(regime, seed) -> (train, test)`): a `ConfigError`
  naming --regimes or --tuning_regimes when it fails, --clients_per_round when it is too small."""
  plan = plan or plan_lib.make(config)
  tuned = [r for s in plan.datasets.values() for r in s.tuning_regimes if r not in plan.regimes]
  clients = plan.run['clients_per_round']
  for regime in plan.regimes + tuple(dict.fromkeys(r for r in tuned if r is not None)):
    flag = 'regimes' if regime in plan.regimes else 'tuning_regimes'
    try:
      train, _ = data(regime, _first_seed(plan))
    except (ValueError, FileNotFoundError) as e:
      raise experiment_config.ConfigError(flag, regime, reason=str(e)) from None
    population = len(train.client_ids)
    if clients > population:
      raise experiment_config.ConfigError(
          'clients_per_round', clients,
          reason=f'regime {regime!r} has {population} clients: use at most {population}, or a '
          'larger population (@K in the regime)')


def _prepare(config, plan, engine, stream) -> None:
  """The checks before any run, then config.json, the plan's line on `stream` and regimes.json
  (size and label skew of the first seed's data, `tff_conflict.data.describe`)."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  root = config.root
  check_regimes(config, engine.data, plan)
  for spec in plan.builds:   # your own data or model checked before any run, on report data
    if spec.phase == runs_lib.REPORT_PHASE and (
        spec.dataset in config.datasets or spec.model in config.model_fns):
      engine.shape_and_classes(spec)
  for spec in plan.builds:   # the builder's checks of every process, without building it
    try:
      engine.check_build(spec)
    except ValueError as e:
      raise experiment_config.ConfigError('methods', spec.method, reason=(
          f'cannot be built on {spec.dataset} with model {spec.model}: {e}')) from None
  recorded = dict(config_lib.as_dict(config), plan=plan.description)
  files.write_json_atomically(os.path.join(root, 'config.json'), recorded)
  files.write_json_atomically(os.path.join(root, results_lib.FAMILY_FILE),
                              results_lib.family_members(config_lib.flat_settings(recorded)))
  runs = plan.description['runs']
  rounds = {s.rounds for s in plan.datasets.values()}
  rounds = (str(rounds.pop()) if len(rounds) == 1
            else ', '.join(f'{d}: {s.rounds}' for d, s in plan.datasets.items()))
  own = [d for d in plan.datasets if 'rounds' in config.dataset_settings.get(d, {})]
  rounds += (f' rounds each ({", ".join(own)}: --dataset_settings\'s, which win over '
             f'--rounds={config.loop.rounds})' if own else ' rounds each')
  print(f'benchmark: {len(plan.regimes)} regimes x {len(plan.methods)} methods x E in '
        f'{list(plan.epochs)} x {len(plan.report_seeds)} seeds = {runs[runs_lib.REPORT_PHASE]} '
        f'reporting runs, up to {runs[runs_lib.TUNE_PHASE]} tuning runs, {rounds} -> {root}',
        file=stream, flush=True)
  described = []
  for regime in plan.regimes:
    train, test = engine.data(regime, _first_seed(plan))
    if getattr(train, 'label_counts', None) is not None:   # else too costly (EMNIST's writers)
      values = data.describe(train)
      source = plan.datasets[plan.dataset_of(regime)]
      described.append({'regime': regime, 'data_seed': _first_seed(plan), **{
          k: values[k] for k in ('num_clients', 'num_examples', 'examples_per_client',
                                 'classes_per_client', 'label_tv_distance')},
                        'test_examples': None if getattr(test, 'label_counts', None) is None
                        else int(test.label_counts.sum()),   # the test split unread
                        'data_location': source.data_location, 'data_digest': source.data_digest})
  files.write_json_atomically(os.path.join(root, 'regimes.json'), described)


def _timing(config, counts, phases, start, executor, incomplete, command, ended) -> dict[str, Any]:
  """timing.json's entry (`phases`: when the runs started and tuning ended, if they did; `ended`:
  false while the invocation runs, `finished` then the time of the entry)."""
  root, now = config.root, time.monotonic()
  return {
      'finished': datetime.datetime.now().isoformat(timespec='seconds'), 'ended': ended,
      'wall_seconds': now - start, 'build_seconds': counts.build_seconds,
      'processes_built': counts.processes_built, 'runs_done': counts.runs_done,
      'runs_skipped': counts.runs_skipped, 'runs_failed': len(counts.failures),
      'rounds_done': counts.rounds_done, 'executor': config.output.executor,
      'starting_seconds': phases.get('start', now) - start,
      'tuning_seconds': phases.get('tuned', now) - phases.get('start', now),
      'reporting_seconds': now - phases.get('tuned', now),
      'workers': getattr(executor, 'workers', None),
      'failed': [{'run': spec.label(), 'error': message,
                  'details': os.path.relpath(os.path.join(spec.directory(root), 'error.txt'),
                                             root)} for spec, message in counts.failures],
      'incomplete': [f'{c["method"]} on {c["regime"]}, E = {c["epochs"]}' for c in incomplete],
      'command': command}


def _on_progress(progress, write_timing) -> Callable[[schedule.Counts], None]:
  """`schedule.run`'s on_progress: ticks `progress` (a run found finished on disk stays out of
  its ETA's rate) and rewrites the invocation's timing.json entry every TIMING_EVERY_SECONDS."""
  seen = {'skipped': 0, 'written': -math.inf}

  def on_progress(counts):
    progress.total = counts.total
    progress.tick(postfix=counts.line(), skipped=counts.runs_skipped > seen['skipped'])
    seen['skipped'] = counts.runs_skipped
    if time.monotonic() - seen['written'] >= TIMING_EVERY_SECONDS:
      write_timing(ended=False)
      seen['written'] = time.monotonic()
  return on_progress


def _run(config, plan, *, loader, stream, after_tuning, command) -> dict[str, Any]:
  root = config.root
  start = time.monotonic()
  options = dict(datasets=config.datasets, model_fns=config.model_fns,
                 runtime=config.output.runtime, resume=config.loop.resume)   # a worker's too
  engine = engine_lib.Engine(root, loader=loader or engine_lib.default_loader(config), **options)
  _prepare(config, plan, engine, stream)
  runs = plan.description['runs']
  progress = progress_lib.Progress(
      runs[runs_lib.TUNE_PHASE] + runs[runs_lib.REPORT_PHASE], label='[benchmark]', unit='run',
      enabled=config.output.progress, min_interval=30.0,
      stream=sys.stderr if getattr(sys.stderr, 'isatty', lambda: False)() else stream)
  report_order = [t.key for t in plan.tasks if t.phase == runs_lib.REPORT_PHASE]
  tuning_order = [plan_lib.choice_key(plan, d, e, m.name) for d, e, m in plan.tuning]
  rows, choices, incomplete = [], [], []   # incomplete: the searches a failed run holds
  phases = {}   # when the runs started and when tuning ended (time.monotonic())

  def write_rows(results):
    rows[:] = [runs_lib.run_row(spec, summary) for key in report_order
               for spec, summary in results.get(key) or () if summary is not None]
    results_lib.write_csv(os.path.join(root, 'runs.csv'), rows, runs_lib.RUN_COLUMNS)

  def end_tuning(results):
    done = [(t, results[k]) for t, k in zip(plan.tuning, tuning_order)]
    incomplete.extend(c for _, c in done if plan_lib.is_incomplete(c))
    done = [(t, c) for t, c in done if not plan_lib.is_incomplete(c)]
    choices.extend(c for _, c in done)
    _write_tuning(plan._replace(tuning=tuple(t for t, _ in done)), root, choices)
    phases['tuned'] = time.monotonic()
    after_tuning()

  def on_task(task, _, results):
    if task.phase == runs_lib.REPORT_PHASE:
      write_rows(results)
    elif all(k in results for k in tuning_order) and 'tuned' not in phases:
      end_tuning(results)

  def on_failure(spec, message):
    print(f'\nrun failed: {spec.label()}: {message} (details: '
          f'{os.path.join(spec.directory(root), "error.txt")})', file=stream, flush=True)

  timing_path = os.path.join(root, 'timing.json')
  earlier = results_lib.read_json(timing_path, [])

  def write_timing(ended, record=True):
    entry = _timing(config, counts, phases, start, executor, incomplete, command, ended)
    if record:
      files.write_json_atomically(timing_path, earlier + [entry])
    return entry

  counts, executor = schedule.Counts.of(plan.tasks), None
  try:
    from experiments import executors  # pylint: disable=g-import-not-at-top
    executor = executors.make(
        executors.Options.of(config.output), functools.partial(
            engine_lib.worker_engine, root, loader=loader, **options),
        engine_lib.run_job, state=engine, affinity=engine_lib.process_of)
    phases['start'] = time.monotonic()
    if not tuning_order:
      end_tuning({})
    with executor:
      results = schedule.run(
          plan.tasks, executor, root=root, counts=counts,
          on_progress=_on_progress(progress, write_timing),
          on_failure=on_failure, on_task=on_task, before_submit=functools.partial(
              _replace_stale, plan, root, stream, set()) if config.loop.resume and plan.tuned_epochs
          else lambda spec: None)
    write_rows(results)
  finally:   # timing.json first: closing the progress display may fail (a closed pipe)
    # An executor that never started (a Ray join that failed) ran nothing: no entry.
    timing = write_timing(ended=True, record='start' in phases)
    progress.close()
  return dict(timing, root=root, report=report_lib.write_report(root), rows=rows,
              choices=choices, failures=[(s.label(), m) for s, m in counts.failures])

"""Estimates a benchmark grid's wall time from one short run per method, dataset and E:
`python -m perf.benchmark_grid --preset=results [--sample_rounds=6]` takes every flag of
`python -m experiments.benchmark` and prints the per-run table and the estimate."""

import collections
import dataclasses
import os
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from experiments import benchmark  # pylint: disable=g-import-not-at-top
from experiments import flags_lib

FLAGS = flags.FLAGS
flags.DEFINE_integer('sample_rounds', 6, 'Rounds of each sample run.', lower_bound=2)


def _cpu_seconds() -> float:
  import psutil  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  total = sum(psutil.Process().cpu_times()[:2])
  for pid in runtime.worker_pids():
    try:
      total += sum(psutil.Process(pid).cpu_times()[:2])
    except psutil.Error:
      pass
  return total


def _duration(seconds: float) -> str:
  hours, rest = divmod(int(round(seconds)), 3600)
  return f'{hours} h {rest // 60:02d} min'


def main(argv):
  """Runs the sample and prints the estimate.

  The sample: one untuned run of `--sample_rounds` rounds per (method, dataset, E) on the dataset's
  tuning regime, seed 0. From it, per (method, dataset, E) the steady seconds per round
  `(run time - first round) / (rounds - 1)`; per (method, dataset) the per-run extra (the first
  round's excess over a steady one in a warm process: the E > min E runs) and the per-process
  cost (building, the sample's mean, plus the first run's warm-up). The estimate is
  `sum of runs x (rounds x steady + per-run extra) + sum of processes x per-process cost` with the
  plan's counts (`Plan.runs`, `Plan.processes`; tuning at its upper bound); the
  CPU-time estimate scales it by the sample's CPU / wall ratio (this process and its workers).
  """
  del argv
  flags_lib.quiet_logs()
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  benchmark.apply_preset()
  config = benchmark.config_from_flags()
  from experiments.benchmarking import grid  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import lookups  # pylint: disable=g-import-not-at-top
  from experiments.benchmarking import plan as plan_lib  # pylint: disable=g-import-not-at-top
  plan = plan_lib.make(config)
  sample = dataclasses.replace(
      config, regimes=tuple(lookups.tuning_regime(config, d) for d in plan.datasets),
      report_seeds=(0,),
      loop=dataclasses.replace(config.loop, rounds=FLAGS.sample_rounds, resume=False),
      tune=False, detect={},
      output=dataclasses.replace(config.output, experiment_name='sample', progress=False,
                                 output_dir=tempfile.mkdtemp(prefix='benchmark_grid_')))
  load_before = os.getloadavg()
  cpu_before, start = _cpu_seconds(), time.monotonic()
  outcome = grid.run_benchmark(sample, stream=open(os.devnull, 'w'))
  wall, cpu = time.monotonic() - start, _cpu_seconds() - cpu_before
  load_after = os.getloadavg()
  if outcome['failures']:
    raise SystemExit(f'sample runs failed: {outcome["failures"]}')
  build = outcome['build_seconds'] / max(outcome['processes_built'], 1)
  first_e = min(config.epochs)
  steady, first = {}, {}
  for row in outcome['rows']:
    key = (row['method'], row['dataset'], int(row['epochs']))
    steady[key] = (row['run_seconds'] - row['first_round_s']) / (sample.loop.rounds - 1)
    first[key] = row['first_round_s']
  extra, warmup = {}, {}
  for (method, dataset, e), s in steady.items():
    if e != first_e:
      extra.setdefault((method, dataset), []).append(max(0.0, first[(method, dataset, e)] - s))
  for (method, dataset), values in list(extra.items()):
    extra[(method, dataset)] = sum(values) / len(values)
  for (method, dataset, e), s in steady.items():
    if e == first_e:
      warmup[(method, dataset)] = max(0.0, first[(method, dataset, e)] - s
                                      - extra.get((method, dataset), 0.0))
  planned, processes = plan.runs, plan.processes
  print(f'Sample: {len(outcome["rows"])} runs of {sample.loop.rounds} rounds on '
        f'{list(sample.regimes)}, {outcome["processes_built"]} processes built '
        f'({build:.1f} s each on average); wall {wall:.0f} s, CPU {cpu:.0f} s '
        f'(ratio {cpu / wall:.2f}); load average before {load_before[0]:.1f}, after '
        f'{load_after[0]:.1f}.\n')
  print(f'Grid: {config.loop.rounds} rounds per run.\n')
  print('| method | dataset | E | steady s / round | per-run extra s | tuning runs | reporting '
        'runs | estimated s |')
  print('|---|---|---|---|---|---|---|---|')
  total = 0.0
  by_phase = collections.Counter()
  for (method, dataset, e), s in sorted(steady.items()):
    runs_seconds = config.loop.rounds * s + extra.get((method, dataset), 0.0)
    tune_e = plan.tuned_epochs.get(e)
    n_tune = planned.get(('tune', method, dataset, e), 0) if tune_e == e else 0
    n_report = planned.get(('report', method, dataset, e), 0)
    seconds = (n_tune + n_report) * runs_seconds
    by_phase['tune'] += n_tune * runs_seconds
    by_phase['report'] += n_report * runs_seconds
    total += seconds
    print(f'| {method} | {dataset} | {e} | {s:.3f} | {extra.get((method, dataset), 0.0):.2f} | '
          f'{n_tune} | {n_report} | {seconds:.0f} |')
  building = sum(n * (build + warmup.get(key, 0.0)) for key, n in processes.items())
  total += building
  print(f'\nProcesses: {sum(processes.values())}, {building:.0f} s to build and warm up.')
  print(f'Estimate on this machine now: {_duration(total)} (tuning {_duration(by_phase["tune"])}'
        f', reporting {_duration(by_phase["report"])}, building {_duration(building)}).')
  print(f'CPU-time estimate: {_duration(total * cpu / wall)}.')


if __name__ == '__main__':
  app.run(main)

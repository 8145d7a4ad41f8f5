"""Cold start of each backend in a fresh Python process: the first round as a binary meets it.

    .venv/bin/python -m benchmarks.cold_start                       # the grid below (~15 min)
    .venv/bin/python -m benchmarks.cold_start --presets=digits --clients=10 --repeats=5
    .venv/bin/python -m benchmarks.cold_start --algorithms=fedgh --clients=10 \
        --variants=cpp,compiled,compiled_no_warmup,cached,cached_no_warmup

Same cases as `benchmarks.runtime` (`--presets` x `--algorithms` x `--clients`). Every
measurement runs in a new Python process that imports TensorFlow and TFF and builds the case's
learning process (not timed), then times, as `benchmarks.runtime` does, from the built process to
the first round's result:
  C++ runtime            `initialize()` (starts a fresh `worker_binary`) and the first `next`
  in-process, compiled   the runner's construction with an empty compile cache (TFF's
                         MapReduceForm compiler runs, and the form is written to the cache),
                         `initialize()` and the first `next`
  in-process, cached     the same with the form that the previous in-process process of this
                         case wrote (what every later run of the same computation meets)
  ..., no warm-up        the same two with `warm_start=False` (no functions prepared ahead on
                         a background thread; `tff_conflict.runtime._warmup`)
`--variants` picks among them (default: cpp,compiled,cached).
Wall-clock seconds and CPU seconds (the process and its children, i.e. `worker_binary`). Each
case runs `--repeats` times, the variants interleaved (their order rotates); each 'compiled'
run has an empty cache directory of its own and the 'cached' runs of a repeat read the one its
first 'compiled' run filled (or, when a 'cached' run comes first, one an untimed run filled). The table shows medians and the in-process / C++ ratios of the
medians. The load average is printed with every case: on a shared machine prefer the CPU
ratios.

In a process that has already run other TensorFlow work (as in `benchmarks.runtime`, where the
in-process runner starts after the C++ runtime's round), one-time costs of TensorFlow are paid
before the timed part; here each variant pays its own.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top

VARIANTS = ('cpp', 'compiled', 'compiled_no_warmup', 'cached', 'cached_no_warmup')
DEFAULT_VARIANTS = 'cpp,compiled,cached'
LABELS = {'cpp': 'C++ runtime', 'compiled': 'in-process, compiled',
          'compiled_no_warmup': 'in-process, compiled, no warm-up',
          'cached': 'in-process, cached form',
          'cached_no_warmup': 'in-process, cached form, no warm-up'}
# The form each in-process variant must have used.
_SOURCES = {'cpp': None, 'compiled': 'compiled', 'compiled_no_warmup': 'compiled',
            'cached': 'disk', 'cached_no_warmup': 'disk'}


def child(preset: str, algorithm: str, clients: int, examples: int, variant: str,
          cache_dir: str) -> dict:
  """One cold start in this (fresh) process: {'wall', 'cpu', 'source'}."""
  from benchmarks import runtime as runtime_benchmark  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  if preset == 'digits':
    case = runtime_benchmark.digits_case(algorithm, clients)
  else:
    case = runtime_benchmark.cnn_case(algorithm, clients, examples)
  datasets = case.datasets(1)
  source = None
  cpu_start, start = runtime_benchmark.cpu_seconds(), time.perf_counter()
  if variant == 'cpp':
    state = case.process.initialize()
    case.process.next(state, datasets)
  else:
    from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top
    runner = inprocess.InProcessRunner(case.process, compile_cache=cache_dir,
                                       warm_start=not variant.endswith('_no_warmup'))
    state = runner.initialize()
    runner.next(state, datasets)
    source = runner.form_source
  wall, cpu = time.perf_counter() - start, runtime_benchmark.cpu_seconds() - cpu_start
  runtime.shutdown_workers()
  return {'wall': wall, 'cpu': cpu, 'source': source}


def run_child(args, preset, algorithm, clients, variant, cache_dir) -> dict:
  command = [sys.executable, '-m', 'benchmarks.cold_start', '--child', '--presets', preset,
             '--algorithms', algorithm, '--clients', str(clients), '--examples',
             str(args.examples), '--variant', variant, '--cache_dir', cache_dir]
  proc = subprocess.run(command, capture_output=True, text=True, timeout=900,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  lines = [l for l in proc.stdout.splitlines() if l.startswith('{')]
  if proc.returncode or not lines:
    raise RuntimeError(f'{command} failed ({proc.returncode}):\n{proc.stderr[-3000:]}')
  return json.loads(lines[-1])


def _load() -> str:
  return '/'.join(f'{x:.1f}' for x in os.getloadavg())


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--presets', default='digits,cnn', help='digits and/or cnn')
  parser.add_argument('--algorithms', default='fedavg,fedgh', help='fedavg and/or fedgh')
  parser.add_argument('--clients', default='10,50', help='clients per round, comma-separated')
  parser.add_argument('--examples', type=int, default=20, help='examples per client (cnn)')
  parser.add_argument('--repeats', type=int, default=3, help='runs of each variant per case')
  parser.add_argument('--variants', default=DEFAULT_VARIANTS,
                      help=f'comma-separated, among {",".join(VARIANTS)} (must include cpp)')
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--variant', choices=VARIANTS, help=argparse.SUPPRESS)
  parser.add_argument('--cache_dir', help=argparse.SUPPRESS)
  args = parser.parse_args()
  presets = [p for p in args.presets.split(',') if p]
  algorithms = [a for a in args.algorithms.split(',') if a]
  cohorts = [int(c) for c in args.clients.split(',') if c]
  if args.child:
    print(json.dumps(child(presets[0], algorithms[0], cohorts[0], args.examples, args.variant,
                           args.cache_dir)), flush=True)
    return
  variants = [v for v in VARIANTS if v in args.variants.split(',')]
  if (args.repeats < 1 or not cohorts or any(c < 1 for c in cohorts)
      or not set(presets) <= {'digits', 'cnn'} or not set(algorithms) <= {'fedavg', 'fedgh'}
      or not set(args.variants.split(',')) <= set(VARIANTS) or 'cpp' not in variants):
    parser.error('--presets in digits,cnn; --algorithms in fedavg,fedgh; --variants in '
                 f'{",".join(VARIANTS)} with cpp; --repeats and --clients >= 1')
  print(f'{args.repeats} fresh processes per variant and case; CPU cores: {os.cpu_count()}; '
        f'load average (1/5/15 min) at start: {_load()}', flush=True)
  rows = []
  for preset in presets:
    for num_clients in cohorts:
      for algorithm in algorithms:
        load_before = _load()
        results = {v: [] for v in variants}
        for repeat in range(args.repeats):
          # The order rotates from repeat to repeat. A 'compiled' variant starts from an empty
          # cache of its own; a 'cached' one reads the cache that this repeat's first 'compiled'
          # run filled (or, if none has run yet, one filled by an untimed run before it).
          shift = repeat % len(variants)
          order = variants[shift:] + variants[:shift]
          directories, filled = [], None
          try:
            for variant in order:
              if variant.startswith('cached') and filled is None:
                filled = tempfile.mkdtemp(prefix='tff_conflict_cold_start_')
                directories.append(filled)
                run_child(args, preset, algorithm, num_clients, 'compiled', filled)
              if variant.startswith('cached'):
                cache_dir = filled
              else:
                cache_dir = tempfile.mkdtemp(prefix='tff_conflict_cold_start_')
                directories.append(cache_dir)
              result = run_child(args, preset, algorithm, num_clients, variant, cache_dir)
              if variant.startswith('compiled') and filled is None:
                filled = cache_dir
              if result['source'] != _SOURCES[variant]:
                raise RuntimeError(f'{variant}: the form came from {result["source"]!r}')
              results[variant].append(result)
          finally:
            for directory in directories:
              shutil.rmtree(directory, ignore_errors=True)
        rows.append((preset, algorithm, num_clients, results))
        print(f'{preset} {algorithm} K={num_clients}: done; load average before/after: '
              f'{load_before} / {_load()}', flush=True)

  print()
  print('| preset | algorithm | clients | backend | cold wall (s) | cold CPU (s) | '
        'wall ratio | CPU ratio |')
  print('|---|---|---|---|---|---|---|---|')
  for preset, algorithm, k, results in rows:
    medians = {v: (float(np.median([r['wall'] for r in results[v]])),
                   float(np.median([r['cpu'] for r in results[v]]))) for v in variants}
    cpp_wall, cpp_cpu = medians['cpp']
    for variant in variants:
      wall, cpu = medians[variant]
      ratios = ('- | -' if variant == 'cpp'
                else f'{wall / cpp_wall:.2f}x | {cpu / cpp_cpu:.2f}x')
      print(f'| {preset} | {algorithm} | {k} | {LABELS[variant]} | {wall:.2f} | {cpu:.2f} | '
            f'{ratios} |')
  print(f'\nload average at end: {_load()}')


if __name__ == '__main__':
  main()

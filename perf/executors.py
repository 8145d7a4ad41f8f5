"""The same benchmark grid on each executor, one after another in this session: `python -m
perf.executors --workers=2 -- --preset=smoke` runs `experiments.benchmark` with the flags after
`--` once per executor (inline, local, ray) into its own directory and prints a Markdown table of
wall times, the time's split (building processes, tuning, reporting), the load average, the
speed-up over inline, and whether runs.csv equals inline's (timing columns aside)."""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TIMING = ('seconds_per_round', 'first_round_s', 'run_seconds')


def _rows(path):
  with open(path) as f:
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in csv.DictReader(f)]


def _load() -> str:
  return '/'.join(f'{v:.1f}' for v in os.getloadavg())


def _run(executor: str, workers: int, flags: list[str], root: str) -> dict:
  extra = [] if executor == 'inline' else [f'--executor={executor}', f'--workers={workers}']
  out = os.path.join(root, executor)
  command = [sys.executable, '-m', 'experiments.benchmark', *flags, *extra,
             f'--output_dir={out}', '--noprogress', '--experiment_name=grid']
  load_before, start = _load(), time.monotonic()
  result = subprocess.run(command, cwd=_REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  wall = time.monotonic() - start
  if result.returncode != 0:
    raise SystemExit(f'{executor}: exit {result.returncode}\n{result.stderr[-3000:]}')
  timing = json.loads(open(os.path.join(out, 'grid', 'timing.json')).read())[-1]
  return dict(executor=executor, workers=1 if executor == 'inline' else workers, wall=wall,
              timing=timing, load=f'{load_before} -> {_load()}',
              rows=_rows(os.path.join(out, 'grid', 'runs.csv')))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--workers', type=int, default=2)
  parser.add_argument('--executors', default='inline,local,ray')
  parser.add_argument('--root', default=None, help='Output root (default: a temporary folder).')
  parser.add_argument('flags', nargs='*', help='experiments.benchmark flags, after --')
  args = parser.parse_args(argv)
  root = args.root or tempfile.mkdtemp(prefix='perf_executors_')
  results = [_run(e, args.workers, args.flags, root) for e in args.executors.split(',')]
  base = results[0]
  print(f'`python -m experiments.benchmark {" ".join(args.flags)}` under {root}\n')
  print('| executor | workers | wall time | building processes | tuning | reporting | runs | '
        'speed-up | runs.csv as inline | load average (1/5/15 min) before -> after |')
  print('|---|---|---|---|---|---|---|---|---|---|')
  for r in results:
    t = r['timing']
    print(f'| {r["executor"]} | {r["workers"]} | {r["wall"]:.0f} s | '
          f'{t["build_seconds"]:.0f} s in {t["processes_built"]} builds | '
          f'{t.get("tuning_seconds", 0):.0f} s | {t.get("reporting_seconds", 0):.0f} s | '
          f'{t["runs_done"]} | {base["wall"] / r["wall"]:.2f}x | '
          f'{"yes" if r["rows"] == base["rows"] else "NO"} ({len(r["rows"])} rows) | '
          f'{r["load"]} |')


if __name__ == '__main__':
  main()

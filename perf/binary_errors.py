"""How fast a bad input ends `python -m experiments.train`: `python -m perf.binary_errors
[--repeats=3]` prints a Markdown table of seconds to exit, exit status and last line per input."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cases(tmp):
  """(label, flags) per bad input; first `--helpfull`, the floor (imports and flags only)."""
  blocker = os.path.join(tmp, 'a_file')
  with open(blocker, 'w') as f:
    f.write('in the way\n')
  return [
      ('--helpfull', ['--helpfull']),
      ('--rounds=0', ['--rounds=0']),
      ('--algorithm=bogus', ['--algorithm=bogus']),
      ('--focal_gamma=nan', ['--focal_gamma=nan']),
      ('--selection_ratio=2', ['--selection_ratio=2']),
      ('--client_learning_rate=inf', ['--client_learning_rate=inf']),
      ('--alpha=nan', ['--alpha=nan']),
      ('--output_dir blocked by a file', [f'--output_dir={blocker}/results']),
      ('--dataset=emnist without the file', ['--dataset=emnist', f'--cache_dir={tmp}/none']),
      ('--num_clients=1000 (digits has 359)', ['--num_clients=1000']),
  ]


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--repeats', type=int, default=3, help='runs per case')
  args = parser.parse_args()
  if args.repeats < 1:
    parser.error('--repeats must be >= 1')
  print(f'CPU cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}')
  print()
  print('| input | seconds (median) | exit status | last line |')
  print('|---|---|---|---|')
  with tempfile.TemporaryDirectory() as tmp:
    for name, flags in _cases(tmp):
      times, result = [], None
      for _ in range(args.repeats):  # a new process each time, as a user runs it
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, '-m', 'experiments.train', *flags, f'--output_dir={tmp}/out']
            if not any(f.startswith('--output_dir') for f in flags)
            else [sys.executable, '-m', 'experiments.train', *flags],
            cwd=_REPO_ROOT, capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - start)
      lines = (result.stderr or result.stdout).strip().splitlines()
      last = lines[-1] if lines else ''
      last = last if len(last) <= 90 else last[:87] + '...'
      print(f'| {name} | {statistics.median(times):.1f} | {result.returncode} | `{last}` |',
            flush=True)


if __name__ == '__main__':
  main()

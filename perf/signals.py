"""SIGTERM (or SIGINT) at random moments to `train` and `benchmark --report_only`: does each end
with 128 + signal and no TFF worker left? `python -m perf.signals [--trials=30] [--max_delay=12]`
prints a Markdown table of exit statuses per binary."""

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _command(module, *args):
  return [sys.executable, '-m', module, *args]


def _env(token):
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', TFF_CONFLICT_TEST_TOKEN=token)


def _trial(command, delay, signum):
  """(exit status, dropped-exception message seen, workers left, seconds, output) of `command`
  started as a user would, sent `signum` after `delay` seconds unless it finished first."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  token = uuid.uuid4().hex
  start = time.monotonic()
  proc = subprocess.Popen(command, cwd=_REPO_ROOT, env=_env(token), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  try:
    proc.communicate(timeout=delay)
  except subprocess.TimeoutExpired:
    proc.send_signal(signum)
  output, _ = proc.communicate(timeout=600)
  seconds = time.monotonic() - start
  time.sleep(0.5)
  left = runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token)
  return proc.returncode, 'Exception ignored' in (output or ''), left, seconds, output


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--trials', type=int, default=30, help='signals per binary')
  parser.add_argument('--max_delay', type=float, default=12.0,
                      help='the signal comes after U[0, max_delay] seconds')
  parser.add_argument('--signal', choices=('TERM', 'INT'), default='TERM')
  parser.add_argument('--binaries', default='train,report_only')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args()
  signum = getattr(signal, f'SIG{args.signal}')
  expected = 128 + signum
  rng = random.Random(args.seed)
  print(f'CPU cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}; '
        f'SIG{args.signal} after U[0, {args.max_delay:g}] s, expected exit status {expected}')
  rows = []
  max_delays = {'train': args.max_delay}   # report_only: 0.9 x an uninterrupted one's time
  with tempfile.TemporaryDirectory() as tmp:
    commands = {  # train: long enough that every delay lands inside it
        'train': lambda i: _command('experiments.train', '--algorithm=fedgh', '--rounds=60',
                                    f'--output_dir={tmp}/train{i}', '--noprogress'),
    }
    if 'report_only' in args.binaries:
      made = subprocess.run(_command('experiments.benchmark', '--preset=smoke',
                                     f'--output_dir={tmp}/bench', '--noprogress'),
                            cwd=_REPO_ROOT, env=_env(uuid.uuid4().hex), capture_output=True,
                            text=True, timeout=1800)
      if made.returncode != 0:
        sys.exit(f'the smoke benchmark failed: {made.stderr[-2000:]}')
      commands['report_only'] = lambda i: _command(
          'experiments.benchmark', '--preset=smoke', f'--output_dir={tmp}/bench',
          '--report_only', '--noprogress')
      start = time.monotonic()
      subprocess.run(commands['report_only'](0), cwd=_REPO_ROOT, env=_env(uuid.uuid4().hex),
                     capture_output=True, timeout=600, check=True)
      max_delays['report_only'] = min(args.max_delay, 0.9 * (time.monotonic() - start))
    for binary in args.binaries.split(','):
      statuses = collections.Counter()
      dropped, left, finished = 0, 0, 0
      print(f'{binary}: signals after U[0, {max_delays[binary]:.1f}] s', flush=True)
      for i in range(args.trials):
        delay = rng.uniform(0.0, max_delays[binary])
        status, was_dropped, workers, seconds, output = _trial(commands[binary](i), delay, signum)
        statuses[status] += 1
        dropped += was_dropped
        left += bool(workers)
        finished += seconds < delay
        mark = '' if status == expected else f'  <-- {output.strip().splitlines()[-1:]}'
        print(f'{binary} trial {i + 1}: signal at {delay:.1f} s, exit {status} after '
              f'{seconds:.1f} s{mark}', flush=True)
      rows.append((binary, statuses, dropped, left, finished))
  print()
  print(f'| binary | trials | exit {expected} | other exit statuses | finished before the signal '
        '| "Exception ignored" printed | workers left |')
  print('|---|---|---|---|---|---|---|')
  for binary, statuses, dropped, left, finished in rows:
    others = ', '.join(f'{s}: {n}' for s, n in sorted(statuses.items()) if s != expected) or '-'
    print(f'| {binary} | {sum(statuses.values())} | {statuses[expected]} | {others} | '
          f'{finished} | {dropped} | {left} |')


if __name__ == '__main__':
  main()

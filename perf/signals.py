"""SIGTERM (or SIGINT) at random moments to `train`, `benchmark --report_only` or `train`'s first
rounds: does each end with 128 + signal, no native crash, no worker left? `python -m perf.signals
[--binaries=train,report_only,first_rounds] [--trials=30]` prints a table."""

import argparse
import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `first_rounds`: the signal comes U[0, FIRST_ROUNDS_DELAY] s after one of these lines of a tiny
# digits run, drawn at random: the header (data loaded, before TFF builds the process) or the
# progress line of round 1 or 2 (a round takes about 20 ms, so the later moments land in rounds
# 2-30 and in the preparation of their client datasets). Trials alternate the algorithms: FedAvg
# (a mean) and FedGH (its clients' updates gathered in the in-process runner's row buffers).
FIRST_ROUNDS_ANCHORS = (r'\S+ on digits \(', r'\S+ round +1/', r'\S+ round +2/')
FIRST_ROUNDS_ALGORITHMS = ('fedavg', 'fedgh')
FIRST_ROUNDS_DELAY = 0.6
_FIRST_ROUNDS_FLAGS = ('--rounds=500', '--num_clients=6', '--clients_per_round=3',
                       '--model=logistic_regression', '--client_batch_size=32')
# What glibc, CPython's faulthandler and the C++ runtime print when a process dies natively.
_NATIVE_CRASH = ('free(): ', 'double free', 'corrupted', 'Fatal Python error', 'Segmentation fault',
                 'Aborted', 'terminate called')


def _command(module, *args):
  return [sys.executable, '-m', module, *args]


def _env(token):
  # PYTHONFAULTHANDLER: a native crash prints every thread's Python stack.
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', TFF_CONFLICT_TEST_TOKEN=token,
              PYTHONFAULTHANDLER='1')


def _trial(command, delay, signum, after=None):
  """(exit status, dropped-exception message seen, workers left, seconds, output, signal sent) of
  `command` started as a user would, sent `signum` `delay` seconds after it started (or after its
  first output line matching the regular expression `after`) unless it finished first."""
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  token = uuid.uuid4().hex
  start = time.monotonic()
  proc = subprocess.Popen(command, cwd=_REPO_ROOT, env=_env(token), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  seen, sent = [], False
  try:
    if after is None:
      try:
        seen.append(proc.communicate(timeout=delay)[0])
      except subprocess.TimeoutExpired:   # communicating again loses no output
        proc.send_signal(signum)
        sent = True
        seen.append(proc.communicate(timeout=600)[0])
    else:
      for line in proc.stdout:
        seen.append(line)
        if re.search(after, line):
          time.sleep(delay)
          proc.send_signal(signum)
          sent = True
          break
      seen.append(proc.communicate(timeout=600)[0])
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  seconds = time.monotonic() - start
  time.sleep(0.5)
  output = ''.join(part or '' for part in seen)
  left = runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token)
  return proc.returncode, 'Exception ignored' in output, left, seconds, output, sent


def native_crash(status, output, signum):
  """Whether a process that ended with `status` and printed `output` died natively (an abort,
  a segfault, heap corruption): a status of a signal other than `signum`, or a crash message."""
  by_signal = (-status if status < 0 else status - 128 if status > 128 else 0)
  return (by_signal not in (0, signum)) or any(text in output for text in _NATIVE_CRASH)


def first_rounds(trials, seed=0, signum=signal.SIGTERM, log=None, max_delay=FIRST_ROUNDS_DELAY):
  """`trials` signals timed from `train`'s first rounds (U[0, `max_delay`] s after one of
  `FIRST_ROUNDS_ANCHORS`, algorithms alternating): a dict of the exit statuses, the trials that
  finished first, printed a dropped exception, left a worker or crashed natively counted, and
  every trial that did not end with 128 + signum, in full."""
  rng = random.Random(seed)
  statuses = collections.Counter()
  counts = collections.Counter()
  unexpected = []
  with tempfile.TemporaryDirectory() as tmp:
    for i in range(trials):
      anchor = rng.randrange(len(FIRST_ROUNDS_ANCHORS))
      delay = rng.uniform(0.0, max_delay)
      algorithm = FIRST_ROUNDS_ALGORITHMS[i % len(FIRST_ROUNDS_ALGORITHMS)]
      command = _command('experiments.train', f'--algorithm={algorithm}', *_FIRST_ROUNDS_FLAGS,
                         f'--output_dir={tmp}/{i}')
      status, dropped, left, _, output, sent = _trial(command, delay, signum,
                                                      after=FIRST_ROUNDS_ANCHORS[anchor])
      statuses[status] += 1
      crashed = native_crash(status, output, signum)
      counts.update(finished=not sent, dropped=dropped, workers_left=bool(left),
                    native_crashes=crashed)
      trial = {'trial': i, 'algorithm': algorithm, 'after': FIRST_ROUNDS_ANCHORS[anchor],
               'delay_s': round(delay, 3),
               'status': status, 'last_line': (output.strip().splitlines() or [''])[-1][:300]}
      if status != 128 + signum or not sent or dropped or left or crashed:
        unexpected.append(dict(trial, workers_left=len(left), output_tail=output[-8000:]))
      if log is not None:
        log(json.dumps(trial))
  return {'trials': trials, 'seed': seed, 'statuses': dict(statuses),
          **{k: counts[k] for k in ('finished', 'dropped', 'workers_left', 'native_crashes')},
          'unexpected': unexpected}


def _random_moments(args, signum, expected, rng):
  """Rows (binary, statuses, dropped, left, finished) of signals at U[0, --max_delay] s."""
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
    for binary in [b for b in args.binaries.split(',') if b in commands]:
      statuses = collections.Counter()
      dropped, left, finished = 0, 0, 0
      print(f'{binary}: signals after U[0, {max_delays[binary]:.1f}] s', flush=True)
      for i in range(args.trials):
        delay = rng.uniform(0.0, max_delays[binary])
        status, was_dropped, workers, seconds, output, _ = _trial(commands[binary](i), delay,
                                                                  signum)
        statuses[status] += 1
        dropped += was_dropped
        left += bool(workers)
        finished += seconds < delay
        mark = '' if status == expected else f'  <-- {output.strip().splitlines()[-1:]}'
        print(f'{binary} trial {i + 1}: signal at {delay:.1f} s, exit {status} after '
              f'{seconds:.1f} s{mark}', flush=True)
      rows.append((binary, statuses, dropped, left, finished))
  return rows


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--trials', type=int, default=30, help='signals per binary')
  parser.add_argument('--max_delay', type=float, default=12.0,
                      help='train, report_only: the signal comes after U[0, max_delay] seconds')
  parser.add_argument('--signal', choices=('TERM', 'INT'), default='TERM')
  parser.add_argument('--binaries', default='train,report_only',
                      help='any of train, report_only, first_rounds (signals timed from '
                      "train's first rounds; their unexpected ends printed as JSON)")
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--first_rounds_delay', type=float, default=FIRST_ROUNDS_DELAY,
                      help='first_rounds: the signal comes U[0, this] s after its line')
  args = parser.parse_args()
  signum = getattr(signal, f'SIG{args.signal}')
  expected = 128 + signum
  rng = random.Random(args.seed)
  print(f'CPU cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}; '
        f'SIG{args.signal}, expected exit status {expected}')
  rows = _random_moments(args, signum, expected, rng)
  if 'first_rounds' in args.binaries.split(','):
    summary = first_rounds(args.trials, args.seed, signum, log=lambda s: print(s, flush=True),
                           max_delay=args.first_rounds_delay)
    print(json.dumps(summary['unexpected'], indent=1))
    rows.append(('first_rounds', collections.Counter(summary['statuses']), summary['dropped'],
                 summary['workers_left'], summary['finished']))
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
